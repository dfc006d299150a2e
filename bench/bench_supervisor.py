"""Supervisor benchmarks: restart latency, start-up cost at scale, restart cost vs siblings.

Run:  .venv/bin/python bench/bench_supervisor.py            (all scenarios, markdown table)
      .venv/bin/python bench/bench_supervisor.py --json     (machine-readable)

Every scenario runs in a fresh subprocess so its peak RSS is its own. Each one also measures
a baseline in the same process and reports the ratio, because the machine is noisy:

* latency:   crash → restarted for one child (p50/p99), vs a bare asyncio round trip
             (create a task, wait until it signals readiness) — what any restart must cost.
* start_10k: start 10,000 children under one supervisor, vs creating 10,000 bare tasks
             that signal readiness one after another.
* nested_1k: 1,000 sub-supervisors (one worker each) under one root, and a chain of 1,000
             supervisors nested one inside the other.
* among:     restart latency of one child among 10,000 siblings vs among 10 (ratio).

Targets (docs/benchmarks.md): p99 crash-to-restarted < 2 ms; 10,000 children started in
< 1 s and < 100 MB RSS; restarting among 10,000 costs no more than among 10.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

from companyd.clock import SystemClock
from companyd.events import EventBus
from companyd.supervision import ChildSpec, Supervisor
from companyd.supervision._child import ChildContext


def rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def idle(ctx: ChildContext) -> None:
    ctx.started()
    await ctx.stopping.wait()


class Crashable:
    """A child that records when it became ready and crashes when told to."""

    def __init__(self) -> None:
        self.ready_at = 0.0
        self.ready_cpu = 0.0
        self.trigger: asyncio.Future[None] | None = None
        self.waiter: asyncio.Future[None] | None = None

    async def __call__(self, ctx: ChildContext) -> None:
        trigger: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.trigger = trigger
        self.ready_cpu = time.thread_time()
        self.ready_at = time.perf_counter()
        ctx.started()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)
        await trigger
        raise RuntimeError("crash")


async def restart_latencies(
    siblings: int, crashes: int, cpu: list[float] | None = None
) -> list[float]:
    """Crash one child ``crashes`` times among ``siblings`` idle ones; seconds per restart.

    ``cpu`` (if given) receives the CPU time of each restart: wall-clock latency on a shared
    machine includes the time other processes held the CPU; CPU time does not.
    """
    probe = Crashable()
    specs = [ChildSpec(id=f"s{i}", start=idle) for i in range(siblings)]
    specs.insert(siblings // 2, ChildSpec(id="probe", start=probe))
    sup = Supervisor(
        "bench",
        specs,
        max_restarts=crashes + 1,
        max_seconds=3600,
        bus=EventBus(SystemClock(), history=100),
    )
    await sup.start()
    out: list[float] = []
    for _ in range(crashes):
        assert probe.trigger is not None
        probe.waiter = asyncio.get_running_loop().create_future()
        c0 = time.thread_time()
        t0 = time.perf_counter()
        probe.trigger.set_result(None)
        await probe.waiter
        out.append(probe.ready_at - t0)
        if cpu is not None:
            cpu.append(probe.ready_cpu - c0)
    await sup.stop()
    return out


async def baseline_round_trips(n: int) -> list[float]:
    """A bare task that signals readiness through a future: the floor of any restart."""
    out: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def body(ready: asyncio.Future[None] = ready) -> None:
            ready.set_result(None)

        task = asyncio.ensure_future(body())
        await ready
        out.append(time.perf_counter() - t0)
        await task
    return out


async def scenario_latency() -> dict[str, Any]:
    """Restarts interleaved with bare round trips, so both see the same machine noise."""
    await restart_latencies(10, 200)  # warm-up
    probe = Crashable()
    sup = Supervisor(
        "bench",
        [ChildSpec(id="probe", start=probe)],
        max_restarts=100_000,
        max_seconds=3600,
        bus=EventBus(SystemClock(), history=100),
    )
    await sup.start()
    values: list[float] = []
    cpu: list[float] = []
    base: list[float] = []
    clean: list[float] = []  # samples during which the OS did not preempt this process
    for _ in range(5000):
        assert probe.trigger is not None
        probe.waiter = asyncio.get_running_loop().create_future()
        switches = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
        c0 = time.thread_time()
        t0 = time.perf_counter()
        probe.trigger.set_result(None)
        await probe.waiter
        values.append(probe.ready_at - t0)
        cpu.append(probe.ready_cpu - c0)
        if resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw == switches:
            clean.append(values[-1])
        base += await baseline_round_trips(1)
    await sup.stop()
    return {
        "samples": len(values),
        "p50_ms": statistics.median(values) * 1000,
        "p99_ms": pct(values, 99) * 1000,
        "cpu_p50_ms": statistics.median(cpu) * 1000,
        "cpu_p99_ms": pct(cpu, 99) * 1000,
        "unpreempted_p99_ms": pct(clean, 99) * 1000,
        "preempted_share": 1 - len(clean) / len(values),
        "baseline_p50_ms": statistics.median(base) * 1000,
        "baseline_p99_ms": pct(base, 99) * 1000,
        "ratio_p50": statistics.median(values) / statistics.median(base),
        "ratio_p99": pct(values, 99) / pct(base, 99),
        "rss_mb": rss_mb(),
    }


async def scenario_start_10k() -> dict[str, Any]:
    n = 10_000
    gc.collect()
    before = rss_mb()
    # baseline: n bare tasks, each awaited until ready, one after another
    t0 = time.perf_counter()
    tasks = []
    stop = asyncio.Event()
    for _ in range(n):
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def body(ready: asyncio.Future[None] = ready) -> None:
            ready.set_result(None)
            await stop.wait()

        tasks.append(asyncio.ensure_future(body()))
        await ready
    base = time.perf_counter() - t0
    stop.set()
    await asyncio.gather(*tasks)
    del tasks
    gc.collect()
    sup = Supervisor(
        "bench",
        [ChildSpec(id=f"c{i}", start=idle) for i in range(n)],
        bus=EventBus(SystemClock()),
    )
    c0 = time.thread_time()
    t0 = time.perf_counter()
    await sup.start()
    took = time.perf_counter() - t0
    took_cpu = time.thread_time() - c0
    peak = rss_mb()
    t0 = time.perf_counter()
    await sup.stop()
    stop_took = time.perf_counter() - t0
    return {
        "children": n,
        "start_s": took,
        "start_cpu_s": took_cpu,
        "baseline_s": base,
        "ratio": took / base,
        "stop_s": stop_took,
        "rss_mb": peak,
        "rss_before_mb": before,
    }


async def scenario_nested_1k() -> dict[str, Any]:
    n = 1000
    bus = EventBus(SystemClock())
    subs = [Supervisor(f"sub{i}", [ChildSpec(id="w", start=idle)]) for i in range(n)]
    root = Supervisor("root", [s.child_spec() for s in subs], bus=bus)
    t0 = time.perf_counter()
    await root.start()
    wide = time.perf_counter() - t0
    t0 = time.perf_counter()
    await root.stop()
    wide_stop = time.perf_counter() - t0
    # a chain: each supervisor's only child is the next one
    inner: Supervisor = Supervisor("l999", [ChildSpec(id="w", start=idle)])
    for i in range(n - 2, -1, -1):
        inner = Supervisor(f"l{i}", [inner.child_spec()])
    chain = Supervisor("root", [inner.child_spec()], bus=bus)
    t0 = time.perf_counter()
    await chain.start()
    deep = time.perf_counter() - t0
    t0 = time.perf_counter()
    await chain.stop()
    deep_stop = time.perf_counter() - t0
    return {
        "supervisors": n,
        "wide_start_s": wide,
        "wide_stop_s": wide_stop,
        "chain_start_s": deep,
        "chain_stop_s": deep_stop,
        "rss_mb": rss_mb(),
    }


async def scenario_among() -> dict[str, Any]:
    """Two supervisors alive side by side (10 and 10,000 siblings), crashes alternated.

    Alternating single crashes gives both the same machine noise and the same heap (and so
    the same garbage-collector work), so the ratio isolates what the supervisor does per
    restart.
    """
    await restart_latencies(10, 200)  # warm-up
    probes: dict[int, Crashable] = {}
    sups = []
    for n in (10, 10_000):
        probe = probes[n] = Crashable()
        specs = [ChildSpec(id=f"s{i}", start=idle) for i in range(n)]
        specs.insert(n // 2, ChildSpec(id="probe", start=probe))
        sup = Supervisor(
            f"among{n}",
            specs,
            max_restarts=100_000,
            max_seconds=3600,
            bus=EventBus(SystemClock(), history=100),
        )
        await sup.start()
        sups.append(sup)
    wall: dict[int, list[float]] = {10: [], 10_000: []}
    cpu: dict[int, list[float]] = {10: [], 10_000: []}
    for _ in range(3000):
        for n, probe in probes.items():
            assert probe.trigger is not None
            probe.waiter = asyncio.get_running_loop().create_future()
            c0 = time.thread_time()
            t0 = time.perf_counter()
            probe.trigger.set_result(None)
            await probe.waiter
            wall[n].append(probe.ready_at - t0)
            cpu[n].append(probe.ready_cpu - c0)
    for sup in sups:
        await sup.stop()
    return {
        "samples": len(wall[10]),
        "among_10_p50_ms": statistics.median(wall[10]) * 1000,
        "among_10k_p50_ms": statistics.median(wall[10_000]) * 1000,
        "among_10_p99_ms": pct(wall[10], 99) * 1000,
        "among_10k_p99_ms": pct(wall[10_000], 99) * 1000,
        "among_10_cpu_p50_ms": statistics.median(cpu[10]) * 1000,
        "among_10k_cpu_p50_ms": statistics.median(cpu[10_000]) * 1000,
        "ratio_p50": statistics.median(wall[10_000]) / statistics.median(wall[10]),
        "ratio_cpu_p50": statistics.median(cpu[10_000]) / statistics.median(cpu[10]),
        "rss_mb": rss_mb(),
    }


SCENARIOS = {
    "latency": scenario_latency,
    "start_10k": scenario_start_10k,
    "nested_1k": scenario_nested_1k,
    "among": scenario_among,
}


def run_all() -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name in SCENARIOS:
        done = subprocess.run(
            [sys.executable, __file__, "--scenario", name],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        results[name] = json.loads(done.stdout)
    return results


def load() -> str:
    try:
        with open("/proc/loadavg", encoding="utf-8") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import os

    return (
        f"{cpu}, {os.cpu_count()} cores (load avg {load()}), Python "
        f"{platform.python_version()}, {platform.system()}"
    )


def table(r: dict[str, Any]) -> str:
    cmd = "`.venv/bin/python bench/bench_supervisor.py`"
    lat, start, nest, among = r["latency"], r["start_10k"], r["nested_1k"], r["among"]
    rows = [
        (
            "crash → restarted, one child (p50 / p99)",
            f"wall {lat['p50_ms']:.3f} / {lat['p99_ms']:.3f} ms, CPU {lat['cpu_p50_ms']:.3f} / "
            f"{lat['cpu_p99_ms']:.3f} ms; wall p99 of the {100 - lat['preempted_share'] * 100:.1f}"
            f" % of samples the OS did not preempt: {lat['unpreempted_p99_ms']:.3f} ms; "
            "a bare task round trip interleaved with them: "
            f"{lat['baseline_p50_ms']:.3f} / {lat['baseline_p99_ms']:.3f} ms "
            f"(ratio p50 {lat['ratio_p50']:.1f}×, p99 {lat['ratio_p99']:.1f}×)",
            "p99 < 2 ms",
        ),
        (
            "start 10,000 children under one supervisor",
            f"{start['start_s']:.3f} s wall, {start['start_cpu_s']:.3f} s CPU "
            f"({start['ratio']:.1f}× 10,000 bare tasks), "
            f"peak RSS {start['rss_mb']:.0f} MB; stop {start['stop_s']:.3f} s",
            "< 1 s, < 100 MB",
        ),
        (
            "1,000 sub-supervisors (1 worker each) under one root",
            f"start {nest['wide_start_s']:.3f} s, stop {nest['wide_stop_s']:.3f} s",
            "—",
        ),
        (
            "a chain of 1,000 nested supervisors",
            f"start {nest['chain_start_s']:.3f} s, stop {nest['chain_stop_s']:.3f} s, "
            f"peak RSS {nest['rss_mb']:.0f} MB",
            "—",
        ),
        (
            "restart one child among 10,000 vs among 10 (p50), both alive, crashes alternated",
            f"wall {among['among_10k_p50_ms']:.3f} vs {among['among_10_p50_ms']:.3f} ms "
            f"(ratio {among['ratio_p50']:.2f}); CPU {among['among_10k_cpu_p50_ms']:.3f} vs "
            f"{among['among_10_cpu_p50_ms']:.3f} ms (ratio {among['ratio_cpu_p50']:.2f})",
            "ratio ≤ 1 (± noise)",
        ),
    ]
    out = ["| what | command | figure | target | machine |", "| --- | --- | --- | --- | --- |"]
    m = machine()
    out += [f"| {w} | {cmd} | {f} | {t} | {m} |" for w, f, t in rows]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.scenario:
        print(json.dumps(asyncio.run(SCENARIOS[args.scenario]())))
        return
    results = run_all()
    print(json.dumps(results, indent=2) if args.json else table(results))


if __name__ == "__main__":
    main()
