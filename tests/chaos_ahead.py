"""The short chaos run (``tests/test_chaos.py``), started ahead by the xdist controller.

``bench/chaos.py --short`` is two simulated days on a scaled real clock: about a minute of
wall time of which some 45 s are waits (its daemon's routines fire on that clock), about
20 s of CPU. Run by the test, it held one of the four workers for that minute. Under
xdist the controller, which only waits for the workers' reports, starts the same command
(:func:`command`) in a thread of its own as soon as the first worker has collected
(:func:`start`), writes its output and exit status to a directory (``ENV``, set before the
workers start, so they inherit it), and the test — ordered among the last of the run by
``tests/conftest.py`` — reads them (:func:`report`), waiting with a deadline if the run is not
over yet. The command, its checks and the test's assertions are the same either way.

Only where the run will certainly be wanted (:func:`wanted`: the chaos test is in the
session's arguments and nothing selects or stops early); otherwise, and without xdist, the
test runs the command itself.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

#: the directory of the run the controller started (inherited by the workers)
ENV = "COMPANYD_TEST_CHAOS_AHEAD"
BENCH = Path(__file__).resolve().parents[1] / "bench" / "chaos.py"
TEST_FILE = Path(__file__).resolve().parent / "test_chaos.py"
TEST_NAME = "test_two_chaotic_days_hold_every_invariant"
#: as the test's own subprocess.run: the whole run, started to ended
TIMEOUT = 600.0

_proc: subprocess.Popen[bytes] | None = None
_started = threading.Event()


def command() -> list[str]:
    """The chaos run the test checks: two simulated days, CI's official memory server when
    it is installed (tests never install it: no network).
    """
    args = [sys.executable, str(BENCH), "--short", "--quiet"]
    if not os.environ.get("COMPANYD_OFFICIAL_MEMORY_SERVER"):
        args.append("--no-official")
    return args


def wanted(config: pytest.Config) -> bool:
    """Whether this session is an xdist controller that will run the chaos test.

    One of its arguments is the test, its module or a directory above it, and no option
    selects tests (``-k``, ``-m``, ``--deselect``, ``--ignore``, last-failed, stepwise) or
    only collects.
    A session that stops first (``-x``) kills the run at its end (:func:`stop`).
    """
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return False
    opt = config.option
    if (
        getattr(opt, "keyword", "")
        or getattr(opt, "markexpr", "")
        or getattr(opt, "deselect", None)
        or getattr(opt, "ignore", None)
        or getattr(opt, "ignore_glob", None)
        or getattr(opt, "lf", False)
        or getattr(opt, "failedfirst", False)
        or getattr(opt, "stepwise", False)
        or getattr(opt, "collectonly", False)
    ):
        return False
    for arg in config.args:
        path, _, rest = arg.partition("::")
        where = Path(config.invocation_params.dir, path).resolve()
        if rest in ("", TEST_NAME) and (where == TEST_FILE or where in TEST_FILE.parents):
            return True
    return False


def plan(config: pytest.Config) -> None:
    """In the controller's ``pytest_configure``: decide, and tell the workers where the
    run's output will be (``ENV``) before they start.
    """
    if wanted(config):
        os.environ[ENV] = tempfile.mkdtemp(prefix="companyd-chaos-")


def start() -> None:
    """In the controller, once a worker has collected: start the run (once)."""
    where = os.environ.get(ENV)
    if where is None or _started.is_set():
        return
    _started.set()
    threading.Thread(target=_run, args=(Path(where),), name="chaos-ahead", daemon=True).start()


def _run(where: Path) -> None:
    global _proc
    rc = "-1"
    try:
        with open(where / "out", "wb") as out, open(where / "err", "wb") as err:
            _proc = subprocess.Popen(command(), stdout=out, stderr=err, start_new_session=True)
            try:
                rc = str(_proc.wait(timeout=TIMEOUT))
            except subprocess.TimeoutExpired:
                os.killpg(_proc.pid, signal.SIGKILL)
                _proc.wait()
                err.write(f"\nchaos run ahead: killed after {TIMEOUT:.0f} s\n".encode())
                rc = "timeout"
    except Exception as exc:  # reported by the test, which fails on it
        with open(where / "err", "a", encoding="utf-8") as err:
            err.write(f"\nchaos run ahead could not run: {exc!r}\n")
    finally:
        (where / "rc.part").write_text(rc, encoding="utf-8")
        os.replace(where / "rc.part", where / "rc")


def stop() -> None:
    """In the controller's ``pytest_unconfigure``: a run still going (the session ended
    first: interrupted, ``-x``) is killed with its process group; the directory goes.
    """
    where = os.environ.pop(ENV, None)
    if _proc is not None and _proc.poll() is None:
        os.killpg(_proc.pid, signal.SIGKILL)
        _proc.wait()
    if where is not None:
        shutil.rmtree(where, ignore_errors=True)


def ahead() -> bool:
    """Whether this worker's chaos test reads the controller's run."""
    return bool(os.environ.get(ENV))


def report() -> tuple[int | str, str, str]:
    """The chaos run's exit status (``"timeout"`` when it ran out of time), stdout and
    stderr: the controller's (waited for, up to :data:`TIMEOUT` from now) or, without one,
    the command run here.
    """
    where = os.environ.get(ENV)
    if where is None:
        try:
            proc = subprocess.run(command(), capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return "timeout", "", f"chaos run: killed after {TIMEOUT:.0f} s"
        return proc.returncode, proc.stdout, proc.stderr
    done = Path(where) / "rc"
    deadline = time.monotonic() + TIMEOUT
    while not done.exists():
        if time.monotonic() > deadline:
            said = f"chaos run ahead: no exit status in {where} after {TIMEOUT:.0f} s"
            return "timeout", "", said
        time.sleep(0.5)
    rc = done.read_text(encoding="utf-8")

    def text(name: str) -> str:
        return (Path(where) / name).read_text(encoding="utf-8", errors="replace")

    return (int(rc) if rc.lstrip("-").isdigit() else rc), text("out"), text("err")
