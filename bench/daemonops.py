"""What the daemon's operational parts cost the event loop, each against a baseline
measured in the same run (the machine is shared and noisy, so ratios matter, not µs).

1. control socket: one `status` round trip carrying a 1,000-agent status dict, through
   ControlServer + ControlClient.acall, vs a bare asyncio Unix-socket echo of the same
   bytes (the floor any socket protocol pays);
2. logging: what one log call costs the caller with setup_logging (redaction of two
   secrets + hand-off to the writer thread), vs a stdlib StreamHandler writing to the same
   /dev/null;
3. metrics: EventBus.publish with the Metrics listener attached, vs with no listener;
4. control socket under load: 8 concurrent clients each doing 50 status calls.

Usage: .venv/bin/python bench/daemonops.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from companyd.daemon._control import ControlServer
from companyd.daemon._control_client import ControlClient
from companyd.daemon._logs import setup_logging
from companyd.daemon._metrics import Metrics
from companyd.events import EventBus, RunFinished


def big_status(agents: int) -> dict[str, Any]:
    children = [
        {"id": f"agent-{i:04d}", "kind": "worker", "state": "running", "restarts": i % 3,
         "uptime_s": 3600.0, "started_at": 1.8e9}
        for i in range(agents)
    ]  # fmt: skip
    return {
        "now": 1.8e9,
        "daemon": {"pid": os.getpid(), "state": "running", "uptime_s": 3600.0},
        "tree": {"id": "companyd", "kind": "supervisor", "state": "running", "children": children},
        "spend": {"agents": [{"agent": f"agent-{i:04d}", "today_usd": 0.1} for i in range(agents)]},
        "routines": [{"routine": f"r{i}", "next_fire": 1.8e9 + i} for i in range(agents // 10)],
    }


class StatusAdmin:
    def __init__(self, status: dict[str, Any]) -> None:
        self._status = status

    async def status(self) -> dict[str, Any]:
        return self._status


class Ctx:
    id = path = "companyd/control"

    def __init__(self) -> None:
        self.stopping = asyncio.Event()
        self.ready = asyncio.Event()

    def started(self, info: Any = None) -> None:
        self.ready.set()


async def bench_control(rounds: int, clients: int, per_client: int) -> dict[str, float]:
    status = big_status(1000)
    payload = json.dumps({"ok": True, "result": status}).encode() + b"\n"
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        # baseline: an echo server answering a request line with the same-sized answer
        async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while await r.readline():
                w.write(payload)
                await w.drain()
            w.close()

        base_path = Path(d) / "echo.sock"
        echo_server = await asyncio.start_unix_server(echo, base_path)

        async def baseline_call() -> None:
            reader, writer = await asyncio.open_unix_connection(base_path, limit=64 << 20)
            writer.write(b'{"op": "status", "args": {}}\n')
            await writer.drain()
            json.loads(await reader.readline())
            writer.close()
            await writer.wait_closed()

        srv = ControlServer(StatusAdmin(status), Path(d) / "c.sock")  # type: ignore[arg-type]
        ctx = Ctx()
        task = asyncio.create_task(srv.run(ctx))
        await ctx.ready.wait()
        client = ControlClient(srv.path)

        async def control_call() -> None:
            await client.acall("status")

        base_t, ctl_t = [], []
        for _ in range(3):  # warm up both
            await baseline_call()
            await control_call()
        for _ in range(rounds):  # interleaved, so noise hits both alike
            t = time.perf_counter()
            await baseline_call()
            base_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            await control_call()
            ctl_t.append(time.perf_counter() - t)

        async def worker() -> None:
            for _ in range(per_client):
                await control_call()

        t = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        load_s = time.perf_counter() - t

        ctx.stopping.set()
        await task
        echo_server.close()
        await echo_server.wait_closed()
    return {
        "payload_kb": len(payload) / 1024,
        "baseline_ms": statistics.median(base_t) * 1e3,
        "control_ms": statistics.median(ctl_t) * 1e3,
        "control_p95_ms": sorted(ctl_t)[int(len(ctl_t) * 0.95) - 1] * 1e3,
        "ratio": statistics.median(ctl_t) / statistics.median(base_t),
        "load_calls_per_s": clients * per_client / load_s,
    }


def bench_logging(lines: int) -> dict[str, float]:
    secrets = ["sk-ant-api03-" + "x" * 40, "123456789:" + "A" * 35]
    log = logging.getLogger("bench.logging")
    root = logging.getLogger()
    old_level = root.level

    def run_calls() -> float:
        t = time.perf_counter()
        for i in range(lines):
            log.info("run %s of agent %s finished: %d steps, $%.4f", f"run-{i}", "cfo", 7, 0.0123)
        return (time.perf_counter() - t) / lines

    results = {}
    with open(os.devnull, "w") as devnull:
        for rep in range(3):
            # baseline: stdlib handler, same format, same destination, synchronous
            handler = logging.StreamHandler(devnull)
            handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
            )
            root.addHandler(handler)
            root.setLevel(logging.INFO)
            base = run_calls()
            root.removeHandler(handler)

            h = setup_logging(stream=devnull, journald=False, secrets=secrets, threaded=True,
                              queue_size=lines + 10)  # fmt: skip
            ours = run_calls()
            h.close()
            results.setdefault("base", []).append(base)
            results.setdefault("ours", []).append(ours)
            del rep
    root.setLevel(old_level)
    base_us = statistics.median(results["base"]) * 1e6
    ours_us = statistics.median(results["ours"]) * 1e6
    return {"baseline_us": base_us, "ours_us": ours_us, "ratio": ours_us / base_us}


def bench_metrics(events: int) -> dict[str, float]:
    bare, fed = EventBus(), EventBus()
    Metrics().attach(fed)

    def emit_all(bus: EventBus) -> float:
        t = time.perf_counter()
        for i in range(events):
            bus.publish(
                RunFinished(
                    source="agent/cfo",
                    status="ok",
                    agent=f"a{i % 20}",
                    task_id="t",
                    run_id="r",
                    routine=None,
                    cost_usd=0.01,
                    steps=1,
                    models=["m"],
                    offline=True,
                )
            )
        return (time.perf_counter() - t) / events

    base, ours = [], []
    for _ in range(3):
        base.append(emit_all(bare))
        ours.append(emit_all(fed))
    b, o = statistics.median(base) * 1e6, statistics.median(ours) * 1e6
    return {"baseline_us": b, "ours_us": o, "ratio": o / b}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args()
    k = 10 if args.quick else 1
    print(f"machine: {platform.machine()} {os.cpu_count()} cpu, {platform.python_implementation()} "
          f"{platform.python_version()}, {platform.platform()}")  # fmt: skip
    c = asyncio.run(bench_control(rounds=200 // k, clients=8, per_client=50 // k))
    print(
        f"control status round trip, 1,000-agent status ({c['payload_kb']:.0f} KB): "
        f"median {c['control_ms']:.2f} ms (p95 {c['control_p95_ms']:.2f} ms) vs bare socket "
        f"echo {c['baseline_ms']:.2f} ms → ratio {c['ratio']:.2f}"
    )
    print(f"control under load, 8 clients: {c['load_calls_per_s']:.0f} status calls/s")
    lg = bench_logging(lines=50_000 // k)
    print(
        f"log call cost to the caller: {lg['ours_us']:.1f} µs (redaction + queue) vs stdlib "
        f"StreamHandler {lg['baseline_us']:.1f} µs → ratio {lg['ratio']:.2f}"
    )
    m = bench_metrics(events=50_000 // k)
    print(
        f"event emit with metrics attached: {m['ours_us']:.1f} µs vs bare emit "
        f"{m['baseline_us']:.1f} µs → ratio {m['ratio']:.2f}"
    )


if __name__ == "__main__":
    sys.exit(main())
