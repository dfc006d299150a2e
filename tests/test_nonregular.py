"""Non-regular files (issue 15 item 11): a FIFO, a device or a directory where companyd
expects a file is refused at once, by name — never read, so no command can hang on one.

The FIFOs here have no writer: opening one for reading blocks forever in a plain
``open()``. Every command runs with a deadline; a hang is a failure. The commands run by
the CLI's entry point in a thread of this process (:func:`cli`): a command stuck on a FIFO
past its deadline is freed by opening the FIFO for writing, then fails the test. A device
that never ends (``/dev/zero``) is read by a real process (:func:`cli_process`): a command
reading it would not stop, and only a process can be killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from companyd.config import AlertsSpec, AnthropicSpec
from companyd.testing.inprocess import cli_in_thread

MINIMAL = """\
schema: companyd/v1
company:
  name: Acme
  budget: {daily_usd: 5}
agents:
  ceo:
    title: CEO
    instructions: Lead.
  cfo:
    title: CFO
    reports_to: ceo
    instructions: Count.
"""


def cli_process(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "companyd", *argv],
        capture_output=True,
        text=True,
        timeout=30,  # a hang is a failure, not a wait
    )


def cli(
    *argv: str, fifo: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``companyd ARGV`` by the CLI's entry point in a thread, with ``env`` added to the
    environment meanwhile; still running after 30 s, it is stuck on ``fifo``: that is
    opened for writing (which lets the reader go on) and the test fails.
    """
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        got = _returns(lambda: cli_in_thread(list(argv)), fifo, timeout=30)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(list(argv), got.rc, got.out, got.err)


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    "command", [["validate"], ["show-config"], ["demo"], ["validate", "--json"]]
)
def test_a_config_path_that_is_a_fifo_is_refused(tmp_path: Path, command: list[str]) -> None:
    path = fifo(tmp_path / "company.yaml")
    p = cli(*command, str(path), fifo=path)
    assert p.returncode == 1, p.stderr
    assert f"{path}: expected a regular file, got a FIFO (named pipe)" in p.stdout + p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda d: fifo(d / "cfo.md"), "a FIFO (named pipe)"),
        (lambda d: Path("/dev/zero"), "a character device"),
        (lambda d: (d / "cfo.md").mkdir() or d / "cfo.md", "the directory"),
    ],
)
def test_an_instructions_file_that_is_not_a_regular_file_is_an_error_with_its_line(
    tmp_path: Path, make: Callable[[Path], Path], kind: str
) -> None:
    target = make(tmp_path)
    cfg = tmp_path / "company.yaml"
    cfg.write_text(MINIMAL.replace("instructions: Count.", f"instructions_file: {target}"))
    # /dev/zero never ends: a command reading it is stopped only by killing its process
    p = (
        cli_process("validate", str(cfg))
        if kind == "a character device"
        else cli("validate", str(cfg), fifo=target)
    )
    assert p.returncode == 1
    line = p.stderr.splitlines()[0]
    assert line.startswith(f"{cfg}:12:24: agents.cfo.instructions_file: expected a ")
    assert kind in line and "Traceback" not in p.stderr


def test_notify_failure_with_a_fifo_for_company_yaml_does_not_hang(tmp_path: Path) -> None:
    path = fifo(tmp_path / "company.yaml")
    p = cli(
        "notify-failure", "companyd.service", "--config", str(path), fifo=path, env={"PATH": ""}
    )
    assert "expected a regular file, got a FIFO" in p.stderr
    assert "Traceback" not in p.stderr


def _returns(fn: Callable[[], Any], unblock: Path, timeout: float = 10) -> Any:
    """``fn()`` run in a thread; if it is still blocked after ``timeout`` seconds, open
    ``unblock`` for writing (releasing a reader stuck on the FIFO) and fail.
    """
    box: list[Any] = []
    t = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        fd = os.open(unblock, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(10)
        pytest.fail(f"blocked on the FIFO {unblock}")
    return box[0]


def test_credentials_that_are_fifos_are_refused_not_read(tmp_path: Path) -> None:
    from companyd.alerts._telegram import resolve_settings
    from companyd.llm._claude import resolve_api_key
    from companyd.llm._model import ModelUnavailable

    creds = tmp_path / "creds"
    creds.mkdir()
    fifo(creds / "anthropic_api_key")
    fifo(creds / "telegram_bot_token")
    env = {"CREDENTIALS_DIRECTORY": str(creds)}

    def key() -> str:
        try:
            return resolve_api_key(AnthropicSpec(), env)
        except ModelUnavailable as exc:
            return str(exc)

    assert "not a regular file" in _returns(key, creds / "anthropic_api_key")
    spec = AlertsSpec.model_validate({"telegram": {"chat_ids": [1]}})
    why = _returns(lambda: resolve_settings(spec, env), creds / "telegram_bot_token")
    assert isinstance(why, str) and "not a regular file" in why


def test_daemon_commands_given_a_fifo_as_config_do_not_hang(tmp_path: Path) -> None:
    path = fifo(tmp_path / "company.yaml")
    p = cli("status", "--config", str(path), fifo=path)
    assert p.returncode == 69 and "no companyd daemon is running" in p.stderr
    p = cli(
        "install-service", "--dry-run", "--config", str(path), "--root", str(tmp_path), fifo=path
    )
    assert p.returncode == 2 and "is not a file" in p.stderr
    assert "Traceback" not in p.stderr


def test_memory_import_of_a_fifo_is_refused(tmp_path: Path) -> None:
    source = fifo(tmp_path / "graph.jsonl")
    p = cli("memory", "import", str(source), "--file", str(tmp_path / "memory.jsonl"), fifo=source)
    assert p.returncode == 1
    assert "not a regular file (a FIFO (named pipe))" in p.stderr and "Traceback" not in p.stderr
