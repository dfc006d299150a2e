"""A tool server's one long line: the mcp SDK's stdio client against companyd's link.

A server (a real subprocess) answers one request with a single line of ``--mb`` MiB (a
JSON-RPC answer whose id comes first); each client reads until that answer (or the error
that replaces it) arrives. Reported per client, median of ``--runs`` fresh runs in one
process, interleaved: wall time from the request to the answer, the CPU time of this
process meanwhile, and the peak of Python's traced memory (tracemalloc) — with the ratio
of the SDK's figure to the link's. The link's bound is ``limits.message_mb``'s default
(8 MiB), so from 8 MiB on it drops the line as it streams in.

    .venv/bin/python bench/bench_stdio.py --mb 4,16,48 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.message import SessionMessage

from companyd.agents._stdio import stdio_link

SERVER = """
import sys
sys.stdin.readline()
out = sys.stdout.buffer
out.write(b'{"jsonrpc":"2.0","id":1,"result":{"pad":"')
block = b"a" * 2**20
for _ in range(int(sys.argv[1])):
    out.write(block)
out.write(b'"}}\\n')
out.flush()
sys.stdin.read()
"""


@contextlib.asynccontextmanager
async def sdk(mb: int) -> AsyncIterator[tuple[Any, Any]]:
    params = StdioServerParameters(command=sys.executable, args=["-c", SERVER, str(mb)])
    async with stdio_client(params) as streams:
        yield streams


@contextlib.asynccontextmanager
async def link(mb: int) -> AsyncIterator[tuple[Any, Any]]:
    async with stdio_link(
        sys.executable,
        ["-c", SERVER, str(mb)],
        env=None,
        cwd=None,
        errlog=sys.stderr,
        name="bench",
        max_message_bytes=8 * 2**20,
        on_broken=lambda reason: None,
    ) as streams:
        yield streams


async def one(client: Any, mb: int) -> tuple[float, float, float]:
    async with client(mb) as (read, write):
        ping = types.JSONRPCRequest(jsonrpc="2.0", id=1, method="ping")
        tracemalloc.start()
        t0, c0 = time.perf_counter(), time.process_time()
        await write.send(SessionMessage(ping))
        got = await read.receive()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert getattr(got, "message", got) is not None
    return wall, cpu, peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", default="4,16,48", help="line sizes in MiB, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.mb.split(",")]
    logging.getLogger("companyd.agents._stdio").setLevel(logging.ERROR)  # "dropped" is expected
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} cpu; load {os.getloadavg()[0]:.2f}")
    print(f"{'line':>8}  {'client':<6} {'wall':>9} {'cpu':>9} {'peak traced':>12}")
    for mb in sizes:
        res: dict[str, list[tuple[float, float, float]]] = {"sdk": [], "link": []}
        for _ in range(args.runs):
            for name, client in (("sdk", sdk), ("link", link)):
                res[name].append(asyncio.run(one(client, mb)))
        med = {
            n: tuple(statistics.median(r[i] for r in rs) for i in range(3)) for n, rs in res.items()
        }
        for n in ("sdk", "link"):
            w, c, p = med[n]
            print(f"{mb:>5} MiB  {n:<6} {w * 1000:>7.0f} ms {c * 1000:>6.0f} ms {p:>9.1f} MiB")
        (sw, sc, sp), (lw, lc, lp) = med["sdk"], med["link"]
        ratios = f"wall {sw / lw:.1f}x, cpu {sc / max(lc, 1e-3):.1f}x, peak {sp / lp:.1f}x"
        print(f"{'':>8}  sdk/link: {ratios}")


if __name__ == "__main__":
    main()
