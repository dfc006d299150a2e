"""Start-to-READY time and peak RSS of the real ``companyd run`` (issue 8).

Each figure comes from a fresh process started the way systemd starts it: ``$NOTIFY_SOCKET``
points at a datagram receiver, the clock runs from spawn until ``READY=1`` arrives, then
SIGTERM, and the peak RSS is read from ``wait4``'s rusage (as ``bench/ready.py`` does). The
CPU time the process used until READY=1 (``/proc/PID/stat``) is given beside the wall-clock
time: on a shared machine the wall clock includes the time other processes held the CPU.
Companies:

* the example company (company.yaml at the top of the repository: 8 agents, 4 routines);
* 100 and 1,000 agents: ten departments, agents reporting to a department head, one
  routine per ten agents;

all with the offline model (``--offline``: no network, no API key). The example runs with
its dashboard on, on a free port (``dashboard.listen: 127.0.0.1:0``). The baseline, measured
in the same run, is a bare Python process that imports the notifier and sends READY=1 — the
floor of any Python daemon on this machine. Each figure is the median of ``--runs`` runs.

A second baseline (issue 31) is a Python process that imports asyncio, sqlite3 and yaml and
sends READY=1 over ``$NOTIFY_SOCKET`` — what any asyncio daemon with a SQLite store and a
YAML config pays before its own code. The runs are interleaved: each round starts both
baselines and every company once, so a burst of load falls on all of them alike.
A third row (no target) is that baseline plus APScheduler's asyncio scheduler and pydantic,
the libraries the daemon's routines and its schema need whatever companyd's own code does.

Targets (issue 8): example < 80 MB and < 1.5 s; 1,000 agents < 300 MB. Issue 31: the example
company (offline, dashboard on as company.yaml has it) READY ≤ 4× and peak RSS ≤ 2.5× the
asyncio + sqlite3 + yaml baseline.

``--with-key`` adds the example company started with an API key instead of ``--offline``
(issue 31: the anthropic SDK is imported at the first model call, not at start).

Usage:
    .venv/bin/python bench/bench_daemon.py [--runs 3] [--sizes example,100,1000] [--with-key]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ready import BASELINE  # a sibling script, not a package

REPO = Path(__file__).resolve().parents[1]

TARGETS: dict[str, tuple[float | None, float | None]] = {
    # size: (READY seconds, peak RSS MiB)
    "example": (1.5, 80.0),
    "100": (None, None),
    "1000": (None, 300.0),
}


def company(agents: int) -> dict[str, Any]:
    """A company of ``agents`` agents in ten departments, with one routine per ten agents."""
    departments = {f"dept{d}": {"title": f"Department {d}"} for d in range(10)}
    doc: dict[str, Any] = {
        "schema": "companyd/v1",
        "company": {
            "name": f"Bench {agents}",
            "timezone": "UTC",
            "budget": {"daily_usd": 100, "monthly_usd": 2000},
        },
        "defaults": {"budget": {"daily_usd": 1, "monthly_usd": 20}},
        "departments": departments,
        "agents": {"ceo": {"title": "CEO", "instructions": "You run the company."}},
        "routines": {},
    }
    for i in range(1, agents):
        dept = f"dept{i % 10}"
        head = f"agent{i % 10}" if i >= 10 and i % 10 else "ceo"
        doc["agents"][f"agent{i}"] = {
            "title": f"Agent {i}",
            "instructions": f"You are agent {i} of {dept}. Keep the memory up to date.",
            "department": dept,
            "reports_to": head,
        }
        if i % 10 == 0:
            doc["routines"][f"routine{i}"] = {
                "assignee": f"agent{i}",
                "description": f"Routine work of agent {i}.",
                "trigger": {"every": "1h"},
                "precondition": "memory_changed",
            }
    return doc


#: The issue-31 baseline: asyncio, sqlite3 and yaml imported, READY=1 sent, SIGTERM awaited.
LEAN_BASELINE = (
    "import asyncio, os, signal, socket, sqlite3, yaml\n"
    "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
    "s.sendto(b'READY=1', os.environ['NOTIFY_SOCKET'])\n"
    "signal.sigwait({signal.SIGTERM})\n"
)
#: The lean baseline plus the libraries the daemon starts with whatever its own code does
#: (shown, no target): APScheduler's asyncio scheduler (the routines) and pydantic (the
#: company.yaml schema) — how much of issue 31's 4× they take before companyd's own code.
FLOOR = LEAN_BASELINE.replace(
    "import asyncio, os, signal, socket, sqlite3, yaml\n",
    "import asyncio, os, signal, socket, sqlite3, yaml\n"
    "import apscheduler.schedulers.asyncio\n"
    "from pydantic import BaseModel\n",
)
#: Issue 31's ratios for the example company: (READY, peak RSS) against LEAN_BASELINE.
LEAN_TARGETS = (4.0, 2.5)

#: ``--with-key``: a made-up key, and an endpoint nothing listens on (no call is made).
KEY_ENV = {
    "ANTHROPIC_API_KEY": "sk-ant-bench-not-a-key-0123456789",
    "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
}

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15)


def measure(
    cmd: list[str], timeout: float = 120.0, extra_env: dict[str, str] | None = None
) -> tuple[float, float, float]:
    """(seconds from spawn to READY=1, CPU seconds used by then, peak RSS in MB) of one run
    of ``cmd`` under a notify socket, as systemd runs a Type=notify service.
    """
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        addr = os.path.join(d, "notify")
        rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        rx.bind(addr)
        rx.settimeout(timeout)
        env = {**os.environ, **(extra_env or {}), "NOTIFY_SOCKET": addr}
        env.pop("WATCHDOG_USEC", None)
        # as installed: bytecode compiled once (main() warms up), not at every start
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=d, stdin=subprocess.DEVNULL)
        try:
            while True:
                if "READY=1" in rx.recv(65536).decode().split("\n"):
                    ready = time.perf_counter() - t0
                    break
            cpu = cpu_seconds(proc.pid)
            proc.send_signal(signal.SIGTERM)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            rx.close()
    if proc.returncode not in (0, -signal.SIGTERM):
        raise SystemExit(f"{cmd!r} exited with {proc.returncode}")
    return ready, cpu, usage.ru_maxrss * 1024 / 1e6  # ru_maxrss is in KiB; MB = 10^6 bytes


def median_of(
    cmd: list[str], runs: int, fresh_state: bool, extra_env: dict[str, str] | None = None
) -> tuple[float, float, float]:
    results = []
    for _ in range(runs):
        if fresh_state:
            with tempfile.TemporaryDirectory(dir="/tmp") as state:
                state_dir = os.path.join(state, "s")
                results.append(measure([*cmd, "--state-dir", state_dir], extra_env=extra_env))
        else:
            results.append(measure(cmd, extra_env=extra_env))
    return (
        statistics.median(r[0] for r in results),
        statistics.median(r[1] for r in results),
        statistics.median(r[2] for r in results),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--sizes", default="example,100,1000", help="comma-separated")
    parser.add_argument(
        "--with-key",
        action="store_true",
        help="also the example company with an API key (not --offline; no call is made "
        "before READY, the key and a closed loopback endpoint are made up)",
    )
    args = parser.parse_args()
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    for s in sizes:
        if s not in TARGETS:
            parser.error(f"unknown size {s!r}; choose from {', '.join(TARGETS)}")
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cpu, Python "
        f"{platform.python_version()}, {platform.platform()}"
    )
    with tempfile.TemporaryDirectory(dir="/tmp") as work:
        keyed: set[str] = set()
        cmds: list[tuple[str, list[str], bool, tuple[float | None, float | None]]] = [
            ("baseline (python + READY=1)", [sys.executable, "-c", BASELINE], False, (None, None)),
            (
                "asyncio+sqlite3+yaml+READY",
                [sys.executable, "-c", LEAN_BASELINE],
                False,
                (None, None),
            ),
            ("floor: lean+APS+pydantic", [sys.executable, "-c", FLOOR], False, (None, None)),
        ]
        for size in sizes:
            if size == "example":
                # the example as it is (dashboard on), on a free port: the default 8470 may
                # be taken by another daemon on this machine, and then the dashboard would
                # not start at all (it waits for the port) and the figure would leave it out
                cfg = Path(work) / "company.yaml"
                example = (REPO / "company.yaml").read_text(encoding="utf-8")
                cfg.write_text(example + '\ndashboard:\n  listen: "127.0.0.1:0"\n')
            else:
                cfg = Path(work) / f"company-{size}.yaml"
                cfg.write_text(yaml.safe_dump(company(int(size)), sort_keys=False))
            cmd = [
                sys.executable,
                "-m",
                "companyd",
                "run",
                "--offline",
                "--log-level",
                "error",
                "--config",
                str(cfg),
            ]
            label = "example company (8 agents)" if size == "example" else f"{size} agents"
            cmds.append((label, cmd, True, TARGETS[size]))
            if size == "example" and args.with_key:
                cmds.append(
                    (
                        "keyed example (API key)",
                        [c for c in cmd if c != "--offline"],
                        True,
                        (None, None),
                    )
                )
                keyed.add("keyed example (API key)")
        for label, cmd, fresh, _ in cmds:  # warm-up, not counted: writes the bytecode
            median_of(cmd, 1, fresh_state=fresh, extra_env=KEY_ENV if label in keyed else None)
        results: dict[str, list[tuple[float, float, float]]] = {c[0]: [] for c in cmds}
        for _ in range(args.runs):  # interleaved: one run of each per round
            for label, cmd, fresh, _ in cmds:
                env = KEY_ENV if label in keyed else None
                results[label].append(median_of(cmd, 1, fresh_state=fresh, extra_env=env))
    rows = [
        (
            label,
            tuple(statistics.median(r[i] for r in results[label]) for i in range(3)),
            target,
        )
        for label, _, _, target in cmds
    ]
    base = rows[0][1]
    lean = rows[1][1]
    print(f"load average after the run: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"\n{'':28} {'READY':>8} {'× base':>7} {'× lean':>7} {'CPU':>8} {'× base':>7} "
        f"{'peak RSS':>9} {'× base':>7} {'× lean':>7}  target"
    )
    for label, (ready, cpu, rss), (t_ready, t_rss) in rows:
        target = " and ".join(
            t
            for t in (
                f"< {t_ready:g} s" if t_ready else "",
                f"< {t_rss:g} MB" if t_rss else "",
            )
            if t
        )
        met = ""
        if target:
            ok = (t_ready is None or ready < t_ready) and (t_rss is None or rss < t_rss)
            met = "met" if ok else "MISSED"
        if label.startswith("example"):
            lean_ok = ready / lean[0] <= LEAN_TARGETS[0] and rss / lean[2] <= LEAN_TARGETS[1]
            target = f"{target} {met}; ≤ {LEAN_TARGETS[0]:g}× and ≤ {LEAN_TARGETS[1]:g}× lean"
            met = "met" if lean_ok else "MISSED"
        print(
            f"{label:28} {ready * 1e3:5.0f} ms {ready / base[0]:6.1f}× {ready / lean[0]:6.1f}× "
            f"{cpu * 1e3:5.0f} ms {cpu / base[1]:6.1f}× {rss:6.1f} MB {rss / base[2]:6.1f}× "
            f"{rss / lean[2]:6.1f}×  {target} {met}".rstrip()
        )


if __name__ == "__main__":
    main()
