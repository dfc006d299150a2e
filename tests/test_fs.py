"""The one atomic writer and the private-mode helpers (src/companyd/_fs.py), and every
store creating its files private whatever the umask (issue 15 item 10). The daemon-level
check is tests/daemon/test_state_privacy.py.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from companyd._fs import (
    DiskAlarm,
    credential_path,
    private_dir,
    private_file,
    private_sqlite,
    read_credential,
    write_atomic,
)
from companyd.alerts._outbox import AlertStore
from companyd.memory._store import GraphStore
from companyd.runs import Journal
from companyd.scheduler._store import RoutineStore
from companyd.spend._ledger import Ledger


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_helpers_create_private_and_tighten(tmp_path: Path, open_umask: None) -> None:
    d = tmp_path / "a" / "b"
    assert private_dir(d) is None and mode(d) == 0o700
    os.chmod(d, 0o755)
    assert private_dir(d) == 0o755 and mode(d) == 0o700
    f = d / "f"
    private_file(f)
    assert mode(f) == 0o600 and f.read_bytes() == b""
    os.chmod(f, 0o644)
    f.write_bytes(b"kept")
    private_file(f)
    assert mode(f) == 0o600 and f.read_bytes() == b"kept"
    write_atomic(d / "g", b"x")
    assert mode(d / "g") == 0o600
    assert sorted(os.listdir(d)) == ["f", "g"]
    db = d / "x.sqlite"
    db.touch(mode=0o644)
    (d / "x.sqlite-wal").touch(mode=0o666)
    private_sqlite(db)
    assert mode(db) == 0o600 and mode(d / "x.sqlite-wal") == 0o600


@pytest.mark.anyio
async def test_every_store_creates_its_files_0600_under_umask_0(
    tmp_path: Path, open_umask: None
) -> None:
    state = tmp_path / "state" / "deep"
    ledger = Ledger(state / "spend.sqlite")
    ledger.close()
    journal = Journal(state / "runs.sqlite")
    await journal.open()
    routines = RoutineStore(state / "routines.sqlite")
    await routines.open()
    alerts = AlertStore(state / "alerts.sqlite")
    await alerts.open()
    with GraphStore(state / "memory.jsonl") as memory:
        memory.call(
            "create_entities", {"entities": [{"name": "a", "entityType": "t", "observations": []}]}
        )
        memory.compact(force=True)
        memory.call(
            "create_entities", {"entities": [{"name": "b", "entityType": "t", "observations": []}]}
        )
        found = {p.name: mode(p) for p in state.iterdir()}
    await journal.close()
    await routines.close()
    await alerts.close()
    assert mode(state) == 0o700 and mode(state.parent) == 0o700
    for name in ("spend.sqlite", "runs.sqlite", "routines.sqlite", "alerts.sqlite"):
        assert name in found, sorted(found)
    for name in ("memory.jsonl", "memory.jsonl.journal", "memory.jsonl.lock"):
        assert name in found, sorted(found)
    assert any(n.endswith("-wal") for n in found), sorted(found)
    loose = {n: oct(m) for n, m in found.items() if m != 0o600}
    assert not loose, loose


def test_existing_loose_memory_files_are_tightened_when_opened_for_writing(
    tmp_path: Path,
) -> None:
    # files an older companyd (or the umask) left 0644
    memfile = tmp_path / "memory.jsonl"
    memfile.write_bytes(b'{"type":"entity","name":"a","entityType":"t","observations":[]}\n')
    lock = tmp_path / "memory.jsonl.lock"
    lock.touch()
    for p in (memfile, lock):
        os.chmod(p, 0o644)
    with GraphStore(memfile, readonly=True) as store:  # a reader changes nothing
        store.open()
    assert mode(memfile) == 0o644
    with GraphStore(memfile) as store:
        store.open()
    assert mode(memfile) == 0o600 and mode(lock) == 0o600
    assert mode(tmp_path / "memory.jsonl.journal") == 0o600


# -- the disk alarm: which stores are failing -------------------------------------------


class _Emitted:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, object]]] = []

    def __call__(self, kind: str, source: str, **data: object) -> None:
        self.events.append((kind, data))

    def kinds(self) -> list[str]:
        return [k for k, _ in self.events]


def _enospc() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


def test_the_disk_alarm_clears_only_when_every_failing_store_recovered() -> None:
    emitted = _Emitted()
    alarm = DiskAlarm(emitted)
    alarm.failed("run journal", "/s/runs.sqlite", _enospc())
    alarm.failed("spend ledger", "/s/spend.sqlite", _enospc())
    assert emitted.kinds() == ["state_disk_full"]  # one alert, naming the first store
    assert emitted.events[0][1]["what"] == "run journal"
    alarm.recovered("spend ledger")  # the journal still fails: the outage goes on
    assert emitted.kinds() == ["state_disk_full"]
    assert alarm.failing == {"run journal"}
    alarm.recovered("memory")  # a store that never failed recovers nothing
    assert emitted.kinds() == ["state_disk_full"]
    alarm.recovered("run journal")
    assert emitted.kinds() == ["state_disk_full", "state_disk_recovered"]
    assert emitted.events[1][1]["failures"] == 2
    assert not alarm.failing


def test_an_outage_reported_by_one_store_clears_with_it_and_the_next_one_alerts() -> None:
    emitted = _Emitted()
    alarm = DiskAlarm(emitted)
    alarm.failed("routine history", "/s/routines.sqlite", _enospc())
    alarm.recovered("routine history")
    alarm.failed("alert outbox", "/s/alerts.sqlite", _enospc())
    assert emitted.kinds() == ["state_disk_full", "state_disk_recovered", "state_disk_full"]
    assert emitted.events[2][1]["what"] == "alert outbox"


def test_credentials_are_found_and_read_in_one_way(tmp_path: Path) -> None:
    """The API key, the bot token and the redactor's list read systemd credentials through
    these two functions; they used to disagree on a ':' in $CREDENTIALS_DIRECTORY.
    """
    assert credential_path("api-key", {}) is None
    assert credential_path("api-key", {"CREDENTIALS_DIRECTORY": ""}) is None
    odd = tmp_path / "run:creds"
    odd.mkdir()
    (odd / "api-key").write_text("  sk-ant-test-123\n", encoding="utf-8")
    path = credential_path("api-key", {"CREDENTIALS_DIRECTORY": str(odd)})
    assert path == odd / "api-key"
    assert read_credential(path) == "sk-ant-test-123"
