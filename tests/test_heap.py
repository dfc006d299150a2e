"""companyd._heap: the cyclic GC is paused while a command starts, on again once its
modules are loaded — for ``companyd run``, once the company is up (issue 31) — and never
left off behind a caller's back.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from companyd._heap import collection_paused, freeze_startup_heap, resume_collection

EXAMPLE = Path(__file__).resolve().parents[1] / "company.yaml"


@pytest.fixture(autouse=True)
def gc_restored() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_until_resumed_or_left() -> None:
    gc.enable()
    with collection_paused():
        assert not gc.isenabled()
        resume_collection()
        assert gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collection_paused():
        assert not gc.isenabled()
        raise RuntimeError("a command that fails before it resumes")
    assert gc.isenabled()  # never left off by a failure


def test_freezing_the_startup_heap_turns_it_back_on() -> None:
    gc.enable()
    with collection_paused():
        freeze_startup_heap()
        assert gc.isenabled()
    gc.unfreeze()


def test_a_gc_the_caller_turned_off_stays_off() -> None:
    gc.disable()
    with collection_paused():
        resume_collection()
        freeze_startup_heap()
        assert not gc.isenabled()
    assert not gc.isenabled()
    gc.unfreeze()


#: Runs the CLI as the console script does, recording the GC's state when the command's
#: handler starts and when READY=1 is sent (``companyd run``), then at the end.
PROBE = """
import gc, json, os, signal, sys, threading
import companyd.daemon._systemd as sd
seen = {}
def collections():
    return sum(g["collections"] for g in gc.get_stats())
real_ready = sd.Notifier.ready
def ready(self, status=None):
    seen.setdefault("ready", [gc.isenabled(), collections()])
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
    return real_ready(self, status)
sd.Notifier.ready = ready
from companyd.cli import main
gc.collect()  # nothing before the command counts
before = collections()
rc = main(sys.argv[1:])
seen["end"] = gc.isenabled()
seen["before"] = before
print(json.dumps([rc, seen]))
"""


def _probe(*argv: str, cwd: Path) -> tuple[int, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    notify = cwd / f"notify-{len(list(cwd.glob('notify-*')))}"
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.bind(str(notify))
    env["NOTIFY_SOCKET"] = str(notify)
    try:
        out = subprocess.run(
            [sys.executable, "-c", PROBE, *argv],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            cwd=cwd,
            env=env,
        )
    finally:
        rx.close()
    rc, seen = json.loads(out.stdout.strip().splitlines()[-1])
    return rc, seen


def test_the_daemon_starts_without_collections_and_runs_with_the_gc_on() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="heap") as d:
        work = Path(d)
        shutil.copy(EXAMPLE, work / "company.yaml")
        rc, seen = _probe(
            "run",
            "--offline",
            "--config",
            str(work / "company.yaml"),
            "--state-dir",
            str(work / "s"),
            "--log-level",
            "error",
            cwd=work,
        )
    assert rc == 0
    enabled, collections = seen["ready"]
    assert enabled is False and collections == seen["before"]  # none during the start
    assert seen["end"] is True  # on again once the company was up


def test_other_commands_and_a_failed_start_leave_the_gc_on(tmp_path: Path) -> None:
    rc, seen = _probe("validate", str(EXAMPLE), cwd=tmp_path)
    assert rc == 0 and seen["end"] is True
    (tmp_path / "bad.yaml").write_text("schema: companyd/v1\ncompany: 3\n")
    rc, seen = _probe("run", "--offline", "--config", str(tmp_path / "bad.yaml"), cwd=tmp_path)
    assert rc != 0 and seen["end"] is True and "ready" not in seen
