"""Helpers for the agent runtime tests: a small company, a per-agent scripted model, and the
real daemon (in-process or as a subprocess) pointed at the loopback Messages API stand-in.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from companyd.clock import Clock
from companyd.config import load_config
from companyd.daemon._main import Daemon
from companyd.llm._claude import ClaudeBackend
from companyd.testing.messages_api import (
    Fault,
    MessagesAPIServer,
    RecordedRequest,
    Reply,
    Stall,
    reply_text,
    reply_tool_use,
)

ScriptItem = Reply | Fault | Stall

BASE: dict[str, Any] = {
    "schema": "companyd/v1",
    "company": {
        "name": "Test Co",
        "timezone": "UTC",
        "budget": {"daily_usd": 50, "monthly_usd": 500},
    },
    "defaults": {
        "model": {"primary": "claude-sonnet-5-5", "fallbacks": ["claude-haiku-5-5"]},
        "limits": {"max_steps": 30, "max_cost_usd": 5, "max_seconds": "10m"},
        "heartbeat_seconds": 120,
    },
}


def company_yaml(agents: Mapping[str, Mapping[str, Any]], **top: Any) -> str:
    """A company.yaml with ``agents`` (title and instructions filled in if missing)."""
    doc = json.loads(json.dumps(BASE))
    full = {}
    for slug, spec in agents.items():
        entry = {"title": slug.upper(), "instructions": f"You are the {slug}."}
        entry.update(spec)
        full[slug] = entry
    doc["agents"] = full
    doc.update(top)
    return yaml.safe_dump(doc, sort_keys=False)


#: The test MCP tool server (tests/mcp_tool_server.py).
TOOL_SERVER = Path(__file__).with_name("mcp_tool_server.py")


def tool_files(directory: Path) -> Path:
    """A directory under ``directory`` the sandboxed test tool server may write (its user is
    ``nobody`` when the tests run as root, hence world-writable): its ``TOOL_LOG`` and
    ``TOOL_BLOCK`` files go there.
    """
    files = directory / "tool-files"
    files.mkdir(exist_ok=True)
    files.chmod(0o777)
    return files


def tool_server(files: Path | None = None, **env: str) -> dict[str, Any]:
    """The test tool server as an ``mcp_servers`` entry, in its sandbox: it may read its own
    script's directory and write ``files`` (:func:`tool_files`), with ``env``. Its tools
    are unannotated test doubles, so it is ``risk: trusted`` (no approvals unless listed).
    """
    spec: dict[str, Any] = {
        "command": sys.executable,
        "args": [str(TOOL_SERVER)],
        "sandbox": {"read": [str(TOOL_SERVER.parent)]},
        "risk": "trusted",
    }
    if files is not None:
        spec["sandbox"]["write"] = [str(files)]
    if env:
        spec["env"] = dict(env)
    return spec


def write_company(directory: Path, agents: Mapping[str, Mapping[str, Any]], **top: Any) -> Path:
    path = directory / "company.yaml"
    path.write_text(company_yaml(agents, **top), encoding="utf-8")
    return path


_WHO = re.compile(r"You are .*? \(([a-z][a-z0-9_-]*)\) at ")


def agent_of(request: RecordedRequest) -> str:
    """Which agent sent ``request`` (from its system prompt)."""
    body = request.body if isinstance(request.body, dict) else {}
    system = body.get("system")
    text = (
        system
        if isinstance(system, str)
        else " ".join(str(b.get("text", "")) for b in system or [] if isinstance(b, dict))
    )
    m = _WHO.search(text)
    return m.group(1) if m else "?"


class PerAgent:
    """A responder with one script per agent; an agent with no script left ends its turn."""

    def __init__(self, **scripts: Sequence[ScriptItem]) -> None:
        self.scripts = {a: collections.deque(s) for a, s in scripts.items()}
        self.seen: list[str] = []

    def add(self, agent: str, *items: ScriptItem) -> None:
        self.scripts.setdefault(agent, collections.deque()).extend(items)

    def __call__(self, request: RecordedRequest) -> ScriptItem:
        agent = agent_of(request)
        self.seen.append(agent)
        script = self.scripts.get(agent)
        if script:
            return script.popleft()
        return reply_text(f"{agent}: nothing more to do.")


def tool_results(request: RecordedRequest) -> list[dict[str, Any]]:
    """The tool_result blocks of the last user turn of ``request``."""
    body = request.body if isinstance(request.body, dict) else {}
    last = (body.get("messages") or [{}])[-1]
    content = last.get("content") if isinstance(last, dict) else None
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def delegation_reviewed_once(directory: Path) -> tuple[Path, PerAgent]:
    """A company where the CEO delegates a Q1 forecast to the CFO with the COO as reviewer,
    and its script: the COO rejects the first draft ("REJECT: no number and no
    assumptions.") and approves the second ("$42k: 35 clinics at $1.2k.").
    """
    cfg = write_company(
        directory, {"ceo": {}, "cfo": {"reports_to": "ceo"}, "coo": {"reports_to": "ceo"}}
    )
    model = PerAgent(
        ceo=[
            reply_tool_use(
                "delegate",
                {
                    "agent": "cfo",
                    "task": "Forecast Q1 revenue.",
                    "expected_output": "A number with its assumptions.",
                    "reviewer": "coo",
                },
            ),
            reply_text("Forecast received."),
        ],
        cfo=[reply_text("Revenue will go up."), reply_text("$42k: 35 clinics at $1.2k.")],
        coo=[reply_text("REJECT: no number and no assumptions."), reply_text("APPROVE")],
    )
    return cfg, model


@contextlib.asynccontextmanager
async def running_company(
    config_path: Path,
    state_dir: Path,
    server: MessagesAPIServer,
    *,
    clock: Clock | None = None,
    oneoff: bool = True,
    max_retries: int = 0,
) -> AsyncIterator[Daemon]:
    """The real daemon in-process (memory, spend, agents; with ``oneoff`` no scheduler,
    alerts or control socket), its model calls going to ``server``.
    """
    cfg = load_config(config_path)
    backend = ClaudeBackend(
        api_key="test-key", base_url=server.base_url, max_retries=max_retries, timeout=30.0
    )
    # The first call would build the SDK's client (~0.7 s of imports, seconds on a loaded
    # machine) inside its run's heartbeat window, which some tests set to 0.5 s; whether a
    # test in the same worker had already imported the SDK decided whether they passed.
    await backend.warm()
    daemon = Daemon(cfg, state_dir, backend=backend, clock=clock, oneoff=oneoff)
    async with daemon:
        yield daemon


# -- the daemon as a real subprocess ----------------------------------------------------


def daemon_env(server: MessagesAPIServer, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": server.base_url,
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


@contextlib.contextmanager
def daemon_process(
    config: Path, state_dir: Path, env: Mapping[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``companyd run`` as a subprocess; waits (≤ 30 s) until its control socket answers."""
    from companyd.daemon._control_client import ControlClient

    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "companyd",
                "run",
                "--config",
                str(config),
                "--state-dir",
                str(state_dir),
            ],
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        sock = state_dir / "companyd.sock"
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"daemon exited {proc.returncode}:\n{log.read_text()}")
            try:
                ControlClient(sock, timeout=2).ping()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise AssertionError(f"daemon not ready in 30 s:\n{log.read_text()}") from None
                time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def wait_until(predicate: Any, timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)
