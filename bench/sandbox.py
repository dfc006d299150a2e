"""What the tool-server sandbox costs per start (issue 29; target: < 100 ms extra).

Starts the same MCP tool server (a small FastMCP-style server on the mcp SDK, written to a
temporary directory) through companyd's own :class:`~companyd.agents._tools.McpToolServer`,
once in its bubblewrap sandbox and once with ``sandbox: false``, interleaved (sandboxed,
bare, sandboxed, …) so that the machine's load falls on both alike. One start is spawn →
MCP ``initialize`` → ``tools/list`` answered. Also times the bare process cost: ``true``
run directly vs inside the same sandbox (bwrap + setpriv + prlimit), which isolates the
sandbox from Python's start-up noise.

Prints the median and p90 of each, the ratio and the difference in ms.

Usage:
    .venv/bin/python bench/sandbox.py [--runs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from companyd.agents import McpToolServer
from companyd.config import McpServerSpec
from companyd.sandbox import ToolSandbox

SERVER = """
from mcp.server import MCPServer

server = MCPServer("bench")


@server.tool(description="Echo.")
def echo(text: str) -> str:
    return text


server.run("stdio")
"""


async def _start(name: str, spec: McpServerSpec, sandbox: ToolSandbox | None) -> float:
    launcher = None if sandbox is None else (lambda: sandbox.launch("bench", name, spec))
    t0 = time.perf_counter()
    async with McpToolServer(name, spec, launcher=launcher) as server:
        assert [t.name for t in server.tools] == ["echo"]
        took = time.perf_counter() - t0
    return took * 1000


def _true_cost(sandbox: ToolSandbox, runs: int) -> tuple[list[float], list[float]]:
    true = shutil.which("true") or "/bin/true"
    spec = McpServerSpec(command=true)
    launch = asyncio.run(sandbox.launch("bench", "true", spec))
    boxed, bare = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([launch.command, *launch.args], env=launch.env, check=True)
        boxed.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        subprocess.run([true], check=True)
        bare.append((time.perf_counter() - t0) * 1000)
    return boxed, bare


def _row(what: str, boxed: list[float], bare: list[float]) -> str:
    b, n = statistics.median(boxed), statistics.median(bare)
    p90b = statistics.quantiles(boxed, n=10)[-1]
    p90n = statistics.quantiles(bare, n=10)[-1]
    return (
        f"{what}: sandboxed median {b:.1f} ms (p90 {p90b:.1f}), bare median {n:.1f} ms "
        f"(p90 {p90n:.1f}); ratio {b / n:.2f}x, extra {b - n:+.1f} ms per start"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="companyd-bench-sandbox-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        # the script in a directory of its own, which is all the sandbox reads of ours
        (work / "srv").mkdir(mode=0o755)
        script = work / "srv" / "server.py"
        script.write_text(SERVER)
        script.chmod(0o644)
        state = work / "state"
        state.mkdir(mode=0o700)
        sandbox = ToolSandbox(state)
        boxed_spec = McpServerSpec.model_validate(
            {
                "command": sys.executable,
                "args": [str(script)],
                "sandbox": {"read": [str(work / "srv")]},
            }
        )
        bare_spec = McpServerSpec(command=sys.executable, args=(str(script),), sandbox=False)
        await _start("warm", boxed_spec, sandbox)  # the sandbox probe, page cache
        await _start("warm", bare_spec, None)
        boxed: list[float] = []
        bare: list[float] = []
        for _ in range(args.runs):
            boxed.append(await _start("echo", boxed_spec, sandbox))
            bare.append(await _start("echo", bare_spec, None))
        t_boxed, t_bare = await asyncio.to_thread(_true_cost, sandbox, args.runs)
    print(
        f"{platform.node()} {platform.machine()} Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
        f"as {'root (servers as nobody)' if os.geteuid() == 0 else 'an unprivileged user'}, "
        f"{args.runs} interleaved runs each"
    )
    print(_row("MCP server start (spawn → initialize → tools/list)", boxed, bare))
    print(_row("process start (`true`)", t_boxed, t_bare))


if __name__ == "__main__":
    asyncio.run(main())
