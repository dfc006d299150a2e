"""Wall time of the CLI's everyday commands as a ratio to a bare ``python -c pass`` (issue 31).

The cost of a ``companyd`` command is its start-up (imports), not its work, so each command
is timed as a fresh process and divided by the start of a bare interpreter measured in the
same run: ``python -c pass`` and every command are run in turn, round after round
(interleaved, so a burst of load from other processes falls on all of them alike), and each
ratio is the median over the rounds. The CPU time (user + system, from the child's
rusage) is given beside the wall time: on a loaded machine the wall clock is mostly time
spent waiting for a core.

``status``, ``inbox``, ``jobs`` and ``runs`` talk to a running daemon: the example company
(company.yaml at the top of the repository, copied into a temporary directory) is started
with ``companyd run --offline`` there and stopped at the end; so do ``spend`` and
``budget`` (no target: shown). ``validate`` reads the same copy. ``runs``, ``tasks`` and
``spend`` are also run against a second copy that no daemon runs, so they read the stores
themselves (no target: shown), and ``memory serve-mcp --file`` is run
from start to its exit at the end of an empty standard input (no target: shown), and
``run`` refusing to start (no target: shown): exit 78 on an invalid company.yaml, exit 75
on the company the daemon already runs (what systemd's retries of a second unit cost).
Two floors are shown last (no target): the imports ``validate`` cannot do without (PyYAML
and APScheduler's cron parser, then with pydantic), each a bare ``python -c "import …"``.
``--python`` runs the commands with another interpreter or tree (``PYTHONPATH`` is passed
through), to measure the code of an older commit in the same way.

Targets (issue 31): ``--version``, ``status``, ``runs``, ``inbox``, ``jobs`` each ≤ 5×;
``validate`` ≤ 10×.

Usage:
    .venv/bin/python bench/cli.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: (label, arguments after ``companyd``, target ratio; None: shown, no target)
COMMANDS: tuple[tuple[str, tuple[str, ...], float | None], ...] = (
    ("--version", ("--version",), 5.0),
    ("--help", ("--help",), None),
    ("status", ("status",), 5.0),
    ("runs", ("runs",), 5.0),
    ("inbox", ("inbox",), 5.0),
    ("jobs", ("jobs",), 5.0),
    ("validate", ("validate",), 10.0),
    ("spend", ("spend",), None),
    ("budget", ("budget",), None),
)

#: Commands that read the stores themselves when no daemon runs (issue 31, no target): run
#: against a second copy of the example company that has no daemon.
OFFLINE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("runs, no daemon", ("runs",)),
    ("tasks, no daemon", ("tasks",)),
    ("spend, no daemon", ("spend",)),
)

#: ``companyd memory serve-mcp --file F`` from start to its exit at the end of an empty
#: standard input (no target: shown): every MCP client of the company memory, the daemon's
#: agents included, starts one; most of it is the mcp SDK's import.
SERVE_MCP = ("memory", "serve-mcp", "--file")

#: ``companyd run`` refusing to start (no target: shown), with its exit code.
REFUSED = ("run, 78 bad config", "run, 75 running")

#: What ``validate`` cannot do without, as bare imports (no target: shown): PyYAML reads the
#: file, APScheduler's cron parser checks every ``cron:`` (the scheduler's own, so the check
#: and the schedule never disagree; it imports asyncio), pydantic validates the schema. With
#: these the floor of ``validate`` sits at or above its 10× target before companyd's own code
#: runs (docs/configuration.md, "What validation costs at start").
FLOORS: tuple[tuple[str, str], ...] = (
    ("floor: yaml+cron", "import yaml, apscheduler.triggers.cron"),
    ("floor: +pydantic", "import yaml, apscheduler.triggers.cron; from pydantic import BaseModel"),
)


def start_daemon(python: str, config: Path, env: dict[str, str], timeout: float = 120.0) -> Any:
    """``companyd run --offline`` of ``config``, returned once it has sent READY=1."""
    addr = str(config.parent / "notify")
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.bind(addr)
    rx.settimeout(timeout)
    proc = subprocess.Popen(
        [
            python,
            "-m",
            "companyd",
            "run",
            "--offline",
            "--log-level",
            "error",
            "--config",
            str(config),
        ],
        env={**env, "NOTIFY_SOCKET": addr},
        cwd=config.parent,
        stdin=subprocess.DEVNULL,
    )
    try:
        while "READY=1" not in rx.recv(65536).decode().split("\n"):
            pass
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        rx.close()
    return proc


def timed(cmd: list[str], env: dict[str, str], cwd: Path, rc: int = 0) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system from the child's rusage) of one run, which
    must exit ``rc``.
    """
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err
        )
        assert proc.stdin is not None
        proc.stdin.close()  # an empty standard input: `memory serve-mcp` serves it and exits
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != rc:
            err.seek(0)
            raise SystemExit(f"{cmd!r} exited {proc.returncode}: {err.read().decode()[-500:]}")
    return elapsed, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="rounds (median)")
    parser.add_argument("--python", default=sys.executable, help="interpreter to measure")
    args = parser.parse_args()
    # An installed companyd has its bytecode compiled (pip compiles at install); a session
    # with PYTHONDONTWRITEBYTECODE=1 would compile every companyd module from source at each
    # start instead and measure the compiler. Written once by the warm-up round below.
    drop = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    where = subprocess.run(
        [args.python, "-c", "import companyd, sys; print(companyd.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cpu, Python "
        f"{platform.python_version()}; companyd from {where}"
    )
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    with tempfile.TemporaryDirectory(dir="/tmp") as work:
        company = Path(work) / "company.yaml"
        shutil.copy(REPO / "company.yaml", company)
        for extra in ("instructions", "prompts"):
            if (REPO / extra).is_dir():
                shutil.copytree(REPO / extra, Path(work) / extra)
        env["COMPANYD_CONFIG"] = str(company)
        (Path(work) / "idle").mkdir()
        idle = Path(work) / "idle" / "company.yaml"  # the same company, no daemon
        shutil.copy(company, idle)
        idle_env = {**env, "COMPANYD_CONFIG": str(idle)}
        daemon = start_daemon(args.python, company, env)
        try:
            script = Path(args.python).parent / "companyd"  # the console script users run
            cli = [str(script)] if script.exists() else [args.python, "-m", "companyd"]
            runs = [(label, argv, env, 0) for label, argv, _ in COMMANDS]
            runs += [(label, argv, idle_env, 0) for label, argv in OFFLINE]
            serve = ("serve-mcp --file", (*SERVE_MCP, str(Path(work) / "memory.jsonl")))
            runs.append((*serve, env, 0))
            bad = Path(work) / "bad.yaml"
            bad.write_text("schema: companyd/v1\ncompany: {name: X\n")
            other = str(Path(work) / "other-state")
            run_78 = ("run", "--config", str(bad))
            run_75 = ("run", "--offline", "--config", str(company), "--state-dir", other)
            runs += [(REFUSED[0], run_78, env, 78), (REFUSED[1], run_75, env, 75)]
            for _, argv, e, rc in runs:  # warm-up, not counted: bytecode written
                timed([*cli, *argv], e, Path(work), rc)
            base: list[tuple[float, float]] = []
            times: dict[str, list[tuple[float, float]]] = {label: [] for label, *_ in runs}
            times.update({label: [] for label, _ in FLOORS})
            for _ in range(args.rounds):
                base.append(timed([args.python, "-c", "pass"], env, Path(work)))
                for label, argv, e, rc in runs:
                    times[label].append(timed([*cli, *argv], e, Path(work), rc))
                for label, code in FLOORS:
                    times[label].append(timed([args.python, "-c", code], env, Path(work)))
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)
    b = statistics.median(w for w, _ in base)
    bc = statistics.median(c for _, c in base)
    print(f"load average after the run: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"\n{'':18} {'wall':>9} {'× base':>7} {'CPU':>9} {'× base':>7}  target (wall)")
    print(f"{'python -c pass':18} {b * 1e3:6.1f} ms {1:6.1f}× {bc * 1e3:6.1f} ms {1:6.1f}×")
    shown = (
        *((label, (), None) for label, _ in OFFLINE),
        ("serve-mcp --file", (), None),
        *((label, (), None) for label in REFUSED),
        *((label, (), None) for label, _ in FLOORS),
    )
    for label, _, target in (*COMMANDS, *shown):
        t = statistics.median(w for w, _ in times[label])
        c = statistics.median(c for _, c in times[label])
        verdict = (
            "—" if target is None else f"≤ {target:g}× " + ("met" if t / b <= target else "MISSED")
        )
        print(
            f"{label:18} {t * 1e3:6.1f} ms {t / b:6.1f}× {c * 1e3:6.1f} ms {c / bc:6.1f}×  "
            f"{verdict}"
        )


if __name__ == "__main__":
    main()
