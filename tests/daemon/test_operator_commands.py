"""The operator's commands as a founder types them at 3 a.m., against the daemon (in this
process, or a subprocess where the test drops privileges) or with none running: what they
print, their exit codes, what they leave behind. The commands run by the CLI's entry point.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from companyd.cli import main
from companyd.testing.daemon import as_unprivileged, short_dir
from companyd.testing.daemon_process import DaemonProcess
from companyd.testing.inprocess import InProcessDaemon, cli_in_thread

COMPANY = {
    "schema": "companyd/v1",
    "company": {"name": "Night Co", "timezone": "UTC", "budget": {"daily_usd": 10}},
    "agents": {
        "ceo": {"title": "CEO", "instructions": "You are the ceo."},
        "cfo": {"title": "CFO", "instructions": "You are the cfo.", "reports_to": "ceo"},
    },
}


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


def write_company(path: Path, **budget: object) -> Path:
    doc = json.loads(json.dumps(COMPANY))
    doc["company"]["budget"].update(budget)
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def companyd_here(*argv: str) -> subprocess.CompletedProcess[str]:
    """``companyd ARGV`` by the CLI's entry point in this process, shaped as a finished
    subprocess (the same exit codes and output, without an interpreter's start-up per
    command).
    """
    got = cli_in_thread(list(argv))
    return subprocess.CompletedProcess(list(argv), got.rc, got.out, got.err)


@pytest.mark.anyio
async def test_a_rejected_reload_prints_each_error_as_text(work: Path) -> None:
    cfg = write_company(work / "company.yaml")
    async with InProcessDaemon(cfg, work / "s") as daemon:
        write_company(cfg, daily_usd="fifty")
        reload = await daemon.cli("reload")
        assert reload.rc == 1
        lines = reload.err.splitlines()
        assert "rejected" in lines[0]
        # the error itself, as the validator wrote it — not a Python repr in quotes
        assert lines[1] == f"  {cfg}:6:16: company.budget.daily_usd: expected a number, got 'fifty'"
        await daemon.stop()


@pytest.mark.anyio
async def test_ask_with_a_timeout_that_is_not_a_positive_number_is_a_usage_error(
    work: Path,
) -> None:
    cfg = write_company(work / "company.yaml")
    async with InProcessDaemon(cfg, work / "s") as daemon:
        runs_before = (await daemon.call("runs"))["runs"]
        for bad in ("inf", "nan", "0", "-5"):
            ask = await daemon.cli("ask", "cfo", "hello", "--timeout", bad)
            assert ask.rc == 2, (bad, ask.err)
            assert "--timeout" in ask.err and "positive number of seconds" in ask.err
            assert "Traceback" not in ask.err and "internal error" not in ask.err
        # nothing was sent to the agent: no task, no run, no spend
        assert (await daemon.call("runs"))["runs"] == runs_before
        await daemon.stop()


def test_read_commands_without_a_daemon_do_not_create_the_state_directory(
    tmp_path: Path,
) -> None:
    cfg = write_company(tmp_path / "company.yaml")
    state = tmp_path / "typo"  # e.g. a mistyped --state-dir, or the daemon's before it ran
    where = ("--config", str(cfg), "--state-dir", str(state))
    expected = {
        ("runs",): (0, "no runs yet"),
        ("tasks",): (0, "no tasks"),
        ("tasks", "--quarantined"): (0, "no tasks"),
        ("proposals",): (0, "no proposals"),
        ("retry", "task-x"): (1, "no quarantined task 'task-x'"),
        ("approve", "prop-x"): (1, "no proposal 'prop-x'"),
        ("reject", "prop-x"): (1, "no proposal 'prop-x'"),
        ("revert", "prop-x"): (1, "no proposal 'prop-x'"),
        # an id no inbox item has: said as the running daemon says it
        ("approve", "nope"): (1, "nothing in the inbox has id 'nope'"),
        ("reject", "task-1"): (1, "companyd retry task-1"),
        # what the running agents were given: no daemon, exit 69 as every such command
        ("tools",): (69, "no companyd daemon is running"),
    }
    for argv, (rc, said) in expected.items():
        done = companyd_here(*argv, *where)
        assert done.returncode == rc, (argv, done.stderr)
        assert said in done.stdout + done.stderr, argv
        assert "Traceback" not in done.stderr
        assert not state.exists(), f"`companyd {' '.join(argv)}` created {state}"


@pytest.mark.anyio
async def test_an_operator_who_may_not_enter_the_state_directory_is_told_how_to_get_in(
    work: Path,
) -> None:
    # The state directory is 0700 for the daemon's user; another user's `companyd status
    # --state-dir …` cannot even stat the socket in it. The message names the directory
    # asked for, also when the company.yaml in use (here: --config) is another running
    # company's, whose socket is tried first and is out of reach too.
    cfg = write_company(work / "company.yaml")
    other = write_company(work / "other.yaml")
    async with (
        DaemonProcess(cfg, work / "s", log=work / "daemon.log") as daemon,
        DaemonProcess(other, work / "t", log=work / "other.log", forked=True) as neighbour,
    ):

        def status(*extra: str) -> str:
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = main(["status", "--state-dir", str(daemon.state_dir), *extra])
            return f"{rc}\n{err.getvalue()}"

        def as_another_user(*extra: str) -> str:
            if os.geteuid() == 0:
                return as_unprivileged(lambda: status(*extra))
            os.chmod(daemon.state_dir, 0)
            os.chmod(neighbour.state_dir, 0)
            try:
                return status(*extra)
            finally:
                os.chmod(daemon.state_dir, 0o700)
                os.chmod(neighbour.state_dir, 0o700)

        # the daemon's own user can (and imports every module the CLI needs, which
        # nobody could not read from a Python installed under /root)
        assert status().startswith("0\n")
        assert status("--config", str(other)).startswith("0\n")
        os.chmod(work, 0o755)
        for extra in ((), ("--config", str(other))):
            rc, err = as_another_user(*extra).split("\n", 1)
            assert rc == "1", (extra, err)
            assert "permission denied" in err and "sudo" in err, (extra, err)
            assert repr(str(daemon.state_dir)) in err, (extra, err)
            assert str(neighbour.state_dir) not in err, (extra, err)
            assert "internal error" not in err and "Traceback" not in err
        assert await daemon.stop() == 0


@pytest.mark.anyio
async def test_runs_of_a_name_is_checked_against_the_running_company(work: Path) -> None:
    # the founder's shell is elsewhere (here: the repository, whose company.yaml has other
    # agents) and names the daemon by its state directory: the daemon's company answers
    doc = json.loads(json.dumps(COMPANY))
    doc["agents"]["night-analyst"] = {
        "title": "Analyst",
        "instructions": "Count.",
        "reports_to": "ceo",
    }
    cfg = work / "company.yaml"
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    async with InProcessDaemon(cfg, work / "s") as daemon:
        state = ("--state-dir", str(work / "s"))
        known = await asyncio.to_thread(companyd_here, "runs", "--agent", "night-analyst", *state)
        assert (known.returncode, known.stdout.strip(), known.stderr) == (0, "no runs yet", "")
        typo = await asyncio.to_thread(companyd_here, "runs", "--agent", "night-analist", *state)
        assert typo.returncode == 1 and typo.stdout == ""
        assert typo.stderr.strip() == (
            "companyd: unknown agent 'night-analist' (not in the running company.yaml and no "
            "runs); did you mean 'night-analyst'? agents: ceo, cfo, night-analyst"
        )
        routine = await asyncio.to_thread(companyd_here, "runs", "last", "nightly", *state)
        assert routine.returncode == 1
        assert "unknown routine 'nightly' (not in the running company.yaml" in routine.stderr
        await daemon.stop()


@pytest.mark.anyio
async def test_jobs_run_of_a_routine_needing_approval_answers_once_the_result_waits(
    work: Path,
) -> None:
    cfg = write_company(work / "company.yaml")
    doc = yaml.safe_load(cfg.read_text(encoding="utf-8"))
    doc["routines"] = {
        "weekly-numbers": {
            "assignee": "cfo",
            "description": "Sum up this week's numbers.",
            "trigger": {"cron": "0 3 29 2 *"},
            "approval": "required",
        }
    }
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    async with InProcessDaemon(cfg, work / "s") as daemon:
        # not the 60 s deadline and exit 75: the fire started and waits for the founder
        got = await daemon.cli("jobs", "run", "weekly-numbers", timeout=30)
        assert got.rc == 0, got.err
        inbox = (await daemon.call("inbox"))["items"]
        assert [i["kind"] for i in inbox] == ["result"]
        item = inbox[0]["id"]
        said = got.out.strip().splitlines()[-1]
        assert said.startswith(
            f"started routine weekly-numbers: its run ended and the result waits for your "
            f"approval as {item}; approve, reject or ask for changes in the dashboard's inbox"
        ), said
        assert said.endswith(f"`companyd approve {item}` (or `companyd inbox`)"), said
        # a second fire has no room while the first waits (concurrency skip_if_active)
        again = await daemon.cli("jobs", "run", "weekly-numbers", "--json", timeout=30)
        assert again.rc == 1 and "is running now" in json.loads(again.out)["error"]
        # --json: the state, the item, and every key it had before
        approved = await daemon.cli("approve", item)
        assert approved.rc == 0, approved.err
        shown = await daemon.cli("jobs", "run", "weekly-numbers", "--json", timeout=30)
        assert shown.rc == 0, shown.err
        data = json.loads(shown.out)
        assert data["state"] == "awaiting_approval"
        assert data["approval_item"] != item and data["approval_item"].startswith("r-")
        assert data["status"] == "ok" and data["routine"] == "weekly-numbers"
        assert {"run_id", "answer", "cost_usd", "message"} <= set(data)
        await daemon.stop()


@pytest.mark.anyio
async def test_doctor_checks_the_state_directory_of_the_daemon_running_the_file(
    work: Path,
) -> None:
    """Issue 28: doctor checks the state the running daemon uses (found through the
    company.yaml it runs), not ``state`` next to company.yaml, which it never uses.
    """
    cfg = write_company(work / "company.yaml")
    async with InProcessDaemon(cfg, work / "s") as daemon:
        argv = ["doctor", "--offline", "--json", "--config", str(cfg)]
        got = await asyncio.to_thread(cli_in_thread, argv)
        checks = {c["name"]: c for c in json.loads(got.out)["checks"]}
        assert repr(str(work / "s")) in checks["state-dir"]["summary"], checks["state-dir"]
        assert not (work / "state").exists()
        await daemon.stop()


def test_status_names_what_paused_an_agent_not_the_operator_for_every_pause() -> None:
    # agents paused by the Anthropic organisation's spend limit read "paused (operator)"
    from companyd.daemon._operator import pause_label

    reasons = {
        "operator": "operator",
        "budget: the company's daily budget of $1.00 is exhausted: …": "budget",
        "Anthropic API spend limit reached": "API spend limit",
        "Anthropic API key refused (HTTP 401)": "API key refused",
        "state disk full: writes failing (OSError: …); free space …": "disk full",
    }
    assert {reason: pause_label(reason) for reason in reasons} == reasons


@pytest.mark.anyio
async def test_status_names_the_text_it_runs_so_a_touched_file_is_not_called_changed(
    work: Path,
) -> None:
    import hashlib

    cfg = write_company(work / "company.yaml")
    async with InProcessDaemon(cfg, work / "s") as daemon:
        said = (await daemon.call("status"))["daemon"]["config_sha256"]
        assert said == hashlib.sha256(cfg.read_bytes()).hexdigest()
        os.utime(cfg)  # touched: newer than the load, the same text
        doctor = await daemon.cli("doctor", "--offline", "--json", timeout=120)
        checks = {c["name"]: c for c in json.loads(doctor.out)["checks"]}
        assert checks["config"]["status"] == "ok", checks["config"]
        await daemon.stop()


@pytest.mark.anyio
async def test_a_reload_names_the_settings_it_applied_beyond_agents_and_routines(
    work: Path,
) -> None:
    # a new budget and name read "reloaded company.yaml: 2 unchanged", as if nothing was
    cfg = write_company(work / "company.yaml")
    async with InProcessDaemon(cfg, work / "s") as daemon:
        doc = yaml.safe_load(cfg.read_text(encoding="utf-8"))
        doc["company"]["name"] = "Day Co"
        doc["company"]["budget"]["daily_usd"] = 20
        doc["alerts"] = {"min_severity": "info"}
        cfg.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        done = await daemon.cli("reload")
        assert done.rc == 0, done.err
        assert done.out.strip() == (
            "reloaded company.yaml: 2 unchanged; applied company.name, company.budget, alerts"
        )
        answer = await daemon.call("reload")  # the same file again: nothing more to say
        assert "settings" not in answer
        await daemon.stop()


@pytest.mark.anyio
async def test_refusals_and_no_ops_say_what_happened(work: Path) -> None:
    """Answers that said something else: an id no inbox item has fell through to the
    proposals ("no proposal 'nope'; pending: (none)", with approvals waiting) and a task's
    id pointed nowhere; a second pause said "paused" again (resume says "was not paused");
    the day's cap refused "➕ $5 today" as SpendError (Telegram's button: "failed inside
    companyd"); a raise of $0.1234567 read "$0.12".
    """
    from companyd.admin import AdminError

    cfg = write_company(work / "company.yaml")
    async with InProcessDaemon(cfg, work / "s") as daemon:
        nope = await daemon.cli("approve", "nope")
        assert nope.rc == 1 and "nothing in the inbox has id 'nope'" in nope.err, nope.err
        assert "`companyd inbox` lists what waits" in nope.err
        task = await daemon.cli("reject", "task-0123456789ab")
        assert task.rc == 1 and "companyd retry task-0123456789ab" in task.err, task.err

        first = await daemon.cli("pause", "cfo")
        assert first.rc == 0 and first.out.startswith("paused cfo: "), first.out
        again = await daemon.cli("pause", "cfo")
        assert again.rc == 0
        assert again.out.strip() == "cfo is already paused; `companyd resume cfo` resumes it"

        assert daemon.daemon is not None
        done = await daemon.daemon.raise_budget(None, 0.1234567)
        assert done.message.startswith("raised today's budget of the company by $0.123457 ")
        assert "(today's limit is now $10.123457;" in done.message
        await daemon.daemon.raise_budget(None, 999_999.0)
        with pytest.raises(AdminError, match="at most \\$1,000,000"):
            await daemon.daemon.raise_budget(None, 5.0)
        await daemon.stop()
