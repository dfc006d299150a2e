"""The durable graph file: cross-process lock, append-only journal, atomic compaction.

One :class:`GraphStore` owns one graph file for one thread. Files next to the graph
``memory.jsonl``:

* ``memory.jsonl`` — the MCP-format file (:mod:`companyd.memory._codec`), what the official
  server and every other MCP memory tool read. Only ever replaced whole, atomically.
* ``memory.jsonl.journal`` — changes since that file was written: a header naming the exact
  file it extends (size and SHA-256), then one checksummed record per change. A write is
  acknowledged only after its record is fsynced, so its cost does not depend on the size of
  the graph (the format: :mod:`companyd.memory._journal`).
* ``memory.jsonl.lock`` — the cross-process lock (:func:`filelock.lock_descriptor`, i.e. the
  same ``flock`` a :class:`filelock.FileLock` on that path takes). Every read and write holds
  it; before each one the store re-checks both files and folds in what other processes did.
* ``memory.jsonl.corrupt`` — what repair took out, byte for byte (:func:`codec.format_quarantine`).

Compaction rewrites ``memory.jsonl`` from memory (temporary file in the same directory,
fsync, ``os.replace``, directory fsync) and starts a new journal. The crash argument is in
docs/memory.md.

Not thread-safe: use a store from one thread at a time (the memory owner has one worker
thread). The lock wait and file I/O block, so async code calls the store from a thread.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from filelock import lock_descriptor, unlock_descriptor

from companyd._fs import PRIVATE_FILE, fsync_directory, tmp_name, write_all, write_atomic
from companyd.memory._codec import (
    LoadReport,
    QuarantinedLine,
    format_quarantine,
    not_a_graph,
    parse_graph,
    serialize,
)
from companyd.memory._errors import (
    MemoryInconsistent,
    MemoryLocked,
    MemoryNotAGraph,
    MemoryToolError,
    MemoryUnsafePath,
)
from companyd.memory._graph import KnowledgeGraph
from companyd.memory._journal import (
    decode_record,
    encode_record,
    journal_header,
    journal_line,
    journal_quarantined,
    parse_header,
)
from companyd.memory._tools import replay as replay_effect
from companyd.memory._tools import run_tool, validate_arguments

__all__ = ["GraphStore", "Operation", "Outcome", "fsync_directory", "write_atomic"]

log = logging.getLogger("companyd.memory.store")

T = TypeVar("T")

_EMPTY_SHA = hashlib.sha256(b"").hexdigest()
#: The journal is folded into the graph file once it is at least this big and at least as
#: big as the graph file: compaction cost O(graph) is then spread over as many bytes of
#: writes, which keeps the cost per write constant.
COMPACT_MIN_JOURNAL_BYTES = 1 << 20

#: What :meth:`GraphStore.execute` runs: a validated tool call, or a read-only function.
Operation = tuple[str, Mapping[str, Any]] | Callable[[KnowledgeGraph], Any]
#: ``(True, result)`` or ``(False, exception)``.
Outcome = tuple[bool, Any]


def _sync_data(fd: int) -> None:
    # fdatasync covers appended bytes and the new file size, which is all a journal append
    # changes; it skips the timestamp-only metadata flush fsync would add.
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # pragma: no cover - macOS
        os.fsync(fd)


# A generated dataclass, not Frozen: two are built per memory operation (Frozen's shared
# __init__ is ~1 µs slower), against ~0.45 ms once at start.
@dataclass(frozen=True)
class _Sig:
    """What stat says about a file; any difference means someone changed it."""

    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> _Sig:
        return cls(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _stat(path: Path) -> _Sig | None:
    try:
        return _Sig.of(os.stat(path))
    except FileNotFoundError:
        return None


class GraphStore:
    """The durable, shareable owner of one MCP memory file (see the module docstring).

    Args:
        path: the graph file (``memory.jsonl``); its directory must exist. A symlink is
            resolved: the store works on (and next to) its target.
        lock_timeout: seconds to wait for ``<file>.lock`` before :class:`MemoryLocked`.
        readonly: never write anything (no repair, no compaction); reads still see other
            processes' journals. For ``check`` and read commands.

    Attributes:
        report: what the last full load found and repaired (None before the first load).
    """

    def __init__(self, path: Path, *, lock_timeout: float = 10.0, readonly: bool = False) -> None:
        # A symlinked graph file is written through: the temporary file, the renames and the
        # side files go next to its target (renaming over the link would leave the target
        # stale), and every name of the file shares one lock.
        self.path = Path(os.path.realpath(path))
        self.journal_path = self.path.with_name(self.path.name + ".journal")
        self.next_journal_path = self.path.with_name(self.path.name + ".journal.next")
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.corrupt_path = self.path.with_name(self.path.name + ".corrupt")
        self.lock_timeout = lock_timeout
        self.readonly = readonly
        self.report: LoadReport | None = None
        self._graph: KnowledgeGraph | None = None
        self._graph_sig: _Sig | None = None
        self._base: tuple[int, str] = (0, _EMPTY_SHA)
        self._journal_fd: int | None = None
        self._journal_sig_ino: int | None = None
        self._journal_offset = 0
        self._journal_records = 0
        self._lock_fd: int | None = None
        self._lock_depth = 0
        self._broken: str | None = None
        self._marker: tuple[KnowledgeGraph, int, str] | None = None
        #: called (in this thread) with each report of a load that repaired something
        self.on_repair: Callable[[LoadReport], None] | None = None

    # -- public ------------------------------------------------------------------------------

    def open(self) -> LoadReport:
        """Load (and, unless read-only, repair and compact) the graph; return the report.

        Raises :class:`MemoryNotAGraph` (and writes nothing, not even the lock file) when the
        path is not a regular file or holds no line of a memory graph.
        """
        # Checked before the lock is taken, so a path pointing at some other file gets no
        # side files next to it; checked again under the lock in _reload.
        self._refuse_foreign(self._read_graph_file()[0])
        with self._locked():
            self._reload()
        assert self.report is not None
        return self.report

    def close(self) -> None:
        """Release file descriptors. Does not compact (call :meth:`compact` first)."""
        if self._journal_fd is not None:
            os.close(self._journal_fd)
            self._journal_fd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        self._graph = None

    def __enter__(self) -> GraphStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def execute(self, calls: Sequence[Operation]) -> list[Outcome]:
        """Run operations in order as one group commit and return their outcomes.

        An operation is a validated tool call ``(tool, arguments)`` or a read-only function
        of the graph. Each outcome is ``(True, result)`` or ``(False, exception)``: a
        :class:`MemoryToolError` (the call changed nothing) or whatever a function raised.
        Every change is in the journal and fsynced before this returns, so every outcome
        (including reads, which may see earlier writes of the batch) is durable.

        Raises:
            MemoryInconsistent: the journal could not be written; the in-memory graph may
                hold changes that are not on disk, so this store refuses further use (open
                a new one: it reloads from disk).
            MemoryLocked: another process held the lock past the deadline.
        """
        if self.readonly and any(isinstance(c, tuple) and c[0] not in _READERS for c in calls):
            raise PermissionError(f"graph store for {str(self.path)!r} was opened read-only")
        with self._locked():
            graph = self._sync()
            outcomes: list[Outcome] = []
            effects: list[Mapping[str, Any]] = []
            for op in calls:
                if not isinstance(op, tuple):
                    try:
                        outcomes.append((True, op(graph)))
                    except Exception as exc:
                        outcomes.append((False, exc))
                    continue
                try:
                    structured, effect = run_tool(graph, op[0], op[1])
                except MemoryToolError as exc:
                    outcomes.append((False, exc))
                    continue
                outcomes.append((True, structured))
                if effect is not None:
                    effects.append(effect)
            if effects:
                self._append(effects)
        return outcomes

    def call(self, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and run one tool call durably; return its structuredContent.

        Raises:
            MemoryToolError: with the official server's text.
        """
        ok, value = self.execute([(tool, validate_arguments(tool, arguments))])[0]
        if not ok:
            raise value
        assert isinstance(value, dict)
        return value

    def read(self, fn: Callable[[KnowledgeGraph], T]) -> T:
        """Call ``fn`` on the current graph under the lock and return its result. ``fn`` must
        not mutate the graph nor keep references to it.
        """
        with self._locked():
            return fn(self._sync())

    def compact(self, *, force: bool = False) -> bool:
        """Fold the journal into the graph file (atomically) if it holds records, or always
        with ``force``. Returns True if the file was rewritten.
        """
        if self.readonly:
            return False
        with self._locked():
            self._sync()
            if not force and self._journal_records == 0:
                return False
            self._compact()
            return True

    def snapshot(self) -> tuple[bytes, bytes | None]:
        """The graph file and its journal exactly as they are on disk, read together under
        the lock, so the pair is consistent whatever other processes write (a backup).
        ``b""`` for a missing graph file, None for a missing journal; nothing is parsed,
        repaired or written.
        """
        with self._locked():
            graph = self._read_graph_file()[0]
            journal = self._read_file(self.journal_path) if self.journal_path.exists() else None
        return graph, journal

    def change_marker(self) -> str:
        """An opaque string that changes whenever the graph's content changes and is equal
        for equal content (also across restarts).
        """
        return self.read(self.marker_of)

    @property
    def broken(self) -> str | None:
        """Why this store refuses further use (a failed journal write), or None."""
        return self._broken

    @property
    def journal_records(self) -> int:
        """Records in the journal not yet folded into the graph file."""
        return self._journal_records

    def should_compact(self) -> bool:
        """True when the journal has grown as big as the graph file (and at least 1 MiB)."""
        return self._journal_records > 0 and self._journal_offset >= max(
            COMPACT_MIN_JOURNAL_BYTES, self._base[0]
        )

    def repair(self) -> LoadReport:
        """Reload, quarantine what is broken into ``<file>.corrupt`` and rewrite the file
        cleanly (atomically), even if it was clean. Returns what was found.
        """
        if self.readonly:
            raise PermissionError(f"graph store for {str(self.path)!r} was opened read-only")
        with self._locked():
            self._graph = None
            self._reload()
            self._compact()
        assert self.report is not None
        return self.report

    # -- locking -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self._broken is not None:
            raise MemoryInconsistent(self._broken)
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        fd = self._acquire()
        self._lock_depth = 1
        try:
            yield
        finally:
            self._lock_depth = 0
            if fd is not None:
                unlock_descriptor(fd)

    def _acquire(self) -> int | None:
        deadline = time.monotonic() + self.lock_timeout
        pause = 0.0002
        while True:
            fd = self._lock_fd
            if fd is None:
                try:
                    fd = _open_side(self.lock_path, os.O_RDWR | os.O_CREAT)
                except OSError as exc:
                    if self.readonly and exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
                        return None  # cannot lock a read-only place; nobody can write there either
                    raise
                self._lock_fd = fd
            if lock_descriptor(fd, blocking=False):
                # The lock must guard the file at the path now: if the lock file was deleted
                # and recreated, holding the old inode would exclude nobody.
                try:
                    current = os.stat(self.lock_path).st_ino
                except FileNotFoundError:
                    current = -1
                if current == os.fstat(fd).st_ino:
                    return fd
                unlock_descriptor(fd)
                os.close(fd)
                self._lock_fd = None
                continue
            if time.monotonic() >= deadline:
                raise MemoryLocked(
                    f"memory file {str(self.path)!r} is locked by another process "
                    f"({str(self.lock_path)!r} held for more than {self.lock_timeout:g}s); "
                    "wait for that companyd/serve-mcp process to finish, or stop it"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    # -- loading -----------------------------------------------------------------------------

    def _sync(self) -> KnowledgeGraph:
        """Bring the in-memory graph up to date with the files (lock held)."""
        graph = self._graph
        if graph is None or _stat(self.path) != self._graph_sig:
            return self._reload()
        jsig = _stat(self.journal_path)
        jino = jsig.ino if jsig is not None else None
        if jino != self._journal_sig_ino:
            return self._reload()
        if jsig is not None and jsig.size != self._journal_offset:
            if jsig.size < self._journal_offset:
                return self._reload()
            self._read_journal_tail(graph, jsig.size)
        return graph

    def _reload(self) -> KnowledgeGraph:
        """Full load from disk, with repair unless read-only (lock held)."""
        self._graph = None
        if self._journal_fd is not None:
            os.close(self._journal_fd)
            self._journal_fd = None
        if not self.readonly:
            self._remove_stray_temporaries()
        data, sig = self._read_graph_file()
        base = (len(data), hashlib.sha256(data).hexdigest())
        graph, report = parse_graph(data)
        if report.lines and report.dropped_lines == report.lines:
            self._refuse_foreign(data)
        if not self.readonly and sig is not None:
            _tighten(self.path)  # left 0644 by an older companyd or an editor
        quarantine = list(report.quarantined)
        self._base = base
        self._graph_sig = sig
        self._journal_offset = 0
        self._journal_records = 0
        self._journal_sig_ino = None

        # Which journal extends this exact file? Normally the journal; right after a
        # compaction that crashed between its two renames, the next journal.
        journal = self._read_file(self.journal_path)
        header = parse_header(journal.split(b"\n", 1)[0]) if journal else None
        journal_ino = -1  # which file the journal came from (-1: not the journal path)
        if header == base:
            jsig = _stat(self.journal_path)
            journal_ino = jsig.ino if jsig is not None else -1
            if not self.readonly:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.next_journal_path)  # from a compaction that crashed early
        else:
            upcoming = self._read_file(self.next_journal_path)
            next_header = parse_header(upcoming.split(b"\n", 1)[0]) if upcoming else None
            if next_header == base:
                if not self.readonly:
                    os.replace(self.next_journal_path, self.journal_path)
                    fsync_directory(self.path.parent)
                    jsig = _stat(self.journal_path)
                    journal_ino = jsig.ino if jsig is not None else -1
                journal, header = upcoming, next_header

        damaged: list[tuple[int, bytes, str]] = []
        journal_ok = False
        if journal and header != base:
            # The graph file was replaced by something that does not keep our journal: an
            # official server or an editor. Our journal holds acknowledged writes the new
            # file may lack; put them back on top (docs/memory.md "Foreign rewrites").
            records, damaged, _ = self._parse_records(journal)
            for offset, effect in records:
                try:
                    if replay_effect(graph, effect):
                        report.journal_records += 1
                except (KeyError, TypeError, ValueError) as exc:
                    damaged.append((offset, journal_line(journal, offset), f"unusable: {exc}"))
            report.foreign_rewrite = report.journal_records > 0
        elif journal:
            records, damaged, end = self._parse_records(journal)
            for offset, effect in records:
                try:
                    replay_effect(graph, effect)
                except (KeyError, TypeError, ValueError) as exc:
                    damaged.append((offset, journal_line(journal, offset), f"unusable: {exc}"))
            report.journal_records = len(records)
            if end < len(journal):
                report.journal_torn = True
                damaged.append(
                    (end, journal[end:], "torn last record (an unacknowledged write cut short)")
                )
            journal_ok = not damaged
            self._journal_offset = end
            self._journal_records = len(records)
        quarantine += [journal_quarantined(o, raw, why) for o, raw, why in damaged]
        graph.check_invariants()
        report.quarantined = quarantine
        report.entities = len(graph)
        report.relations = graph.relation_count
        self.report = report
        self._graph = graph

        if self.readonly:
            # Follow the journal only if it is the file at the journal path; otherwise
            # (a next journal after a crash) reload on every call until a writer fixes it.
            if journal_ok:
                self._journal_sig_ino = journal_ino
            elif not journal and _stat(self.journal_path) is None:
                self._journal_sig_ino = None  # no journal at all: nothing to follow yet
            else:
                self._journal_sig_ino = -1
            return graph
        if quarantine:
            self._write_quarantine(quarantine)
        if report.needs_repair:
            self._compact()  # clean, complete file and an empty journal extending it
        else:
            self._open_journal(fresh=not journal_ok)
        if report.needs_repair:
            log.warning("memory file %s repaired: %s", self.path, report.summary())
            if self.on_repair is not None:
                self.on_repair(report)
        return graph

    def _read_graph_file(self) -> tuple[bytes, _Sig | None]:
        """The graph file's bytes and stat (``b""``, None when missing); refuses anything but
        a regular file. O_NONBLOCK: opening a FIFO must not wait for a writer.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return b"", None
        except IsADirectoryError:
            raise self._not_regular(f"a directory ({os.strerror(errno.EISDIR)})") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise self._not_regular(_file_kind(st.st_mode))
            return _read_all(fd), _Sig.of(st)
        finally:
            os.close(fd)

    def _not_regular(self, kind: str) -> MemoryNotAGraph:
        return MemoryNotAGraph(
            f"cannot use memory file {str(self.path)!r}: it is {kind}, not a regular file; "
            "set memory.path in company.yaml (or the symlink) to a regular file, or remove "
            "it to start an empty graph there"
        )

    def _refuse_foreign(self, data: bytes) -> None:
        """Raise :class:`MemoryNotAGraph` when ``data`` has lines but none of a graph."""
        if not not_a_graph(data):
            return
        raise MemoryNotAGraph(
            f"memory file {str(self.path)!r} is not a memory graph: none of its lines is an "
            "entity, a relation or any other JSON object, so companyd left it untouched instead "
            "of repairing it into an empty graph. If memory.path in company.yaml (or a "
            "symlink) names the wrong file, point it at the graph file or a new path; if this "
            "is your damaged graph, move it aside, restore what you need by hand and restart"
        )

    def _read_file(self, path: Path) -> bytes:
        try:
            fd = _open_side(path, os.O_RDONLY)
        except FileNotFoundError:
            return b""
        try:
            return _read_all(fd)
        finally:
            os.close(fd)

    def _parse_records(
        self, journal: bytes
    ) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, bytes, str]], int]:
        """Records after the header: ``(good [(offset, effect)], damaged [(offset, raw,
        reason)], end of the last complete line)``.
        """
        pos = journal.find(b"\n") + 1 if journal else 0
        if pos == 0:
            return [], [], 0
        good: list[tuple[int, dict[str, Any]]] = []
        damaged: list[tuple[int, bytes, str]] = []
        n = len(journal)
        while pos < n:
            end = journal.find(b"\n", pos)
            if end < 0:
                break  # no newline: the tail of a write that was never acknowledged
            line = journal[pos:end]
            try:
                good.append((pos, decode_record(line)))
            except ValueError as exc:
                damaged.append((pos, line, f"damaged record ({exc})"))
            pos = end + 1
        return good, damaged, pos

    def _read_journal_tail(self, graph: KnowledgeGraph, size: int) -> None:
        """Apply records other processes appended since we last looked (lock held)."""
        fd = self._journal_fd
        if fd is None:
            fd = _open_side(self.journal_path, os.O_RDONLY)
            try:
                chunk = os.pread(fd, size - self._journal_offset, self._journal_offset)
            finally:
                os.close(fd)
        else:
            chunk = os.pread(fd, size - self._journal_offset, self._journal_offset)
        pos = 0
        damaged = False
        while pos < len(chunk):
            end = chunk.find(b"\n", pos)
            if end < 0:
                break
            try:
                replay_effect(graph, decode_record(chunk[pos:end]))
                self._journal_records += 1
            except (KeyError, TypeError, ValueError):
                damaged = True
            pos = end + 1
        if damaged or pos < len(chunk):
            # A writer died mid-record or a record is damaged: reload fully, which repairs
            # (quarantines and truncates) under the lock we hold.
            self._reload()
            return
        self._journal_offset += pos

    # -- writing -----------------------------------------------------------------------------

    def _append(self, effects: Sequence[Mapping[str, Any]]) -> None:
        data = b"".join(encode_record(e) for e in effects)
        fd = self._journal_fd
        try:
            if fd is None:
                raise OSError(errno.EBADF, "journal is not open")
            write_all(fd, data)
            _sync_data(fd)
        except OSError as exc:
            # Cut off what part of the records reached the file (a full disk takes a write
            # partly; shrinking a file needs no space), so the failed, unacknowledged write
            # is not applied by the next load: the lock is held, nobody appended after us.
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self._journal_offset)
            # The graph in memory now holds changes that may not be on disk. Never retry an
            # fsync (the page cache may have dropped the data): refuse, and let the owner
            # reload from what the disk says.
            self._broken = (
                f"writing the journal {str(self.journal_path)!r} failed ({exc}); "
                "the memory owner must restart and reload"
            )
            self._graph = None
            raise MemoryInconsistent(self._broken) from exc
        self._journal_offset += len(data)
        self._journal_records += len(effects)

    def _compact(self) -> None:
        """Rewrite the graph file from memory and start an empty journal for it (lock held).

        Order: graph to a temporary file (fsync) → next journal naming it (fsync, dir
        fsync) → rename the graph file (dir fsync) → rename the next journal (dir fsync).
        """
        graph = self._graph
        assert graph is not None
        data = serialize(graph)
        sha = hashlib.sha256(data).hexdigest()
        tmp = tmp_name(self.path)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE)
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            self._write_journal_file(self.next_journal_path, journal_header(len(data), sha))
            fsync_directory(self.path.parent)
            os.replace(tmp, self.path)
            fsync_directory(self.path.parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.replace(self.next_journal_path, self.journal_path)
        fsync_directory(self.path.parent)
        self._base = (len(data), sha)
        self._graph_sig = _stat(self.path)
        self._marker = (graph, graph.version, _marker_from_sha(sha))
        self._journal_offset = len(journal_header(len(data), sha))
        self._journal_records = 0
        self._open_journal(fresh=False)

    def _write_journal_file(self, path: Path, content: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE)
        try:
            write_all(fd, content)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _open_journal(self, *, fresh: bool) -> None:
        """Open the journal for appending at ``_journal_offset``; with ``fresh`` (or when it is
        missing) first replace it by an empty one extending the current graph file.
        """
        if self._journal_fd is not None:
            os.close(self._journal_fd)
            self._journal_fd = None
        if fresh or not self.journal_path.exists():
            header = journal_header(*self._base)
            tmp = tmp_name(self.journal_path)
            self._write_journal_file(tmp, header)
            os.replace(tmp, self.journal_path)
            fsync_directory(self.path.parent)
            self._journal_offset = len(header)
            self._journal_records = 0
        fd = _open_side(self.journal_path, os.O_RDWR | os.O_APPEND)
        st = os.fstat(fd)
        self._journal_fd = fd
        self._journal_sig_ino = st.st_ino
        if st.st_size != self._journal_offset:
            # Only reachable with a tail we already quarantined: cut it off so the next
            # record starts on a line of its own.
            os.ftruncate(fd, self._journal_offset)
            os.fsync(fd)

    def _write_quarantine(self, lines: list[QuarantinedLine]) -> None:
        when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        data = format_quarantine(lines, source=str(self.path), when=when)
        created = not self.corrupt_path.exists()
        fd = _open_side(self.corrupt_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            start = os.fstat(fd).st_size
            try:
                write_all(fd, data)
                os.fsync(fd)
            except OSError:
                # A section cut short (disk full) would misframe every section appended
                # after it (the byte counts): take it out again.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)
        if created:
            fsync_directory(self.path.parent)

    def _remove_stray_temporaries(self) -> None:
        # Our own temporaries only (``.memory.jsonl.companyd-<hex>.tmp``): the lock we hold
        # means no companyd process is writing one now. The official server's
        # ``memory.jsonl.<hex>.tmp`` files are left alone: it takes no lock.
        prefixes = (f".{self.path.name}.companyd-", f".{self.journal_path.name}.companyd-")
        try:
            names = os.listdir(self.path.parent)
        except FileNotFoundError:
            return
        for name in names:
            if name.endswith(".tmp") and name.startswith(prefixes):
                with contextlib.suppress(OSError):
                    os.unlink(self.path.parent / name)

    def marker_of(self, graph: KnowledgeGraph) -> str:
        """:meth:`change_marker` of ``graph`` (this store's current graph), without locking;
        for use inside :meth:`execute` and :meth:`read`.
        """
        cached = self._marker
        if cached is not None and cached[0] is graph and cached[1] == graph.version:
            return cached[2]
        marker = _marker_from_sha(hashlib.sha256(serialize(graph)).hexdigest())
        self._marker = (graph, graph.version, marker)
        return marker


_READERS = frozenset({"read_graph", "search_nodes", "open_nodes"})


def _marker_from_sha(sha: str) -> str:
    return f"g1-{sha[:32]}"


def _open_side(path: Path, flags: int) -> int:
    """Open a side file (journal, lock, ``.corrupt``) without following a symlink: side
    files are written only next to the graph (docs/memory.md), never through a link planted
    there. Raises :class:`MemoryUnsafePath` for a symlink.
    """
    try:
        fd = os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW, PRIVATE_FILE)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise MemoryUnsafePath(
            f"memory side file {str(path)!r} is a symlink; companyd writes its journal, lock "
            "and .corrupt files only next to the graph file, never through a link. Remove the "
            "symlink (move the file it points to aside if you need it) and start again"
        ) from None
    if flags & (os.O_WRONLY | os.O_RDWR):
        st = os.fstat(fd)
        if st.st_mode & 0o077 and st.st_uid == os.geteuid():
            with contextlib.suppress(OSError):
                os.fchmod(fd, PRIVATE_FILE)  # left 0644 by an older companyd
    return fd


def _tighten(path: Path) -> None:
    """Drop group/other bits from a file we own (others' files are left alone)."""
    with contextlib.suppress(OSError):
        st = os.stat(path)
        if st.st_mode & 0o077 and st.st_uid == os.geteuid():
            os.chmod(path, PRIVATE_FILE)


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return f"a directory ({os.strerror(errno.EISDIR)})"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
