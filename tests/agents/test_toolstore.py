"""The tools store on both backends: daily call counts and the approved catalogues of the
MCP servers (docs/tools.md). Real SQLite and a throwaway PostgreSQL cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from companyd.clock import ManualClock
from companyd.desk._toolstore import Catalogue, RateLimits, ToolStore
from companyd.events import EventBus
from companyd.storage import Backend
from racekit import race_at

pytestmark = pytest.mark.anyio


def _tool(description: str, **annotations: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "description": description,
        "input_schema": {"type": "object"},
        "annotations": annotations,
    }


async def test_counts_are_per_day_and_survive_reopening(
    tmp_path: Path, state_backend: Backend
) -> None:
    store = ToolStore(tmp_path / "tools.sqlite", backend=state_backend)
    try:
        assert await store.take("a", "post", "2026-01-01", 2) == (True, 1, False)
        assert await store.take("a", "post", "2026-01-01", 2) == (True, 2, False)
        assert await store.take("a", "post", "2026-01-01", 2) == (False, 2, True)
        assert await store.take("a", "post", "2026-01-01", 2) == (False, 2, False)
        assert await store.take("b", "post", "2026-01-01", 2) == (True, 1, False)
    finally:
        await store.close()
    store = ToolStore(tmp_path / "tools.sqlite", backend=state_backend)
    try:
        assert await store.take("a", "post", "2026-01-01", 2) == (False, 2, False)
        assert await store.take("a", "post", "2026-01-02", 2) == (True, 1, False)
        assert await store.used("2026-01-01") == {("a", "post"): 2, ("b", "post"): 1}
    finally:
        await store.close()


async def test_the_day_is_the_companys(tmp_path: Path) -> None:
    store = ToolStore(tmp_path / "tools.sqlite")
    clock = ManualClock(start=1767225600.0 - 3600)  # 2025-12-31 23:00 UTC
    limits = RateLimits(store, bus=EventBus(clock), clock=clock, timezone=lambda: "Europe/Berlin")
    try:
        assert limits.today() == "2026-01-01"  # already midnight in Berlin
    finally:
        await store.close()


async def test_an_approval_beside_a_catalogue_check_waits_its_turn(tmp_path: Path) -> None:
    """The CLI approves held tools offline (`companyd tools approve`: no control socket yet)
    while the daemon's agent start compares a server's catalogue with the stored one: the
    approval comes between the check's read and its write. Each takes the write lock at
    ``BEGIN``: the check's reads stay true until its writes, the approval waits and then
    approves what the check held too — neither fails with "database is locked" (a plain
    ``BEGIN``'s stale snapshot), which would leave the agent without its tools.
    """
    daemon = ToolStore(tmp_path / "tools.sqlite")
    cli = ToolStore(tmp_path / "tools.sqlite")
    try:
        await daemon.check_catalogue("a", "s", {"t": _tool("t")})
        await daemon.check_catalogue("a", "s", {"t": _tool("t"), "v": _tool("v")}, now=100.0)
        listed = {"t": _tool("t"), "v": _tool("v"), "w": _tool("w")}
        checked, approved = await race_at(
            daemon._db,
            "INSERT INTO catalogue",
            daemon.check_catalogue("a", "s", listed, now=200.0),
            cli._db,
            cli.approve("s", "a"),
        )
        assert isinstance(checked, Catalogue), checked
        assert checked.offered == {"t"} and dict(checked.held) == {"v": "new tool", "w": "new tool"}
        assert sorted(approved) == [("a", "v"), ("a", "w")], approved
        after = await daemon.check_catalogue("a", "s", listed)
        assert after.offered == {"t", "v", "w"} and not after.held
    finally:
        await daemon.close()
        await cli.close()


async def test_the_first_catalogue_is_approved_then_changes_are_held_until_approved(
    tmp_path: Path, state_backend: Backend
) -> None:
    store = ToolStore(tmp_path / "tools.sqlite", backend=state_backend)
    try:
        first = await store.check_catalogue("a", "s", {"t": _tool("v1"), "u": _tool("u")})
        assert first.offered == {"t", "u"} and not first.held
        same = await store.check_catalogue("a", "s", {"t": _tool("v1"), "u": _tool("u")})
        assert same.offered == {"t", "u"} and not same.held
        changed = {"t": _tool("v1", destructiveHint=True), "u": _tool("u"), "v": _tool("v")}
        held = await store.check_catalogue("a", "s", changed, now=100.0)
        assert held.offered == {"u"}
        assert dict(held.held) == {"t": "changed annotations", "v": "new tool"}
        assert dict(held.newly_held) == dict(held.held)
        again = await store.check_catalogue("a", "s", changed)
        assert dict(again.held) == dict(held.held) and not again.newly_held  # told once
        assert await store.held() == [
            {"agent": "a", "server": "s", "tools": ["t", "v"], "since": 100.0}
        ]
        assert sorted(await store.approve("s")) == [("a", "t"), ("a", "v")]
        after = await store.check_catalogue("a", "s", changed)
        assert after.offered == {"t", "u", "v"} and not after.held
        gone = await store.check_catalogue("a", "s", {"u": _tool("u")})
        assert gone.offered == {"u"}
        back = await store.check_catalogue("a", "s", {"u": _tool("u"), "t": _tool("v1")})
        assert dict(back.held) == {"t": "new tool"}  # a removed tool was forgotten
    finally:
        await store.close()
