"""One daemon per state directory: real flock, real subprocesses, real SIGKILL."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from companyd.daemon._lock import LOCK_NAME, StateLock, read_holder
from companyd.errors import StateLocked

_HOLDER = textwrap.dedent(
    """
    import sys
    from companyd.daemon._lock import StateLock
    lock = StateLock.acquire(sys.argv[1])
    print("locked", flush=True)
    sys.stdin.readline()          # hold until the test closes our stdin (or kills us)
    lock.release()
    """
)

_CONTENDER = textwrap.dedent(
    """
    import sys
    from companyd.daemon._lock import StateLock
    from companyd.errors import StateLocked
    try:
        StateLock.acquire(sys.argv[1])
    except StateLocked as exc:
        print(exc)
        sys.exit(75)
    print("acquired")
    """
)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A separate process holding the lock on tmp_path/state."""
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path / "state")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "locked"
            yield proc
        finally:
            proc.kill()
            proc.wait(timeout=10)


def test_second_daemon_is_refused_with_the_holders_pid_and_the_directory(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    state = tmp_path / "state"
    with pytest.raises(StateLocked) as info:
        StateLock.acquire(state)
    message = str(info.value)
    assert f"pid {holder.pid}" in message
    assert repr(str(state)) in message
    assert "--state-dir" in message  # says what to do
    assert read_holder(state) == holder.pid


def test_the_lock_is_released_when_the_holder_is_killed(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    with StateLock.acquire(tmp_path / "state") as lock:  # no stale lock to clean up
        assert lock.held and read_holder(tmp_path / "state") == os.getpid()
    assert not lock.held


def test_a_second_process_is_refused_while_we_hold_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with StateLock.acquire(state):
        out = subprocess.run(
            [sys.executable, "-c", _CONTENDER, str(state)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 75, out.stderr
        assert f"pid {os.getpid()}" in out.stdout
    out = subprocess.run(
        [sys.executable, "-c", _CONTENDER, str(state)], capture_output=True, text=True, timeout=30
    )
    assert (out.returncode, out.stdout.strip()) == (0, "acquired")


def test_subprocesses_do_not_inherit_the_lock(tmp_path: Path) -> None:
    state = tmp_path / "state"
    lock = StateLock.acquire(state)
    # A long-lived child (an agent's MCP server) started while we hold the lock ...
    with subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    ) as child:
        try:
            lock.release()
            # ... must not keep it: a new daemon can start although the child still runs.
            with StateLock.acquire(state):
                assert child.poll() is None
        finally:
            child.kill()
            child.wait(timeout=10)


def test_the_directory_is_created_private_and_the_file_keeps_its_place(tmp_path: Path) -> None:
    state = tmp_path / "a" / "state"
    lock = StateLock.acquire(state)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / LOCK_NAME).stat().st_mode) == 0o600
    assert (state / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    lock.release()
    lock.release()  # idempotent
    assert (state / LOCK_NAME).exists()  # never unlinked (would split the lock in two)
    assert read_holder(state) is None  # pid cleared on release


def test_the_lock_conflicts_within_one_process_too(tmp_path: Path) -> None:
    # flock is per open file description: a second acquire in the same process fails
    # (a daemon that somehow started its tree twice would be caught).
    with StateLock.acquire(tmp_path), pytest.raises(StateLocked):
        StateLock.acquire(tmp_path)


@pytest.mark.parametrize("content", ["", "garbage\n", "12ab\n"])
def test_read_holder_tolerates_garbage(tmp_path: Path, content: str) -> None:
    (tmp_path / LOCK_NAME).write_text(content)
    assert read_holder(tmp_path) is None
    assert read_holder(tmp_path / "missing") is None


def test_one_claim_per_company_yaml_whatever_path_names_it(tmp_path: Path) -> None:
    from companyd.daemon._lock import CompanyLock

    cfg = tmp_path / "company.yaml"
    cfg.write_text("x: 1\n", encoding="utf-8")
    (tmp_path / "alias.yaml").symlink_to(cfg)
    with CompanyLock.acquire(cfg) as claim:
        assert claim.held
        with pytest.raises(StateLocked) as info:
            CompanyLock.acquire(tmp_path / "alias.yaml")
        assert f"already running, pid {os.getpid()}," in str(info.value)
        assert repr(str(cfg)) in str(info.value)
        other = tmp_path / "other.yaml"
        other.write_text("x: 2\n", encoding="utf-8")
        with CompanyLock.acquire(other):  # another company: its own claim
            pass
    with CompanyLock.acquire(tmp_path / "alias.yaml"):  # released: free again
        pass


def test_a_released_claim_can_be_made_again_at_once(tmp_path: Path) -> None:
    # release() must not return while the answering thread is still inside accept(): the
    # kernel keeps the name bound until that call returns, and the next claim (a restart
    # in the same process, a test) was refused as "already running, pid unknown".
    from companyd.daemon._lock import CompanyLock

    cfg = tmp_path / "company.yaml"
    cfg.write_text("x: 1\n", encoding="utf-8")
    for _ in range(300):
        with CompanyLock.acquire(cfg) as claim:
            assert claim.held


def test_the_claim_name_is_the_sha256_of_the_real_path(tmp_path: Path) -> None:
    # computed without hashlib on CPython (issue 31: OpenSSL's start-up in every CLI
    # command); it must stay the name every companyd computes for the same file
    import hashlib

    from companyd.daemon import CompanyLock

    config = tmp_path / "company.yaml"
    config.write_text("schema: companyd/v1\n")
    (tmp_path / "link.yaml").symlink_to(config)
    digest = hashlib.sha256(os.fsencode(os.path.realpath(config))).hexdigest()[:40]
    assert CompanyLock.address(tmp_path / "link.yaml") == b"\0companyd/company/" + digest.encode()
