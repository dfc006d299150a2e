"""Checkpoint and resume across a kill -9 of the whole daemon (issue 5 acceptance).

The daemon that is killed (SIGKILL) or stopped (SIGTERM) runs as a real ``companyd run``
process: the signal, the exit status and a death at any instruction need a process (forked
from :mod:`companyd.testing.forkserver`, which imported the daemon and the SDK once). The
daemon started again on the same state directory is ``companyd run``'s composition root in
this process (:class:`~companyd.testing.inprocess.InProcessDaemon`, the real anthropic SDK):
what it proves — the run completes from its last journaled step, nothing paid twice — is
read from what the dead process left on disk, which is the same whoever reads it; a second
interpreter's start-up would add a second of CPU and nothing to the claim. The loopback
Messages API stand-in runs in this process and counts the calls it served.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import pytest

from agentkit import (
    PerAgent,
    daemon_env,
    tool_files,
    tool_results,
    tool_server,
    wait_until,
    write_company,
)
from companyd.admin._blocks import FireRow, RunRow
from companyd.daemon._control_client import ControlClient
from companyd.runs import Journal
from companyd.testing.daemon_process import DaemonProcess
from companyd.testing.inprocess import InProcessDaemon, cli_in_thread
from companyd.testing.messages_api import MessagesAPIServer, reply_text, reply_tool_use, stall

pytestmark = pytest.mark.anyio

TOOL_SERVER = Path(__file__).parent.parent / "mcp_tool_server.py"

T = TypeVar("T")


def killable(cfg: Path, state: Path, env: Mapping[str, str], log: Path) -> DaemonProcess:
    """The ``companyd run`` process the test signals: forked from the fork server, which
    imported the daemon and the anthropic SDK once (what is killed is still a process of
    its own; its start-up imports are not what these tests are about). ``async with`` it
    to start it (≤ 30 s until its control socket answers) and SIGTERM what still runs at
    the end.
    """
    return DaemonProcess(cfg, state, log=log, offline=False, env=env, log_level="info", forked=True)


def restarted(cfg: Path, state: Path, srv: MessagesAPIServer) -> InProcessDaemon:
    """The daemon started again on ``state`` after the process died: in this process, its
    model calls going to ``srv`` through the real anthropic SDK.
    """
    env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": srv.base_url}
    return InProcessDaemon(cfg, state, offline=False, env=env)


async def until(found: Callable[[], T], *, what: str, timeout: float = 30.0) -> T:
    """``found()`` once it is truthy, polled without blocking the event loop the in-process
    daemon runs on (≤ ``timeout`` real seconds).
    """
    deadline = time.monotonic() + timeout
    while not (got := found()):
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        await asyncio.sleep(0.05)
    return got


def _runs(state: Path) -> list[RunRow]:
    journal = Journal(state / "runs.sqlite")
    try:
        return journal.run_sync(lambda db: journal.list_runs(db, limit=10))
    finally:
        journal.close_sync()


def _ask_in_background(sock: Path, agent: str, question: str) -> threading.Thread:
    def ask() -> None:
        # the daemon is killed under it; the run's fate is read from the journal instead
        with contextlib.suppress(Exception):
            ControlClient(sock, timeout=120).call(
                "ask", agent=agent, question=question, timeout=100.0
            )

    t = threading.Thread(target=ask, daemon=True)
    t.start()
    return t


async def test_a_ten_step_run_killed_after_step_six_completes_without_paying_twice(
    tmp_path: Path,
) -> None:
    cfg = write_company(tmp_path, {"ceo": {}})
    state = tmp_path / "s"
    steps = [reply_tool_use("search_nodes", {"query": f"step {i}"}) for i in range(1, 10)]
    model = PerAgent(
        ceo=[*steps[:6], stall(None, then=steps[6]), *steps[6:], reply_text("All ten done.")]
    )
    with MessagesAPIServer(responder=model) as srv:
        env = daemon_env(srv)
        async with killable(cfg, state, env, tmp_path / "d1.log") as proc:
            _ask_in_background(state / "companyd.sock", "ceo", "Do the ten-step job.")
            # the 7th request only leaves once steps 1–6 are answered and journaled
            srv.wait_for_requests(7, timeout=30)
            assert srv.served == 6
            proc.send_signal(signal.SIGKILL)
            await proc.wait(10)
        assert [r["status"] for r in _runs(state)] == ["running"]
        async with restarted(cfg, state, srv):
            done = await until(
                lambda: [r for r in _runs(state) if r["status"] == "ok"],
                what="the resumed run to finish",
            )
        run = done[0]
        assert run["steps"] == 10
        assert run["answer"] == "All ten done."
        # 10 LLM calls served in total, not 16: the six completed ones were not made again
        assert srv.served == 10
        assert len(srv.requests) == 11  # + the one in flight at the kill, never answered
        # the resumed conversation carried on from step 6
        first_after = srv.requests[7].body["messages"]
        assert len(first_after) == 1 + 2 * 6


async def test_a_non_idempotent_tool_in_flight_at_the_kill_is_not_called_again(
    tmp_path: Path,
) -> None:
    files = tool_files(tmp_path)
    log, block = files / "tool.log", files / "block"
    block.touch()
    social = tool_server(files, TOOL_LOG=str(log), TOOL_BLOCK=str(block))
    cfg = write_company(tmp_path, {"marketing": {"mcp_servers": {"social": social}}})
    state = tmp_path / "s"
    model = PerAgent(
        marketing=[
            reply_tool_use("post_update", {"text": "launch day"}),
            reply_text("I could not confirm the post; checking first."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        env = daemon_env(srv)
        try:
            async with killable(cfg, state, env, tmp_path / "d1.log") as proc:
                _ask_in_background(state / "companyd.sock", "marketing", "Post the launch.")
                wait_until(
                    lambda: log.exists() and "started" in log.read_text(),
                    what="the tool call to start",
                )
                proc.send_signal(signal.SIGKILL)
                await proc.wait(10)
            async with restarted(cfg, state, srv):
                await until(
                    lambda: [r for r in _runs(state) if r["status"] == "ok"],
                    what="the resumed run to finish",
                )
        finally:
            block.unlink()  # let the orphaned first tool server finish and exit
    started = [line for line in log.read_text().splitlines() if line.startswith("started")]
    assert started == ["started launch day"]  # called once, never again
    unknown = tool_results(srv.requests[-1])[0]
    assert unknown["is_error"] is True
    assert "outcome of this 'post_update' call is unknown" in unknown["content"]
    assert srv.served == 2


async def test_sigterm_during_a_run_checkpoints_and_exits_zero(tmp_path: Path) -> None:
    cfg = write_company(tmp_path, {"ceo": {}})
    state = tmp_path / "s"
    model = PerAgent(
        ceo=[
            reply_tool_use("search_nodes", {"query": "a"}),
            reply_tool_use("search_nodes", {"query": "b"}, latency=1.0),
            reply_text("finished after the restart"),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        env = daemon_env(srv)
        async with killable(cfg, state, env, tmp_path / "d1.log") as proc:
            _ask_in_background(state / "companyd.sock", "ceo", "Two searches.")
            srv.wait_for_requests(2, timeout=30)
            proc.send_signal(signal.SIGTERM)
            # the call in flight is answered and journaled, then the daemon exits 0
            assert await proc.wait(40) == 0
        assert srv.served == 2
        runs = _runs(state)
        assert [r["status"] for r in runs] == ["running"] and runs[0]["steps"] == 2
        # with no daemon, `companyd runs` does not say the run is running: nothing runs it
        where = ["--config", str(cfg), "--state-dir", str(state)]
        listed = await asyncio.to_thread(cli_in_thread, ["runs", *where])
        assert listed.rc == 0 and "running" not in listed.out, listed
        assert "interrupted" in listed.out, listed.out
        shown = await asyncio.to_thread(cli_in_thread, ["runs", "show", runs[0]["run_id"], *where])
        assert "still running" not in shown.out and "· interrupted" in shown.out, shown.out
        assert "the next start resumes it" in shown.out, shown.out
        tasks = await asyncio.to_thread(cli_in_thread, ["tasks", *where])
        assert " interrupted " in tasks.out and "running" not in tasks.out, tasks.out
        async with restarted(cfg, state, srv):
            done = await until(
                lambda: [r for r in _runs(state) if r["status"] == "ok"],
                what="the resumed run",
            )
        assert done[0]["steps"] == 3 and srv.served == 3


async def test_daemon_refuses_a_second_instance_on_the_same_state_dir(tmp_path: Path) -> None:
    # the first daemon holds the locks in this process (as `companyd run` takes them); the
    # second is a real `companyd run`, whose exit status and message are the point
    cfg = write_company(tmp_path, {"ceo": {}})
    state = tmp_path / "s"
    with MessagesAPIServer() as srv:
        async with restarted(cfg, state, srv):
            second = await asyncio.to_thread(
                subprocess.run,
                [
                    sys.executable,
                    "-m",
                    "companyd",
                    "run",
                    "--config",
                    str(cfg),
                    "--state-dir",
                    str(state),
                ],
                env=daemon_env(srv),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert second.returncode == 75
            assert f"already running, pid {os.getpid()}," in second.stderr
            assert "Traceback" not in second.stderr
    assert os.path.exists(state / "daemon.lock")


def _fires(state: Path, routine: str) -> list[FireRow]:
    import sqlite3

    from companyd.scheduler._store import DB_NAME, recent_fires

    conn = sqlite3.connect(state / DB_NAME)
    try:
        return [r.to_dict() for r in recent_fires(conn, routine, 10)]
    finally:
        conn.close()


async def test_a_routine_run_killed_mid_way_is_recorded_with_its_resumed_outcome(
    tmp_path: Path,
) -> None:
    # The fire's run is journaled by the agent; after kill -9 and a restart the run resumes,
    # and the routine's history records the fire as ok (not cancelled, no failure alert).
    routine = {
        "assignee": "ceo",
        "description": "Do the three-step report.",
        "trigger": {"cron": "0 3 1 1 *"},  # only fired by hand here
    }
    cfg = write_company(tmp_path, {"ceo": {}}, routines={"report": routine})
    state = tmp_path / "s"
    steps = [reply_tool_use("search_nodes", {"query": f"step {i}"}) for i in range(1, 3)]
    model = PerAgent(
        ceo=[steps[0], stall(None, then=steps[1]), steps[1], reply_text("Report done.")]
    )
    with MessagesAPIServer(responder=model) as srv:
        env = daemon_env(srv)
        async with killable(cfg, state, env, tmp_path / "d1.log") as proc:

            def fire() -> None:
                with contextlib.suppress(Exception):  # the daemon is killed under it
                    ControlClient(state / "companyd.sock", timeout=60).call(
                        "run_job", routine="report"
                    )

            threading.Thread(target=fire, daemon=True).start()
            srv.wait_for_requests(2, timeout=30)  # step 1 answered and journaled
            proc.send_signal(signal.SIGKILL)
            await proc.wait(10)
        [fire_row] = _fires(state, "report")
        assert fire_row["outcome"] is None  # open: the run was in progress
        async with restarted(cfg, state, srv):
            done = await until(
                lambda: [f for f in _fires(state, "report") if f["outcome"] is not None],
                what="the resumed run's fire to be closed",
            )
    [row] = done
    assert row["fire_id"] == fire_row["fire_id"]
    assert row["outcome"] == "ok", row
    assert "resumed from its journal" in str(row["reason"])
    assert row["run_id"] == _runs(state)[0]["run_id"]
    assert srv.served == 3  # step 1; after the restart step 2 and the answer (none twice)


async def test_a_routine_run_that_ends_within_a_graceful_stop_is_recorded_with_its_outcome(
    tmp_path: Path,
) -> None:
    # A stop that comes during the run's last model call: the scheduler stops first and
    # leaves the fire open; the call finishes within the stop's grace and the run ends ok
    # before the agents stop, so the restarted runtime holds no such task. The fire takes the
    # run's outcome from the journal — not "cancelled … the agent runtime did not resume it"
    # with a failure alert — and its result is delivered (routine_result), not lost.
    routine = {
        "assignee": "ceo",
        "description": "Draft today's post.",
        "expected_output": "One post.",
        "deliver": ["memory"],
        "trigger": {"cron": "0 3 1 1 *"},  # only fired by hand here
    }
    cfg = write_company(tmp_path, {"ceo": {}}, routines={"post": routine})
    state = tmp_path / "s"
    # the stop begins as soon as the call arrives; the scheduler stops within milliseconds,
    # the call ends 0.6 s later, inside the agents' STOP_CALL_GRACE (3 s)
    model = PerAgent(ceo=[stall(0.6, then=reply_text("The post."))])
    with MessagesAPIServer(responder=model) as srv:
        daemon = restarted(cfg, state, srv)
        async with daemon:
            fire = asyncio.create_task(
                ControlClient(daemon.socket, timeout=60).acall("run_job", routine="post")
            )
            await until(lambda: srv.requests, what="the model call in flight")
            await daemon.restart()  # graceful: stop (the call ends within its grace), start
            with contextlib.suppress(Exception):
                await fire  # answered "stopping" (the run ends at a checkpoint)
            done = await until(
                lambda: [f for f in _fires(state, "post") if f["outcome"] is not None],
                what="the fire to be closed",
            )
    [run] = _runs(state)  # one run: not run a second time
    assert run["status"] == "ok"
    [row] = done
    assert row["outcome"] == "ok", row
    assert row["run_id"] == run["run_id"]
    assert "the run had ended" in str(row["reason"]), row  # the outcome came from the journal
    assert daemon.events("routine_failed") == []
    [result] = daemon.events("routine_result")
    assert result["data"]["answer"] == "The post." and result["data"]["run_id"] == run["run_id"]
    assert srv.served == 1  # not run a second time
