"""companyd.testing.forkserver: a forked ``companyd`` is the command ``python -m companyd``
runs — the same exit code and output for the same command line, environment and working
directory — and a process of its own that signals reach (its status as ``Popen`` has it).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from companyd.testing import forkserver

pytestmark = pytest.mark.anyio


async def _forked(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> tuple[int, str]:
    proc = forkserver.spawn(argv, env, cwd, log=log)
    async with asyncio.timeout(60):
        code = await proc.wait_async()
    return code, log.read_text()


def _real(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "companyd", *argv],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout


async def test_a_forked_command_exits_and_says_what_the_real_one_does(tmp_path: Path) -> None:
    # company.yaml named by a path relative to the working directory; an invalid one (an
    # MCP server without a command) for an exit code that is not 0, and a missing one
    doc = {
        "schema": "companyd/v1",
        "company": {"name": "Forked", "budget": {"daily_usd": 5}},
        "agents": {"ceo": {"title": "CEO", "instructions": "lead", "mcp_servers": {"x": {}}}},
    }
    (tmp_path / "company.yaml").write_text(yaml.safe_dump(doc))
    # the fork server's children write unbuffered (as DaemonProcess runs every daemon)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPANYD_")}
    env["PYTHONUNBUFFERED"] = "1"
    for argv in (["--version"], ["validate", "company.yaml"], ["validate", "missing.yaml"]):
        real = await asyncio.to_thread(_real, argv, env, tmp_path)
        forked = await _forked(argv, env, tmp_path, tmp_path / f"{argv[-1]}.log")
        assert forked == real, argv
        if argv[0] == "validate":
            assert real[0] != 0 and argv[1] in real[1], real  # not vacuous: a failure, and why


async def test_a_forked_daemon_is_a_process_of_its_own_that_signals_reach(
    tmp_path: Path,
) -> None:
    doc = {
        "schema": "companyd/v1",
        "company": {"name": "Forked", "budget": {"daily_usd": 5}},
        "agents": {"ceo": {"title": "CEO", "instructions": "lead"}},
    }
    procs = []
    for name in ("term", "kill"):  # one daemon per company.yaml: a copy each
        cfg = tmp_path / f"{name}.yaml"
        cfg.write_text(yaml.safe_dump(doc))
        argv = ["run", "--config", str(cfg), "--state-dir", str(tmp_path / name), "--offline"]
        log = tmp_path / f"{name}.log"
        procs.append(forkserver.spawn(argv, dict(os.environ), tmp_path, log=log))
    term, kill = procs
    assert len({term.pid, kill.pid, os.getpid()}) == 3
    async with asyncio.timeout(60):
        while not (tmp_path / "term" / "companyd.sock").exists():
            assert term.returncode is None, (tmp_path / "term.log").read_text()
            await asyncio.sleep(0.05)
        term.send_signal(signal.SIGTERM)  # the daemon's own handler: a graceful stop
        kill.send_signal(signal.SIGKILL)
        assert await term.wait_async() == 0, (tmp_path / "term.log").read_text()
        assert await kill.wait_async() == -signal.SIGKILL
    assert "Traceback" not in (tmp_path / "term.log").read_text()
    assert forkserver.forked_children_cpu() > 0


def test_what_the_interpreter_fixed_at_its_start_cannot_be_asked_for(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH="/elsewhere")
    with pytest.raises(ValueError, match=r"cannot take PYTHONPATH .*start this one as a real"):
        forkserver.spawn(["--version"], env, tmp_path, log=tmp_path / "v.log")


def test_a_forked_child_s_stdio_are_the_descriptors_the_test_sent(tmp_path: Path) -> None:
    # `companyd memory serve-mcp` talks JSON-RPC over its stdin and stdout: here pipes of
    # this test, the child's stderr a third one; closing its stdin ends it with status 0
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    child_in, to_child = os.pipe()
    from_child, child_out = os.pipe()
    err_read, child_err = os.pipe()
    argv = ["memory", "serve-mcp", "--file", str(tmp_path / "memory.jsonl")]
    try:
        proc = forkserver.spawn(
            argv, env, tmp_path, stdin=child_in, stdout=child_out, stderr=child_err
        )
    finally:
        for fd in (child_in, child_out, child_err):
            os.close(fd)  # the child has its copies: EOF below means the child closed them
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    with os.fdopen(to_child, "wb") as w, os.fdopen(from_child, "rb") as r:
        w.write(json.dumps(hello).encode() + b"\n")
        w.flush()
        answer = json.loads(r.readline())
        assert answer["id"] == 1 and "serverInfo" in answer["result"], answer
        assert proc.poll() is None  # alive while its stdin is open
    assert proc.wait(timeout=60) == 0
    with os.fdopen(err_read, "rb") as e:
        assert b"Traceback" not in e.read()
    assert proc.returncode == 0 and forkserver.forked_children_cpu() > 0
