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
