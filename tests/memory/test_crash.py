"""Crash safety: a writer SIGKILLed at random moments never loses an acknowledged write, and
the file always loads. bench/bench_memory_crash.py runs the same with 200+ trials.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from companyd.memory._codec import parse_graph
from companyd.memory._store import GraphStore

WRITER = Path(__file__).with_name("_crash_writer.py")
ROOT = Path(__file__).resolve().parents[2]


def crash_once(path: Path, seed: int, delay: float) -> tuple[set[str], dict[str, set[str]]]:
    """Run the writer, SIGKILL it ``delay`` s after it is ready; return what it acknowledged."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(path), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        assert proc.stdout.readline() == b"ready\n", proc.stderr.read()
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        lines = proc.stdout.read().decode().splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    entities: set[str] = set()
    observations: dict[str, set[str]] = {}
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind == "E":
            entities.add(rest)
        elif kind == "O":
            name, _, obs = rest.partition(" ")
            observations.setdefault(name, set()).add(obs)
    return entities, observations


def test_sigkill_at_random_moments_loses_no_acknowledged_write(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    rng = random.Random(20260831)
    acked: set[str] = set()
    acked_obs: dict[str, set[str]] = {}
    trials = 20
    for trial in range(trials):
        entities, observations = crash_once(path, trial, rng.uniform(0.0, 0.08))
        acked |= entities
        for name, obs in observations.items():
            acked_obs.setdefault(name, set()).update(obs)
        # The MCP file is only ever replaced whole: whatever the moment of the kill, it is
        # complete and clean (only the journal can end in a torn record).
        if path.exists():
            _, report = parse_graph(path.read_bytes())
            assert not report.needs_repair, (trial, report.summary())
        with GraphStore(path) as store:  # what the next start does: load, repair, serve
            graph = store.call("read_graph", {})
        have = {e["name"]: set(e["observations"]) for e in graph["entities"]}
        assert acked <= have.keys(), (trial, sorted(acked - have.keys())[:5])
        for name, obs in acked_obs.items():
            assert obs <= have[name], (trial, name, sorted(obs - have[name]))
        assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    assert len(acked) > trials  # the writers really wrote (not killed before the first ack)
