"""``companyd backup [--to FILE]``, ``companyd backup verify FILE`` and ``companyd restore``.

``backup`` takes the state directory's lock when it can: then no daemon runs there, and the
backup is taken by this process (and no daemon starts half-way through). When a daemon
holds the lock, the backup is asked of it over the control socket (the ``backup`` Admin
operation), so the archive is written by the daemon's user while it keeps running; the
archive is the same either way (:mod:`companyd.ops._backup`).

``restore`` holds the lock of the target directory for the whole restore, which is how it
refuses a running daemon's state (exit 75, as ``companyd run`` would) and keeps one from
starting in the middle. Exit codes: 0 done; 1 refused (damaged backup, non-empty
directory without ``--force``, nothing to back up); 2 usage; 69/75 as for other commands.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from companyd.cli._main import print_json
from companyd.config import CompanyConfig, default_config_path, load_config
from companyd.daemon import RequestFailed, StateLock, find_daemon
from companyd.errors import EX_REFUSED, EX_TEMPFAIL, StateLocked
from companyd.ops import BackupError, backup_name, restore_backup, take_backup, verify_archive

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``backup`` (with ``backup verify``) and ``restore``."""
    p = sub.add_parser(
        "backup",
        usage="companyd backup [-h] [--to FILE] [--config F] [--state-dir D] [--json]\n"
        "       companyd backup verify [-h] [--json] FILE",
        help="write a verified, consistent backup of the company (also while it runs)",
        description="Snapshot every SQLite store (SQLite's online backup API), the memory "
        "graph and journal (under the memory lock) and company.yaml into one .tar.gz with "
        "a manifest of versions, sizes and SHA-256s, written atomically (0600). While the "
        "daemon runs, the daemon takes it (through the control socket).",
    )
    p.add_argument(
        "--to",
        type=Path,
        metavar="FILE",
        help="the archive to write, or a directory for a dated file in it (default: "
        "./companyd-<company>-<hash>-<time>.tar.gz); never inside the state directory",
    )
    p.add_argument("--config", type=Path, help="company.yaml (default: $COMPANYD_CONFIG, …)")
    p.add_argument("--state-dir", type=Path, help="the state directory (default: as `run`)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_backup)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    v = actions.add_parser(
        "verify",
        # its own prog: derived from the parent's two-line usage it came out garbled
        prog="companyd backup verify",
        help="check every checksum of a backup and open every store read-only",
        description="Check the manifest, every member's size and SHA-256, and open every "
        "SQLite store (quick_check) and the memory graph read-only. Exit 0 when all hold, "
        "1 with each problem listed.",
    )
    v.add_argument("file", type=Path, metavar="FILE", help="a backup written by `companyd backup`")
    v.add_argument("--json", action="store_true", help="machine-readable output")
    v.set_defaults(func=_verify)

    p = sub.add_parser(
        "restore",
        help="restore a backup into a state directory that `companyd run` starts from",
        description="Verify the backup, then put its stores and memory into --state-dir. "
        "Refuses the state directory of a running daemon, and a non-empty directory unless "
        "--force (which moves what is there to <dir>.before-restore-<time>, deleting "
        "nothing).",
    )
    p.add_argument("file", type=Path, metavar="FILE", help="a backup written by `companyd backup`")
    p.add_argument("--state-dir", type=Path, required=True, help="where to restore the state")
    p.add_argument(
        "--force", action="store_true", help="restore into a non-empty directory (moved aside)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_restore)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _backup(args: argparse.Namespace) -> int:
    config_file = args.config or default_config_path()
    config: CompanyConfig = load_config(config_file)
    state_dir = config.state_dir(args.state_dir)
    dest = (args.to or Path(backup_name(config, time.time()))).absolute()
    if not state_dir.is_dir():
        print(
            f"companyd: state directory {str(state_dir)!r} does not exist: nothing to back up "
            "(check --state-dir, or company.yaml's state_dir)",
            file=sys.stderr,
        )
        return EX_REFUSED
    try:
        lock = StateLock.acquire(state_dir)
    except StateLocked:
        client = find_daemon(state_dir=state_dir, config=config_file, timeout=600.0)
        try:
            result = client.call("backup", to=str(dest))
        except RequestFailed as exc:
            if exc.code != "stopping":
                raise
            # the daemon's stop ended the backup and removed what it had staged: exit 75,
            # as for every request a stop answers (docs/deploy.md)
            print(f"companyd: {exc}", file=sys.stderr)
            if args.json:
                print_json({"ok": False, "error": str(exc), "code": exc.code})
            return EX_TEMPFAIL
        via = "by the running daemon"
    else:
        with lock:
            result = take_backup(config, state_dir, dest).to_dict()
        via = "no daemon running"
    if args.json:
        print_json(result)
        return 0
    members = result.get("members", [])
    print(
        f"backup written: {result['path']} ({_size(int(result['size']))}, {len(members)} "
        f"members, {result['seconds']:.2f} s; {via})"
    )
    for m in members:
        print(f"  {m['name']:<34} {_size(int(m['size'])):>10}  sha256 {m['sha256'][:16]}…")
    print(f"check it with: companyd backup verify {result['path']}")
    return 0


def _taken(manifest: dict[str, Any], zone: str | None) -> str:
    """When the backup was taken, as every time shown to a person: in the company's zone,
    named (``format_when``; UTC when the backup does not say its zone). ``--json`` keeps the
    manifest's ISO 8601 UTC.
    """
    from companyd.admin import format_when

    ts = manifest.get("created_ts")
    if isinstance(ts, int | float) and not isinstance(ts, bool):
        return format_when(ts, zone or "UTC", seconds=True)
    return str(manifest.get("created"))  # a manifest without its epoch: as it says it


def _verify(args: argparse.Namespace) -> int:
    report = verify_archive(args.file.absolute())
    if args.json:
        print_json(report.to_dict())
        return 0 if report.ok else EX_REFUSED
    m = report.manifest
    taken = _taken(m, report.timezone)
    head = f"backup {str(args.file)!r}: {m.get('company')!r}, taken {taken}"
    if report.ok:
        print(
            f"{head}; ok: {len(report.checked)} members, every checksum matches and every "
            "store opens"
        )
        return 0
    print(f"{head}; DAMAGED: {len(report.problems)} problem(s)")
    for problem in report.problems:
        print(f"  ✗ {problem}")
    print("use another backup; this one cannot be restored", file=sys.stderr)
    return EX_REFUSED


def _restore(args: argparse.Namespace) -> int:
    state_dir = args.state_dir.absolute()
    if not args.file.exists():  # before the lock, which would create the directory
        raise BackupError(f"no backup at {str(args.file)!r}; check the path")
    if not args.file.is_file():  # a directory, a FIFO, a device: refused at once
        raise BackupError(
            f"{str(args.file)!r} is not a regular file; a backup is a .tar.gz written by "
            "`companyd backup`"
        )
    try:
        lock = StateLock.acquire(state_dir)
    except StateLocked as exc:
        who = f"pid {exc.holder}" if exc.holder is not None else "it is starting"
        print(
            f"companyd: refusing to restore into the state of a running daemon ({who}, on "
            f"{exc.directory or str(state_dir)!r}): stop it first (`systemctl stop companyd`), "
            "then restore again — or restore into another --state-dir",
            file=sys.stderr,
        )
        return EX_TEMPFAIL
    with lock:
        result = restore_backup(args.file.absolute(), state_dir, force=args.force)
    if args.json:
        print_json(result.to_dict())
        return 0
    b = result.manifest
    print(
        f"restored the backup of {b.get('company')!r} taken {_taken(b, result.timezone)} into "
        f"{str(state_dir)!r}: {', '.join(result.restored) or 'nothing'}"
    )
    if result.moved_aside is not None:
        print(f"what was there before is in {str(result.moved_aside)!r}")
    for note in result.notes:
        print(f"note: {note}")
    print(f"start it with: companyd run --state-dir {state_dir} --config <company.yaml>")
    return 0
