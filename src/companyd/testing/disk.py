"""A real full disk for tests and the chaos benchmark: a small tmpfs mounted for the
duration, and a filler file that takes every free byte.

Mounting needs root (CI runs as root) and a kernel that allows it in this namespace;
:func:`small_disk` raises :class:`DiskUnavailable` with the reason otherwise, so a caller
can skip with it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

__all__ = ["DiskUnavailable", "fill", "small_disk"]


class DiskUnavailable(RuntimeError):
    """A small tmpfs cannot be mounted here (not root, or mounting is not allowed)."""


@contextlib.contextmanager
def small_disk(mountpoint: Path, size: str = "4m") -> Iterator[Path]:
    """Mount a tmpfs of ``size`` on ``mountpoint`` (created) and unmount it on exit."""
    if os.geteuid() != 0:
        raise DiskUnavailable("mounting a small tmpfs needs root (CI runs as root)")
    mountpoint.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        raise DiskUnavailable(f"cannot mount a tmpfs: {done.stderr.strip() or done.returncode}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, timeout=30)


def fill(directory: Path, name: str = ".filler") -> Path:
    """Write ``directory/name`` until the disk is full (ENOSPC); return its path. Remove
    it (or truncate it) to give the space back.
    """
    path = directory / name
    chunk = b"\0" * 65536
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)
    return path
