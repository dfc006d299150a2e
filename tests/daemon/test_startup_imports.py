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
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from companyd.testing.daemon_process import DaemonProcess

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
    "opentelemetry",
)

PROBE = """
import contextlib, io, json, sys
from companyd.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(["--help"])  # builds the parser `companyd run` builds: every CLI area
import companyd.cli._run
import companyd.daemon._main
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_daemon_start_path_imports_no_sdk_it_does_not_use() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert sorted(loaded.intersection(NOT_AT_START)) == []


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


def test_commands_a_running_daemon_answers_import_nothing_heavy() -> None:
    # status, runs, inbox and jobs ask the daemon and print its answer: the control
    # client (a socket and JSON) and the printers, nothing of the daemon's own machinery.
    async def scenario(work: Path) -> None:
        shutil.copy(EXAMPLE, work / "company.yaml")
        state = work / "s"
        env = {**os.environ, "COMPANYD_CONFIG": str(work / "company.yaml")}
        async with DaemonProcess(work / "company.yaml", state, log=work / "d.log"):
            for command in ("status", "runs", "inbox", "jobs"):
                loaded = await asyncio.to_thread(
                    _loaded_by, command, "--state-dir", str(state), cwd=work, env=env
                )
                assert sorted(loaded.intersection((*HEAVY, "asyncio"))) == [], command

    with tempfile.TemporaryDirectory(dir="/tmp", prefix="imp") as d:
        asyncio.run(scenario(Path(d)))


#: Builds the daemon (every service, the tracer) for a company with or without telemetry,
#: then lists the top-level packages loaded.
DAEMON_PROBE = """
import json, sys, tempfile
from pathlib import Path
import yaml
from companyd.config import load_config
from companyd.daemon._main import Daemon
from companyd.llm import OfflineModel

spec = {
    "schema": "companyd/v1",
    "company": {"name": "Probe Co", "budget": {"daily_usd": 5}},
    "agents": {"writer": {"title": "Writer", "instructions": "Write."}},
}
if sys.argv[1] == "on":
    spec["telemetry"] = {"otlp_endpoint": "http://127.0.0.1:9"}
work = Path(tempfile.mkdtemp())
(work / "company.yaml").write_text(yaml.safe_dump(spec))
config = load_config(work / "company.yaml")
daemon = Daemon(config, work / "s", backend=OfflineModel(), offline=True)
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def loaded_by_daemon(telemetry: str) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", DAEMON_PROBE, telemetry],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env,
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_a_daemon_without_telemetry_never_imports_opentelemetry() -> None:
    assert "opentelemetry" not in loaded_by_daemon("off")
    # the probe sees the SDK when telemetry is on: the check above can fail
    assert "opentelemetry" in loaded_by_daemon("on")
