"""What ``companyd run`` imports before ``READY=1``: nothing the offline daemon does not use.

Every command builds the whole parser (each ``companyd.cli`` area's ``register``), so a
module imported at the top of any CLI area, or anywhere under ``companyd.daemon.main``, is
paid for by the daemon's start. The mcp SDK (``memory serve-mcp``) and networkx (``memory
export``/``import``) cost ~40 MB of peak RSS and ~1 s of CPU there (docs/benchmarks.md,
"daemon"); this keeps them, and the SDKs a company without Telegram settings or run
``--offline`` does not need, out of the start path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
import companyd.cli.run
import companyd.daemon.main
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_daemon_start_path_imports_no_sdk_it_does_not_use() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert sorted(loaded.intersection(NOT_AT_START)) == []


#: Builds the daemon (every service, the tracer) for a company with or without telemetry,
#: then lists the top-level packages loaded.
DAEMON_PROBE = """
import json, sys, tempfile
from pathlib import Path
import yaml
from companyd.config import load_config
from companyd.daemon.main import Daemon
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
