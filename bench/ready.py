"""Start-to-READY time and peak RSS of a daemon, measured the way systemd sees it.

Runs a command with ``$NOTIFY_SOCKET`` pointing at a datagram receiver (as systemd does
for ``Type=notify``), times spawn → ``READY=1``, sends SIGTERM, waits for the exit and
reads the peak RSS from ``wait4``'s rusage. Each figure is the median of ``--runs`` runs,
reported with its ratio to a baseline measured in the same run: a bare Python process that
imports the notifier and sends READY=1 at once (the floor of any Python daemon here).

Usage:
    .venv/bin/python bench/ready.py                          # the daemonops stand-in
    .venv/bin/python bench/ready.py -- companyd run --offline --config company.yaml
        --state-dir /tmp/s                                   # the real daemon, once it exists

The stand-in (no command given) starts the operational pieces ``companyd run`` will
assemble — load company.yaml, take the state lock, set up logging, bind the control
socket, start the metrics endpoint, the watchdog and the lag monitor — then sends READY=1.
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

REPO = Path(__file__).resolve().parents[1]

BASELINE = (
    "from companyd.daemon._systemd import Notifier\n"
    "import signal, sys\n"
    "Notifier.from_env().ready('up')\n"
    "signal.sigwait({signal.SIGTERM})\n"
)

STAND_IN = """
import asyncio, signal, sys
from pathlib import Path
from companyd.config import load_config
from companyd.clock import SystemClock
from companyd.events import EventBus
from companyd.daemon._lock import StateLock
from companyd.daemon._logs import setup_logging, log_events
from companyd.daemon._systemd import Notifier, Watchdog, LoopLagMonitor
from companyd.daemon._control import ControlServer
from companyd.daemon._protocol import socket_path
from companyd.daemon._metrics import Metrics, MetricsServer

class Admin:
    async def status(self):
        return {}

class Ctx:
    id = path = "companyd/x"
    def __init__(self):
        self.stopping = asyncio.Event()
        self.ready = asyncio.Event()
    def started(self, info=None):
        self.ready.set()

async def main(config, state):
    logs = setup_logging(level="warning")
    cfg = load_config(config)
    lock = StateLock.acquire(state)
    clock, bus = SystemClock(), EventBus()
    log_events(bus)
    notifier = Notifier.from_env(unset_environment=True)
    lag = LoopLagMonitor(clock, bus)
    children = [Watchdog(notifier, clock).run, lag.run,
                ControlServer(Admin(), socket_path(state), state_dir=state).run,
                MetricsServer(Metrics(lag=lag.stats), bus, "127.0.0.1:0").run]
    ctxs = [Ctx() for _ in children]
    tasks = [asyncio.create_task(run(c)) for run, c in zip(children, ctxs)]
    for c in ctxs:
        await c.ready.wait()
    notifier.ready(f"{len(cfg.agents)} agents")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    notifier.stopping()
    for c in ctxs:
        c.stopping.set()
    await asyncio.gather(*tasks)
    lock.release()
    logs.close()

asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
"""


def measure(cmd: list[str], timeout: float = 60.0) -> tuple[float, float]:
    """(seconds to READY=1, peak RSS in MiB) of one run of ``cmd``."""
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        addr = os.path.join(d, "notify")
        rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        rx.bind(addr)
        rx.settimeout(timeout)
        env = {**os.environ, "NOTIFY_SOCKET": addr}
        env.pop("WATCHDOG_USEC", None)
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=d)
        try:
            while True:
                msg = rx.recv(4096).decode()
                if "READY=1" in msg.split("\n"):
                    ready = time.perf_counter() - t0
                    break
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
    return ready, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def median_of(cmd: list[str], runs: int) -> tuple[float, float]:
    results = [measure(cmd) for _ in range(runs)]
    return statistics.median(r[0] for r in results), statistics.median(r[1] for r in results)


def main() -> None:
    argv = sys.argv[1:]
    command = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description="start-to-READY time and peak RSS")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--config", default=str(REPO / "company.yaml"), help="for the stand-in")
    args = parser.parse_args(own)
    print(f"machine: {platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()},"
          f" {platform.platform()}")  # fmt: skip
    base = median_of([sys.executable, "-c", BASELINE], args.runs)
    with tempfile.TemporaryDirectory(dir="/tmp") as state:
        if command:
            label = " ".join(command)
            target = median_of(command, args.runs)
        else:
            label = "daemonops stand-in (config, lock, logging, control, metrics, watchdog)"
            target = median_of(
                [sys.executable, "-c", STAND_IN, args.config, os.path.join(state, "s")], args.runs
            )
    print(
        f"baseline (python + READY=1):  READY {base[0] * 1e3:7.0f} ms   peak RSS {base[1]:6.1f} MiB"
    )
    print(f"{label}:")
    print(
        f"  READY {target[0] * 1e3:7.0f} ms ({target[0] / base[0]:.1f}× baseline)   "
        f"peak RSS {target[1]:6.1f} MiB ({target[1] / base[1]:.1f}× baseline)"
    )


if __name__ == "__main__":
    main()
