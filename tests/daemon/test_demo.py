"""``companyd demo --crash-test``: the README tour must work, offline, and say what happened.

These run the demo for real (system clock, real tasks); it takes milliseconds because the
placeholder agents crash and restart at once.
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from companyd.config import load_config, load_config_text
from companyd.daemon._demo import crash_test
from companyd.errors import CompanydError

EXAMPLE = Path(__file__).resolve().parents[2] / "company.yaml"


def run(config: Any, **kw: Any) -> tuple[int, str]:
    out = io.StringIO()
    code = asyncio.run(crash_test(config, out=out, **kw))
    return code, out.getvalue()


def test_the_crash_test_on_the_example_company() -> None:
    code, text = run(load_config(EXAMPLE))
    assert code == 0, text
    # the tree, as a newcomer sees it
    assert "├─ agents" in text and "│  ├─ finance" in text
    assert "supervisor: one_for_one, at most 3 restarts within 60 s" in text
    # act 1: one crash, one restart, nothing else touched
    act1, act2 = text.split("\n2. ", 1)
    assert "companyd/agents/finance  child_exited     cfo exited: error:RuntimeError(" in act1
    assert "restarting cfo (restart 1 of at most 3 within 60 s)" in act1
    assert "cfo is running again" in act1
    assert "✓ cfo was restarted; nothing else was touched — 17 other children" in act1
    # act 2: the department gives up and its parent restarts it
    assert "GIVES UP: 4 restarts within 60 s is more than 3" in act2
    assert "accountant stopped (shutdown)" in act2
    assert "companyd/agents          restart          restarting finance" in act2
    assert "finance is running again" in act2
    assert "✓ Above it, companyd/agents restarted it — restart 1 of at most 3" in act2
    assert "✓ Nothing outside companyd/agents/finance was touched (15 children" in act2
    assert text.rstrip().endswith("Result: all as expected.")
    assert "✗" not in text


def test_crashing_an_agent_without_a_department_escalates_to_the_root() -> None:
    code, text = run(load_config(EXAMPLE), agent="ceo")
    assert code == 0, text
    assert "Its supervisor, companyd/agents, restarts it" in text
    assert "companyd/agents gave up after 4 restarts" in text
    assert "Above it, companyd restarted it — restart 1 of at most 2 within 60 s" in text


def test_a_department_with_backoff_and_one_for_all() -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["departments"]["finance"]["supervisor"] = {
        "strategy": "one_for_all",
        "max_restarts": 2,
        "max_seconds": 60,
        "backoff": {"min": "0.001s", "max": "0.002s"},
    }
    config = load_config_text(yaml.safe_dump(doc), base_dir=EXAMPLE.parent)
    code, text = run(config, agent="cfo")
    assert code == 0, text
    assert "one_for_all also restarted accountant" in text
    assert "before restarting cfo (backoff)" in text
    assert "GIVES UP: 3 restarts within 60 s is more than 2" in text


@pytest.mark.parametrize(
    ("agent", "needle"),
    [("nobody", "unknown agent 'nobody'"), ("intern", "'intern' is temporary")],
)
def test_refuses_an_agent_it_cannot_demonstrate(agent: str, needle: str) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["agents"]["intern"] = {
        "title": "Intern",
        "reports_to": "ceo",
        "restart": "temporary",
        "instructions": "x",
    }
    # A refusal, not a usage error: exit 1 as an unknown agent is in every command (it was
    # 2 here only), with the message on stderr (it went to stdout).
    with pytest.raises(CompanydError, match=needle):
        run(load_config_text(yaml.safe_dump(doc), base_dir=EXAMPLE.parent), agent=agent)


def test_the_cli_command_in_a_subprocess(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "companyd", "demo", "--crash-test", str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Result: all as expected." in done.stdout
    assert done.stderr == ""
    assert list(tmp_path.iterdir()) == []  # offline and stateless: nothing written
    shown = subprocess.run(
        [sys.executable, "-m", "companyd", "demo", str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert shown.returncode == 0 and "└─ control" in shown.stdout
    assert "companyd demo --crash-test" in shown.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "companyd", "demo", "--crash-test", str(tmp_path / "none.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert missing.returncode == 1 and "file not found" in missing.stderr
    assert "Traceback" not in missing.stderr
