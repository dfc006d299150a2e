"""What ``companyd run`` imports before ``READY=1``: nothing the offline daemon does not use.

Every command builds the whole parser (each ``companyd.cli`` area's ``register``), so a
module imported at the top of any CLI area, or anywhere under ``companyd.daemon._main``, is
paid for by the daemon's start. The mcp SDK (``memory serve-mcp``) and networkx (``memory
export``/``import``) cost ~40 MB of peak RSS and ~1 s of CPU there (docs/benchmarks.md,
"daemon"); this keeps them, and the SDKs a company without Telegram settings or run
``--offline`` does not need, out of the start path.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from companyd.testing.daemon_process import DaemonProcess, NotifyListener
from companyd.testing.messages_api import MessagesAPIServer, reply_text

EXAMPLE = Path(__file__).resolve().parents[2] / "company.yaml"

#: Top-level packages the offline daemon of the example company never needs at start.
NOT_AT_START = (
    "mcp",
    "mcp_types",
    "networkx",
    "starlette",
    "uvicorn",
    "telegram",
    "anthropic",
    "httpx",
    # the anthropic SDK's HTTP stack (its own fork of httpx), and what it loads where it is
    # installed (selenium brings trio into the test venv)
    "httpx2",
    "httpcore2",
    "trio",
    "opentelemetry",
)

PROBE = """
import contextlib, io, json, sys
from companyd.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(["--help"])  # builds the parser `companyd run` builds: every CLI area
import companyd.cli._run
import companyd.daemon._main
print(json.dumps(sorted(sys.modules)))
"""

#: Modules of companyd the start path's imports must not load (round 12): memory's browsing,
#: the config's resolved view, the spend report, a budget raise and a standby's routine
#: history are their Admin operations'. A face's lazy name is loaded with
#: ``importlib.import_module``, which ``-X importtime`` does not show: checked here.
NOT_IMPORTED_AT_START = (
    "companyd.memory._browse",
    "companyd.config._view",
    "companyd.spend._reports",
    "companyd.spend._raises",
    "companyd.scheduler._offline",
)


def test_daemon_start_path_imports_no_sdk_it_does_not_use() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    modules = set(json.loads(out.stdout.strip().splitlines()[-1]))
    loaded = {name.split(".")[0] for name in modules}
    assert sorted(loaded.intersection(NOT_AT_START)) == []
    assert sorted(modules.intersection(NOT_IMPORTED_AT_START)) == []
    assert "companyd.daemon._views" in modules  # their importer is: the check can fail


# -- the CLI's everyday commands (issue 31) ----------------------------------------------

#: What no everyday command needs: the SDKs, the web stack, the graph library, the stores'
#: PostgreSQL driver, the scheduler library, and pydantic (the config schema, the
#: operator contract's validation). Each costs tens to hundreds of ms of start-up.
HEAVY = (
    *NOT_AT_START,
    "pydantic",
    "pydantic_core",
    "psycopg",
    "psycopg_pool",
    "apscheduler",
    "jinja2",
    "prometheus_client",
)

#: ``validate`` reads the config (pydantic, the cron library, and the state backend's
#: types): it must still not load what only a running company or another command uses.
NOT_FOR_VALIDATE = (*NOT_AT_START, "jinja2", "prometheus_client")

CLI_PROBE = """
import contextlib, io, json, sys
from companyd.cli import main
out = io.StringIO()
rc = None  # argparse exits for --version and --help
with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
    rc = main(sys.argv[1:])
print(json.dumps([rc, sorted({name.split(".")[0] for name in sys.modules})]))
"""


def _loaded_by(*argv: str, cwd: Path, env: dict[str, str]) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", CLI_PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=cwd,
        env=env,
    )
    rc, loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rc in (0, None), (argv, proc.stderr)
    return set(loaded)


def test_version_and_validate_import_nothing_they_do_not_use(tmp_path: Path) -> None:
    env = {**os.environ, "COMPANYD_CONFIG": str(EXAMPLE)}
    for argv in (["--version"], ["--help"], ["status", "--help"]):
        loaded = _loaded_by(*argv, cwd=tmp_path, env=env)
        assert sorted(loaded.intersection(HEAVY)) == [], argv
        assert "yaml" not in loaded and "asyncio" not in loaded, argv
    loaded = _loaded_by("validate", str(EXAMPLE), cwd=tmp_path, env=env)
    assert sorted(loaded.intersection(NOT_FOR_VALIDATE)) == []


# status, runs, inbox and jobs of a running daemon, with --state-dir and without: their
# budget (HEAVY here, and more) is tests/test_cli_imports.py's, on one daemon for all of them


#: Builds the daemon (every service, the tracer) for a company without telemetry and lists
#: the top-level packages loaded, then does the same for one with telemetry in the same
#: process (what the first build loaded is listed before the second one starts).
DAEMON_PROBE = """
import json, sys, tempfile
from pathlib import Path
import yaml
from companyd.config import load_config
from companyd.daemon._main import Daemon
from companyd.llm import OfflineModel

def loaded_after_building(telemetry):
    spec = {
        "schema": "companyd/v1",
        "company": {"name": "Probe Co", "budget": {"daily_usd": 5}},
        "agents": {"writer": {"title": "Writer", "instructions": "Write."}},
    }
    if telemetry:
        spec["telemetry"] = {"otlp_endpoint": "http://127.0.0.1:9"}
    work = Path(tempfile.mkdtemp())
    (work / "company.yaml").write_text(yaml.safe_dump(spec))
    config = load_config(work / "company.yaml")
    daemon = Daemon(config, work / "s", backend=OfflineModel(), offline=True)
    return sorted({name.split(".")[0] for name in sys.modules})

print(json.dumps([loaded_after_building(False), loaded_after_building(True)]))
"""


def loaded_by_daemons() -> tuple[set[str], set[str]]:
    """The packages loaded once a daemon without telemetry is built, then once one with
    telemetry is built too (one process).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", DAEMON_PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env,
    )
    off, on = json.loads(out.stdout.strip().splitlines()[-1])
    return set(off), set(on)


def test_a_daemon_without_telemetry_never_imports_opentelemetry() -> None:
    off, on = loaded_by_daemons()
    assert "opentelemetry" not in off
    # the probe sees the SDK when telemetry is on: the check above can fail
    assert "opentelemetry" in on


# -- the daemon's start, up to READY=1 (issue 31) -----------------------------------------

#: What the daemon of the example company (offline, dashboard on) must not load before
#: READY=1: the model SDK, the telemetry SDK, the mcp SDK, and the dashboard's web stack
#: (uvicorn, click, h11, Starlette, Jinja2, the pages), which its first visit loads. The
#: dashboard listens before READY.
NOT_BEFORE_READY = (
    # PostgreSQL's driver: a SQLite company's stores name the errors they catch without it
    "psycopg",
    "psycopg_pool",
    "companyd.storage._postgres",
    "anthropic",
    "httpx",
    "httpx2",
    "httpcore2",
    "trio",
    "opentelemetry",
    "mcp",
    "uvicorn",
    "click",
    "h11",
    "starlette",
    "jinja2",
    "wsproto",
    "websockets",
    "companyd.dashboard._app",
    "companyd.dashboard._pages",
    "companyd.dashboard._render",
    # the backup machinery (the first backup loads it) and urllib.request (http.client)
    "tarfile",
    "companyd.ops._archive",
    "urllib.request",
    # round 12: the jobs report (a `jobs` request loads it), difflib (a misspelt name) and
    # a run's transcript (the first run that ends)
    "companyd.scheduler._report",
    "companyd.scheduler._jobs_text",
    "difflib",
    "companyd.runs._transcript",
    "companyd.runs._cut",
)

#: Of those, what the first ``status`` request loads (its routines' lines): once, then.
AT_FIRST_STATUS = ("companyd.scheduler._report", "companyd.scheduler._jobs_text")


def imported(log_text: str) -> list[str]:
    """The modules named by ``-X importtime`` lines (``PYTHONPROFILEIMPORTTIME=1``) in a
    daemon's stderr, in import order. A module loaded by ``importlib.import_module`` (the
    faces' lazy names) has no line of its own, but the modules it imports with ``import``
    statements do: :func:`heavy_among` matches a package by its submodules too.
    """
    return [
        line.rsplit("|", 1)[1].strip()
        for line in log_text.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    ]


def heavy_among(modules: list[str], heavy: tuple[str, ...]) -> list[str]:
    """The entries of ``heavy`` that ``modules`` holds (a name or one of its submodules),
    both read without the leading underscores of internal modules (``companyd.dashboard._app``
    and ``companyd.dashboard._app`` are one), so a module renamed private is still matched.
    """

    def plain(name: str) -> str:
        return ".".join(part.lstrip("_") for part in name.split("."))

    loaded = {plain(m) for m in modules}
    return [h for h in heavy if any(m == plain(h) or m.startswith(plain(h) + ".") for m in loaded)]


def profiled_env(notify: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**env, "NOTIFY_SOCKET": notify, "PYTHONPROFILEIMPORTTIME": "1", **extra}


def test_the_example_company_is_ready_before_the_dashboard_app_and_sdks_load() -> None:
    async def scenario(work: Path) -> None:
        cfg = work / "company.yaml"
        cfg.write_text(
            EXAMPLE.read_text(encoding="utf-8") + '\ndashboard:\n  listen: "127.0.0.1:0"\n',
            encoding="utf-8",
        )
        listener = NotifyListener(work / "notify")
        listener.start()
        d = DaemonProcess(cfg, work / "s", log=work / "d.log", env=profiled_env(listener.address))
        try:
            await d.spawn()
            await listener.wait_for("READY", timeout=60)
            # every import before READY=1 was written to the log before READY was sent
            before = imported(d.log_text())
            assert heavy_among(before, NOT_BEFORE_READY) == []
            # ... and the dashboard was listening when READY=1 was sent: its child reported
            # its address (a READY waits for every child to start), and answers
            await d.wait_ready()
            url = (await d.call("status"))["daemon"]["dashboard"]
            assert url.startswith("http://127.0.0.1:")
            not_yet = tuple(h for h in NOT_BEFORE_READY if h not in AT_FIRST_STATUS)
            assert heavy_among(imported(d.log_text()), not_yet) == []
            login = await d.call("dashboard_login")
            assert login["url"].startswith(url)
            status, text = await asyncio.to_thread(_get, login["url"])
            assert status == 200 and "Logged in" in text
            # the first visit loaded the web stack (the checks above can fail)
            after = imported(d.log_text())
            web = ("uvicorn", "starlette", "jinja2", "companyd.dashboard._pages")
            assert heavy_among(after, web) == list(web)
            assert heavy_among(after, ("anthropic", "opentelemetry", "mcp")) == []
            assert await d.stop() == 0
        finally:
            listener.close()
            if d.returncode is None:
                await d.stop()

    with tempfile.TemporaryDirectory(dir="/tmp", prefix="imp") as d:
        asyncio.run(scenario(Path(d)))


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


#: A company with an API key: one agent and a routine that fires only when asked.
KEYED = {
    "schema": "companyd/v1",
    "company": {"name": "Key Co", "timezone": "UTC", "budget": {"daily_usd": 10}},
    "defaults": {"model": {"primary": "claude-sonnet-5-5"}},
    "agents": {"writer": {"title": "Writer", "instructions": "You are the writer."}},
    "routines": {
        "daily-post": {
            "assignee": "writer",
            "description": "Draft today's post.",
            "trigger": {"cron": "0 14 * * *"},
        }
    },
    "dashboard": {"enabled": False},
}


def test_with_a_key_the_anthropic_sdk_is_imported_at_the_first_call_not_at_start() -> None:
    async def scenario(work: Path) -> None:
        cfg = work / "company.yaml"
        cfg.write_text(yaml.safe_dump(KEYED, sort_keys=False), encoding="utf-8")
        listener = NotifyListener(work / "notify")
        listener.start()
        with MessagesAPIServer(script=[reply_text("Today's post.")]) as srv:
            env = profiled_env(
                listener.address,
                ANTHROPIC_API_KEY="sk-ant-test-key-0123456789abcdef",
                ANTHROPIC_BASE_URL=srv.base_url,
            )
            d = DaemonProcess(cfg, work / "s", log=work / "d.log", offline=False, env=env)
            try:
                await d.spawn()
                await listener.wait_for("READY", timeout=60)
                await d.wait_ready()
                status = await d.call("status")
                assert status["daemon"]["offline"] is False  # Claude, not the offline model
                sdk = ("anthropic", "httpx2", "httpcore2")
                assert heavy_among(imported(d.log_text()), (*sdk, "httpx")) == []
                await d.call("run_job", routine="daily-post")
                await d.wait_event("run_finished", timeout=60)
                assert len(srv.requests) == 1  # through the real SDK, to the stand-in
                # the SDK and its client's HTTP stack, loaded at the first call (in a
                # worker thread: tests/llm/test_claude.py)
                assert heavy_among(imported(d.log_text()), sdk) == list(sdk)
                assert await d.stop() == 0
            finally:
                listener.close()
                if d.returncode is None:
                    await d.stop()

    with tempfile.TemporaryDirectory(dir="/tmp", prefix="imp") as d:
        asyncio.run(scenario(Path(d)))


def test_a_key_that_cannot_be_a_header_stops_the_start_without_the_sdk(tmp_path: Path) -> None:
    from companyd.llm import ModelUnavailable, resolve_api_key

    class Spec:
        api_key_env = "COMPANYD_TEST_KEY"
        api_key_credential = "anthropic_api_key"

    with pytest.raises(ModelUnavailable, match=r"COMPANYD_TEST_KEY has a space.*character 7"):
        resolve_api_key(Spec(), {"COMPANYD_TEST_KEY": "sk-ant xyz"})  # type: ignore[arg-type]
    with pytest.raises(ModelUnavailable, match=r"non-ASCII character \(U\+2019\)") as err:
        resolve_api_key(Spec(), {"COMPANYD_TEST_KEY": "sk-ant-QZX’9"})  # type: ignore[arg-type]
    assert "QZX" not in str(err.value)  # the message never quotes the key
    assert resolve_api_key(Spec(), {"COMPANYD_TEST_KEY": " sk-ant-a1 "}) == "sk-ant-a1"  # type: ignore[arg-type]


STORE_ERRORS_PROBE = """
import json, sys
from companyd._sqlite import store_errors
before = [c.__module__ + "." + c.__name__ for c in store_errors()]
import psycopg
try:
    raise psycopg.OperationalError("connection lost")
except store_errors() as exc:
    caught = type(exc).__name__
print(json.dumps([before, "psycopg" in sys.modules, caught]))
"""


def test_store_errors_name_psycopgs_errors_once_it_is_loaded_and_not_before() -> None:
    out = subprocess.run(
        [sys.executable, "-c", STORE_ERRORS_PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    before, loaded, caught = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == ["sqlite3.Error", "builtins.OSError"]  # psycopg was not imported for it
    assert loaded and caught == "OperationalError"
