"""The short chaos run (issue 10): two simulated days of the example company under a real
``companyd run``, with agent crashes, a SIGKILL and restart, a corrupted memory file, a
broken and then a grown company.yaml, a Telegram outage and a flaky model API — every
invariant must hold. The full week is ``python bench/chaos.py`` (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "chaos.py"


@pytest.mark.slow
def test_two_chaotic_days_hold_every_invariant() -> None:
    args = [sys.executable, str(BENCH), "--short", "--quiet"]
    if not os.environ.get("COMPANYD_OFFICIAL_MEMORY_SERVER"):
        args.append("--no-official")  # tests never install it (no network); CI exports it
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    report = proc.stdout + proc.stderr
    assert "Traceback" not in report, report
    lines = [line for line in proc.stdout.splitlines() if line.strip().startswith(("✓", "✗"))]
    assert len(lines) >= 10, report  # every invariant was checked and printed
    assert proc.returncode == 0 and not any(line.strip().startswith("✗") for line in lines), report
