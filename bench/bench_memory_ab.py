#!/usr/bin/env python3
r"""Memory over MCP, before/after: two source trees' ``serve-mcp`` and the official server,
interleaved round by round with the same driver as bench/bench_memory.py.

Each round runs, on fresh copies of one seed file: tree A and tree B sequential (A first
in odd rounds, B first in even ones),
the official server, then A and B with 8 calls in flight. Per call it reports the rate and
the server process's CPU time (user + system from /proc/PID/stat, which a loaded machine
inflates far less than wall time). Medians of the per-round figures and of per-round
ratios, so a noisy neighbour hits all three alike.

Around the trees' sequential rows each round also measures the disk in the same directory
(``raw``: append one 150-byte line + ``fdatasync``; ``flush``: ``fdatasync`` of a file with
nothing to write, i.e. the device's cache flush alone) and tree B's SDK ``ping``. A
sequential client waits for one fdatasync per call, so ``raw / official`` is the ratio a
server with no CPU cost at all would reach in that round: the disk's ceiling.

    git archive main | tar -x -C /tmp/before      # the tree to compare with
    COMPANYD_OFFICIAL_MEMORY_SERVER=$(bench/install_official_memory_server.sh) \
        .venv/bin/python bench/bench_memory_ab.py --before /tmp/before/src
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_memory as bm

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def measure(argv: list[str], env: dict[str, str], n: int, inflight: int) -> tuple[float, float]:
    """(calls per second, server CPU microseconds per call) for ``n`` create_entities."""
    client = bm.Client(argv, env)
    try:
        for i in range(5):
            client.call("create_entities", bm.entity(f"warm-{i}"))
        cpu0, t0 = _cpu(client.proc.pid), time.perf_counter()
        sent = done = 0
        while done < n:
            while sent < n and sent - done < inflight:
                client.send(
                    "tools/call", {"name": "create_entities", "arguments": bm.entity(f"m-{sent}")}
                )
                sent += 1
            msg = client.receive()
            if msg.get("result", {}).get("isError"):
                raise RuntimeError(str(msg))
            done += 1
        elapsed, cpu = time.perf_counter() - t0, _cpu(client.proc.pid) - cpu0
        return n / elapsed, cpu / n * 1e6
    finally:
        client.close()


def disk_rates(directory: Path, n: int) -> tuple[float, float]:
    """(append+fdatasync per second, fdatasync of a clean file per second)."""
    raw = bm.raw_rate(directory, n)
    path = directory / "flush.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"x" * 150)
        os.fsync(fd)
        t = time.perf_counter()
        for _ in range(n):
            os.fdatasync(fd)
        flush = n / (time.perf_counter() - t)
    finally:
        os.close(fd)
        path.unlink()
    return raw, flush


def ping(argv: list[str], env: dict[str, str], n: int) -> tuple[float, float]:
    """(SDK pings per second, server CPU microseconds per ping)."""
    client = bm.Client(argv, env)
    try:
        cpu0, t0 = _cpu(client.proc.pid), time.perf_counter()
        for _ in range(n):
            client.request("ping", {})
        elapsed, cpu = time.perf_counter() - t0, _cpu(client.proc.pid) - cpu0
        return n / elapsed, cpu / n * 1e6
    finally:
        client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the src/ directory of the tree to compare")
    ap.add_argument("--after", default=str(bm.ROOT / "src"), help="default: this tree's src/")
    ap.add_argument("--size", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=300, help="ours, per round and row")
    ap.add_argument("--official-calls", type=int, default=60)
    ap.add_argument("--official", default=os.environ.get("COMPANYD_OFFICIAL_MEMORY_SERVER"))
    args = ap.parse_args()
    if not args.official:
        ap.error("set COMPANYD_OFFICIAL_MEMORY_SERVER (bench/install_official_memory_server.sh)")
    base = Path(tempfile.mkdtemp(prefix="companyd-bench-ab-"))
    seed = base / "seed.jsonl"
    bm.seed_file(seed, args.size)

    def fresh() -> Path:
        d = Path(tempfile.mkdtemp(dir=base))
        (d / "memory.jsonl").write_bytes(seed.read_bytes())
        return d / "memory.jsonl"

    trees = {"before": args.before, "after": args.after}
    rows: dict[str, list[tuple[float, float]]] = {}
    print(f"# {args.size} entities, {args.rounds} rounds; load average {os.getloadavg()}")
    for r in range(args.rounds):
        got: dict[str, tuple[float, float]] = {}
        disk = [disk_rates(base, args.calls)]
        order = list(trees.items())
        for name, src in order if r % 2 == 0 else order[::-1]:  # neither always first
            got[name] = measure([*bm.SERVE, str(fresh())], {"PYTHONPATH": src}, args.calls, 1)
        disk.append(disk_rates(base, args.calls))
        got["raw"] = (statistics.mean(d[0] for d in disk), 0.0)
        got["flush"] = (statistics.mean(d[1] for d in disk), 0.0)
        got["ping"] = ping([*bm.SERVE, str(fresh())], {"PYTHONPATH": args.after}, args.calls)
        got["official"] = measure(
            ["node", args.official], {"MEMORY_FILE_PATH": str(fresh())}, args.official_calls, 1
        )
        for name, src in trees.items():
            got[f"{name} x8"] = measure(
                [*bm.SERVE, str(fresh())], {"PYTHONPATH": src}, args.calls, 8
            )
        for k, v in got.items():
            rows.setdefault(k, []).append(v)
        print(
            f"round {r + 1}: "
            + "; ".join(f"{k} {rate:.0f}/s {cpu:.0f} us CPU" for k, (rate, cpu) in got.items())
            + f"; after/official {got['after'][0] / got['official'][0]:.1f}x, "
            f"before/official {got['before'][0] / got['official'][0]:.1f}x, "
            f"raw/official {got['raw'][0] / got['official'][0]:.1f}x",
            flush=True,
        )
    print(f"# load average {os.getloadavg()}")
    for k, vals in rows.items():
        print(
            f"{k:<12} median {statistics.median(v[0] for v in vals):8.1f}/s  "
            f"{statistics.median(v[1] for v in vals):7.0f} us CPU per call"
        )
    for name in [*trees, "raw"]:
        wall = [a[0] / o[0] for a, o in zip(rows[name], rows["official"], strict=True)]
        if name == "raw":
            print(
                f"disk ceiling (raw / official): {statistics.median(wall):.1f}x "
                f"(rounds {min(wall):.1f}-{max(wall):.1f})"
            )
            continue
        cpu = [o[1] / a[1] for a, o in zip(rows[name], rows["official"], strict=True)]
        print(
            f"{name}: {statistics.median(wall):.1f}x the official server's calls/s "
            f"(rounds {min(wall):.1f}-{max(wall):.1f}); its CPU per call is "
            f"{statistics.median(cpu):.1f}x ours"
        )


if __name__ == "__main__":
    main()
