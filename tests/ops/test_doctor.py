"""``companyd doctor``: every check seen failing on a broken set-up and passing on a good one,
against the real anthropic SDK and python-telegram-bot talking to the loopback stand-ins;
``--fix`` repairs permissions (and a missing state directory) and nothing else.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from companyd.cli import main
from companyd.ops._checks import Check
from companyd.ops._doctor import DoctorReport, RunningDaemon, check_state_dir, run_doctor
from companyd.testing.bot_api import BotApiServer
from companyd.testing.daemon import as_unprivileged, short_dir
from companyd.testing.messages_api import MessagesAPIServer

from .opskit import API_KEY, CHAT, TOKEN, env, write_company

NO_SYSTEMD = Path("/nonexistent/run/systemd/system")


@dataclass
class World:
    tmp: Path
    bot: BotApiServer
    api: MessagesAPIServer
    config: Path
    state: Path

    def env(self, **kw: str) -> dict[str, str]:
        return env(self.api.base_url, **kw)

    async def doctor(self, *, fix: bool = False, **kw: str) -> DoctorReport:
        return await run_doctor(
            self.config, fix=fix, environ=self.env(**kw), systemd_runtime=NO_SYSTEMD
        )


@pytest.fixture
def api() -> Iterator[MessagesAPIServer]:
    with MessagesAPIServer(api_key=API_KEY) as srv:
        yield srv


@pytest.fixture
async def world(tmp_path: Path, api: MessagesAPIServer) -> AsyncIterator[World]:
    async with BotApiServer(token=TOKEN, chats=[CHAT]) as bot:
        config = write_company(tmp_path, api_url=bot.url)
        state = tmp_path / "state"
        state.mkdir(mode=0o700)
        (state / "memory.jsonl").write_text(
            '{"type":"entity","name":"plan","entityType":"doc","observations":["ship"]}\n'
        )
        os.chmod(state / "memory.jsonl", 0o600)
        yield World(tmp_path, bot, api, config, state)


def by_name(report: DoctorReport) -> dict[str, Check]:
    return {c.name: c for c in report.checks}


@pytest.mark.anyio
async def test_a_good_set_up_passes_every_check(world: World) -> None:
    report = await world.doctor()
    checks = by_name(report)
    assert report.ok, report.to_dict()
    for name in ("config", "secrets", "anthropic", "telegram", "state-dir", "memory", "versions"):
        assert checks[name].status == "ok", checks[name]
    assert checks["disk"].status in ("ok", "warning")  # the machine's disk, not ours
    assert world.api.models_listed == 1  # the key was checked with GET /v1/models
    assert world.api.stats()["requests"] == 0  # and no message was sent: it cost nothing
    assert "@companyd_test_bot" in checks["telegram"].summary
    methods = [c.method for c in world.bot.calls]
    assert "getMe" in methods and "getChat" in methods and "sendMessage" not in methods
    assert "1 entities" in checks["memory"].summary
    # no systemd here (the runtime directory is absent): skipped, never a problem
    assert checks["clock"].status == "skipped" and "no systemd" in checks["clock"].summary
    assert checks["systemd"].status == "skipped" and "no systemd" in checks["systemd"].summary


@pytest.mark.anyio
async def test_a_wrong_bot_token_is_a_problem(world: World) -> None:
    report = await world.doctor(token="123456:not-the-token-of-this-bot-xxxxxxxx")
    c = by_name(report)["telegram"]
    assert c.status == "problem" and not report.ok
    assert "401" in c.summary or "rejected" in c.summary, c.summary
    assert "not-the-token" not in c.summary  # redacted
    assert c.fix and "BotFather" in c.fix


@pytest.mark.anyio
async def test_an_unknown_chat_is_a_problem(world: World) -> None:
    report = await world.doctor(chats=f"{CHAT},777")
    c = by_name(report)["telegram"]
    assert c.status == "problem"
    assert "chat 777: 400 bad request: chat not found" in c.summary.lower()
    assert "1 of 2 chat(s)" in c.summary
    assert c.fix and "/start" in c.fix


@pytest.mark.anyio
async def test_a_refused_api_key_is_a_problem(world: World) -> None:
    report = await world.doctor(key="sk-ant-wrong")
    c = by_name(report)["anthropic"]
    assert c.status == "problem" and "refused" in c.summary and "401" in c.summary
    assert "sk-ant-wrong" not in c.summary


@pytest.mark.anyio
async def test_an_unreachable_api_is_a_problem(world: World) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    report = await run_doctor(
        world.config,
        environ=env(f"http://127.0.0.1:{port}"),
        systemd_runtime=NO_SYSTEMD,
    )
    c = by_name(report)["anthropic"]
    assert c.status == "problem" and "cannot check the API key" in c.summary, c
    assert c.fix and "network" in c.fix


@pytest.mark.anyio
async def test_an_unreachable_bot_api_is_a_problem(world: World) -> None:
    await world.bot.go_down("refuse")
    report = await world.doctor()
    c = by_name(report)["telegram"]
    assert c.status == "problem" and "network error" in c.summary, c


@pytest.mark.anyio
async def test_a_missing_secret_is_a_problem(world: World) -> None:
    environ = world.env()
    del environ["TELEGRAM_CHAT_ID"]
    report = await run_doctor(world.config, environ=environ, systemd_runtime=NO_SYSTEMD)
    c = by_name(report)["secrets"]
    assert c.status == "problem" and "$TELEGRAM_CHAT_ID" in c.summary, c
    assert API_KEY not in str(report.to_dict()) and TOKEN not in str(report.to_dict())


@pytest.mark.anyio
async def test_invalid_yaml_is_a_problem_and_skips_what_needs_it(world: World) -> None:
    world.config.write_text("schema: companyd/v1\ncompany: [unclosed\n")
    report = await world.doctor()
    checks = by_name(report)
    assert checks["config"].status == "problem" and not report.ok
    assert "companyd validate" in (checks["config"].fix or "")
    for name in ("secrets", "anthropic", "telegram", "memory"):
        assert checks[name].status == "skipped", checks[name]


@pytest.mark.anyio
async def test_a_config_changed_after_the_daemon_loaded_it_is_a_warning(world: World) -> None:
    loaded = world.config.stat().st_mtime - 60
    running = RunningDaemon(str(world.config), loaded, str(world.state))
    report = await run_doctor(
        world.config, environ=world.env(), running=running, systemd_runtime=NO_SYSTEMD
    )
    c = by_name(report)["config"]
    assert c.status == "warning" and "older version" in c.summary and "reload" in (c.fix or "")
    running = RunningDaemon(str(world.config), loaded + 120, str(world.state))
    report = await run_doctor(
        world.config, environ=world.env(), running=running, systemd_runtime=NO_SYSTEMD
    )
    assert by_name(report)["config"].status == "ok"
    assert "loaded this version" in by_name(report)["config"].summary


@pytest.mark.anyio
async def test_a_config_touched_but_not_changed_is_the_version_the_daemon_runs(
    world: World,
) -> None:
    # a `touch`, or a copy restored as it was: newer, but the same text — the daemon says
    # which text it runs, so it is not "an older version"
    import hashlib

    text = world.config.read_text(encoding="utf-8")
    same = hashlib.sha256(text.encode("utf-8")).hexdigest()
    loaded = world.config.stat().st_mtime - 60  # the file's time is after the load
    for digest, status in ((same, "ok"), (hashlib.sha256(b"before").hexdigest(), "warning")):
        running = RunningDaemon(str(world.config), loaded, str(world.state), config_sha256=digest)
        report = await run_doctor(
            world.config, environ=world.env(), running=running, systemd_runtime=NO_SYSTEMD
        )
        assert by_name(report)["config"].status == status, by_name(report)["config"]


@pytest.mark.anyio
async def test_loose_state_permissions_are_a_problem(world: World) -> None:
    os.chmod(world.state, 0o755)
    report = await world.doctor()
    c = by_name(report)["state-dir"]
    assert c.status == "problem" and "0755" in c.summary and "--fix" in (c.fix or "")
    assert os.stat(world.state).st_mode & 0o777 == 0o755  # without --fix nothing changes


@pytest.mark.anyio
async def test_a_damaged_memory_file_is_reported_with_what_repair_would_do(world: World) -> None:
    with open(world.state / "memory.jsonl", "a") as f:
        f.write('{"type":"entity","name":\n')
    report = await world.doctor()
    c = by_name(report)["memory"]
    assert c.status == "warning" and "1 damaged line" in c.summary
    assert "companyd memory repair" in (c.fix or "")


@pytest.mark.anyio
async def test_fix_repairs_permissions_and_nothing_else(world: World) -> None:
    # A broken set-up: loose modes everywhere, and problems --fix must leave alone.
    sub = world.state / "sub"
    sub.mkdir()
    (world.state / "runs.sqlite").write_bytes(b"not really sqlite")
    (sub / "x").write_text("x")
    os.chmod(world.state, 0o755)
    os.chmod(sub, 0o775)
    os.chmod(world.state / "runs.sqlite", 0o644)
    os.chmod(sub / "x", 0o666)
    with open(world.state / "memory.jsonl", "a") as f:
        f.write("garbage line\n")

    def snapshot() -> dict[str, bytes]:
        out = {}
        for p in sorted(world.tmp.rglob("*")):
            if p.is_file() and p.name != "memory.jsonl.lock":
                out[str(p.relative_to(world.tmp))] = p.read_bytes()
        return out

    before = snapshot()
    report = await world.doctor(fix=True, token="123456:wrong-token-for-this-bot-xxxxxxxxx")
    checks = by_name(report)
    assert checks["state-dir"].status == "ok"
    assert sorted(report.changed) == sorted(
        [
            f"chmod 0700 {str(world.state)!r} (was 0755)",
            f"chmod 0700 {str(sub)!r} (was 0775)",
            f"chmod 0600 {str(world.state / 'runs.sqlite')!r} (was 0644)",
            f"chmod 0600 {str(sub / 'x')!r} (was 0666)",
        ]
    )
    for p, mode in ((world.state, 0o700), (sub, 0o700), (sub / "x", 0o600)):
        assert stat.S_IMODE(p.stat().st_mode) == mode
    # nothing else was touched: same files, same bytes (memory still damaged, config as is)
    assert snapshot() == before
    assert checks["memory"].status == "warning"
    assert checks["telegram"].status == "problem"  # a wrong token is not a local fix
    assert not report.ok


@pytest.mark.anyio
async def test_fix_creates_a_missing_state_directory(world: World) -> None:
    for p in world.state.iterdir():
        p.unlink()
    world.state.rmdir()
    report = await world.doctor()
    c = by_name(report)["state-dir"]
    assert (c.status, c.fix) == ("ok", None)  # before the first start: not a problem
    assert c.summary == (
        f"state directory {str(world.state)!r} does not exist yet: it will be created at "
        "first start (`companyd run`, mode 0700)"
    )
    assert not world.state.exists()
    report = await world.doctor(fix=True)
    c = by_name(report)["state-dir"]
    assert c.status == "ok" and c.changed == [f"created {str(world.state)!r} (mode 0700)"]
    assert stat.S_IMODE(world.state.stat().st_mode) == 0o700


@pytest.mark.anyio
async def test_before_the_first_start_doctor_passes_unless_the_state_cannot_be_made(
    world: World,
) -> None:
    """Issue 28: a company never started has no state directory yet; that is no problem —
    unless the daemon's user could not create it, which is, with the fix.
    """
    for p in world.state.iterdir():
        p.unlink()
    world.state.rmdir()
    report = await world.doctor()
    assert report.ok, [c for c in report.checks if c.status == "problem"]
    assert by_name(report)["state-dir"].status == "ok"
    with short_dir() as top:
        top.chmod(0o755)
        locked = top / "locked"
        locked.mkdir(mode=0o755)  # root's, not writable by nobody
        state = locked / "company" / "state"

        def as_nobody() -> str:
            c = check_state_dir(state)
            return f"{c.status}\n{c.summary}\n{c.fix}"

        status, summary, fix = as_unprivileged(as_nobody).split("\n")
        assert not state.parent.exists()
    assert status == "problem"
    assert summary == (
        f"state directory {str(state)!r} does not exist and cannot be created by nobody: "
        f"{str(locked)!r} is not writable"
    )
    assert fix.startswith(
        f"create it for the daemon's user: `sudo install -d -m 0700 -o nobody {state}`"
    )


def test_the_command_prints_one_line_per_check_and_exits_1_on_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_company(tmp_path)
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    rc = main(["doctor", "--config", str(config), "--offline"])
    out = capsys.readouterr().out
    assert rc == 1
    lines = out.splitlines()
    assert lines[0].startswith("ok       config")
    assert any(line.startswith("PROBLEM  state-dir") for line in lines)
    assert any(line.startswith("skipped  anthropic") and "--offline" in line for line in lines)
    assert lines[-1].startswith("2 problem(s)")  # state-dir, and the secrets not set here
    rc = main(["doctor", "--config", str(config), "--offline", "--fix", "--json"])
    out = capsys.readouterr().out
    assert '"fixed' not in out and f"chmod 0700 {str(state)!r} (was 0755)" in out
    assert rc == 1  # the secrets are still missing: --fix does not invent them


@pytest.mark.anyio
async def test_offline_the_api_key_is_not_required(world: World) -> None:
    """Issue 28: `doctor --offline` does not require the API key (the company runs offline)."""
    environ = world.env()
    del environ["ANTHROPIC_API_KEY"]
    report = await run_doctor(
        world.config, offline=True, environ=environ, systemd_runtime=NO_SYSTEMD
    )
    c = by_name(report)["secrets"]
    assert c.status == "ok" and "not needed offline" in c.summary, c
    assert by_name(report)["anthropic"].status == "skipped"
    # online, the same set-up still lacks the key
    online = await run_doctor(world.config, environ=environ, systemd_runtime=NO_SYSTEMD)
    assert by_name(online)["secrets"].status == "problem"
    assert "ANTHROPIC_API_KEY" in by_name(online)["secrets"].summary


@pytest.mark.anyio
async def test_without_telegram_doctor_says_which_results_would_reach_no_phone(
    tmp_path: Path,
) -> None:
    """Issue 28: doctor says results, not only failures, would be lost without Telegram —
    online and offline (no network is needed to see that Telegram is not configured).
    """
    routines = {
        "daily-post": {
            "assignee": "ceo",
            "description": "Write the post.",
            "expected_output": "A post.",
            "trigger": {"cron": "0 14 * * *"},
        },
        "archive": {
            "assignee": "cfo",
            "description": "File the books.",
            "expected_output": "A note.",
            "deliver": ["file"],
            "trigger": {"cron": "0 15 * * *"},
        },
    }
    config = write_company(tmp_path, routines=routines)
    doc = yaml.safe_load(config.read_text())
    del doc["alerts"]
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    for offline in (True, False):
        report = await run_doctor(
            config, offline=offline, environ=env("http://127.0.0.1:9"), systemd_runtime=NO_SYSTEMD
        )
        c = by_name(report)["telegram"]
        assert c.status == "warning", (offline, c)
        assert "failures reach nobody" in c.summary
        assert "results of 1 routine(s) that deliver to telegram (daily-post)" in c.summary
        assert "kept in the inbox" in c.summary and "archive" not in c.summary


@pytest.mark.anyio
async def test_doctor_checks_the_state_directory_the_service_will_use(world: World) -> None:
    """Issue 28: for a company.yaml where the units keep it, the state checked is the
    unit's (``StateDirectory=``), not ``state`` next to company.yaml — which the service
    never uses.
    """
    unit_state = world.tmp / "var-lib-companyd"
    report = await run_doctor(
        world.config,
        environ=world.env(),
        systemd_runtime=NO_SYSTEMD,
        unit_state_dir=unit_state,
    )
    c = by_name(report)["state-dir"]
    assert c.status == "ok" and repr(str(unit_state)) in c.summary, c
    assert "will be created at first start" in c.summary


def test_the_units_state_directory_of_a_company_yaml_in_their_place() -> None:
    from companyd.cli._doctor import _unit_state_dir

    assert _unit_state_dir(Path("/etc/companyd/company.yaml")) == Path("/var/lib/companyd")
    assert _unit_state_dir(Path("/etc/companyd/acme/company.yaml")) == Path(
        "/var/lib/companyd/acme"
    )
    assert _unit_state_dir(Path("/srv/acme/company.yaml")) is None
