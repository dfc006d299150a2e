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
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import sqlite3
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from companyd._fs import PRIVATE_FILE, fsync_directory, tmp_name
from companyd._sqlite import connect_readonly, user_version
from companyd.errors import CompanydError
from companyd.memory import GraphStore

__all__ = [
    "FORMAT",
    "MANIFEST",
    "MANIFEST_SHA",
    "BackupError",
    "Member",
    "VerifyReport",
    "read_manifest",
    "sha256_file",
    "verify_archive",
    "write_archive",
]

#: The archive format this code writes and reads.
FORMAT = "companyd-backup/1"
MANIFEST = "manifest.json"
MANIFEST_SHA = "manifest.sha256"

_CHUNK = 1 << 20


class BackupError(CompanydError):
    """A backup could not be taken, verified or restored; the message says why and what to
    do (exit 1).
    """


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
    """What :func:`verify_archive` found: the manifest, and one problem per bad member."""

    path: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

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
    dest: Path, manifest: Mapping[str, Any], files: Mapping[str, Path], *, compresslevel: int = 6
) -> int:
    """Write ``files`` (archive name → staged file) and ``manifest`` as one gzip tar at
    ``dest``, atomically and 0600; returns its size.

    Raises:
        OSError: the destination cannot be written (the temporary file is removed).
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
                        tar.addfile(info, f)
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
        tar = tarfile.open(path, mode="r:*")  # noqa: SIM115 - closed by the `with` below
    except FileNotFoundError:
        raise BackupError(f"no backup at {str(path)!r}; check the path") from None
    except IsADirectoryError:
        raise BackupError(f"{str(path)!r} is a directory; name the backup file inside it") from None
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BackupError(
            f"{str(path)!r} is not a readable companyd backup ({type(exc).__name__}: {exc}); "
            "expected a .tar.gz written by `companyd backup`"
        ) from None
    with tar:
        yield tar


def read_manifest(tar: tarfile.TarFile, path: Path) -> dict[str, Any]:
    """The archive's manifest, checked against ``manifest.sha256``.

    Raises:
        BackupError: missing, damaged or of another format.
    """
    data = _member_bytes(tar, MANIFEST, path)
    recorded = _member_bytes(tar, MANIFEST_SHA, path)
    got = hashlib.sha256(data).hexdigest()
    want = recorded.decode("ascii", errors="replace").strip()
    if recorded != f"{got}\n".encode():  # byte for byte: its newline counts too
        raise BackupError(
            f"backup {str(path)!r}: {MANIFEST} does not match {MANIFEST_SHA} (SHA-256 {got}, "
            f"expected {want}): the archive is damaged; use another backup"
        )
    try:
        manifest = json.loads(data)
    except ValueError as exc:
        raise BackupError(f"backup {str(path)!r}: {MANIFEST} is not JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise BackupError(
            f"backup {str(path)!r} has format {found!r}; this companyd reads {FORMAT!r}"
        )
    return manifest


def _member_bytes(tar: tarfile.TarFile, name: str, path: Path) -> bytes:
    try:
        f = tar.extractfile(name)
    except KeyError:
        raise BackupError(
            f"backup {str(path)!r} has no {name!r}: it is not a companyd backup, or it is damaged"
        ) from None
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BackupError(f"backup {str(path)!r} is damaged: {exc}") from None
    if f is None:
        raise BackupError(f"backup {str(path)!r}: {name!r} is not a file")
    with f:
        return f.read()


def members(manifest: Mapping[str, Any]) -> list[Member]:
    """The manifest's member entries."""
    return [Member(**m) for m in manifest.get("members", [])]


def verify_archive(path: Path, *, extract_to: Path | None = None) -> VerifyReport:
    """Check every member of the backup at ``path`` against the manifest (presence, size,
    SHA-256, nothing extra) and open each store read-only (quick_check, schema version) and
    the memory graph with the memory loader. With ``extract_to`` (an empty directory) the
    members are left there, as checked, for :mod:`companyd.ops.restore`.

    Raises:
        BackupError: the archive cannot be read at all, or its manifest is damaged (a bad
            member is reported in :attr:`VerifyReport.problems` instead).
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
            try:
                names = tar.getnames()
            except (tarfile.TarError, OSError, EOFError) as exc:
                raise BackupError(f"backup {str(path)!r} is damaged: {exc}") from None
            for extra in sorted(set(names) - known):
                report.problems.append(f"{extra}: not in the manifest")
            for m in listed:
                problem = _extract_checked(tar, m, scratch)
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
            problem = _open_member(m, scratch, listed)
            if problem:
                report.checked.remove(m.name)
                report.problems.append(f"{m.name}: {problem}")
    return report


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


def _safe_target(root: Path, name: str) -> Path | None:
    target = (root / name).resolve()
    if root.resolve() not in target.parents:
        return None
    return target


def _extract_checked(tar: tarfile.TarFile, m: Member, root: Path) -> str | None:
    target = _safe_target(root, m.name)
    if target is None:
        return "its name leaves the archive's directory"
    try:
        src = tar.extractfile(m.name)
    except KeyError:
        return "missing from the archive"
    except (tarfile.TarError, OSError, EOFError) as exc:
        return f"cannot be read: {exc}"
    if src is None:
        return "not a regular file in the archive"
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    h = hashlib.sha256()
    size = 0
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE)
        with src, os.fdopen(fd, "wb") as out:
            while chunk := src.read(_CHUNK):
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
