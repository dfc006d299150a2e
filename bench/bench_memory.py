#!/usr/bin/env python3
"""Company memory benchmark: durable create_entities per second, load time, lost writes.

Measured in one run on one machine, each figure next to a baseline from the same run:

* raw      — the disk's append-and-fdatasync rate (one ~150-byte line per write), measured
             right before and after each in-process figure;
* store    — ``GraphStore.call("create_entities", …)`` (validate, lock, re-check the files,
             journal append, fdatasync), one entity per call;
* service  — ``await MemoryService.call(…)`` (the daemon path: + event loop → owner thread);
* mcp      — sequential ``tools/call create_entities`` over stdio to ``companyd memory
             serve-mcp`` from a stdlib JSON-RPC client (buffered pipes, as in the reference);
             ``mcp x8`` keeps 8 calls in flight; ``ping`` is the SDK's floor (no tool work);
* official — the same sequential calls to ``@modelcontextprotocol/server-memory`` 2026.8.31
             (if COMPANYD_OFFICIAL_MEMORY_SERVER points at its dist/index.js);
* load     — opening a seeded file with every repair check (``GraphStore.open``);
* race     — 4 server processes x 200 writes on one file, and 1 process with 8 in flight:
             writes acknowledged but missing afterwards (ours, and the official server).

Seed files are in the official format (``seed-<i>``, type ``seed``, one observation, ~110
bytes a line), like reference §8.

    .venv/bin/python bench/bench_memory.py                 # everything
    .venv/bin/python bench/bench_memory.py --quick         # small sizes, few calls
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from companyd.events import EventBus  # noqa: E402
from companyd.memory._service import MemoryService  # noqa: E402
from companyd.memory._store import GraphStore  # noqa: E402
from companyd.supervision._child import StandaloneContext  # noqa: E402

SERVE = [sys.executable, "-m", "companyd", "memory", "serve-mcp", "--file"]
ENV = {"PYTHONPATH": str(ROOT / "src")}


def seed_file(path: Path, n: int) -> None:
    lines = [
        json.dumps(
            {
                "type": "entity",
                "name": f"seed-{i}",
                "entityType": "seed",
                "observations": [f"seed observation number {i} for the benchmark"],
            },
            separators=(",", ":"),
        )
        for i in range(n)
    ]
    path.write_text("\n".join(lines))


def entity(name: str) -> dict[str, Any]:
    return {"entities": [{"name": name, "entityType": "bench", "observations": ["a fact"]}]}


def raw_rate(directory: Path, n: int) -> float:
    """Appends of one 150-byte line, each followed by fdatasync, per second."""
    path = directory / "raw.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    line = b"x" * 149 + b"\n"
    try:
        t = time.perf_counter()
        for _ in range(n):
            os.write(fd, line)
            os.fdatasync(fd)
        return n / (time.perf_counter() - t)
    finally:
        os.close(fd)
        path.unlink()


def inprocess(
    store_path: Path, service_path: Path, directory: Path, rounds: int, n: int
) -> dict[str, list[float]]:
    """Rates per round of: raw appends, store calls, service calls, service calls 8 at a
    time. Interleaved in short rounds so that a noisy neighbour hits all of them alike.
    """

    async def main() -> dict[str, list[float]]:
        service = MemoryService(service_path, bus=EventBus())
        ctx = StandaloneContext("bench/memory")
        task = asyncio.create_task(service.run(ctx))
        await ctx.ready.wait()
        store = GraphStore(store_path)
        store.open()
        raw_path = directory / "raw.bin"
        fd = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
        line = b"x" * 149 + b"\n"
        rates: dict[str, list[float]] = {"raw": [], "store": [], "service": [], "service x8": []}
        for i in range(20):  # warm up
            store.call("create_entities", entity(f"warm-{i}"))
            await service.call("create_entities", entity(f"warm-{i}"))
        for r in range(rounds):
            t = time.perf_counter()
            for _ in range(n):
                os.write(fd, line)
                os.fdatasync(fd)
            rates["raw"].append(n / (time.perf_counter() - t))
            t = time.perf_counter()
            for i in range(n):
                store.call("create_entities", entity(f"b{r}-{i}"))
            rates["store"].append(n / (time.perf_counter() - t))
            t = time.perf_counter()
            for i in range(n):
                await service.call("create_entities", entity(f"s{r}-{i}"))
            rates["service"].append(n / (time.perf_counter() - t))
            t = time.perf_counter()
            for k in range(0, n, 8):
                await asyncio.gather(
                    *(service.call("create_entities", entity(f"g{r}-{k + j}")) for j in range(8))
                )
            rates["service x8"].append(n / (time.perf_counter() - t))
        os.close(fd)
        raw_path.unlink()
        store.close()
        ctx.stopping.set()
        await task
        return rates

    return asyncio.run(main())


class Client:
    """Stdlib newline-delimited JSON-RPC client with buffered pipes."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **env},
        )
        self.n = 0
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        )
        self._write({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _write(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def send(self, method: str, params: dict[str, Any]) -> int:
        self.n += 1
        self._write({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        return self.n

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            msg = json.loads(self.proc.stdout.readline())
            if "id" in msg:
                return dict(msg)

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.send(method, params)
        return self.receive()

    def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        res = self.request("tools/call", {"name": name, "arguments": args})["result"]
        if res.get("isError"):
            raise RuntimeError(res["content"][0]["text"])
        return dict(res)

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=120)
        self.proc.stdout.close()


def mcp_rate(argv: list[str], env: dict[str, str], n: int, *, inflight: int = 1) -> float:
    client = Client(argv, env)
    try:
        for i in range(5):
            client.call("create_entities", entity(f"warm-{i}"))
        t = time.perf_counter()
        if inflight == 1:
            for i in range(n):
                client.call("create_entities", entity(f"m-{i}"))
        else:
            sent = done = 0
            while done < n:
                while sent < n and sent - done < inflight:
                    client.send(
                        "tools/call", {"name": "create_entities", "arguments": entity(f"m-{sent}")}
                    )
                    sent += 1
                client.receive()
                done += 1
        return n / (time.perf_counter() - t)
    finally:
        client.close()


def ping_rate(argv: list[str], env: dict[str, str], n: int) -> float:
    client = Client(argv, env)
    try:
        t = time.perf_counter()
        for _ in range(n):
            client.request("ping", {})
        return n / (time.perf_counter() - t)
    finally:
        client.close()


def load_seconds(path: Path, runs: int = 3) -> tuple[float, int]:
    times = []
    entities = 0
    for _ in range(runs):
        t = time.perf_counter()
        with GraphStore(path) as store:
            report = store.open()
        times.append(time.perf_counter() - t)
        entities = report.entities
        assert not report.needs_repair
    return statistics.median(times), entities


def race(argv_for: Any, directory: Path, *, processes: int, writes: int, inflight: int) -> str:
    """Writes acknowledged but missing afterwards, as ``lost/total``."""
    path = directory / "race.jsonl"
    for p in directory.glob("race.jsonl*"):
        p.unlink()
    argv, env = argv_for(path)
    clients = [Client(argv, env) for _ in range(processes)]
    barrier = threading.Barrier(processes)
    acked: set[str] = set()
    lock = threading.Lock()

    def run(k: int) -> None:
        c = clients[k]
        barrier.wait()
        sent = done = 0
        names: dict[int, str] = {}
        while done < writes:
            while sent < writes and sent - done < inflight:
                name = f"p{k}-e{sent}"
                names[
                    c.send("tools/call", {"name": "create_entities", "arguments": entity(name)})
                ] = name
                sent += 1
            msg = c.receive()
            done += 1
            if not msg["result"].get("isError"):
                with lock:
                    acked.add(names[msg["id"]])

    threads = [threading.Thread(target=run, args=(k,)) for k in range(processes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        c.close()
    from companyd.memory._codec import parse_graph

    graph, report = parse_graph(path.read_bytes())
    names = {e.name for e in graph.entities()}
    lost = len(acked - names)
    total = processes * writes
    return (
        f"{lost}/{total} lost ({100 * lost / total:.1f} %), "
        f"{report.dropped_lines} unparseable lines"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--calls", type=int, default=2000, help="timed calls per in-process / MCP row")
    ap.add_argument("--quick", action="store_true", help="sizes 1000,10000 and 300 calls")
    ap.add_argument(
        "--mcp-rounds", type=int, default=5, help="rounds of the MCP rows (calls split among them)"
    )
    ap.add_argument("--official", default=os.environ.get("COMPANYD_OFFICIAL_MEMORY_SERVER"))
    ap.add_argument("--dir", help="where to put the files (default: a temporary directory)")
    args = ap.parse_args()
    sizes = [int(s) for s in ("1000,10000" if args.quick else args.sizes).split(",")]
    calls = 300 if args.quick else args.calls
    official = args.official if args.official and shutil.which("node") else None
    base = Path(args.dir or tempfile.mkdtemp(prefix="companyd-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    print(
        f"# machine: {platform.node()} {platform.machine()} {os.cpu_count()} cpu, "
        f"python {platform.python_version()}, {platform.platform()}"
    )
    print(f"# files in {base}; calls per row: {calls}; official: {official or 'not available'}")
    rows: list[tuple[str, int, float, str]] = []

    def row(what: str, size: int, value: float, note: str) -> None:
        rows.append((what, size, value, note))
        print(f"{what:<28} {size:>7} {value:>10.1f}  {note}", flush=True)

    for size in sizes:
        seed = base / f"seed-{size}.jsonl"
        seed_file(seed, size)

        def fresh(name: str, size: int = size, seed: Path = seed) -> Path:
            d = base / f"{name}-{size}"
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
            shutil.copy(seed, d / "memory.jsonl")
            return d / "memory.jsonl"

        rates = inprocess(fresh("store"), fresh("service"), base, rounds=10, n=max(50, calls // 10))
        raw = statistics.median(rates["raw"])
        row("raw append+fdatasync /s", size, raw, "median of 10 interleaved rounds")
        for name in ("store", "service", "service x8"):
            ratios = [x / y for x, y in zip(rates[name], rates["raw"], strict=True)]
            value = statistics.median(rates[name])
            row(
                f"{name} create_entities /s",
                size,
                value,
                f"{statistics.median(ratios):.0%} of raw (median of per-round ratios)",
            )
        # MCP rows: rounds interleaved with the raw baseline and the ping floor, each round
        # on a fresh copy of the seed file (a server process per measurement), so a noisy
        # neighbour hits all of them alike; medians of the rounds and of per-round ratios.
        per_round = max(200, calls // args.mcp_rounds)
        mcp: dict[str, list[float]] = {"raw": [], "ping": [], "mcp": [], "mcp8": []}
        for _ in range(args.mcp_rounds):
            raw_before = raw_rate(base, per_round)
            mcp["ping"].append(ping_rate([*SERVE, str(fresh("ping"))], ENV, per_round))
            mcp["mcp"].append(mcp_rate([*SERVE, str(fresh("mcp"))], ENV, per_round))
            mcp["mcp8"].append(mcp_rate([*SERVE, str(fresh("mcp8"))], ENV, per_round, inflight=8))
            mcp["raw"].append((raw_before + raw_rate(base, per_round)) / 2)
        raw = statistics.median(mcp["raw"])
        ping = statistics.median(mcp["ping"])
        ours = statistics.median(mcp["mcp"])
        ours8 = statistics.median(mcp["mcp8"])

        def spread(key: str, m: dict[str, list[float]] = mcp) -> str:
            return f"rounds {min(m[key]):.0f}-{max(m[key]):.0f}"

        def ratio(key: str, base_key: str, m: dict[str, list[float]] = mcp) -> str:
            r = [x / y for x, y in zip(m[key], m[base_key], strict=True)]
            return f"{statistics.median(r):.0%}"

        rounds = f"median of {args.mcp_rounds} rounds x {per_round} calls"
        row("raw append+fdatasync /s", size, raw, f"around the MCP rounds; {spread('raw')}")
        row("mcp ping (SDK floor) /s", size, ping, f"no tool work; {rounds}; {spread('ping')}")
        row(
            "mcp create_entities /s",
            size,
            ours,
            f"{ratio('mcp', 'raw')} of raw, {ratio('mcp', 'ping')} of ping; {rounds}; "
            f"{spread('mcp')}",
        )
        row("mcp x8 in flight /s", size, ours8, f"{ratio('mcp8', 'raw')} of raw; {spread('mcp8')}")
        if official:
            n = {1000: 500, 10000: 200}.get(size, 30)
            path = fresh("official")
            theirs = mcp_rate(["node", official], {"MEMORY_FILE_PATH": str(path)}, n)
            row(
                "official create_entities /s",
                size,
                theirs,
                f"ours is {ours / theirs:.1f}x ({n} calls)",
            )
        secs, count = load_seconds(fresh("load"))
        row("load with repair checks ms", size, secs * 1000, f"{count} entities")

    print("\n# lost writes (acknowledged, missing afterwards)")
    ours_argv = lambda p: ([*SERVE, str(p)], ENV)  # noqa: E731
    print("ours     4 processes x 200:", race(ours_argv, base, processes=4, writes=200, inflight=1))
    print(
        "ours     1 process, 8 in flight x 200:",
        race(ours_argv, base, processes=1, writes=200, inflight=8),
    )
    if official:
        off_argv = lambda p: (["node", official], {"MEMORY_FILE_PATH": str(p)})  # noqa: E731
        print(
            "official 4 processes x 200:", race(off_argv, base, processes=4, writes=200, inflight=1)
        )
        print(
            "official 1 process, 8 in flight x 200:",
            race(off_argv, base, processes=1, writes=200, inflight=8),
        )
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
