"""One way to name the config and one exit code per kind of failure, across commands
(issue 15 items 18 and 19). What the shell sees — a pipe closed early, an interrupted
command — runs each command as a real subprocess (:func:`cli`); the exit codes and messages
of each command are checked through the CLI's entry point in this process
(:func:`cli_here`: the same code, without an interpreter's start-up per command).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from companyd.testing.inprocess import cli_in_thread

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "company.yaml"


def cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COMPANYD_CONFIG", "STATE_DIRECTORY")}
    return subprocess.run(
        [sys.executable, "-m", "companyd", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=cwd,
    )


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


def _quiet(err: str) -> bool:
    return not any(s in err for s in ("Broken pipe", "BrokenPipeError", "Traceback", "Exception"))


@pytest.mark.parametrize("args", PIPED, ids=" ".join)
def test_piped_into_head_every_command_exits_quietly(tmp_path: Path, args: list[str]) -> None:
    """`companyd … | head -1`, a real shell pipeline: no 'Broken pipe', and companyd's own
    exit status is its answer (0; 69 for status with no daemon), never 1 for the pipe.
    """
    import shlex

    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "companyd", *args])
    script = f"{cmd} 2>{tmp_path / 'err'} | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}"
    env = {k: v for k, v in os.environ.items() if k not in ("COMPANYD_CONFIG", "STATE_DIRECTORY")}
    p = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    err = (tmp_path / "err").read_text()
    expected = 69 if args[0] == "status" else 0
    assert int(p.stdout.strip()) == expected, err
    assert _quiet(err), err


@pytest.mark.parametrize("args", PIPED, ids=" ".join)
def test_with_both_outputs_already_closed_every_command_exits_quietly(
    tmp_path: Path, args: list[str]
) -> None:
    """The deterministic form of `… 2>&1 | head -1`: the reader is gone before companyd
    writes a byte, so every write to stdout and stderr fails with EPIPE.
    """
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in os.environ.items() if k not in ("COMPANYD_CONFIG", "STATE_DIRECTORY")}
    try:
        p = subprocess.run(
            [sys.executable, "-m", "companyd", *args],
            stdout=write_end,
            stderr=write_end,
            timeout=120,
            env=env,
            cwd=tmp_path,
        )
    finally:
        os.close(write_end)
    # the command's own answer, as if nobody had left: 0, or 69 for status with no daemon
    assert p.returncode == (69 if args[0] == "status" else 0)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["validate", "--config", "missing.yaml"], 1),
        (["runs", "--agent", "nobody", "--config", str(EXAMPLE)], 1),
        (["help", "nope"], 2),
    ],
)
def test_a_closed_pipe_does_not_turn_a_no_into_a_yes(
    tmp_path: Path, args: list[str], code: int
) -> None:
    """`companyd validate bad.yaml 2>&1 | head -1`: the reader leaving must not hide the
    answer (a failed check exited 0 when its error line met the closed pipe).
    """
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in os.environ.items() if k not in ("COMPANYD_CONFIG", "STATE_DIRECTORY")}
    try:
        p = subprocess.run(
            [sys.executable, "-m", "companyd", *args],
            stdout=write_end,
            stderr=write_end,
            timeout=120,
            env=env,
            cwd=tmp_path,
        )
    finally:
        os.close(write_end)
    assert p.returncode == code


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
    shown = cli("backup", "verify", "--help")
    assert shown.returncode == 0
    assert shown.stdout.startswith("usage: companyd backup verify [-h] [--json] FILE\n")
