"""A reload asked for while the daemon starts or stops (issue 8).

systemd reads READY=1 as "the service is up" and STOPPING=1 as "it is going away"; a reload
must not send READY=1 before the tree is up, nor after STOPPING=1. The daemon runs
in-process (offline model) with a datagram socket standing in for the notify socket, so the
order of the requests is exact rather than a matter of timing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import yaml

from companyd.admin._results import DepartmentChanges, ReloadApplied, ReloadRejected
from companyd.admin._wire import result_data
from companyd.clock import ManualClock
from companyd.config import load_config
from companyd.daemon._main import Daemon
from companyd.daemon._reload import shown_error
from companyd.llm._offline import OfflineModel
from companyd.testing.daemon import short_dir
from companyd.testing.daemon_process import NotifyListener

pytestmark = pytest.mark.anyio

DEADLINE = 30.0


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


@contextlib.asynccontextmanager
async def edge_daemon(
    work: Path, monkeypatch: pytest.MonkeyPatch, clock: ManualClock | None = None
) -> AsyncIterator[tuple[Daemon, NotifyListener]]:
    """An offline two-agent daemon (not started) sending sd_notify to a listener; stopped
    afterwards unless the test stopped it, and closed.
    """
    doc = {
        "schema": "companyd/v1",
        "company": {"name": "Edge Co", "timezone": "UTC", "budget": {"daily_usd": 10}},
        "agents": {
            "ceo": {"title": "CEO", "instructions": "You are the ceo."},
            "cfo": {"title": "CFO", "instructions": "You are the cfo.", "reports_to": "ceo"},
        },
    }
    cfg = work / "company.yaml"
    cfg.write_text(yaml.safe_dump(doc), encoding="utf-8")
    listener = NotifyListener(work / "notify")
    listener.start()
    monkeypatch.setenv("NOTIFY_SOCKET", listener.address)
    daemon = Daemon(load_config(cfg), work / "s", backend=OfflineModel(), offline=True, clock=clock)
    try:
        yield daemon, listener
    finally:
        if daemon.state != "stopping":
            async with asyncio.timeout(DEADLINE):
                await daemon.stop()
        daemon.notifier.close()
        listener.close()


def lifecycle(listener: NotifyListener) -> list[str]:
    """READY / RELOADING / STOPPING datagrams, in the order systemd received them."""
    keys = ("READY", "RELOADING", "STOPPING")
    return [k for m in listener.messages for k in keys if m.has(k)]


async def test_a_reload_asked_during_start_up_waits_until_the_tree_is_up(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with edge_daemon(work, monkeypatch) as (daemon, listener):
        starting = asyncio.create_task(daemon.start())
        await asyncio.sleep(0)
        assert daemon.state == "starting"
        reloading = asyncio.create_task(daemon.reload())  # e.g. a SIGHUP during start-up
        async with asyncio.timeout(DEADLINE):
            await starting
            result = await reloading
        assert isinstance(result, ReloadApplied)
        assert result.applied is True and result.unchanged == 2
        await listener.wait_for("READY", count=2, timeout=DEADLINE)
        # READY=1 once the tree is up (never "0/2 agents up"), then the reload
        assert lifecycle(listener) == ["READY", "RELOADING", "READY"]
        first = listener.with_key("READY")[0]
        assert first.fields["STATUS"].startswith("2/2 agents up")


async def test_a_reload_asked_while_stopping_is_refused_and_sends_no_ready(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with edge_daemon(work, monkeypatch) as (daemon, listener):
        async with asyncio.timeout(DEADLINE):
            await daemon.start()
        stopping = asyncio.create_task(daemon.stop())
        await asyncio.sleep(0)  # STOPPING=1 is out
        async with asyncio.timeout(DEADLINE):
            result = await daemon.reload()  # e.g. a SIGHUP right after the SIGTERM
            await stopping
        assert isinstance(result, ReloadRejected)
        assert result.applied is False
        assert result.errors == ["the daemon is stopping; company.yaml was not reloaded"]
        await listener.wait_for("STOPPING", timeout=DEADLINE)
        await asyncio.sleep(0.05)  # let any stray datagram arrive (there must be none)
        assert lifecycle(listener) == ["READY", "STOPPING"]
        assert not [e for e in daemon.bus.recent() if e.kind == "daemon_reloaded"]


async def test_a_reload_names_the_settings_that_only_a_restart_applies(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from companyd.cli._daemon import _reload_summary

    cfg = work / "company.yaml"
    async with edge_daemon(work, monkeypatch) as (daemon, _):
        async with asyncio.timeout(DEADLINE):
            await daemon.start()
            same = await daemon.reload()
        # a clean file that changed nothing: no settings waiting, no warnings
        assert same.applied is True and "restart_required" not in result_data("reload", same)
        assert "warnings" not in result_data("reload", same)
        doc = yaml.safe_load(cfg.read_text(encoding="utf-8"))
        doc["memory"] = {"path": "elsewhere/memory.jsonl"}
        doc["anthropic"] = {"timeout_seconds": 30}
        doc["agents"]["cfo"]["instructions"] = "You are the cfo. Be brief."
        cfg.write_text(yaml.safe_dump(doc), encoding="utf-8")
        async with asyncio.timeout(DEADLINE):
            result = await daemon.reload()
        assert isinstance(result, ReloadApplied)
        assert result.applied is True and result.changed == ["cfo"]
        assert result.restart_required == ["memory.path", "anthropic"]
        assert _reload_summary(result_data("reload", result)) == (
            "reloaded company.yaml: restarted cfo; 1 unchanged; memory.path, anthropic "
            "changed: takes effect at the next restart (`systemctl restart companyd`)"
        )
        # a change the tree could not apply (an agent that failed to start) is in the
        # summary, not only in --json: "started analyst" alone said it ran
        partial = result_data(
            "reload",
            ReloadApplied(
                applied=True,
                added=["analyst"],
                removed=[],
                changed=[],
                unchanged=0,
                departments=DepartmentChanges(added=[], removed=[], changed=[]),
                routines={},
                failures=["analyst: no api key"],
                resumed=[],
            ),
        )
        assert _reload_summary(partial) == (
            "reloaded company.yaml: started analyst; 0 unchanged; NOT applied: analyst: no "
            "api key (see `journalctl -u companyd`; exit 3)"
        )
        # the pager's Telegram settings are read when it starts: a reload says so too (and
        # the two above still wait for the restart: they are compared with what runs)
        doc["alerts"] = {"telegram": {"bot_token_env": "OTHER_BOT_TOKEN"}}
        cfg.write_text(yaml.safe_dump(doc), encoding="utf-8")
        async with asyncio.timeout(DEADLINE):
            telegram = await daemon.reload()
        assert isinstance(telegram, ReloadApplied)
        assert telegram.restart_required == ["memory.path", "anthropic", "alerts.telegram"]


async def test_a_graceful_stop_is_healthy_for_the_watchdog(
    work: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """While the tree stops (runs brought to a checkpoint, services stopped in reverse) the
    daemon is doing what it was asked: the watchdog keeps pinging and logs no false "health
    check fails" (issue 15 item 20). systemd's TimeoutStopSec bounds the stop itself.
    """
    from companyd.daemon._systemd import Watchdog

    monkeypatch.setenv("WATCHDOG_USEC", "10000000")
    async with edge_daemon(work, monkeypatch) as (daemon, _):
        async with asyncio.timeout(DEADLINE):
            await daemon.start()
        watchdog = Watchdog(daemon.notifier, health=daemon._healthy)
        assert watchdog.tick()
        stopping = asyncio.create_task(daemon.stop())
        during = 0
        async with asyncio.timeout(DEADLINE):
            while not stopping.done():
                if daemon.tree.status != "running":
                    during += 1
                    watchdog.tick()
                await asyncio.sleep(0)
            await stopping
        assert during > 0, "the stop finished before the tree left 'running'"
        assert watchdog.skipped == 0, "a graceful stop withheld WATCHDOG=1"
        assert "health check fails" not in caplog.text


async def test_the_watchdog_pings_in_real_time_whatever_the_business_clock_does(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WatchdogSec is counted in real seconds by systemd: a daemon whose business clock is held
    still (a test's ManualClock) or compressed (COMPANYD_TIME_SCALE, where pings paced by it
    came thousands of times too often) still pings every half interval of real time.
    """
    monkeypatch.setenv("WATCHDOG_USEC", "200000")  # a ping every 0.1 s
    async with edge_daemon(work, monkeypatch, clock=ManualClock(1_000_000.0)) as (
        daemon,
        listener,
    ):
        async with asyncio.timeout(DEADLINE):
            await daemon.start()
            [ready] = await listener.wait_for("READY")
            since = listener.messages.index(ready)
            await listener.wait_for("WATCHDOG", since=since, count=3)


async def test_status_shows_the_running_file_and_the_last_rejected_reload(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``status`` (JSON, text and Telegram's /status) tells since when the running file
    runs and the last rejected reload: when, how many errors, the first one — with what
    looks like a secret masked (issue 15 item 17).
    """
    import json

    from companyd.admin import render_status
    from companyd.alerts._render_status import format_status

    token = "123456789:AAH" + "x" * 32
    cfg = work / "company.yaml"
    async with edge_daemon(work, monkeypatch) as (daemon, _):
        async with asyncio.timeout(DEADLINE):
            await daemon.start()
            applied = await daemon.reload()
        assert applied.applied is True
        loaded_at = daemon.config_loaded_at
        first = await daemon.status()
        assert first.daemon.reload == {
            "last_at": loaded_at,
            "last_result": "applied",
            "rejected": None,
        }
        good = cfg.read_text(encoding="utf-8")
        doc = yaml.safe_load(good)
        doc["agents"]["ceo"]["department"] = f"ops {token}"  # a token pasted by mistake
        doc["agents"]["cfo"]["budget"] = {"daily_usd": "lots"}
        cfg.write_text(yaml.safe_dump(doc), encoding="utf-8")
        async with asyncio.timeout(DEADLINE):
            rejected = await daemon.reload()
            status = await daemon.status()
        assert isinstance(rejected, ReloadRejected)
        assert rejected.applied is False
        reload = status.daemon.reload
        assert reload["last_result"] == "rejected" and reload["rejected"] is not None
        assert reload["rejected"]["errors"] == len(rejected.errors) >= 2
        assert reload["rejected"]["at"] >= loaded_at
        first_error = reload["rejected"]["first_error"]
        assert "company.yaml:" in first_error and "agents.ceo.department" in first_error
        assert status.daemon.config_loaded_at == loaded_at  # the old file still runs
        shown = json.dumps(result_data("status", status))
        assert token not in shown and token[10:] not in shown
        text = render_status(result_data("status", status))
        assert "config running since" in text
        line = next(x for x in text.splitlines() if "last reload rejected" in x)
        assert f"{reload['rejected']['errors']} errors" in line
        assert reload["rejected"]["first_error"][:40] in line
        phone = format_status(result_data("status", status))
        assert "last reload rejected" in phone and token[10:] not in phone
        # A good file again: the rejection is history, no longer shown as current.
        cfg.write_text(good, encoding="utf-8")
        async with asyncio.timeout(DEADLINE):
            assert (await daemon.reload()).applied is True
            after = await daemon.status()
        assert after.daemon.reload["last_result"] == "applied"
        assert after.daemon.reload["rejected"] == reload["rejected"]
        assert "last reload rejected" not in render_status(result_data("status", after))
        assert "last reload rejected" not in format_status(result_data("status", after))


def test_a_shown_config_error_is_one_line_with_secrets_masked() -> None:
    shown = shown_error(
        "company.yaml:3:1: agents.ceo.instructions_file: cannot read\n  'x'\n"
        "got 'sk-ant-api03-" + "A" * 30 + "' and 'boss 123456789:AAH" + "b" * 32 + "'"
    )
    assert "\n" not in shown and "  " not in shown
    assert "sk-ant-api03-AAA" not in shown and "AAHbbbb" not in shown
    assert shown.startswith("company.yaml:3:1: agents.ceo.instructions_file: cannot read 'x'")


async def test_a_reload_reports_every_changed_routine_and_agent(
    work: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 28: a reload that changed only a routine's `approval` (or an agent's
    require_approval) reports it changed, not unchanged: whole resolved specs are compared.
    The file's warnings are logged, as at start: one that gives the cfo `ask_founder` while
    its manager waits 5 min for it says so in the daemon's log.
    """
    cfg = work / "company.yaml"
    async with edge_daemon(work, monkeypatch) as (daemon, _):
        doc = yaml.safe_load(cfg.read_text(encoding="utf-8"))
        doc["routines"] = {
            "close": {"assignee": "cfo", "description": "Close.", "trigger": {"cron": "0 8 1 * *"}},
            "post": {"assignee": "ceo", "description": "Post.", "trigger": {"cron": "0 9 * * *"}},
        }
        cfg.write_text(yaml.safe_dump(doc), encoding="utf-8")
        async with asyncio.timeout(DEADLINE):
            await daemon.start()
            first = await daemon.reload()
        assert isinstance(first, ReloadApplied) and first.routines["added"] == ["close", "post"]
        doc["routines"]["close"]["approval"] = "required"
        doc["agents"]["ceo"]["tools"] = {"require_approval": ["send_email"]}
        cfg.write_text(yaml.safe_dump(doc), encoding="utf-8")
        async with asyncio.timeout(DEADLINE):
            result = await daemon.reload()
        assert isinstance(result, ReloadApplied)
        assert result.routines["changed"] == ["close"]
        assert result.routines["unchanged"] == ["post"]
        assert result.changed == ["ceo"] and result.unchanged == 1
        assert "may delegate to" not in caplog.text
        doc["agents"]["cfo"]["tools"] = {"ask_founder": True}
        cfg.write_text(yaml.safe_dump(doc), encoding="utf-8")
        async with asyncio.timeout(DEADLINE):
            result = await daemon.reload()
        assert isinstance(result, ReloadApplied) and result.changed == ["cfo"]
        [warned] = [r for r in caplog.records if "may delegate to 'cfo'" in r.getMessage()]
        assert warned.levelname == "WARNING"
        assert warned.getMessage().startswith(
            f"{cfg}:10:17: warning: agents.cfo.reports_to: 'ceo' may delegate to 'cfo', whose run "
            "waits up to 10m for your answers to its ask_founder questions"
        )


async def test_a_reload_whose_caller_gave_up_still_holds_off_the_next_one(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reload goes on when its caller is cancelled (the control socket's deadline, a
    closed connection), and the next reload waits for it: never two at once — each answer
    is computed from what the one before left running, and systemd sees RELOADING=1 and
    READY=1 strictly in turn (no READY=1 in the middle of the second one).
    """
    cfg = work / "company.yaml"
    async with edge_daemon(work, monkeypatch) as (daemon, listener):
        async with asyncio.timeout(DEADLINE):
            await daemon.start()
        doc = yaml.safe_load(cfg.read_text(encoding="utf-8"))
        doc["agents"]["cfo"]["instructions"] = "You are the cfo. Be brief."
        cfg.write_text(yaml.safe_dump(doc), encoding="utf-8")
        given_up = asyncio.create_task(daemon.reload(via="cli"))
        async with asyncio.timeout(DEADLINE):
            while daemon.state != "reloading":
                await asyncio.sleep(0)
        given_up.cancel()  # the first one is applying: its caller goes away
        async with asyncio.timeout(DEADLINE):
            second = await daemon.reload()
            await listener.wait_for("READY", count=3, timeout=DEADLINE)
        assert isinstance(second, ReloadApplied)
        # the first reload restarted cfo; the second found it already running the file
        assert second.changed == [] and second.unchanged == 2
        assert daemon.config.agents["cfo"].instructions == "You are the cfo. Be brief."
        assert lifecycle(listener) == ["READY", "RELOADING", "READY", "RELOADING", "READY"]
        with contextlib.suppress(asyncio.CancelledError):
            await given_up


async def test_a_reload_says_the_new_files_warnings(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the file loads, but says something likely not meant (a company budget no call fits
    # in): the reload's answer carries the warnings, `companyd reload` prints them as
    # `validate` does, and the reloaded message says them (a clean file's: above)
    import os
    import sys

    from companyd.alerts._render_kinds import render

    cfg = work / "company.yaml"
    async with edge_daemon(work, monkeypatch) as (daemon, _):
        doc = yaml.safe_load(cfg.read_text(encoding="utf-8"))
        doc["company"]["budget"] = {"daily_usd": 0.02}
        cfg.write_text(yaml.safe_dump(doc), encoding="utf-8")
        async with asyncio.timeout(DEADLINE):
            await daemon.start()  # started on the clean file: the daemon has no warning yet
            # the CLI, as a founder runs it, asking this daemon over its control socket
            cli = await asyncio.create_subprocess_exec(
                sys.executable,
                *("-m", "companyd", "reload", "--state-dir", str(work / "s")),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, "COMPANYD_CONFIG": str(cfg)},
            )
            out, err = await cli.communicate()
        assert cli.returncode == 0, err
        assert out.decode().startswith("reloaded company.yaml:")
        (warning,) = err.decode().splitlines()
        assert "warning: company.budget.daily_usd: the company's daily budget of $0.02" in warning
        async with asyncio.timeout(DEADLINE):
            result = await daemon.reload()  # the same file again: the same warning
        assert isinstance(result, ReloadApplied) and result.warnings == [warning]
        rendered, _ = render("daemon_reloaded", result_data("reload", result), "daemon", {}, ())
        assert rendered.lines[-2:] == ("⚠ company.yaml has 1 warning:", f"• {warning}")
