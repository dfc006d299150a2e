"""Crash safety: a writer SIGKILLed at random moments never loses an acknowledged write, and
the file always loads. bench/bench_memory_crash.py runs the same with 200+ trials.
"""

from __future__ import annotations

import contextlib
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


class Writers:
    """Starts the writers (``_crash_writer.py --fork``): each trial's writer is a process of
    its own, forked by one server that imported the store once — a writer's start-up and
    import were most of its CPU (~0.1 s), twenty times over.
    """

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.stderr = tmp / "writers.err"
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        with self.stderr.open("wb") as err:
            self.server = subprocess.Popen(
                [sys.executable, str(WRITER), "--fork"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                text=True,
            )
        self.started = 0

    def crash_once(
        self, path: Path, seed: int, delay: float
    ) -> tuple[set[str], dict[str, set[str]]]:
        """Start a writer, SIGKILL it ``delay`` s after it is ready; return what it
        acknowledged.
        """
        assert self.server.stdin is not None and self.server.stdout is not None
        self.started += 1
        fifo = self.tmp / f"writer-{self.started}.out"
        os.mkfifo(fifo)
        self.server.stdin.write(f"{path} {seed} {fifo}\n")
        self.server.stdin.flush()
        pid = int(self.server.stdout.readline() or "0")
        assert pid > 0, self.stderr.read_text()
        killed = False
        try:
            with fifo.open("rb") as out:
                assert out.readline() == b"ready\n", self.stderr.read_text()
                time.sleep(delay)
                os.kill(pid, signal.SIGKILL)
                killed = True
                lines = out.read().decode().splitlines()  # to EOF: the writer is gone
        finally:
            if not killed:  # a writer that failed its start: the server waits for it
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            returncode = int(self.server.stdout.readline() or "0")
            fifo.unlink()
        assert returncode == -signal.SIGKILL, self.stderr.read_text()
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

    def close(self) -> None:
        assert self.server.stdin is not None and self.server.stdout is not None
        self.server.stdin.close()
        try:
            self.server.wait(timeout=30)
        finally:
            if self.server.poll() is None:
                self.server.kill()
                self.server.wait(timeout=30)
            self.server.stdout.close()


def test_sigkill_at_random_moments_loses_no_acknowledged_write(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    rng = random.Random(20260831)
    acked: set[str] = set()
    acked_obs: dict[str, set[str]] = {}
    trials = 20
    (tmp_path / "w").mkdir()
    writers = Writers(tmp_path / "w")
    try:
        for trial in range(trials):
            entities, observations = writers.crash_once(path, trial, rng.uniform(0.0, 0.08))
            acked |= entities
            for name, obs in observations.items():
                acked_obs.setdefault(name, set()).update(obs)
            # The MCP file is only ever replaced whole: whatever the moment of the kill, it
            # is complete and clean (only the journal can end in a torn record).
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
    finally:
        writers.close()
    assert len(acked) > trials  # the writers really wrote (not killed before the first ack)
