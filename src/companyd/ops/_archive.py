"""The backup archive: its members, its manifest, writing it atomically and checking it.

A backup is one ``tar.gz`` (plain ``tar -tzf`` lists it) holding

* ``manifest.json`` — the format, when and by which versions (companyd, Python, SQLite) it
  was taken, the company, where its state and memory lived, and one entry per member with
  its kind, size, SHA-256 and (for a store) its schema version;
* ``manifest.sha256`` — the SHA-256 of ``manifest.json`` itself, so a changed byte in the
  manifest is caught like one anywhere else;
* the members the manifest names: ``state/*.sqlite`` (each store, as SQLite's online backup
  API copied it), ``memory/<graph file>`` and ``memory/<graph file>.journal`` (taken
  together under the memory lock), ``config/company.yaml`` (the file as the daemon loaded
  it) and ``config/resolved.json`` (the validated file with every default filled in;
  secrets appear there only as the names of the variables and credentials that hold them).

:func:`write_archive` writes the archive next to its destination under a temporary name,
fsyncs it, renames it into place and fsyncs the directory: a crash or a full disk leaves
the old file or the new one, never half of one; the file is 0600 (it holds the company's
prompts, answers, memory and spend). :func:`verify_archive` checks every checksum and opens
every store read-only (``PRAGMA quick_check``, the schema version) and the memory graph
through the memory package's own loader in a scratch directory.

Nothing in an archive is trusted before it is checked (docs/deploy.md, "What a restore
trusts"): the manifest is read only up to :data:`MANIFEST_LIMIT` bytes and must have exactly
the shape :func:`manifest_problems` describes (known keys, their types, member names of the
fixed forms ``state/<name>.sqlite``, ``memory/<file>``, ``memory/<file>.journal``,
``config/company.yaml``, ``config/resolved.json``, a relative ``memory_in_state_dir`` with no
``..``); every archive entry must be a regular file the manifest lists, once, whose size in
the tar header is the manifest's (so no member is read past its declared size); the memory
journal is parsed line by line. The archive itself must be a regular file (a FIFO or a
device is refused before it is opened for reading).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import stat
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from companyd._fs import PRIVATE_FILE, fsync_directory, tmp_name
from companyd._sqlite import connect_readonly, user_version
from companyd.errors import CompanydError
from companyd.memory import GraphStore, decode_record, parse_header

__all__ = [
    "FORMAT",
    "MANIFEST",
    "MANIFEST_SHA",
    "BackupError",
    "BackupStopped",
    "Member",
    "VerifyReport",
    "manifest_problems",
    "read_manifest",
    "sha256_file",
    "verify_archive",
    "write_archive",
]

#: The archive format this code writes and reads.
FORMAT = "companyd-backup/1"
MANIFEST = "manifest.json"
MANIFEST_SHA = "manifest.sha256"
#: The member holding the validated configuration (every default filled in).
RESOLVED = "config/resolved.json"

_CHUNK = 1 << 20

#: The most of ``manifest.json`` / ``manifest.sha256`` read (a real manifest is a few KiB).
MANIFEST_LIMIT = 1 << 20

#: The member kinds, and the keys of a member entry.
KINDS = ("sqlite", "memory", "memory-journal", "config", "resolved-config")
_MEMBER_KEYS = {"name": str, "kind": str, "size": int, "sha256": str, "schema_version": int}
#: One path component of a member or of ``memory_in_state_dir``: not ``.`` or ``..``, no
#: separator, no control character, not one of the restore's own ``.companyd-`` names
#: (``memory.path`` is the founder's: "Acme Memory.jsonl" is a fine file name).
_PART = re.compile(r"(?!\.\.?$)(?!\.companyd-)[^/\\\x00-\x1f\x7f]{1,255}")
_SHA = re.compile(r"[0-9a-f]{64}")
#: The manifest's keys and the types of their values (``None`` allowed where listed);
#: ``members`` and ``database`` are checked further below.
_STR = (str,)
_TOP: dict[str, tuple[type, ...]] = {
    "format": _STR,
    "created": _STR,
    "created_ts": (int, float),
    "companyd": _STR,
    "python": _STR,
    "sqlite": _STR,
    "libraries": (dict,),
    "platform": _STR,
    "host": _STR,
    "company": _STR,
    "config_path": _STR,
    "state_dir": _STR,
    "memory_path": _STR,
    "memory_in_state_dir": (str, type(None)),
    "members": (list,),
    "database": (dict, type(None)),
}
_REQUIRED = ("format", "members", "memory_in_state_dir")
_DATABASE = {"backend": str, "schema": str, "in_archive": bool, "back_up_with": str}


class BackupError(CompanydError):
    """A backup could not be taken, verified or restored; the message says why and what to
    do (exit 1).
    """


class BackupStopped(BackupError):
    """The backup was asked to stop (its ``stopped`` said so) before it finished: nothing
    was written — the staging and the temporary archive are removed.
    """

    def __init__(self) -> None:
        super().__init__("the backup was stopped before it finished; nothing was written")


class _Checked:
    """A file read for the archive that raises :class:`BackupStopped` between reads once
    ``stopped()`` says so (a large store is not written to its end first).
    """

    def __init__(self, raw: Any, stopped: Callable[[], bool]) -> None:
        self._raw = raw
        self._stopped = stopped

    def read(self, size: int = -1) -> bytes:
        if self._stopped():
            raise BackupStopped
        data: bytes = self._raw.read(size)
        return data


@dataclass(frozen=True)
class Member:
    """One file of the archive as the manifest describes it.

    Attributes:
        name: its path inside the archive (``state/spend.sqlite``).
        kind: ``sqlite``, ``memory``, ``memory-journal``, ``config`` or ``resolved-config``.
        size: bytes.
        sha256: hex digest of its bytes.
        schema_version: a store's ``PRAGMA user_version`` (None for other kinds).
    """

    name: str
    kind: str
    size: int
    sha256: str
    schema_version: int | None = None

    @classmethod
    def of(cls, name: str, kind: str, path: Path, schema_version: int | None = None) -> Member:
        """The entry for the staged file ``path`` (its size and SHA-256 read from disk)."""
        size, sha = sha256_file(path)
        return cls(name=name, kind=kind, size=size, sha256=sha, schema_version=schema_version)


@dataclass
class VerifyReport:
    """What :func:`verify_archive` found: the manifest, and one problem per bad member.

    ``timezone``: the backed-up company's zone (``company.timezone`` in its checked
    ``config/resolved.json``), in which its times are shown to a person; None when the
    archive does not say (they are then shown in UTC).
    """

    path: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    timezone: str | None = None

    @property
    def ok(self) -> bool:
        """No problem found."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The report as ``--json`` prints it."""
        return {
            "path": str(self.path),
            "ok": self.ok,
            "format": self.manifest.get("format"),
            "created": self.manifest.get("created"),
            "company": self.manifest.get("company"),
            "members": len(self.checked),
            "checked": self.checked,
            "problems": self.problems,
        }


def sha256_file(path: Path) -> tuple[int, str]:
    """``(size, SHA-256 hex)`` of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def write_archive(
    dest: Path,
    manifest: Mapping[str, Any],
    files: Mapping[str, Path],
    *,
    compresslevel: int = 6,
    stopped: Callable[[], bool] | None = None,
) -> int:
    """Write ``files`` (archive name → staged file) and ``manifest`` as one gzip tar at
    ``dest``, atomically and 0600; returns its size.

    Raises:
        OSError: the destination cannot be written (the temporary file is removed).
        BackupStopped: ``stopped()`` said so while it wrote (the temporary file is removed).
    """
    manifest_bytes = json.dumps(manifest, indent=2, ensure_ascii=False).encode() + b"\n"
    manifest_sha = (hashlib.sha256(manifest_bytes).hexdigest() + "\n").encode()
    tmp = tmp_name(dest)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        with os.fdopen(fd, "wb") as raw:
            os.fchmod(raw.fileno(), PRIVATE_FILE)  # whatever the umask
            with tarfile.open(
                fileobj=raw, mode="w:gz", compresslevel=compresslevel, format=tarfile.PAX_FORMAT
            ) as tar:
                _add_bytes(tar, MANIFEST, manifest_bytes, manifest.get("created_ts"))
                _add_bytes(tar, MANIFEST_SHA, manifest_sha, manifest.get("created_ts"))
                for name, path in files.items():
                    info = tar.gettarinfo(str(path), arcname=name)
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    info.mode = PRIVATE_FILE
                    with open(path, "rb") as f:
                        tar.addfile(info, f if stopped is None else _Checked(f, stopped))
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(dest.parent)
    return dest.stat().st_size


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: Any) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = PRIVATE_FILE
    info.mtime = int(mtime or 0)
    tar.addfile(info, io.BytesIO(data))


@contextlib.contextmanager
def _open_tar(path: Path) -> Iterator[tarfile.TarFile]:
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise BackupError(f"no backup at {str(path)!r}; check the path") from None
    except IsADirectoryError:
        raise BackupError(f"{str(path)!r} is a directory; name the backup file inside it") from None
    except OSError as exc:
        raise BackupError(
            f"cannot open backup {str(path)!r}: {exc.strerror or exc}; check the path and "
            "that this user may read it"
        ) from None
    raw = os.fdopen(fd, "rb")
    with raw:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise BackupError(f"{str(path)!r} is a directory; name the backup file inside it")
        if not stat.S_ISREG(st.st_mode):
            raise BackupError(
                f"{str(path)!r} is {_file_kind(st.st_mode)}, not a backup file; a backup is a "
                "regular .tar.gz written by `companyd backup`"
            )
        os.set_blocking(fd, True)
        try:
            tar = tarfile.open(fileobj=raw, mode="r:*")  # noqa: SIM115 - closed below
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise BackupError(
                f"{str(path)!r} is not a readable companyd backup ({type(exc).__name__}: "
                f"{exc}); expected a .tar.gz written by `companyd backup`"
            ) from None
        with tar:
            _load_headers(tar, path)
            yield tar


#: More entries than any companyd backup has (it has a few dozen at most).
MAX_ENTRIES = 10_000


def _load_headers(tar: tarfile.TarFile, path: Path) -> None:
    """Read every entry's header once (no content is extracted), refusing an archive of
    more than :data:`MAX_ENTRIES` entries before its headers fill the memory.
    """
    try:
        n = 0
        while tar.next() is not None:
            n += 1
            if n > MAX_ENTRIES:
                raise BackupError(
                    f"backup {str(path)!r} has more than {MAX_ENTRIES} entries; a companyd "
                    "backup has a few dozen: it is damaged or not a companyd backup"
                )
    except BackupError:
        raise
    except Exception as exc:  # TarError, OSError, EOFError, zlib.error
        raise BackupError(
            f"{str(path)!r} is not a readable companyd backup ({type(exc).__name__}: {exc}); "
            "expected a .tar.gz written by `companyd backup`"
        ) from None


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _entry_kind(info: tarfile.TarInfo) -> str:
    if info.issym():
        return f"a symbolic link (to {info.linkname!r})"
    if info.islnk():
        return f"a hard link (to {info.linkname!r})"
    if info.isfifo():
        return "a FIFO"
    if info.ischr() or info.isblk():
        return "a device"
    if info.isdir():
        return "a directory"
    return "not a regular file"


def _entries(tar: tarfile.TarFile, path: Path) -> list[tarfile.TarInfo]:
    """Every entry's header (nothing is extracted: only the headers are read)."""
    try:
        return tar.getmembers()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BackupError(f"backup {str(path)!r} is damaged: {exc}") from None
    except Exception as exc:  # zlib.error: a damaged compressed stream
        raise BackupError(f"backup {str(path)!r} is damaged: {type(exc).__name__}: {exc}") from None


def read_manifest(tar: tarfile.TarFile, path: Path) -> dict[str, Any]:
    """The archive's manifest, checked against ``manifest.sha256`` and for its shape
    (:func:`manifest_problems`).

    Raises:
        BackupError: missing, damaged, of another format or of the wrong shape (the message
            names each problem).
    """
    data = _member_bytes(tar, MANIFEST, path)
    recorded = _member_bytes(tar, MANIFEST_SHA, path)
    got = hashlib.sha256(data).hexdigest()
    want = recorded.decode("ascii", errors="replace").strip()
    if recorded != f"{got}\n".encode():  # byte for byte: its newline counts too
        raise BackupError(
            f"backup {str(path)!r}: {MANIFEST} does not match {MANIFEST_SHA} (SHA-256 {got}, "
            f"expected {want[:64]}): the archive is damaged; use another backup"
        )
    try:
        manifest = json.loads(data)
    except RecursionError:
        raise BackupError(
            f"backup {str(path)!r}: {MANIFEST} is nested too deep to be a companyd manifest: "
            "the archive is damaged or not a companyd backup; use another backup"
        ) from None
    except ValueError as exc:
        raise BackupError(f"backup {str(path)!r}: {MANIFEST} is not JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise BackupError(
            f"backup {str(path)!r} has format {found!r:.80}; this companyd reads {FORMAT!r}"
        )
    problems = manifest_problems(manifest)
    if problems:
        raise BackupError(
            f"backup {str(path)!r}: {MANIFEST} is damaged: "
            + "; ".join(problems[:10])
            + (f" and {len(problems) - 10} more" if len(problems) > 10 else "")
            + " — use another backup"
        )
    return manifest


def _member_bytes(tar: tarfile.TarFile, name: str, path: Path) -> bytes:
    found = [i for i in _entries(tar, path) if i.name == name]
    if not found:
        raise BackupError(
            f"backup {str(path)!r} has no {name!r}: it is not a companyd backup, or it is damaged"
        )
    if len(found) > 1:
        raise BackupError(f"backup {str(path)!r} holds {name!r} {len(found)} times: it is damaged")
    info = found[0]
    if not info.isreg():
        raise BackupError(f"backup {str(path)!r}: {name!r} is {_entry_kind(info)}, not a file")
    if info.size > MANIFEST_LIMIT:
        raise BackupError(
            f"backup {str(path)!r}: {name!r} is {info.size} bytes, more than a companyd "
            f"manifest ever is ({MANIFEST_LIMIT}): the archive is damaged"
        )
    try:
        f = tar.extractfile(info)
        assert f is not None  # a regular file
        with f:
            return f.read(MANIFEST_LIMIT)
    except Exception as exc:  # TarError, OSError, EOFError, zlib.error
        raise BackupError(f"backup {str(path)!r} is damaged: {type(exc).__name__}: {exc}") from None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _type_name(types: tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", dict: "an object",
             list: "a list", bool: "true or false", type(None): "null"}  # fmt: skip
    return " or ".join(
        names.get(t, t.__name__) for t in types if t is not int or float not in types
    )


def _is(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False  # JSON true is not a size
    return isinstance(value, types)


def manifest_problems(manifest: Mapping[str, Any]) -> list[str]:
    """What is wrong with a manifest's shape (empty: nothing): every key one this format
    writes, each value of its type, each member entry of the form its kind allows (see the
    module docstring), no name twice, at most one of each memory and config kind, a journal
    only with its graph, and ``memory_in_state_dir`` a relative path of plain names that ends
    in the graph's file name.
    """
    problems: list[str] = []
    for key in sorted(set(manifest) - set(_TOP)):
        problems.append(f"unknown key {_shown(key)} (this format has {', '.join(_TOP)})")
    for key in _REQUIRED:
        if key not in manifest:
            problems.append(f"no {key!r}")
    for key, types in _TOP.items():
        if key in manifest and not _is(manifest[key], types):
            problems.append(f"{key!r} is {_shown(manifest[key])}, expected {_type_name(types)}")
    libraries = manifest.get("libraries")
    if isinstance(libraries, dict) and not all(
        isinstance(k, str) and isinstance(v, str) for k, v in libraries.items()
    ):
        problems.append("'libraries' must map names to version strings")
    database = manifest.get("database")
    if isinstance(database, dict):
        for key in sorted(set(database) - set(_DATABASE)):
            problems.append(f"unknown key {_shown(key)} in 'database'")
        for key, typ in _DATABASE.items():
            if not _is(database.get(key), (typ,)):
                problems.append(
                    f"'database.{key}' is {_shown(database.get(key))}, expected "
                    f"{_type_name((typ,))}"
                )
    entries = manifest.get("members")
    if not isinstance(entries, list):
        return problems
    names: set[str] = set()
    by_kind: dict[str, list[str]] = {}
    for i, entry in enumerate(entries):
        where = f"members[{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{where} is {_shown(entry)}, expected an object")
            continue
        for key in sorted(set(entry) - set(_MEMBER_KEYS)):
            problems.append(f"{where}: unknown key {_shown(key)}")
        bad = False
        for key, typ in _MEMBER_KEYS.items():
            value = entry.get(key)
            if key == "schema_version" and value is None:
                continue
            if not _is(value, (typ,)):
                problems.append(f"{where}.{key} is {_shown(value)}, expected {_type_name((typ,))}")
                bad = True
        if bad:
            continue
        name, kind = entry["name"], entry["kind"]
        if entry["size"] < 0:
            problems.append(f"{where}.size is {entry['size']}, expected a size in bytes")
        if not _SHA.fullmatch(entry["sha256"]):
            problems.append(f"{where}.sha256 is {_shown(entry['sha256'])}, expected 64 hex digits")
        problem = _name_problem(name, kind)
        if problem:
            problems.append(f"{where}: member {_shown(name)} {problem}")
            continue
        if name in names:
            problems.append(f"{where}: member {name!r} is listed twice")
        names.add(name)
        by_kind.setdefault(kind, []).append(name)
    for kind in ("memory", "memory-journal", "config", "resolved-config"):
        if len(by_kind.get(kind, [])) > 1:
            problems.append(f"{len(by_kind[kind])} members of kind {kind!r}, expected one")
    graph = by_kind.get("memory", [None])[0]
    for journal in by_kind.get("memory-journal", []):
        if graph is None or journal != f"{graph}.journal":
            problems.append(
                f"member {journal!r} is a memory journal without its graph "
                f"({journal.removesuffix('.journal')!r}) in the manifest"
            )
    rel = manifest.get("memory_in_state_dir")
    if isinstance(rel, str):
        problem = _relative_problem(rel)
        if problem:
            problems.append(f"'memory_in_state_dir' is {_shown(rel)}: {problem}")
        elif graph is not None and rel.rsplit("/", 1)[-1] != graph.split("/", 1)[1]:
            problems.append(
                f"'memory_in_state_dir' is {rel!r}, but the graph in the archive is {graph!r}"
            )
        elif rel.split("/", 1)[0] in {n.split("/", 1)[1] for n in by_kind.get("sqlite", [])}:
            problems.append(f"'memory_in_state_dir' {rel!r} is where a store goes")
    return problems


def _name_problem(name: str, kind: str) -> str | None:
    """Why ``name`` is not a member name of ``kind`` (None: it is)."""
    if kind not in KINDS:
        return f"has kind {_shown(kind)}; the kinds are {', '.join(KINDS)}"
    if kind == "config":
        return None if name == "config/company.yaml" else "is not 'config/company.yaml'"
    if kind == "resolved-config":
        return None if name == RESOLVED else f"is not {RESOLVED!r}"
    top, _, base = name.partition("/")
    if kind == "sqlite":
        if top != "state" or not _PART.fullmatch(base) or not base.endswith(".sqlite"):
            return "is not of the form state/<name>.sqlite (a plain file name)"
        return None
    if top != "memory" or not _PART.fullmatch(base):
        return "is not of the form memory/<file name> (a plain file name)"
    if (kind == "memory") == base.endswith(".journal"):
        return "is not a memory graph's name" if kind == "memory" else "does not end in .journal"
    return None


def _relative_problem(rel: str) -> str | None:
    """Why ``rel`` is not a safe path relative to the state directory (None: it is)."""
    if rel.startswith("/"):
        return "an absolute path; it must be relative to the state directory"
    parts = rel.split("/")
    if len(parts) > 16:
        return "too many directories"
    for part in parts:
        if part in ("", ".", ".."):
            return f"it has a {part or 'empty'!r} component; only plain names are allowed"
        if not _PART.fullmatch(part):
            return f"{part!r} is not a plain file name (no / or \\, no control character)"
        if part == "daemon.lock":
            return "it names the state directory's lock"
    return None


def members(manifest: Mapping[str, Any]) -> list[Member]:
    """The manifest's member entries (a manifest :func:`read_manifest` accepted)."""
    return [Member(**m) for m in manifest.get("members", [])]


def verify_archive(path: Path, *, extract_to: Path | None = None) -> VerifyReport:
    """Check every member of the backup at ``path`` against the manifest (presence, size,
    SHA-256, nothing extra, only regular files, no name twice) and open each store
    read-only (quick_check, schema version), the memory graph with the memory loader and
    parse the memory journal. With ``extract_to`` (an empty directory) the members are left
    there, as checked, under their archive names, for :mod:`companyd.ops._restore`.

    No member is read past the size the manifest declares, and no archive entry but a
    regular file is opened.

    Raises:
        BackupError: the archive cannot be read at all, is not a regular file, or its
            manifest is damaged or of the wrong shape (a bad member is reported in
            :attr:`VerifyReport.problems` instead).
    """
    report = VerifyReport(path=path)
    with contextlib.ExitStack() as stack:
        if extract_to is None:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="companyd-v-")))
        else:
            scratch = extract_to
        with _open_tar(path) as tar:
            report.manifest = read_manifest(tar, path)
            listed = members(report.manifest)
            known = {m.name for m in listed} | {MANIFEST, MANIFEST_SHA}
            entries: dict[str, tarfile.TarInfo] = {}
            refused: set[str] = set()
            for info in _entries(tar, path):
                if info.name not in known:
                    report.problems.append(
                        f"{info.name}: not in the manifest (a backup holds only the stores, "
                        "memory and configuration its manifest lists)"
                    )
                elif info.name in entries:
                    report.problems.append(f"{info.name}: in the archive more than once")
                    refused.add(info.name)
                elif not info.isreg():
                    report.problems.append(
                        f"{info.name}: {_entry_kind(info)} in the archive, not a regular file"
                    )
                    refused.add(info.name)
                entries.setdefault(info.name, info)
            _check_room(scratch, listed, path)
            for m in listed:
                if m.name in refused:
                    continue
                problem = _extract_checked(tar, entries.get(m.name), m, scratch)
                if problem:
                    report.problems.append(f"{m.name}: {problem}")
                else:
                    report.checked.append(m.name)
        problem = _whole_stream(path)
        if problem:
            report.problems.append(problem)
        for m in listed:
            if m.name not in report.checked:
                continue
            try:
                problem = _open_member(m, scratch, listed)
            except RecursionError:
                problem = "nested too deep to be read: it is damaged"
            if problem:
                report.checked.remove(m.name)
                report.problems.append(f"{m.name}: {problem}")
        if RESOLVED in report.checked:
            report.timezone = _company_zone(scratch / RESOLVED)
    return report


def _company_zone(resolved: Path) -> str | None:
    """``company.timezone`` of a checked ``config/resolved.json`` (its size is the
    manifest's); None if it does not hold one.
    """
    try:
        zone = json.loads(resolved.read_bytes())["company"]["timezone"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return zone if isinstance(zone, str) else None


def _whole_stream(path: Path) -> str | None:
    """Read the compressed file to its end: the members may be intact while the bytes after
    them (the tar's end blocks, the gzip trailer with its CRC) are not, and those are part
    of the file too.
    """
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    if not gzipped:
        return None
    try:
        with gzip.open(path, "rb") as g:
            while g.read(_CHUNK):
                pass
    except Exception as exc:  # gzip.BadGzipFile, zlib.error, EOFError: a damaged stream
        return f"the compressed archive is damaged: {type(exc).__name__}: {exc}"
    return None


def _check_room(scratch: Path, listed: list[Member], path: Path) -> None:
    """Refuse to start extracting members that cannot fit where they go (a consistent
    manifest may still declare a huge member: it must not fill the disk half-way).
    """
    need = sum(m.size for m in listed)
    free = shutil.disk_usage(scratch).free
    if need > free:
        raise BackupError(
            f"backup {str(path)!r}: its members need {need} bytes, {str(scratch)!r} has "
            f"{free} free; make room (or point TMPDIR at a bigger file system for "
            "`backup verify`) and try again; nothing was written"
        )


def _extract_checked(
    tar: tarfile.TarFile, info: tarfile.TarInfo | None, m: Member, root: Path
) -> str | None:
    if info is None:
        return "missing from the archive"
    if info.size != m.size:  # before reading a byte of it
        return f"{info.size} bytes in the archive, the manifest says {m.size}"
    target = root / m.name  # a validated name: state/…, memory/…, config/…
    try:
        src = tar.extractfile(info)
    except Exception as exc:  # tarfile.TarError, OSError, EOFError, zlib.error
        return f"cannot be read: {type(exc).__name__}: {exc}"
    if src is None:
        return "not a regular file in the archive"
    h = hashlib.sha256()
    size = 0
    try:
        target.parent.mkdir(exist_ok=True, mode=0o700)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
        fd = os.open(target, flags, PRIVATE_FILE)
        with src, os.fdopen(fd, "wb") as out:
            while size < m.size and (chunk := src.read(min(_CHUNK, m.size - size))):
                h.update(chunk)
                size += len(chunk)
                out.write(chunk)
    except Exception as exc:  # tarfile.TarError, OSError, EOFError, zlib.error (a bad CRC)
        return f"cannot be read: {type(exc).__name__}: {exc}"
    if size != m.size:
        return f"{size} bytes, the manifest says {m.size}"
    if h.hexdigest() != m.sha256:
        return f"SHA-256 {h.hexdigest()}, the manifest says {m.sha256}: the member is damaged"
    return None


def _open_member(m: Member, root: Path, listed: list[Member]) -> str | None:
    path = root / m.name
    if m.kind == "sqlite":
        try:
            conn = connect_readonly(path)
            try:
                version = user_version(conn)
                result = conn.execute("PRAGMA quick_check").fetchone()[0]
            finally:
                conn.close()
        except sqlite3.Error as exc:
            return f"does not open as SQLite: {exc}"
        if result != "ok":
            return f"SQLite quick_check: {result}"
        if m.schema_version is not None and version != m.schema_version:
            return f"schema version {version}, the manifest says {m.schema_version}"
        return None
    if m.kind == "memory":
        return _load_memory(path)
    if m.kind == "memory-journal":
        return _parse_journal(path)
    return None


def _parse_journal(path: Path) -> str | None:
    """A memory journal is a header line and complete, checksummed records, nothing else
    (the loader skips a first line it does not recognise: parse it here before trusting it).
    """
    data = path.read_bytes()
    if not data:
        return None
    lines = data.split(b"\n")
    if lines[-1]:
        return "the memory journal ends in an incomplete line: it is damaged"
    if parse_header(lines[0]) is None:
        return "the memory journal does not start with a companyd journal header: it is damaged"
    for n, line in enumerate(lines[1:-1], start=2):
        try:
            decode_record(line)
        except (ValueError, RecursionError) as exc:
            return f"line {n} of the memory journal is not a journal record ({exc})"
    return None


def _load_memory(path: Path) -> str | None:
    """Load the graph (with its journal beside it) read-only, as the daemon would."""
    try:
        with GraphStore(path, readonly=True) as store:
            report = store.open()
    except (CompanydError, OSError) as exc:
        return f"the memory graph does not load: {exc}"
    if report.quarantined:
        return (
            f"the memory graph loads with {len(report.quarantined)} damaged line(s) that "
            "`companyd memory repair` would set aside"
        )
    return None


def member_dict(m: Member) -> dict[str, Any]:
    """A member as the manifest writes it."""
    return asdict(m)
