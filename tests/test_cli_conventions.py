"""One way to name the config and one exit code per kind of failure, across commands
(issue 15 items 18 and 19). The exit codes and messages of each command are checked through
the CLI's entry point in this process (:func:`cli_here`: the same code, without an
interpreter's start-up per command).

What the shell sees when the reader of a pipe leaves (``companyd … | head -1``): every
command line runs, with its stdout and stderr on a real pipe (into ``head -1``, or already
closed), in one driver process (tests/cli_pipes_driver.py: the console script's entry point
on the process's own streams and descriptors, re-pointed before each command) — one
interpreter start-up for all of them instead of one each. What only a process of its own
shows — the interpreter's last flush at exit and the exit status the shell gets from
``python -m companyd`` — is checked on real processes for one command line of each kind
of ending (:data:`AS_PROCESSES`: the early ``--version``, an answer, a long output, a
refusal, a usage error, a bad file).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from companyd.testing.inprocess import cli_in_thread

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "company.yaml"
DRIVER = Path(__file__).resolve().parent / "cli_pipes_driver.py"

# the pipe tests share one driver run (module-scoped): on one xdist worker
pytestmark = pytest.mark.xdist_group("cli_conventions")


def cli_here(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``companyd ARGV`` by the CLI's entry point in this process (from directory ``cwd``),
    shaped as :func:`cli`'s result.
    """
    here = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        got = cli_in_thread(list(argv))
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(list(argv), got.rc, got.out, got.err)


@pytest.mark.parametrize(
    "command", [["validate"], ["validate", "--json"], ["show-config", "--json"], ["demo"]]
)
def test_config_commands_accept_config_as_every_other_command_does(
    tmp_path: Path, command: list[str]
) -> None:
    by_flag = cli_here(*command, "--config", str(EXAMPLE), cwd=tmp_path)
    positional = cli_here(*command, str(EXAMPLE), cwd=tmp_path)
    assert by_flag.returncode == 0, by_flag.stderr
    assert (by_flag.stdout, by_flag.stderr) == (positional.stdout, positional.stderr)


def test_the_config_named_twice_differently_is_a_usage_error(tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    p = cli_here("validate", str(EXAMPLE), "--config", str(other))
    assert p.returncode == 2
    assert "named twice" in p.stderr and str(other) in p.stderr and "Traceback" not in p.stderr
    same = cli_here("validate", str(EXAMPLE), "--config", str(EXAMPLE))
    assert same.returncode == 0


def test_an_unknown_agent_exits_1_in_every_command(tmp_path: Path) -> None:
    state = tmp_path / "state"
    base = ["--config", str(EXAMPLE), "--state-dir", str(state)]
    runs = {
        "demo": cli_here("demo", "--crash-test", "--agent", "nobody", "--config", str(EXAMPLE)),
        "ask": cli_here("ask", "nobody", "hi", "--offline", *base),
        "ask --json": cli_here("ask", "nobody", "hi", "--offline", "--json", *base),
        "runs": cli_here("runs", "--agent", "nobody", *base),
        "runs --json": cli_here("runs", "--agent", "nobody", "--json", *base),
    }
    for name, p in runs.items():
        assert p.returncode == 1, (name, p.returncode, p.stderr)
        assert "'nobody'" in p.stderr and "ceo" in p.stderr, (name, p.stderr)
        assert "Traceback" not in p.stderr
    assert json.loads(runs["runs --json"].stdout)["ok"] is False
    assert json.loads(runs["ask --json"].stdout)["ok"] is False
    # an agent that exists but has no runs yet is not an error
    p = cli_here("runs", "--agent", "cfo", *base)
    assert (p.returncode, p.stdout.strip()) == (0, "no runs yet")


PIPED = [
    ["--help"],
    ["--version"],
    ["help"],
    ["help", "status"],
    ["validate", "--config", str(EXAMPLE)],
    ["validate", "--json", "--config", str(EXAMPLE)],
    ["show-config", "--config", str(EXAMPLE)],
    ["show-config", "--json", "--config", str(EXAMPLE)],
    ["demo", "--config", str(EXAMPLE)],
    ["demo", "--crash-test", "--config", str(EXAMPLE)],
    ["status", "--config", str(EXAMPLE)],
    ["status", "--json", "--config", str(EXAMPLE)],
    ["runs", "--config", str(EXAMPLE)],
    ["jobs", "--config", str(EXAMPLE)],
    ["spend", "--config", str(EXAMPLE)],
    ["budget", "--config", str(EXAMPLE)],
    ["memory", "--help"],
]


NO_INTO_YES = [
    (["validate", "--config", "missing.yaml"], 1),
    (["runs", "--agent", "nobody", "--config", str(EXAMPLE)], 1),
    (["help", "nope"], 2),
]

#: one command line per kind of ending, run as processes of their own
AS_PROCESSES = [
    ["--version"],  # answered by the entry point before anything else is imported
    ["validate", "--config", str(EXAMPLE)],
    ["demo", "--crash-test", "--config", str(EXAMPLE)],  # a long output
    ["status", "--config", str(EXAMPLE)],  # 69: no daemon
    ["help", "nope"],  # 2: argparse's SystemExit
    ["validate", "--config", "missing.yaml"],  # 1: a bad file
]


def _expected(args: list[str]) -> int:
    """The command's own answer, as if nobody had left: 0, or 69 for status with no daemon,
    or the failure's code.
    """
    failing = {tuple(a): code for a, code in NO_INTO_YES}
    return failing.get(tuple(args), 69 if args[0] == "status" else 0)


def _plain_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("COMPANYD_CONFIG", "STATE_DIRECTORY")}


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, ...], Any]]:
    """Every command line of :data:`PIPED` into ``head -1`` and with both outputs already
    closed, and those of :data:`NO_INTO_YES` closed, in one driver process: each result
    (``rc``, ``err``) by ``(mode, *argv)``.
    """
    where = tmp_path_factory.mktemp("pipes")
    commands = [("head", a) for a in PIPED] + [("closed", a) for a in PIPED]
    commands += [("closed", a) for a, _ in NO_INTO_YES]
    results = where / "results.json"
    done = subprocess.run(
        [sys.executable, str(DRIVER), str(results)],
        input=json.dumps(commands),
        capture_output=True,
        text=True,
        timeout=300,
        env=_plain_env(),
        cwd=where,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    got = json.loads(results.read_text(encoding="utf-8"))
    assert len(got) == len(commands)
    yield {(mode, *argv): result for (mode, argv), result in zip(commands, got, strict=True)}


def _quiet(err: str) -> bool:
    return not any(s in err for s in ("Broken pipe", "BrokenPipeError", "Traceback", "Exception"))


@pytest.mark.parametrize("args", PIPED, ids=" ".join)
def test_piped_into_head_every_command_exits_quietly(
    driven: dict[tuple[str, ...], Any], args: list[str]
) -> None:
    """`companyd … | head -1`, a real pipe into a real head: no 'Broken pipe', and
    companyd's own exit status is its answer (0; 69 for status with no daemon), never 1 for
    the pipe.
    """
    result = driven[("head", *args)]
    assert result["rc"] == _expected(args), result["err"]
    assert _quiet(result["err"]), result["err"]


@pytest.mark.parametrize("args", PIPED, ids=" ".join)
def test_with_both_outputs_already_closed_every_command_exits_quietly(
    driven: dict[tuple[str, ...], Any], args: list[str]
) -> None:
    """The deterministic form of `… 2>&1 | head -1`: the reader is gone before companyd
    writes a byte, so every write to stdout and stderr fails with EPIPE.
    """
    # the command's own answer, as if nobody had left: 0, or 69 for status with no daemon
    assert driven[("closed", *args)]["rc"] == _expected(args)


@pytest.mark.parametrize(("args", "code"), NO_INTO_YES)
def test_a_closed_pipe_does_not_turn_a_no_into_a_yes(
    driven: dict[tuple[str, ...], Any], args: list[str], code: int
) -> None:
    """`companyd validate bad.yaml 2>&1 | head -1`: the reader leaving must not hide the
    answer (a failed check exited 0 when its error line met the closed pipe).
    """
    assert driven[("closed", *args)]["rc"] == code


@pytest.mark.parametrize("args", AS_PROCESSES, ids=" ".join)
def test_as_a_process_of_its_own_a_gone_reader_changes_nothing(
    tmp_path: Path, args: list[str]
) -> None:
    """`python -m companyd …` as the shell runs it: piped into `head -1` (a real shell
    pipeline, PIPESTATUS) and with both outputs already closed, the exit status is the
    command's answer — the interpreter's last flush at exit fails on nothing (it would
    exit 120) — and nothing is said about the pipe.
    """
    import shlex

    expected = _expected(args)
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "companyd", *args])
    script = f"{cmd} 2>{tmp_path / 'err'} | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}"
    p = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=_plain_env(),
        cwd=tmp_path,
    )
    err = (tmp_path / "err").read_text()
    assert int(p.stdout.strip()) == expected, err
    assert _quiet(err), err

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        closed = subprocess.run(
            [sys.executable, "-m", "companyd", *args],
            stdout=write_end,
            stderr=write_end,
            timeout=120,
            env=_plain_env(),
            cwd=tmp_path,
        )
    finally:
        os.close(write_end)
    assert closed.returncode == expected


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser, str | None]]:
    """Every command and subcommand under ``parser``: (its words, its parser, its help)."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, child in action.choices.items():
                words = (*path, name)
                out.append((words, child, helps.get(name)))
                out += _commands(child, words)
    return out


def test_every_command_has_a_one_line_description() -> None:
    """Issue 28: every command and subcommand says what it does in `--help` (its
    description) and in its parent's list (its help), each on one line.
    """
    from companyd.cli._main import _build_parser

    broken: list[str] = []
    commands = _commands(_build_parser(broken))
    assert not broken and len(commands) > 40
    missing = [
        " ".join(words)
        for words, child, help_ in commands
        if not (child.description or "").strip() or not (help_ or "").strip()
    ]
    assert not missing, f"{len(missing)} command(s) with no description: {missing}"
    multi = [" ".join(w) for w, _, h in commands if h and "\n" in h]
    assert not multi, multi


def test_every_subcommand_help_has_a_clean_usage() -> None:
    """`backup verify --help` printed the parent's two-line usage glued to its own
    (issue 28): each command's usage starts with its own words, on one line.
    """
    from companyd.cli._main import _build_parser

    for words, child, _ in _commands(_build_parser()):
        usage = child.format_usage()
        first = usage.splitlines()[0]
        assert first.startswith(f"usage: companyd {' '.join(words)}"), (words, usage)
        assert usage.count("usage:") == 1, (words, usage)
    shown = cli_here("backup", "verify", "--help")
    assert shown.returncode == 0
    assert shown.stdout.startswith("usage: companyd backup verify [-h] [--json] FILE\n")
