"""Takeover time of companyd's leadership on PostgreSQL: the leader dies, how long until a
standby leads?

A throwaway PostgreSQL cluster on loopback (Debian's server, as the tests use), and
daemons reduced to their leadership: each is a Python process running
:class:`companyd.storage._leadership.Leadership` with the daemon's defaults (lease 5 s,
poll 1 s) that prints when it leads. One leads, a fresh standby waits; at a random moment
of the leader's renewal cycle the leader is

* ``kill``: sent SIGKILL (its socket closes: the server frees the lock at once), or
* ``stop``: sent SIGSTOP, then SIGKILL once replaced (its socket stays open and the server
  sees an idle, healthy session: the case of a dead link or a frozen host, which only the
  lease can end — the standby must see the renewal go stale and end that session);

the takeover time is from the signal to the standby's "leading" line (both stamped with
``time.time()`` on this host). The new leader becomes the next victim, ``--trials`` times
per mode; every takeover must bump the epoch by exactly one.

Usage:
    .venv/bin/python bench/leadership.py                  # both modes, 20 trials each
    .venv/bin/python bench/leadership.py --modes kill --trials 5
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from companyd.testing.postgres import ThrowawayCluster

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import asyncio, sys, time
from companyd.clock import SystemClock
from companyd.storage._leadership import Leadership

async def main():
    dsn, schema, node, lease, poll = sys.argv[1:6]
    lead = Leadership(dsn, schema, node=node, clock=SystemClock(), lease=float(lease),
                      poll=float(poll))
    await lead.who()  # connected, the table exists
    print("standby", flush=True)
    epoch = await lead.campaign()
    print(f"lead {epoch} {time.time()!r}", flush=True)
    await lead.hold()

asyncio.run(main())
"""


class Daemon:
    """One leadership process and the lines it prints."""

    def __init__(self, dsn: str, schema: str, node: str, lease: float, poll: float) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, dsn, schema, node, str(lease), str(poll)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def line(self, expect: str, timeout: float = 60.0) -> list[str]:
        """The next line, which must start with ``expect`` (blocking; the child prints it
        or dies, and the caller's alarm bounds the wait).
        """
        assert self.proc.stdout is not None
        signal.alarm(math.ceil(timeout))
        try:
            words = self.proc.stdout.readline().split()
        finally:
            signal.alarm(0)
        if not words or words[0] != expect:
            raise SystemExit(f"expected {expect!r} from the child, got {words!r}")
        return words

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def run_mode(
    cluster: ThrowawayCluster, mode: str, trials: int, lease: float, poll: float
) -> list[float]:
    schema = cluster.fresh_schema(f"bench_{mode}")
    leader = Daemon(cluster.dsn, schema, "n0", lease, poll)
    leader.line("standby")
    epoch = int(leader.line("lead")[1])
    times: list[float] = []
    try:
        for i in range(1, trials + 1):
            standby = Daemon(cluster.dsn, schema, f"n{i}", lease, poll)
            standby.line("standby")
            time.sleep(random.uniform(0, lease))  # a random moment of the renewal cycle
            start = time.time()
            leader.proc.send_signal(signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
            words = standby.line("lead", timeout=10 * (lease + poll))
            took = float(words[2]) - start
            if int(words[1]) != epoch + 1:
                raise SystemExit(f"epoch {words[1]} after {epoch}: expected {epoch + 1}")
            epoch += 1
            leader.kill()
            times.append(took)
            print(f"  {mode} #{i}: {took:.2f} s (epoch {epoch})", flush=True)
            leader = standby
    finally:
        leader.kill()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--modes", nargs="+", choices=("kill", "stop"), default=["kill", "stop"])
    parser.add_argument("--lease", type=float, default=5.0)
    parser.add_argument("--poll", type=float, default=1.0)
    args = parser.parse_args()
    with ThrowawayCluster() as cluster:
        results = {m: run_mode(cluster, m, args.trials, args.lease, args.poll) for m in args.modes}
    print(f"\nlease {args.lease:g} s, poll {args.poll:g} s, {args.trials} takeovers per mode")
    print("| leader | p50 | p99 | max | goal p99 ≤ 10 s |")
    print("| --- | --- | --- | --- | --- |")
    for mode, times in results.items():
        p99 = nearest_rank(times, 0.99)
        print(
            f"| {mode} | {nearest_rank(times, 0.5):.2f} s | {p99:.2f} s | {max(times):.2f} s "
            f"| {'yes' if p99 <= 10 else 'no'} |"
        )


if __name__ == "__main__":
    main()
