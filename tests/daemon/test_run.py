"""Acceptance tests of ``companyd run`` (issue 8).

Where the process is the claim — sd_notify and the watchdog, SIGHUP and SIGTERM, exit codes
(78, 75, 1) — the daemon is a real ``companyd run`` subprocess, offline (the built-in model),
with a datagram socket standing in for systemd's notify socket; it logs every event as JSON
on stderr (captured to a file), and the tests talk to it as an operator does: signals, the
control socket and the ``companyd`` commands. ``COMPANYD_DEBUG=1`` lets a test crash an
agent or block the event loop. Where it is not — what a reload changes, which daemon a
command given a --config reaches — the daemon is ``companyd run``'s composition root in this
process (:class:`~companyd.testing.inprocess.InProcessDaemon`) and the refused second
``companyd run`` stays a process.

Covered elsewhere against the real daemon: a second daemon on the same state directory
exits 75, SIGTERM during a run checkpoints and exits 0, kill -9 then a new start resumes
the run (tests/agents/test_resume.py).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from companyd.errors import EX_CONFIG, EX_UNAVAILABLE
from companyd.testing.daemon import short_dir
from companyd.testing.daemon_process import CliResult, DaemonProcess, NotifyListener
from companyd.testing.inprocess import InProcessDaemon, cli_in_thread

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "company.yaml"

#: The example company's agents (company.yaml at the top of the repository).
EXAMPLE_AGENTS = {"ceo", "cfo", "accountant", "coo", "lawyer", "marketing", "cto", "improver"}


@pytest.fixture
def work() -> Iterator[Path]:
    """A short directory: the control socket and the notify socket live in it."""
    with short_dir() as d:
        yield d


def debug_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "COMPANYD_DEBUG": "1", **extra}


def company(
    agents: Mapping[str, Mapping[str, Any]],
    routines: Mapping[str, Mapping[str, Any]] | None = None,
    **top: Any,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": "companyd/v1",
        "company": {"name": "Reload Co", "timezone": "UTC", "budget": {"daily_usd": 10}},
        "departments": {"finance": {"title": "Finance"}},
        "agents": {
            slug: {"title": slug.upper(), "instructions": f"You are the {slug}.", **spec}
            for slug, spec in agents.items()
        },
    }
    if routines:
        doc["routines"] = dict(routines)
    doc.update(top)
    return doc


def write(path: Path, doc: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(doc), sort_keys=False), encoding="utf-8")
    return path


def nodes(tree: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every node of a status tree by id."""
    out = {str(tree.get("id")): dict(tree)}
    for child in tree.get("children", ()):
        out.update(nodes(child))
    return out


def run_companyd(
    *argv: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "companyd", *argv],
        env=dict(os.environ if env is None else env),
        capture_output=True,
        text=True,
        timeout=60,
    )


# -- sd_notify ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_sd_notify_ready_watchdog_blocked_loop_reload_and_stop(work: Path) -> None:
    listener = NotifyListener(work / "notify")
    listener.start()
    env = debug_env(NOTIFY_SOCKET=listener.address, WATCHDOG_USEC="400000")
    # a copy: a daemon claims its company.yaml by real path, and the repository's own is
    # every worker's ./company.yaml, which CLI commands run without --config would reach
    example = work / "company.yaml"
    example.write_bytes(EXAMPLE.read_bytes())
    daemon = DaemonProcess(example, work / "s", log=work / "daemon.log", env=env)
    try:
        await daemon.spawn()
        ready = (await listener.wait_for("READY", timeout=30))[0]
        # READY=1 comes with the one-line summary systemctl status shows
        assert ready.fields["STATUS"] == "8/8 agents up · 0 runs in flight · $0.00 of $10.00 today"
        # ... and STATUS= on its own from the updater, which keeps it current
        alone = await listener.wait_until(
            lambda m: "STATUS" in m.fields and "READY" not in m.fields
        )
        assert alone.fields["STATUS"].startswith("8/8 agents up")
        await daemon.wait_ready()
        # pinged every WATCHDOG_USEC/2 = 0.2 s, from the event loop
        await listener.wait_for("WATCHDOG", since=listener.messages.index(ready), count=3)

        # a synchronous call freezes the event loop for 2 s: no WATCHDOG=1 can get out
        sent = time.monotonic()
        answer = await daemon.call("debug", action="block", seconds=2.0)
        answered = time.monotonic()
        assert answer == {"action": "block", "seconds": 2.0}
        first_after = len(listener.messages)
        await listener.wait_for("WATCHDOG", since=first_after, count=2)  # and they resume
        pings = [m.at for m in listener.with_key("WATCHDOG")]
        # the gaps between pings that overlap the blocking call (pings are 0.2 s apart)
        around = [b - a for a, b in itertools.pairwise(pings) if a < answered and b > sent]
        # The frozen 2 s fall inside one of them: the loop could not send a ping. (Slowness
        # can only widen gaps, so this holds on any machine; a daemon pinging from another
        # thread would fail it.)
        assert max(around) >= 1.5, f"pings kept coming while the loop was blocked: {around}"
        # the daemon saw its own loop stall
        lag = await daemon.wait_event("loop_lag")
        assert lag["data"]["lag_s"] >= 1.0
        status = await daemon.call("status")
        assert status["daemon"]["loop_lag"]["max_ms"] >= 1000

        # SIGHUP: RELOADING=1 with the current CLOCK_MONOTONIC, then READY=1 again
        mark = len(listener.messages)
        t_before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        daemon.send_signal(signal.SIGHUP)
        reloading = (await listener.wait_for("RELOADING", since=mark))[0]
        t_after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        assert t_before <= int(reloading.fields["MONOTONIC_USEC"]) <= t_after
        again = await listener.wait_for("READY", since=listener.messages.index(reloading))
        assert (
            again[0].fields["STATUS"] == "8/8 agents up · 0 runs in flight · $0.00 of $10.00 today"
        )
        reloaded = await daemon.wait_event("daemon_reloaded")
        assert reloaded["data"]["unchanged"] == 8

        # SIGTERM: STOPPING=1, then a clean exit
        mark = len(listener.messages)
        daemon.send_signal(signal.SIGTERM)
        await listener.wait_for("STOPPING", since=mark)
        assert await daemon.wait(40) == 0
        assert "Traceback" not in daemon.log_text()
    finally:
        if daemon.proc is not None and daemon.returncode is None:
            await daemon.stop()
        listener.close()


# -- reload -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_reload_starts_only_what_was_added_and_keeps_the_old_tree_on_a_broken_file(
    work: Path,
) -> None:
    cfg = work / "company.yaml"
    agents: dict[str, dict[str, Any]] = {
        "ceo": {},
        "cfo": {"reports_to": "ceo", "department": "finance"},
        "coo": {"reports_to": "ceo"},
    }
    routines = {
        "check-in": {
            "assignee": "coo",
            "description": "Check what changed.",
            "trigger": {"every": "1h"},
        }
    }
    write(cfg, company(agents, routines))
    # In this process: the reload SIGHUP starts (Daemon._sighup) is awaited here; the signal
    # itself, with RELOADING=1 and READY=1 around it, is the sd_notify test's.
    async with InProcessDaemon(cfg, work / "s", env={"COMPANYD_DEBUG": "1"}) as daemon:
        before = nodes((await daemon.call("status"))["tree"])
        assert {"ceo", "cfo", "coo", "finance"} <= set(before)
        await daemon.advance(1)  # a second later: what starts now has a later started_at

        # 1. add an agent, reload: only that agent starts, the others keep their uptime
        agents["cto"] = {"reports_to": "ceo"}
        write(cfg, company(agents, routines))
        mark = len(daemon.events())
        await daemon.reload()
        [reloaded] = daemon.events("daemon_reloaded")[-1:]
        started_now = [
            e["data"]["child"] for e in daemon.events()[mark:] if e["kind"] == "child_started"
        ]
        assert started_now == ["cto"]
        assert "cto" in (reloaded["data"].get("added") or reloaded["data"].get("started"))
        after = nodes((await daemon.call("status"))["tree"])
        for node in ("companyd", "memory", "agents", "ceo", "finance", "cfo", "coo", "control"):
            assert after[node]["started_at"] == before[node]["started_at"], node
            assert after[node]["restarts"] == 0
        assert after["cto"]["state"] == "running"
        assert after["cto"]["started_at"] > before["ceo"]["started_at"]

        # 2. break the file: the old tree keeps running, config_rejected carries the errors
        broken = company({**agents, "cto": {"reports_to": "nobody"}}, routines)
        broken["company"]["budget"]["daily_usd"] = -5
        write(cfg, broken)
        mark = len(daemon.events())
        await daemon.reload()
        [rejected] = [e for e in daemon.events()[mark:] if e["kind"] == "config_rejected"]
        assert rejected["severity"] == "warning"
        assert rejected["data"]["count"] == 2
        errors = "\n".join(rejected["data"]["errors"])
        assert "'nobody'" in errors and "daily_usd" in errors
        # `companyd reload` says the same and exits 1
        reload = await daemon.cli("reload")
        assert reload.rc == 1
        assert "rejected" in reload.err and "'nobody'" in reload.err and "daily_usd" in reload.err
        assert "Traceback" not in reload.err
        status = await daemon.cli("status", "--json")
        assert status.rc == 0
        kept = nodes(json.loads(status.out)["tree"])
        assert {k: v["started_at"] for k, v in kept.items() if k != "cto"} == {
            k: v["started_at"] for k, v in after.items() if k != "cto"
        }
        assert kept["cto"]["started_at"] == after["cto"]["started_at"]
        assert not [e for e in daemon.events()[mark:] if e["kind"] == "child_started"]

        # 3. change cfo, remove coo and its routine, add a routine for ceo
        agents["cfo"]["instructions"] = "You are the cfo. Watch the runway weekly."
        del agents["coo"]
        routines = {
            "weekly-note": {
                "assignee": "ceo",
                "description": "Write the weekly note.",
                "trigger": {"cron": "0 9 * * mon"},
            }
        }
        jobs_before = json.loads((await daemon.cli("jobs", "--json")).out)
        assert [r["routine"] for r in jobs_before["routines"]] == ["check-in"]
        write(cfg, company(agents, routines))
        mark = len(daemon.events())
        await daemon.advance(1)
        reload = await daemon.cli("reload")
        assert reload.rc == 0, reload.err
        assert reload.out == (
            "reloaded company.yaml: stopped coo; restarted cfo; 2 unchanged; "
            "routines added weekly-note, removed check-in\n"
        )
        now = nodes((await daemon.call("status"))["tree"])
        assert "coo" not in now
        assert now["cfo"]["started_at"] > after["cfo"]["started_at"]
        assert now["ceo"]["started_at"] == before["ceo"]["started_at"]
        assert now["cto"]["started_at"] == after["cto"]["started_at"]
        restarted = [
            e["data"]["child"] for e in daemon.events()[mark:] if e["kind"] == "child_started"
        ]
        assert restarted == ["cfo"]
        # the routines follow: check-in is gone, weekly-note is scheduled — in the
        # daemon's own view (`companyd jobs` asks the running daemon)
        jobs = await daemon.cli("jobs", "--json")
        assert jobs.rc == 0, jobs.err
        live = json.loads(jobs.out)
        assert live.get("daemon") is True
        assert [r["routine"] for r in live["routines"]] == ["weekly-note"]
        assert live["routines"][0]["next_fire"]
        table = await daemon.cli("jobs")
        assert "weekly-note" in table.out and "check-in" not in table.out
        status_routines = (await daemon.call("status"))["routines"]
        assert [r["routine"] for r in status_routines] == ["weekly-note"]

        # `companyd jobs run` fires it now, inside the daemon, and prints the run
        fired = await daemon.cli("jobs", "run", "weekly-note")
        assert fired.rc == 0, fired.err
        assert "OFFLINE model" in fired.out and "run-" in fired.out
        history = json.loads((await daemon.cli("jobs", "history", "weekly-note", "--json")).out)
        assert [(f["kind"], f["outcome"]) for f in history["fires"]] == [("manual", "ok")]
        unknown = await daemon.cli("jobs", "run", "check-in")
        assert unknown.rc == 1 and "check-in" in unknown.err and "Traceback" not in unknown.err

        # 4. change finance's strategy: the department restarts in place, and so does cfo in
        # it — the answer and the daemon_reloaded event (the alert) say so ("2 unchanged"
        # and "no agent changed" hid a restart that withdrew cfo's run)
        # — and cto, disabled, is stopped, not also counted unchanged (it was "2 unchanged"
        # beside "stopped cto": four agents out of three)
        doc = company({**agents, "cto": {**agents["cto"], "enabled": False}}, routines)
        doc["departments"]["finance"]["supervisor"] = {"strategy": "one_for_all"}
        write(cfg, doc)
        mark = len(daemon.events())
        reload = await daemon.cli("reload")
        assert reload.rc == 0, reload.err
        assert reload.out == "reloaded company.yaml: stopped cto; restarted cfo; 1 unchanged\n"
        [event] = [e for e in daemon.events()[mark:] if e["kind"] == "daemon_reloaded"]
        assert event["data"]["restarted"] == ["cfo"] and event["data"]["unchanged"] == 1
        assert event["data"]["stopped"] == ["cto"]
        restarted = [
            e["data"]["child"] for e in daemon.events()[mark:] if e["kind"] == "child_started"
        ]
        assert restarted == ["cfo", "finance"]
        # status counts what runs: a disabled agent is not one that is down ("2/3 agents up")
        live = await daemon.call("status")
        assert live["agents"] | {"busy": 0} == {
            "total": 2,
            "running": 2,
            "paused": 0,
            "failed": 0,
            "busy": 0,
        }
        assert daemon.running._status_line().startswith("2/2 agents up")

        # 5. cto back as a temporary agent, which crashes: OTP drops it from the tree, and
        # status still counts it — down, failed (it said "failed": 0 and only the
        # STATUS= fraction hinted that an agent had stopped for good)
        write(cfg, company({**agents, "cto": {**agents["cto"], "restart": "temporary"}}, routines))
        reload = await daemon.cli("reload")
        assert reload.rc == 0 and "started cto" in reload.out, (reload.out, reload.err)
        mark = len(daemon.events())
        assert (await daemon.call("debug", action="crash", target="cto"))["crashed"]
        deadline = time.monotonic() + 10
        while not [e for e in daemon.events()[mark:] if e["kind"] == "child_exited"]:
            assert time.monotonic() < deadline, "cto did not crash"
            await asyncio.sleep(0.01)
        live = await daemon.call("status")
        # the tree shows it where it was, failed, with why (it was left out of the tree)
        cto = nodes(live["tree"])["cto"]
        assert (cto["state"], cto["restart"]) == ("failed", "temporary"), cto
        assert "never restarted" in cto["reason"], cto
        assert (live["agents"]["total"], live["agents"]["running"]) == (3, 2)
        assert live["agents"]["failed"] == 1
        shown = await daemon.cli("status")
        assert shown.rc == 0
        (line,) = [ln for ln in shown.out.splitlines() if ln.lstrip("│├└─ ").startswith("cto ")]
        assert "failed" in line, shown.out

    # without a daemon, `jobs run` says one is needed (exit 69) instead of guessing
    offline = await daemon.cli("jobs", "run", "weekly-note")
    assert offline.rc == EX_UNAVAILABLE
    assert "needs a running daemon" in offline.err and "Traceback" not in offline.err


# -- exit codes ---------------------------------------------------------------------------


def test_an_invalid_config_at_start_exits_78_with_every_error_and_no_traceback(
    tmp_path: Path,
) -> None:
    doc = company({"ceo": {}, "cfo": {"reports_to": "nobody"}})
    doc["company"]["budget"]["daily_usd"] = "lots"
    cfg = write(tmp_path / "company.yaml", doc)
    done = run_companyd(
        "run", "--offline", "--config", str(cfg), "--state-dir", str(tmp_path / "s")
    )
    assert done.returncode == EX_CONFIG
    assert "'nobody'" in done.stderr and "'lots'" in done.stderr
    assert "2 problem(s)" in done.stderr and "exit 78" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "s").exists()  # nothing was started


@pytest.mark.parametrize("where", ["under_a_file", "lock_is_a_directory"])
def test_an_unusable_state_directory_exits_78_with_the_path_and_no_traceback(
    tmp_path: Path, where: str
) -> None:
    cfg = write(tmp_path / "company.yaml", company({"ceo": {}}))
    if where == "under_a_file":
        (tmp_path / "file").write_text("", encoding="utf-8")
        state = tmp_path / "file" / "s"
    else:
        state = tmp_path / "s"
        (state / "daemon.lock").mkdir(parents=True)
    done = run_companyd("run", "--offline", "--config", str(cfg), "--state-dir", str(state))
    assert done.returncode == EX_CONFIG, done.stderr
    assert str(state) in done.stderr and "--state-dir" in done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr


def test_an_unknown_control_group_exits_78_before_anything_starts(tmp_path: Path) -> None:
    cfg = write(tmp_path / "company.yaml", company({"ceo": {}}))
    state = tmp_path / "s"
    done = run_companyd(
        "run", "--offline", "--config", str(cfg), "--state-dir", str(state),
        "--control-group", "no-such-group-companyd",
    )  # fmt: skip
    assert done.returncode == EX_CONFIG, done.stderr
    assert "unknown group 'no-such-group-companyd'" in done.stderr and "groupadd" in done.stderr
    assert "Traceback" not in done.stderr
    assert not state.exists()  # nothing was started


def test_no_api_key_without_offline_exits_78_and_offers_offline(tmp_path: Path) -> None:
    cfg = write(tmp_path / "company.yaml", company({"ceo": {}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.pop("CREDENTIALS_DIRECTORY", None)
    done = run_companyd("run", "--config", str(cfg), "--state-dir", str(tmp_path / "s"), env=env)
    assert done.returncode == EX_CONFIG
    assert "ANTHROPIC_API_KEY" in done.stderr
    assert "--offline" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.anyio
async def test_the_root_supervisor_giving_up_exits_1_so_systemd_restarts_it(work: Path) -> None:
    """An agent that keeps crashing: its supervisor (max_restarts 0) gives up at once and
    escalates; the root restarts the agents subtree twice within a minute, and on the third
    failure gives up too (ROOT_MAX_RESTARTS = 2). The daemon exits 1, which systemd's
    Restart=on-failure answers with a fresh process.
    """
    cfg = write(
        work / "company.yaml",
        company(
            {"ceo": {}, "cfo": {"reports_to": "ceo"}},
            supervisor={"strategy": "one_for_one", "max_restarts": 0, "max_seconds": 60},
        ),
    )
    listener = NotifyListener(work / "notify")
    listener.start()
    env = debug_env(NOTIFY_SOCKET=listener.address)
    daemon = DaemonProcess(cfg, work / "s", log=work / "daemon.log", env=env)
    try:
        await daemon.start()
        for crash in range(3):
            # wait until the agent is running again after the previous escalation
            deadline = time.monotonic() + 20
            while True:
                tree = nodes((await daemon.call("status"))["tree"])
                if tree.get("cfo", {}).get("state") == "running":
                    break
                assert time.monotonic() < deadline, f"cfo not running again: {tree.get('cfo')}"
                await asyncio.sleep(0.05)
            assert tree["agents"]["restarts"] == crash
            assert (await daemon.call("debug", action="crash", target="cfo"))["crashed"]
            if crash < 2:

                def agents_restarted(e: dict[str, Any], n: int = crash + 1) -> bool:
                    return bool(e["data"]["child"] == "agents" and e["data"]["restarts"] == n)

                await daemon.wait_event("child_started", agents_restarted)
        assert await daemon.wait(30) == 1
        gave_up = daemon.events("max_intensity", lambda e: e["source"] == "companyd")
        assert gave_up, "the root supervisor did not report giving up"
        log = daemon.log_text()
        assert "the root supervisor gave up" in log
        assert "Traceback" not in log
        assert listener.with_key("STOPPING"), "systemd was not told the daemon is stopping"
    finally:
        if daemon.proc is not None and daemon.returncode is None:
            await daemon.stop()
        listener.close()


def test_example_company_agents_are_what_the_tests_assume() -> None:
    # the sd_notify test reads "8/8 agents up" from the example company
    assert set(yaml.safe_load(EXAMPLE.read_text())["agents"]) == EXAMPLE_AGENTS


# -- one company, one daemon ----------------------------------------------------------------


#: the variables that would choose the config or state for us
_PLACED_BY_ENV = (
    "STATE_DIRECTORY",
    "RUNTIME_DIRECTORY",
    "COMPANYD_CONFIG",
    "CONFIGURATION_DIRECTORY",
    "NOTIFY_SOCKET",
)


def _plain_env() -> dict[str, str]:
    """This environment without anything that would choose the config or state for us."""
    return {k: v for k, v in os.environ.items() if k not in _PLACED_BY_ENV}


def _companyd_in(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "companyd", *argv],
        cwd=cwd,
        env=_plain_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _cli_from(cwd: Path, *argv: str) -> CliResult:
    """``companyd ARGV`` run from directory ``cwd`` by the CLI's entry point in this process
    (the same path resolution as the console script, without an interpreter's start-up).
    """
    here = os.getcwd()
    os.chdir(cwd)
    try:
        return cli_in_thread(list(argv))
    finally:
        os.chdir(here)


@pytest.mark.anyio
async def test_one_company_one_daemon_whatever_the_path_and_working_directory(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default state directory is next to company.yaml (not in the working directory):
    a second `companyd run` of the same file — by a relative, absolute or symlinked path,
    from any directory — exits 75 with "already running, pid N", and every command given
    that --config reaches the running daemon.

    The running daemon is the in-process one (it takes the company's and the state's locks
    as `companyd run` does, so its pid is this process's); each second `companyd run` is a
    real process — its exit status is the claim, and the flock it meets is another
    process's — and the commands run by the CLI's entry point from each directory.
    """
    for key in _PLACED_BY_ENV:
        monkeypatch.delenv(key, raising=False)
    home = work / "co"
    home.mkdir()
    cfg = write(home / "company.yaml", company({"ceo": {}}))
    (work / "alias.yaml").symlink_to(cfg)
    (work / "link").symlink_to(home, target_is_directory=True)
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    async with InProcessDaemon(cfg, home / "state"):
        ways = [
            (elsewhere, str(cfg)),  # absolute, from another directory
            (work, "co/company.yaml"),  # relative, from the parent
            (elsewhere, str(work / "alias.yaml")),  # a symlink to the file
            (work / "link", "company.yaml"),  # through a symlinked directory
        ]
        for cwd, path in ways:
            second = await asyncio.to_thread(
                _companyd_in, cwd, "run", "--offline", "--config", path
            )
            assert second.returncode == 75, (cwd, path, second.stderr)
            assert f"already running, pid {os.getpid()}" in second.stderr, second.stderr
            assert "Traceback" not in second.stderr
            for argv in (["status", "--json"], ["runs", "--json"], ["budget", "--json"]):
                done = await asyncio.to_thread(_cli_from, cwd, *argv, "--config", path)
                assert done.rc == 0, (cwd, path, argv, done.err)
                if argv[0] == "status":
                    assert json.loads(done.out)["daemon"]["pid"] == os.getpid()
        assert not (elsewhere / "state").exists() and not (work / "state").exists()


@pytest.mark.anyio
async def test_a_second_daemon_of_the_same_company_yaml_is_refused_even_on_another_state_dir(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--state-dir (or $STATE_DIRECTORY) chooses where the state lives, not a second copy of
    the company: two daemons of one company.yaml would poll the same Telegram bot and spend
    the same budget twice. The second one (a real `companyd run`) exits 75 naming the first
    one's pid (the in-process daemon's: this process).
    """
    for key in _PLACED_BY_ENV:
        monkeypatch.delenv(key, raising=False)
    cfg = write(work / "company.yaml", company({"ceo": {}}))
    async with InProcessDaemon(cfg, work / "a"):
        for extra in (["--state-dir", str(work / "b")], []):
            second = await asyncio.to_thread(
                _companyd_in, work, "run", "--offline", "--config", str(cfg), *extra
            )
            assert second.returncode == 75, (extra, second.stderr)
            assert f"already running, pid {os.getpid()}" in second.stderr, second.stderr
            assert str(cfg) in second.stderr and "Traceback" not in second.stderr
        # refused before anything was made: no state directory left behind
        assert not (work / "b").exists()
        # and --config alone finds it, though its state is not where company.yaml says
        elsewhere = work / "elsewhere"
        elsewhere.mkdir()
        done = await asyncio.to_thread(
            _cli_from, elsewhere, "status", "--json", "--config", str(cfg)
        )
        assert done.rc == 0, done.err
        assert json.loads(done.out)["daemon"]["pid"] == os.getpid()


def test_a_sighup_before_the_loop_listens_is_remembered_for_one_reload() -> None:
    # `companyd run` installs remember_early_sighup before anything else; Daemon.main takes
    # the request once its loop handles SIGHUP (daemon/_launch.py owns the flag)
    from companyd.daemon import remember_early_sighup
    from companyd.daemon._launch import take_early_sighup

    assert take_early_sighup() is False
    previous = signal.signal(signal.SIGHUP, remember_early_sighup)
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGHUP)  # twice before the loop: still one reload
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert take_early_sighup() is True
    assert take_early_sighup() is False
