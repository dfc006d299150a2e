"""Shared helpers for the memory tests."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .mcp_helpers import ServeMcpForks, Session


class ChildCtx:
    """A minimal supervisor context (companyd.supervision._child.ChildContext) for tests."""

    def __init__(self) -> None:
        self._stopping = asyncio.Event()
        self.ready = asyncio.Event()
        self.info: Any = None
        self.started_calls = 0

    @property
    def id(self) -> str:
        return "memory"

    @property
    def path(self) -> str:
        return "test/memory"

    @property
    def stopping(self) -> asyncio.Event:
        return self._stopping

    def started(self, info: Any = None) -> None:
        self.started_calls += 1
        self.info = info
        self.ready.set()


@pytest.fixture
def memfile(tmp_path: Path) -> Path:
    return tmp_path / "memory.jsonl"


def official_server() -> str | None:
    """Path of the official server's dist/index.js, or None (with the reason printed)."""
    path = os.environ.get("COMPANYD_OFFICIAL_MEMORY_SERVER")
    if not path:
        return None
    if shutil.which("node") is None or not Path(path).is_file():
        return None
    return path


def require_official() -> str:
    path = official_server()
    if path is None:
        env = os.environ.get("COMPANYD_OFFICIAL_MEMORY_SERVER")
        if not env:
            why = (
                "COMPANYD_OFFICIAL_MEMORY_SERVER is not set; run `export "
                "COMPANYD_OFFICIAL_MEMORY_SERVER=$(bench/install_official_memory_server.sh)`"
            )
        elif shutil.which("node") is None:
            why = "node is not installed"
        else:
            why = f"COMPANYD_OFFICIAL_MEMORY_SERVER={env!r} is not a file"
        print(f"skipping official-server interop: {why}")
        pytest.skip(f"official MCP memory server unavailable: {why}", allow_module_level=True)
    return path


@pytest.fixture
async def theirs(
    pair: tuple[Session, Session], pair_dir: Path
) -> AsyncIterator[tuple[Session, Path]]:
    """For a module with a ``pair`` of servers (ours, the official one) kept for the whole
    module, and their ``pair_dir``: the official server and its file, for one file test.
    Whatever the test leaves there is removed after it (a file the official server cannot
    read fails every call until it is gone).
    """
    path = pair_dir / "theirs.jsonl"
    path.unlink(missing_ok=True)
    try:
        yield pair[1], path
    finally:
        path.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def serve_mcp_forks() -> Iterator[ServeMcpForks]:
    """``companyd memory serve-mcp`` processes forked from the test process's fork server
    (mcp_helpers.ServeMcpForks; companyd.testing.forkserver, started on first use and
    closed at the process's exit): each xdist worker pays one import of what serve-mcp
    imports (~0.75 s of CPU) instead of one per process a test starts.
    """
    from .mcp_helpers import ServeMcpForks

    yield ServeMcpForks()
