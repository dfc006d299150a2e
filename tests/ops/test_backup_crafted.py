"""Crafted and hostile archives: ``restore`` writes only inside ``--state-dir`` and ``backup
verify`` calls each of these damage (exit 1 naming it), never ok and never an internal
error; a restore that fails midway leaves the previous state exactly as it was.

Every archive here is a good backup rewritten: its manifest edited (and ``manifest.sha256``
recomputed, as an attacker would), entries added or replaced.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from companyd.cli import main
from companyd.config import load_config
from companyd.ops._archive import BackupError, verify_archive
from companyd.ops._backup import take_backup
from companyd.ops._restore import restore_backup
from companyd.testing.daemon_process import CliResult
from companyd.testing.disk import DiskUnavailable, small_disk
from companyd.testing.inprocess import cli_in_thread

from .opskit import write_company

Edit = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A good backup of a company with runs, spend and memory (two offline asks)."""
    tmp = tmp_path_factory.mktemp("company")
    config = write_company(tmp)
    for question in ("record the plan", "record the budget"):
        assert main(["ask", "ceo", question, "--offline", "--config", str(config)]) == 0
    loaded = load_config(config)
    return take_backup(loaded, loaded.state_dir(), tmp / "good.tar.gz").path


def _info(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.mode = 0o600
    return info


def craft(
    src: Path,
    dst: Path,
    edit: Edit | None = None,
    *,
    raw_manifest: bytes | None = None,
    extra: list[tuple[tarfile.TarInfo, bytes]] = (),  # type: ignore[assignment]
    drop: tuple[str, ...] = (),
    first: list[tuple[tarfile.TarInfo, bytes]] = (),  # type: ignore[assignment]
) -> Path:
    """``src`` rewritten: its manifest edited by ``edit`` (or replaced by ``raw_manifest``)
    with a matching ``manifest.sha256``, the entries ``drop`` left out, ``extra`` added
    (``first`` added ahead of the rest).
    """
    with tarfile.open(src, "r:gz") as tin:
        entries = []
        for info in tin.getmembers():
            f = tin.extractfile(info)
            assert f is not None
            entries.append((info, f.read()))
    manifest = json.loads(next(d for i, d in entries if i.name == "manifest.json"))
    if edit is not None:
        edit(manifest)
    data = raw_manifest if raw_manifest is not None else json.dumps(manifest).encode()
    sha = (hashlib.sha256(data).hexdigest() + "\n").encode()
    with tarfile.open(dst, "w:gz") as tout:
        for info, body in first:
            tout.addfile(info, io.BytesIO(body) if info.isreg() else None)
        for info, body in entries:
            if info.name in drop:
                continue
            if info.name == "manifest.json":
                body = data
            elif info.name == "manifest.sha256":
                body = sha
            info.size = len(body)
            tout.addfile(info, io.BytesIO(body))
        for info, body in extra:
            tout.addfile(info, io.BytesIO(body) if info.isreg() else None)
    return dst


def entry(name: str, kind: str, data: bytes) -> dict[str, Any]:
    """A manifest member entry that matches ``data``."""
    return {
        "name": name,
        "kind": kind,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "schema_version": None,
    }


def listing(root: Path) -> dict[str, bytes | str]:
    """Every path under ``root`` with its bytes (files) or ``dir``/``link → …``."""
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = f"link → {os.readlink(p)}"
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = p.read_bytes()
    return out


def set_memory(rel: str) -> Edit:
    def edit(m: dict[str, Any]) -> None:
        m["memory_in_state_dir"] = rel

    return edit


def add_member(
    name: str, kind: str, data: bytes
) -> tuple[Edit, list[tuple[tarfile.TarInfo, bytes]]]:
    """A member ``name`` of ``kind`` holding ``data``, listed in the manifest (in place of a
    member of that name: the tar entry too is replaced, see :func:`craft`).
    """

    def edit(m: dict[str, Any]) -> None:
        m["members"] = [e for e in m["members"] if e["name"] != name]
        m["members"].append(entry(name, kind, data))

    return edit, [(_info(name, data), data)]


def store_bytes(good: Path) -> bytes:
    """A real store of the good backup (it opens and passes quick_check)."""
    with tarfile.open(good, "r:gz") as tar:
        f = tar.extractfile("state/spend.sqlite")
        assert f is not None
        return f.read()


# name → (edit, extra entries, what verify must name). Each breaks out, or tries to, on the
# code before this change (see the commit): restore wrote outside --state-dir, or verify said
# ok, or the command died with an internal error.
def _escapes(good: Path, outside: Path) -> dict[str, tuple[Edit | None, list[Any], str]]:
    graph = "memory.jsonl"
    routes: dict[str, tuple[Edit | None, list[Any], str]] = {
        "memory_in_state_dir ..": (
            set_memory(f"../{outside.name}/{graph}"),
            [],
            "memory_in_state_dir",
        ),
        "memory_in_state_dir absolute": (
            set_memory(str(outside / graph)),
            [],
            "memory_in_state_dir",
        ),
        "memory_in_state_dir inside a store": (
            set_memory(f"runs.sqlite/{graph}"),
            [],
            "memory_in_state_dir",
        ),
        "memory_in_state_dir the lock": (set_memory("daemon.lock"), [], "memory_in_state_dir"),
    }
    edit, extra = add_member("state/../x.sqlite", "sqlite", store_bytes(good))
    routes["member state/../x"] = (edit, extra, "state/../x.sqlite")
    edit, extra = add_member(f"state/../../{outside.name}/x.sqlite", "sqlite", store_bytes(good))
    routes["member state/../../outside"] = (edit, extra, "state/../")
    edit, extra = add_member("bin/run.sh", "script", b"#!/bin/sh\nrm -rf ~\n")
    routes["member of no known kind"] = (edit, extra, "bin/run.sh")
    edit, extra = add_member("config/../evil", "config", b"x")
    routes["config member with .."] = (edit, extra, "config/../evil")
    journal = os.urandom(300).replace(b"\n", b"")  # arbitrary bytes, one line
    edit, extra = add_member(f"memory/{graph}.journal", "memory-journal", journal)
    routes["journal member of arbitrary bytes"] = (edit, extra, f"memory/{graph}.journal")
    journal = b'{"companyd_memory_journal":1,"base_size":0,"base_sha256":"x"}\nnot a record\n'
    edit, extra = add_member(f"memory/{graph}.journal", "memory-journal", journal)
    routes["journal member with a bad record"] = (edit, extra, "journal")
    edit, extra = add_member("memory/other.jsonl.journal", "memory-journal", b"")
    routes["journal without its graph"] = (edit, extra, "without its graph")
    return routes


def _symlink_member(good: Path) -> tuple[Edit, list[Any], str]:
    """``state/alias.sqlite``: a symlink to a real store, listed with that store's digest (so
    reading through the link matches it).
    """
    data = store_bytes(good)
    link = _info("state/alias.sqlite", kind=tarfile.SYMTYPE)
    link.linkname = "spend.sqlite"

    def edit(m: dict[str, Any]) -> None:
        m["members"].append(entry("state/alias.sqlite", "sqlite", data))

    return edit, [(link, b"")], "state/alias.sqlite"


def _symlink_on_the_way(outside: Path) -> tuple[Edit | None, list[Any], str]:
    """A symlink entry ``memory`` → a directory outside, ahead of the memory members (the
    classic tar escape: extract the link, then write through it).
    """
    link = _info("memory", kind=tarfile.SYMTYPE)
    link.linkname = str(outside)
    return None, [(link, b"")], "memory: not in the manifest"


def _special_member(kind: bytes) -> tuple[Edit, list[Any], str]:
    info = _info("state/dev.sqlite", kind=kind)
    info.devmajor, info.devminor = 1, 5  # /dev/zero

    def edit(m: dict[str, Any]) -> None:
        m["members"].append(entry("state/dev.sqlite", "sqlite", b""))

    return edit, [(info, b"")], "state/dev.sqlite"


ROUTES = [
    "memory_in_state_dir ..",
    "memory_in_state_dir absolute",
    "memory_in_state_dir inside a store",
    "memory_in_state_dir the lock",
    "member state/../x",
    "member state/../../outside",
    "member of no known kind",
    "config member with ..",
    "journal member of arbitrary bytes",
    "journal member with a bad record",
    "journal without its graph",
    "symlink member",
    "symlink directory on the way",
    "FIFO member",
    "device member",
]


def _route(good: Path, name: str, outside: Path) -> tuple[Edit | None, list[Any], str]:
    if name == "symlink member":
        return _symlink_member(good)
    if name == "symlink directory on the way":
        return _symlink_on_the_way(outside)
    if name == "FIFO member":
        return _special_member(tarfile.FIFOTYPE)
    if name == "device member":
        return _special_member(tarfile.CHRTYPE)
    return _escapes(good, outside)[name]


@pytest.mark.parametrize("route", ROUTES)
def test_a_crafted_archive_is_damage_to_verify_and_restore_writes_nothing(
    good: Path, tmp_path: Path, route: str, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    edit, extra, named = _route(good, route, outside)
    replaced = tuple(i.name for i, _ in extra)
    bad = craft(good, tmp_path / "bad.tar.gz", edit, extra=extra, drop=replaced)
    if route == "symlink directory on the way":  # the link first, then the members
        bad = craft(good, tmp_path / "bad.tar.gz", first=extra)

    # verify: exit 1, the damage named, never ok, never an internal error
    assert main(["backup", "verify", str(bad)]) == 1
    out, err = capsys.readouterr()
    assert named in out + err, out + err
    assert "internal error" not in err and "Traceback" not in err
    with contextlib.suppress(BackupError):
        assert not verify_archive(bad).ok

    # restore --force over an existing state: refused, the old state exactly as it was,
    # and nothing written outside the state directory
    state = tmp_path / "parent" / "state"
    state.mkdir(parents=True)
    (state / "spend.sqlite").write_bytes(b"the old ledger")
    (state / "mem").mkdir()
    (state / "mem" / "notes").write_bytes(b"old notes")
    before = listing(tmp_path)
    assert main(["restore", str(bad), "--state-dir", str(state), "--force"]) == 1
    err = capsys.readouterr().err
    assert "nothing was restored" in err and "internal error" not in err, err
    after = listing(tmp_path)
    assert after == {**before, "parent/state/daemon.lock": after.get("parent/state/daemon.lock")}
    assert not [p for p in (tmp_path / "parent").iterdir() if "before-restore" in p.name]


def _deep(n: int) -> bytes:
    return b'{"format": "companyd-backup/1", "members": ' + b"[" * n + b"]" * n + b"}"


def _set(path: str, value: Any) -> Edit:
    """Set the manifest's ``a.b.0.c`` to ``value``."""

    def edit(m: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = m
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return edit


BAD_MANIFESTS: dict[str, tuple[Edit | None, bytes | None, str]] = {
    "nested 100k deep": (None, _deep(100_000), "nested too deep"),
    "a deep value": (None, _deep(5_000), "manifest.json"),
    "members not a list": (_set("members", "abc"), None, "'members' is 'abc'"),
    "a member not an object": (_set("members.0", 1), None, "members[0] is 1"),
    "size a string": (_set("members.0.size", "12"), None, "members[0].size is '12'"),
    "size true": (_set("members.0.size", True), None, "members[0].size is True"),
    "name a list": (_set("members.0.name", ["state"]), None, "members[0].name"),
    "memory_in_state_dir a number": (_set("memory_in_state_dir", 5), None, "memory_in_state_dir"),
    "database a string": (_set("database", "x"), None, "'database' is 'x'"),
    "an extra top-level key": (_set("run_after_restore", "sh -c id"), None, "run_after_restore"),
    "an extra member key": (_set("members.0.mode", 0o4777), None, "'mode'"),
    "a name listed twice": (
        lambda m: m["members"].append(dict(m["members"][0])),
        None,
        "listed twice",
    ),
    "no members": (lambda m: m.pop("members"), None, "no 'members'"),
}


@pytest.mark.parametrize("case", list(BAD_MANIFESTS))
def test_a_bad_manifest_is_exit_1_naming_the_damage(
    good: Path, tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    edit, raw, named = BAD_MANIFESTS[case]
    bad = craft(good, tmp_path / "bad.tar.gz", edit, raw_manifest=raw)
    assert main(["backup", "verify", str(bad)]) == 1
    out, err = capsys.readouterr()
    assert named in out + err and "internal error" not in err, out + err
    with pytest.raises(BackupError):
        verify_archive(bad)
    state = tmp_path / "state"
    assert main(["restore", str(bad), "--state-dir", str(state)]) == 1
    err = capsys.readouterr().err
    assert named in err and "internal error" not in err, err
    assert sorted(p.name for p in state.iterdir()) == ["daemon.lock"]


def test_verify_stops_reading_a_member_at_its_declared_size(good: Path, tmp_path: Path) -> None:
    """A 20 MiB member (a few KiB compressed) whose manifest says 10 bytes: nothing past the
    declared size is written to the scratch directory.
    """
    big = b"\0" * (20 << 20)
    info = _info("state/big.sqlite", big)

    def edit(m: dict[str, Any]) -> None:
        m["members"].append(entry("state/big.sqlite", "sqlite", big[:10]))

    bad = craft(good, tmp_path / "bomb.tar.gz", edit, extra=[(info, big)])
    assert bad.stat().st_size < 1 << 20
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    report = verify_archive(bad, extract_to=scratch)
    assert not report.ok
    assert any(p.startswith("state/big.sqlite:") and "10" in p for p in report.problems)
    written = sum(p.stat().st_size for p in scratch.rglob("*") if p.is_file())
    assert written < 1 << 20, f"{written} bytes written for a member declared 10 bytes"


def cli_at_once(argv: list[str], fifo: Path | None = None) -> CliResult:
    """``companyd ARGV`` in process (:func:`cli_in_thread`, in a thread of its own), which
    must return within 30 s. A command left blocked opening ``fifo`` for reading (it waits
    for a writer) is let go, by opening the write end, before the test fails.
    """
    result: list[CliResult] = []
    worker = threading.Thread(target=lambda: result.append(cli_in_thread(argv)), daemon=True)
    worker.start()
    worker.join(30)
    if worker.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            worker.join(5)
        pytest.fail(f"`companyd {' '.join(argv)}` did not return within 30 s")
    return result[0]


@pytest.mark.parametrize("what", ["fifo", "device"])
def test_verify_refuses_a_fifo_or_a_device_at_once(tmp_path: Path, what: str) -> None:
    fifo = None
    if what == "fifo":
        path = fifo = tmp_path / "backup.tar.gz"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    done = cli_at_once(["backup", "verify", str(path)], fifo)
    assert done.rc == 1, done.err
    assert ("a FIFO" if what == "fifo" else "a device") in done.err, done.err
    state = tmp_path / "state"
    done = cli_at_once(["restore", str(path), "--state-dir", str(state)], fifo)
    assert done.rc == 1 and "not a regular file" in done.err, done.err
    assert not state.exists()


@contextlib.contextmanager
def failing_rename(target: Path, *, always: bool = False) -> Iterator[list[str]]:
    """``os.rename`` / ``os.replace`` fail with EIO the first time (or, ``always``, every
    time) they put something at ``target`` (a disk error midway through the restore's
    renames); yields the calls seen.
    """
    calls: list[str] = []
    failed: list[bool] = []
    real_rename, real_replace = os.rename, os.replace

    def fake(real: Callable[..., None]) -> Callable[..., None]:
        def call(src: Any, dst: Any, *a: Any, **k: Any) -> None:
            calls.append(f"{src} -> {dst}")
            if Path(dst) == target and (always or not failed):
                failed.append(True)
                raise OSError(5, "Input/output error (injected)", str(dst))
            real(src, dst, *a, **k)

        return call

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "rename", fake(real_rename))  # companyd.ops._restore's os
        mp.setattr(os, "replace", fake(real_replace))
        yield calls


def test_a_restore_that_fails_midway_leaves_the_previous_state_exactly(
    good: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "runs.sqlite").write_bytes(b"the old journal")
    (state / "spend.sqlite").write_bytes(b"the old ledger")
    (state / "memory.jsonl").write_bytes(b'{"old": "memory"}\n')
    before = listing(tmp_path)
    # the second store put in place fails: runs.sqlite is already in, memory not yet
    with failing_rename(state / "spend.sqlite") as calls, pytest.raises(BackupError) as info:
        restore_backup(good, state, force=True)
    assert any(c.endswith(str(state / "spend.sqlite")) for c in calls)
    assert "Input/output error" in str(info.value)
    assert listing(tmp_path) == before  # the old state, byte for byte; no aside, no scratch
    # and the same restore without the fault puts the backup in, the old state aside
    result = restore_backup(good, state, force=True)
    assert result.moved_aside is not None
    assert (result.moved_aside / "spend.sqlite").read_bytes() == b"the old ledger"
    assert (state / "spend.sqlite").read_bytes()[:16] == b"SQLite format 3\x00"


def test_a_restore_whose_undo_fails_too_deletes_nothing_and_says_where_it_is(
    good: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "spend.sqlite").write_bytes(b"the old ledger")
    with failing_rename(state / "spend.sqlite", always=True), pytest.raises(BackupError) as info:
        restore_backup(good, state, force=True)
    assert "could not be fully undone" in str(info.value)
    kept = [p for p in state.rglob("spend.sqlite") if p.read_bytes() == b"the old ledger"]
    assert len(kept) == 1 and str(kept[0].parent) in str(info.value)


def test_a_good_backup_with_memory_in_a_subdirectory_restores_there(
    tmp_path: Path,
) -> None:
    """memory_in_state_dir with a directory in it, and names with spaces and accents
    (``memory.path: state/My Data/mémoire 1.jsonl``), is allowed and restored to that place.
    """
    config_path = write_company(tmp_path, memory={"path": "state/My Data/mémoire 1.jsonl"})
    assert main(["ask", "ceo", "record it", "--offline", "--config", str(config_path)]) == 0
    config = load_config(config_path)
    archive = take_backup(config, config.state_dir(), tmp_path / "b.tar.gz").path
    assert verify_archive(archive).ok
    target = tmp_path / "restored"
    result = restore_backup(archive, target)
    assert "My Data/mémoire 1.jsonl" in result.restored
    assert (target / "My Data" / "mémoire 1.jsonl").read_bytes() == (
        config.state_dir() / "My Data" / "mémoire 1.jsonl"
    ).read_bytes()


def test_an_archive_of_too_many_entries_is_refused(good: Path, tmp_path: Path) -> None:
    """Headers alone (a few bytes each compressed) must not fill the memory: past 10,000
    entries the archive is refused.
    """
    extra = [(_info(f"x/{i}"), b"") for i in range(10_001)]
    bad = craft(good, tmp_path / "many.tar.gz", extra=extra)
    with pytest.raises(BackupError, match="more than 10000 entries"):
        verify_archive(bad)


def test_a_member_bigger_than_the_free_space_is_refused_before_writing(
    good: Path, tmp_path: Path
) -> None:
    """A consistent manifest may declare a huge member (zeros compress 1000:1): it must not
    fill the disk half-way. The scratch directory is a 1 MiB disk here.
    """
    big = b"\0" * (4 << 20)
    info = _info("state/big.sqlite", big)

    def edit(m: dict[str, Any]) -> None:
        m["members"].append(entry("state/big.sqlite", "sqlite", big))

    bad = craft(good, tmp_path / "bomb.tar.gz", edit, extra=[(info, big)])
    try:
        with small_disk(tmp_path / "disk", size="1m") as disk:
            with pytest.raises(BackupError, match=r"need .* bytes, .* free"):
                verify_archive(bad, extract_to=disk)
            assert list(disk.iterdir()) == []
    except DiskUnavailable as exc:
        pytest.skip(str(exc))
