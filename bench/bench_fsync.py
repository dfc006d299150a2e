#!/usr/bin/env python3
"""What one durable journal write costs on this disk, by way of writing it (issue 31).

Interleaved rounds of ``--calls`` writes of one 150-byte record each, in the directory
given (default: a temporary one, where bench_memory.py puts its files), each way timed per
write (wall and this process's CPU):

* append   — ``write`` at the end of the file + ``fdatasync``: what the memory journal does;
             the new size makes ext4 commit its journal (metadata) on every sync;
* in place — ``pwrite`` into blocks written and synced beforehand + ``fdatasync``: the data
             block and a cache flush, no metadata (a preallocated journal would do this);
* direct   — the same blocks through ``O_DIRECT | O_DSYNC`` (the block goes to the device
             with the sync in one call);
* flush    — ``fdatasync`` of a file with nothing to write: the device's cache flush alone,
             the floor of any durable write.

Medians over rounds, with the 10th and 90th percentiles (a loaded shared disk swings by
10x between rounds), and the median per-round ratio to ``append``.

    .venv/bin/python bench/bench_fsync.py --rounds 30
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

LINE = b"x" * 149 + b"\n"


def _timed(n: int, write: Callable[[int], None]) -> tuple[float, float]:
    t, c = time.perf_counter(), time.process_time()
    for i in range(n):
        write(i)
    return (time.perf_counter() - t) / n, (time.process_time() - c) / n


def _prefilled(path: Path, n: int) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"\0" * (n * len(LINE) + 8192))
    os.fsync(fd)
    return fd


def one_round(directory: Path, n: int) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    path = directory / "fsync-bench.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:

        def append(i: int) -> None:
            os.write(fd, LINE)
            os.fdatasync(fd)

        out["append"] = _timed(n, append)
    finally:
        os.close(fd)
    fd = _prefilled(path, n)
    try:

        def in_place(i: int) -> None:
            os.pwrite(fd, LINE, i * len(LINE))
            os.fdatasync(fd)

        out["in place"] = _timed(n, in_place)
    finally:
        os.close(fd)
    fd = _prefilled(path, n)
    os.close(fd)
    fd = os.open(path, os.O_RDWR | os.O_DIRECT | os.O_DSYNC)
    buf = mmap.mmap(-1, 8192)  # page-aligned, as O_DIRECT needs
    try:

        def direct(i: int) -> None:
            off = i * len(LINE)
            block = off // 4096 * 4096
            start = off - block
            if start + len(LINE) > 8192:  # pragma: no cover - records are < 4 KiB
                raise AssertionError
            buf[start : start + len(LINE)] = LINE
            end = (off + len(LINE) + 4095) // 4096 * 4096
            os.pwritev(fd, [memoryview(buf)[: end - block]], block)
            if (off + len(LINE)) // 4096 * 4096 != block:  # the next record starts a block
                buf[:4096] = buf[4096:]
                buf[4096:] = b"\0" * 4096

        out["direct"] = _timed(n, direct)
    finally:
        os.close(fd)
        buf.close()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, LINE)
        os.fsync(fd)
        out["flush"] = _timed(n, lambda i: os.fdatasync(fd))
    finally:
        os.close(fd)
        path.unlink()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=50, help="writes per way and round")
    ap.add_argument("--dir", help="where to write (default: a temporary directory)")
    args = ap.parse_args()
    directory = Path(args.dir or tempfile.mkdtemp(prefix="companyd-fsync-"))
    print(f"# {directory}; {args.rounds} rounds x {args.calls}; load {os.getloadavg()}")
    rounds = [one_round(directory, args.calls) for _ in range(args.rounds)]
    print(f"# load {os.getloadavg()}")
    for way in rounds[0]:
        wall = sorted(r[way][0] for r in rounds)
        cpu = statistics.median(r[way][1] for r in rounds)
        ratio = statistics.median(r[way][0] / r["append"][0] for r in rounds)
        print(
            f"{way:<9} median {wall[len(wall) // 2] * 1e6:7.0f} us/write "
            f"(p10 {wall[len(wall) // 10] * 1e6:.0f}, p90 {wall[9 * len(wall) // 10] * 1e6:.0f}), "
            f"CPU {cpu * 1e6:4.0f} us, {ratio:.2f}x append's time"
        )
    if not args.dir:
        directory.rmdir()


if __name__ == "__main__":
    main()
