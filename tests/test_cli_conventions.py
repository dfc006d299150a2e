"""One way to name the config and one exit code per kind of failure, across commands
(issue 15 items 18 and 19). Every command runs as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.parametrize(
    "command", [["validate"], ["validate", "--json"], ["show-config", "--json"], ["demo"]]
)
def test_config_commands_accept_config_as_every_other_command_does(
    tmp_path: Path, command: list[str]
) -> None:
    by_flag = cli(*command, "--config", str(EXAMPLE), cwd=tmp_path)
    positional = cli(*command, str(EXAMPLE), cwd=tmp_path)
    assert by_flag.returncode == 0, by_flag.stderr
    assert (by_flag.stdout, by_flag.stderr) == (positional.stdout, positional.stderr)


def test_the_config_named_twice_differently_is_a_usage_error(tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    p = cli("validate", str(EXAMPLE), "--config", str(other))
    assert p.returncode == 2
    assert "named twice" in p.stderr and str(other) in p.stderr and "Traceback" not in p.stderr
    same = cli("validate", str(EXAMPLE), "--config", str(EXAMPLE))
    assert same.returncode == 0


def test_an_unknown_agent_exits_1_in_every_command(tmp_path: Path) -> None:
    state = tmp_path / "state"
    base = ["--config", str(EXAMPLE), "--state-dir", str(state)]
    runs = {
        "demo": cli("demo", "--crash-test", "--agent", "nobody", "--config", str(EXAMPLE)),
        "ask": cli("ask", "nobody", "hi", "--offline", *base),
        "runs": cli("runs", "--agent", "nobody", *base),
        "runs --json": cli("runs", "--agent", "nobody", "--json", *base),
    }
    for name, p in runs.items():
        assert p.returncode == 1, (name, p.returncode, p.stderr)
        assert "'nobody'" in p.stderr and "ceo" in p.stderr, (name, p.stderr)
        assert "Traceback" not in p.stderr
    assert json.loads(runs["runs --json"].stdout)["ok"] is False
    # an agent that exists but has no runs yet is not an error
    p = cli("runs", "--agent", "cfo", *base)
    assert (p.returncode, p.stdout.strip()) == (0, "no runs yet")
