"""The companyd command line: validate, init, show-config, --version, error presentation."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import companyd
import companyd.cli._main
from companyd.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "company.yaml"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse: --version, usage errors
            rc = int(exc.code or 0)
    return rc, out.getvalue(), err.getvalue()


# -- validate ---------------------------------------------------------------------------


def test_validate_json_summary() -> None:
    rc, out, err = run("validate", "--json", str(EXAMPLE))
    assert (rc, err) == (0, "")
    assert json.loads(out) == {
        "valid": True,
        "file": str(EXAMPLE),
        "company": "Northwind Solo",
        "agents": 8,
        "routines": 4,
        "departments": 4,
        "tree_depth": 3,
        "warnings": [],
    }


def test_validate_uses_companyd_config_then_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    rc, _, err = run("validate")
    assert rc == 1
    assert err == (
        "company.yaml: file not found; create one with `companyd init` or give the path to "
        "your company.yaml\n"
    )
    monkeypatch.setenv("COMPANYD_CONFIG", str(EXAMPLE))
    rc, out, _ = run("validate")
    assert rc == 0 and out.startswith(f"{EXAMPLE}: ok")


def test_validate_prints_warnings_and_still_succeeds(tmp_path: Path) -> None:
    f = tmp_path / "company.yaml"
    f.write_text(
        EXAMPLE.read_text(encoding="utf-8").replace(
            "model: claude-haiku-5-5 ", "model: claude-nova-9    "
        ),
        encoding="utf-8",
    )
    rc, out, err = run("validate", str(f))
    assert rc == 0
    assert out.endswith("org chart depth 3, 1 warning\n")
    (line,) = err.splitlines()
    assert line.startswith(f"{f}:78:12: warning: agents.accountant.model: unknown model id")


# -- init -------------------------------------------------------------------------------


def test_init_writes_the_starter_and_refuses_to_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "new" / "company.yaml"
    rc, out, err = run("init", str(tmp_path / "new"))
    assert (rc, err) == (0, "")
    assert out == f"wrote {target}; edit it, then check it with `companyd validate {target}`\n"
    starter = target.read_text(encoding="utf-8")
    assert starter.startswith("# company.yaml")
    assert sorted(p.name for p in target.parent.iterdir()) == ["company.yaml"]  # no temp left

    target.write_text("mine\n", encoding="utf-8")
    rc, out, err = run("init", str(target.parent))
    assert rc == 1 and out == ""
    assert "already exists" in err and "--force" in err
    assert target.read_text(encoding="utf-8") == "mine\n"

    rc, out, _ = run("init", "--force", "--json", str(target.parent))
    assert rc == 0
    assert json.loads(out) == {"written": str(target)}
    assert target.read_text(encoding="utf-8") == starter
    assert sorted(p.name for p in target.parent.iterdir()) == ["company.yaml"]


def test_init_reports_an_unwritable_target_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "company.yaml").mkdir()
    rc, _, err = run("init", str(tmp_path))
    assert rc == 1
    assert err == (
        f"companyd: {tmp_path / 'company.yaml'} is a directory; move it away or choose "
        "another DIR\n"
    )
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc, _, err = run("init", str(blocker / "sub"))
    assert rc == 1
    assert err.startswith(f"companyd: cannot write {blocker / 'sub' / 'company.yaml'}: ")
    # a file named as DIR: said so ("File exists; check that the directory is writable")
    rc, _, err = run("init", str(blocker))
    assert (rc, blocker.read_text()) == (1, "x")
    assert err == (
        f"companyd: {blocker} is a file, not a directory; give `companyd init` the directory "
        "to write company.yaml into (e.g. `companyd init .`)\n"
    )


# -- show-config ------------------------------------------------------------------------


def company_with_secrets(tmp_path: Path) -> Path:
    (tmp_path / "cfo.md").write_text("You own the cash.\n", encoding="utf-8")
    f = tmp_path / "company.yaml"
    f.write_text(
        textwrap.dedent(
            """\
            company: {name: Acme, budget: {daily_usd: 5}}
            defaults:
              budget: {daily_usd: 1}
              limits: {max_steps: 7}
            agents:
              ceo: {title: CEO, instructions: Lead.}
              cfo:
                title: CFO
                reports_to: ceo
                instructions_file: cfo.md
                mcp_servers:
                  gh: {command: gh-mcp, env_from: {GITHUB_TOKEN: GH_TOKEN}}
            alerts:
              telegram: {chat_ids_env: CHAT}
            """
        ),
        encoding="utf-8",
    )
    return f


def test_show_config_resolves_and_masks_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = company_with_secrets(tmp_path)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-THIS-MUST-NOT-BE-PRINTED")
    monkeypatch.setenv("GH_TOKEN", "ghp_ALSO-SECRET")
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    rc, out, err = run("show-config", "--json", str(f))
    assert (rc, err) == (0, "")
    assert "THIS-MUST-NOT-BE-PRINTED" not in out and "ALSO-SECRET" not in out
    view = json.loads(out)
    cfo = view["agents"]["cfo"]
    assert cfo["instructions"] == "You own the cash.\n"
    assert cfo["budget"]["daily_usd"] == 1  # from defaults
    assert cfo["limits"]["max_steps"] == 7
    assert cfo["restart"] == "permanent"
    assert cfo["model"]["primary"] == "claude-sonnet-5-5"
    assert view["state_dir"] == str(tmp_path / "state") or view["state_dir"].endswith("state")
    assert {(s["key"], s.get("env") or s.get("credential"), s["set"]) for s in view["secrets"]} == {
        ("anthropic.api_key_env", "ANTHROPIC_API_KEY", True),
        ("anthropic.api_key_credential", "anthropic_api_key", False),
        ("alerts.telegram.bot_token_env", "TELEGRAM_BOT_TOKEN", False),
        ("alerts.telegram.bot_token_credential", "telegram_bot_token", False),
        ("alerts.telegram.chat_ids_env", "CHAT", False),
        ("agents.cfo.mcp_servers.gh.env_from.GITHUB_TOKEN", "GH_TOKEN", True),
    }


def test_show_config_yaml_is_readable_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = company_with_secrets(tmp_path)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-THIS-MUST-NOT-BE-PRINTED")
    rc, out, _ = run("show-config", str(f))
    assert rc == 0
    assert "THIS-MUST-NOT-BE-PRINTED" not in out
    assert out.startswith(f"# {f} as companyd runs it")
    data = yaml.safe_load(out)
    assert data["agents"]["cfo"]["instructions"] == "You own the cash.\n"
    assert data["agents"]["ceo"]["reports_to"] is None


def test_show_config_of_an_invalid_file_lists_the_errors(tmp_path: Path) -> None:
    f = tmp_path / "company.yaml"
    f.write_text("company: {name: Acme}\nagents: {}\n", encoding="utf-8")
    rc, out, err = run("show-config", str(f))
    assert rc == 1 and out == ""
    assert err.splitlines() == [
        f"{f}:1:1: company.budget: required key 'budget' is missing; add it — a company-wide "
        "ceiling is required (e.g. `budget: {daily_usd: 10, monthly_usd: 200}`), or write "
        "`budget: unlimited` to opt out explicitly",
        f"{f}:2:9: agents: expected at least one agent, got none; add the CEO first",
    ]


# -- the program ------------------------------------------------------------------------


def test_version_and_usage() -> None:
    assert run("--version") == (0, f"companyd {companyd.__version__}\n", "")
    rc, out, err = run()
    assert rc == 2 and out == ""
    assert "validate" in err and "show-config" in err
    rc, _, err = run("validate", "--no-such-flag")
    assert rc == 2 and "unrecognized arguments: --no-such-flag" in err


AREAS = {
    "broken_area": "raise RuntimeError('boom at import')\n",
    "buggy_area": textwrap.dedent(
        """\
        def register(sub):
            p = sub.add_parser("explode")
            p.set_defaults(func=lambda args: 1 // 0)
        """
    ),
}


def test_a_broken_area_and_a_buggy_command_never_show_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, text in AREAS.items():
        (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(companyd.cli._main, "_AREAS", (*companyd.cli._main._AREAS, *AREAS))

    rc, out, err = run("validate", str(EXAMPLE))
    assert rc == 0 and "ok — 8 agents" in out
    assert err == (
        "companyd: internal error: some commands are unavailable (broken_area: RuntimeError: "
        "boom at import) — this is a bug; run again with --debug for details and report it\n"
    )

    rc, _, err = run("explode")
    assert rc == 70
    assert "Traceback" not in err
    assert err.splitlines()[-1] == (
        "companyd: internal error: ZeroDivisionError: integer division or modulo by zero — "
        "this is a bug; run again with --debug for the traceback and report it"
    )
    monkeypatch.setattr(
        companyd.cli._main, "_AREAS", (*companyd.cli._main._AREAS[:-2], "buggy_area")
    )
    with pytest.raises(ZeroDivisionError):
        main(["--debug", "explode"])


def companyd_argv() -> list[str]:
    script = Path(sys.executable).parent / "companyd"
    return [str(script)] if script.exists() else [sys.executable, "-m", "companyd"]


def test_python_dash_m_companyd(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "companyd", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        0,
        f"companyd {companyd.__version__}\n",
        "",
    )


@pytest.mark.parametrize("args", [["validate", "--json"], ["show-config"]])
def test_a_closed_pipe_is_not_an_error(args: list[str]) -> None:
    # `companyd show-config | head -1` where head has already gone: every write fails with
    # EPIPE. companyd must exit 0 quietly, without "Exception ignored ... BrokenPipeError",
    # whether the output is small (fails at the final flush) or large (fails mid-way).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [*companyd_argv(), *args, str(EXAMPLE)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env=env,
        )
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_the_command_table_is_what_the_areas_register() -> None:
    # `main` lists the commands of the areas it does not import from _COMMANDS: their
    # names, order and help must be what each area's register() adds, or `companyd --help`
    # and the "invalid choice" error would drift from the real commands.
    import argparse
    import importlib

    for area in companyd.cli._main._AREAS:
        parser = argparse.ArgumentParser(prog="companyd")
        sub = parser.add_subparsers(dest="command", metavar="COMMAND")
        importlib.import_module(area).register(sub)
        helps = {a.dest: a.help for a in sub._choices_actions}
        registered = tuple((name, helps.get(name)) for name in sub.choices)
        assert companyd.cli._main._COMMANDS[area] == registered, area


def test_a_command_imports_only_its_own_area() -> None:
    # The whole point of the table: `companyd status` does not import the memory, doctor or
    # backup areas, and the top-level help reads the same as with every area built.
    probe = textwrap.dedent(
        """\
        import contextlib, io, json, sys
        from companyd.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main(sys.argv[1:])
        areas = sorted(m for m in sys.modules if m.startswith("companyd.cli."))
        print(json.dumps([areas, out.getvalue()]))
        """
    )

    def probe_run(*argv: str) -> tuple[list[str], str]:
        proc = subprocess.run(
            [sys.executable, "-c", probe, *argv],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        areas, out = json.loads(proc.stdout.splitlines()[-1])
        return areas, out

    areas, text = probe_run("--help")
    assert areas == ["companyd.cli._entry", "companyd.cli._main"]
    full = io.StringIO()
    companyd.cli._main._build_parser([]).print_help(full)
    assert text == full.getvalue()
    areas, _ = probe_run("status", "--help")
    assert areas == ["companyd.cli._daemon", "companyd.cli._entry", "companyd.cli._main"]
    areas, _ = probe_run("help", "jobs")
    assert "companyd.cli._scheduler" in areas and "companyd.cli._memory" not in areas


def test_the_runs_status_choices_are_every_run_status() -> None:
    # written out in companyd.cli._roles so that `companyd runs` does not import the run
    # records; a new RunStatus must be offered by `runs --status` too
    import companyd.cli._roles
    from companyd.runs import RunStatus

    assert ("running", *(str(s) for s in RunStatus)) == companyd.cli._roles._STATUSES


def test_the_ask_footer_says_the_cost_as_companyd_runs_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `${cost:.4f}` said a run of $0.00004 cost "$0.0000"; companyd.admin.format_usd with
    # usd_places (at least RUN_COST_PLACES decimals) as `companyd runs` prints a run's cost
    from companyd.cli._roles import _print_answer

    result = {"status": "ok", "answer": "hi", "models": ["m"], "tokens": 12, "steps": 1}
    assert _print_answer({**result, "cost_usd": 0.00004, "run_id": "run-1"}) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "— m · 12 tokens · $0.00004 · 1 steps · run-1"
    )
    assert _print_answer({**result, "cost_usd": 1234.5, "run_id": "run-2"}) == 0
    assert "· $1,234.5000 ·" in capsys.readouterr().out


def test_an_unknown_option_is_said_with_the_commands_own_usage() -> None:
    # argparse says a subcommand's unknown option at the top level: "usage: companyd [-h]
    # [--version] [--debug] COMMAND ..." told the founder nothing about `memory search`
    rc, _, err = run("memory", "search", "x", "--bogus", "D")
    assert rc == 2
    assert err.startswith("usage: companyd memory search ")
    assert (
        err.splitlines()[-1] == "companyd memory search: error: unrecognized arguments: --bogus D"
    )
    rc, _, err = run("--bogus")
    assert rc == 2 and err.splitlines()[-1] == "companyd: error: unrecognized arguments: --bogus"


def test_an_ask_whose_calls_went_unanswered_does_not_say_no_model_call(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the calls timed out and were charged at their worst case: "no model call · $0.0139"
    # read as money spent on nothing
    from companyd.cli._roles import _print_answer

    result = {
        "status": "failed",
        "reason": "the model call timed out twice",
        "answer": "",
        "models": [],
        "tokens": 0,
        "cost_usd": 0.0139,
        "steps": 0,
        "run_id": "run-0123456789ab",
    }
    assert _print_answer(result) == 1
    said = capsys.readouterr().err
    assert said.startswith("— no model answer (calls unanswered, charged as sent) · 0 tokens")
    assert "$0.0139" in said
    _print_answer({**result, "cost_usd": 0.0})
    assert capsys.readouterr().err.startswith("— no model call · 0 tokens · $0.0000")
