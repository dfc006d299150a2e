"""Issue 15 item 10: the state is private whatever the umask.

Files holding prompts, answers, memory and spend (every SQLite store with its -wal/-shm,
memory.jsonl with its journal, the alert outbox, the lock) are created 0600 and directories
0700, under umask 0022 and 0000 alike; an existing state directory open to the group or
others is tightened, with a warning in the log and a ``state_dir_tightened`` event. Against
the real daemon as a subprocess (offline model).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from companyd.testing.daemon import short_dir
from companyd.testing.daemon_process import DaemonProcess

pytestmark = pytest.mark.anyio

COMPANY = {
    "schema": "companyd/v1",
    "company": {"name": "Private Co", "timezone": "UTC", "budget": {"daily_usd": 10}},
    "departments": {"finance": {"title": "Finance"}},
    "agents": {
        "ceo": {"title": "CEO", "instructions": "You are the CEO."},
        "cfo": {"title": "CFO", "instructions": "You are the CFO.", "reports_to": "ceo"},
    },
}


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


def modes(root: Path) -> dict[str, int]:
    """Permission bits of every file and directory under ``root`` (root itself as ".")."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            if stat.S_ISSOCK(st.st_mode):
                continue  # the control socket: its own mode rules (docs/daemon.md "Control socket")
            found[str(path.relative_to(root))] = stat.S_IMODE(st.st_mode)
    return found


async def run_daemon_under(umask: int, work: Path, state: Path) -> DaemonProcess:
    cfg = work / "company.yaml"
    cfg.write_text(yaml.safe_dump(COMPANY, sort_keys=False), encoding="utf-8")
    daemon = DaemonProcess(cfg, state, log=work / "daemon.log")
    old = os.umask(umask)  # inherited by the daemon only: nothing else runs meanwhile
    try:
        await daemon.spawn()
    finally:
        os.umask(old)
    await daemon.wait_ready()
    return daemon


@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask-0022", "umask-0000"])
async def test_state_files_are_0600_and_directories_0700_whatever_the_umask(
    work: Path, umask: int
) -> None:
    state = work / "s"
    daemon = await run_daemon_under(umask, work, state)
    try:
        answer = await daemon.call("ask", agent="cfo", question="What did we spend?")
        assert answer.get("answer"), answer
        seen = modes(state)  # while running: the -wal/-shm files exist now
    finally:
        assert await daemon.stop() == 0, daemon.log_text()
    seen.update(modes(state))
    names = set(seen)
    for expected in ("spend.sqlite", "runs.sqlite", "memory.jsonl"):
        assert any(n.startswith(expected) for n in names), (expected, sorted(names))
    assert any(n.endswith("-wal") for n in names), sorted(names)
    loose = {
        name: oct(mode)
        for name, mode in seen.items()
        if mode != (0o700 if (state / name).is_dir() else 0o600)
    }
    assert not loose, f"not private under umask {umask:04o}: {loose}"


async def test_an_existing_state_directory_open_to_others_is_tightened_with_a_warning(
    work: Path,
) -> None:
    state = work / "s"
    state.mkdir()
    os.chmod(state, 0o755)
    daemon = await run_daemon_under(0o022, work, state)
    try:
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        event = await daemon.wait_event("state_dir_tightened")
        assert event["data"]["path"] == str(state)
        assert event["data"]["was"] == "0755"
        assert "0755" in daemon.log_text() and "0700" in daemon.log_text()
    finally:
        assert await daemon.stop() == 0, daemon.log_text()


async def test_memory_path_naming_another_file_exits_78_and_leaves_it_byte_identical(
    work: Path,
) -> None:
    # issue 15 item 9 against the real daemon: not repaired into an empty graph, and no
    # restart loop under systemd (78 is in RestartPreventExitStatus)
    other = work / "notes.txt"
    other.write_bytes(b"root:x:0:0:root:/root:/bin/bash\nsome: notes\n")
    cfg = work / "company.yaml"
    cfg.write_text(
        yaml.safe_dump({**COMPANY, "memory": {"path": str(other)}}, sort_keys=False),
        encoding="utf-8",
    )
    daemon = DaemonProcess(cfg, work / "s", log=work / "daemon.log")
    await daemon.spawn()
    assert await daemon.wait(60) == 78
    log = daemon.log_text()
    assert "not a memory graph" in log and "memory.path" in log, log[-2000:]
    assert other.read_bytes() == b"root:x:0:0:root:/root:/bin/bash\nsome: notes\n"
    assert sorted(p.name for p in work.iterdir() if p.name.startswith("notes")) == ["notes.txt"]
