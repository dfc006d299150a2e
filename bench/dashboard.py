"""The dashboard's cost, against a real ``companyd run --offline`` with a big state.

    .venv/bin/python bench/dashboard.py                     # 100,000 runs, 10,000 entities
    .venv/bin/python bench/dashboard.py --runs 10000 --entities 1000 --samples 30

Issue 18's targets: a page renders in < 150 ms at p95 with 100,000 runs and 10,000 memory
entities stored; an event reaches an open page in < 1 s; the dashboard adds < 15 MB to the
daemon's RSS. One run measures, on the same state directory:

* **render**: wall time of ``GET`` for each page served (with a session cookie, as the
  browser asks), p50 / p95 / max over ``--samples`` requests, beside ``GET /login-needed``
  (a template and nothing else) as the baseline;
* **event to page**: an open ``/live?f=tree`` event stream (the overview's), the time from
  asking the daemon to crash an agent (``debug crash``, COMPANYD_DEBUG=1) to the stream's
  next ``tree`` event — what a browser receives before swapping it in;
* **RSS**: the daemon's VmRSS and VmHWM with the dashboard on (after serving the pages)
  minus the same daemon with ``dashboard.enabled: false``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

from bench_runs import AGENTS, CONFIG, fill  # the run journal as bench/bench_runs.py fills it

from companyd.daemon._control_client import ControlClient
from companyd.runs import Journal

PAGES = ["/", "/agents", "/agents/agent1", "/agents/agent1/spend",
         "/runs", "/runs?agent=agent1&status=ok&since=30d", "/runs/{run}", "/routines",
         "/spend", "/spend.csv?period=2000-01-01..", "/memory", "/memory?q=entity",
         "/memory/entity?name=entity-1&depth=3", "/inbox", "/config"]  # fmt: skip


def seed_memory(path: Path, n: int) -> None:
    """``n`` entities in the MCP memory format, each with two observations and a relation."""
    lines = []
    for i in range(n):
        observations = [f"fact {i}", f"another fact about {i}"]
        entity = {"type": "entity", "name": f"entity-{i}", "entityType": "bench"}
        lines.append(json.dumps({**entity, "observations": observations}))
        relation = {"type": "relation", "from": f"entity-{i}", "to": f"entity-{(i * 7 + 1) % n}"}
        lines.append(json.dumps({**relation, "relationType": "knows"}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def companyd(config: Path, state: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "companyd", *argv, "--config", str(config),
         "--state-dir", str(state)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def start(config: Path, state: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "COMPANYD_DEBUG": "1"}
    env.pop("NOTIFY_SOCKET", None)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "companyd", "run", "--offline", "--config", str(config),
             "--state-dir", str(state), "--log-level", "warning"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env,
        )  # fmt: skip
    deadline = time.monotonic() + 120
    while companyd(config, state, "status", "--json").returncode != 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the daemon did not start:\n" + log.read_text()[-3000:])
        time.sleep(0.2)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(60)


def rss_kb(pid: int) -> tuple[int, int]:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


class Browser:
    """A session of the dashboard over plain HTTP (what the browser's requests cost)."""

    def __init__(self, login_url: str) -> None:
        url = urllib.parse.urlsplit(login_url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        conn.request("GET", f"{url.path}?{url.query}")
        response = conn.getresponse()
        response.read()
        cookie = response.getheader("set-cookie") or ""
        assert response.status == 200 and cookie, (response.status, cookie)
        self.cookie = cookie.split(";", 1)[0]
        self.conn = conn

    def get(self, path: str) -> tuple[int, float]:
        t = time.perf_counter()
        self.conn.request("GET", path, headers={"Cookie": self.cookie})
        response = self.conn.getresponse()
        response.read()
        return response.status, time.perf_counter() - t

    def stream(self, path: str) -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        conn.request("GET", path, headers={"Cookie": self.cookie, "Accept": "text/event-stream"})
        response = conn.getresponse()
        assert response.status == 200, response.status
        return response


def next_event(stream: http.client.HTTPResponse, name: str) -> None:
    """Read ``stream`` until an event named ``name`` has been received whole."""
    current = None
    while True:
        line = stream.readline().decode().rstrip("\r\n")
        if line.startswith("event:"):
            current = line.split(":", 1)[1].strip()
        elif line == "" and current == name:
            return
        elif line == "":
            current = None


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"p50 {ms(statistics.median(ordered))}, p95 {ms(p95)}, max {ms(ordered[-1])}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--entities", type=int, default=10_000)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--events", type=int, default=len(AGENTS))
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"python {platform.python_version()}, {platform.platform()}")
    with tempfile.TemporaryDirectory(prefix="bench-dash-", dir="/tmp") as tmp:
        root = Path(tmp)
        state = root / "s"
        state.mkdir()
        journal = Journal(state / "runs.sqlite")
        t = time.perf_counter()
        fill(journal, args.runs)
        journal.run_sync(lambda db: None)
        print(f"filled {args.runs:,} runs in {time.perf_counter() - t:.1f} s")
        seed_memory(state / "memory.jsonl", args.entities)
        print(f"seeded {args.entities:,} memory entities (and as many relations)")

        results: dict[str, Any] = {}
        for on in (False, True):
            config = root / f"company-{'on' if on else 'off'}.yaml"
            extra = (
                'dashboard:\n  listen: "127.0.0.1:0"\n' if on else "dashboard:\n  enabled: false\n"
            )
            config.write_text(CONFIG + extra, encoding="utf-8")
            proc = start(config, state, root / "daemon.log")
            try:
                time.sleep(3)  # let start-up settle before reading RSS
                if not on:
                    results["rss_off"] = rss_kb(proc.pid)
                    continue
                results["rss_on_idle"] = rss_kb(proc.pid)
                done = companyd(config, state, "dashboard", "--json")
                assert done.returncode == 0, done.stderr
                browser = Browser(json.loads(done.stdout)["url"])
                timings: dict[str, list[float]] = {}
                newest = ControlClient(state / "companyd.sock", timeout=10).call("runs", limit=1)
                run = newest["runs"][0]["run_id"]  # a transcript of the 100,000
                for page in ["/login-needed", *(p.replace("{run}", run) for p in PAGES)]:
                    status, _ = browser.get(page)  # warm-up (and: is it served?)
                    if status != 200:
                        continue
                    timings[page] = [browser.get(page)[1] for _ in range(args.samples)]
                results["timings"] = timings
                socket = state / "companyd.sock"
                latencies = []
                for agent in AGENTS[: args.events]:
                    stream = browser.stream("/live?f=tree")
                    time.sleep(0.3)  # the stream's subscription is in place
                    t0 = time.perf_counter()
                    ControlClient(socket, timeout=10).call("debug", action="crash", target=agent)
                    next_event(stream, "tree")
                    latencies.append(time.perf_counter() - t0)
                    stream.close()
                    time.sleep(1.5)  # the agent is restarted before the next one crashes
                results["latency"] = latencies
                results["rss_on_served"] = rss_kb(proc.pid)
            finally:
                stop(proc)

    print()
    base = results["timings"].pop("/login-needed")
    print(f"GET /login-needed (baseline: a template alone): {summary(base)}")
    for page, values in results["timings"].items():
        print(f"GET {page}: {summary(values)}")
    print(f"event to page (debug crash → the tree event on /live): {summary(results['latency'])}")
    off, idle, served = results["rss_off"], results["rss_on_idle"], results["rss_on_served"]
    print(
        f"RSS: dashboard off {off[0] / 1024:.1f} MB (peak {off[1] / 1024:.1f}); on, idle "
        f"{idle[0] / 1024:.1f} MB (+{(idle[0] - off[0]) / 1024:.1f}); on, after serving the "
        f"pages {served[0] / 1024:.1f} MB (+{(served[0] - off[0]) / 1024:.1f}; peak "
        f"{served[1] / 1024:.1f}, +{(served[1] - off[1]) / 1024:.1f})"
    )


if __name__ == "__main__":
    main()
