"""Outbox rows written before events were typed still load and render the same.

The alert outbox stores each alert's merged event ``data`` as JSON (``AlertRecord.to_row``).
Events became one frozen dataclass per kind; their JSON view was kept as it was, so a row
written by the previous version (commit f3cbcfa, ``bus.emit(kind, source, **data)``) must
still load, render and coalesce with the typed events of this version.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from companyd.alerts._outbox import AlertStore
from companyd.alerts._render_kinds import render
from companyd.events import BudgetThreshold, ChildExited, Restart

AGENTS = frozenset({"ceo", "cfo"})
T0 = 1_800_000_000.0

# What the previous version published for a crash of cfo and its restart, as merged into one
# alert (later values win) and stored.
OLD_CHILD_EXITED: dict[str, Any] = {
    "child": "cfo",
    "restart_type": "permanent",
    "action": "restart",
    "reason": "error:RuntimeError('boom')",
    "exception": "RuntimeError",
    "message": "boom",
}
OLD_RESTART: dict[str, Any] = {
    "child": "cfo",
    "strategy": "one_for_one",
    "restarts": 1,
    "max_restarts": 3,
    "max_seconds": 5.0,
    "group": ["cfo"],
}
OLD_THRESHOLD: dict[str, Any] = {
    "scope": "agent",
    "agent": "cfo",
    "period": "day",
    "key": "2027-01-15",
    "level": 0.8,
    "used_usd": 1.6,
    "limit_usd": 2.0,
    "resets_at": "2027-01-16T00:00:00+00:00",
    "message": "agent cfo has used 80% of its daily budget ($1.60 of $2.00)",
}


def _old_body(kind: str, severity: str, source: str, data: dict[str, Any], counts: Any) -> str:
    """A row body exactly as ``AlertRecord.to_row`` of the previous version wrote it."""
    return json.dumps(
        {
            "kind": kind,
            "severity": severity,
            "source": source,
            "data": data,
            "counts": counts,
            "first_ts": T0,
            "last_ts": T0 + 1,
            "held_until": None,
            "status": "open",
            "folded_into": None,
            "text": "(the text sent then)",
            "buttons": [],
            "footer": [],
            "version": 1,
            "edit_after": 0.0,
            "next_button": 1,
            "deliveries": {},
        },
        ensure_ascii=False,
    )


def test_typed_events_have_the_json_shape_of_the_old_ones() -> None:
    exited = ChildExited(source="companyd/agents", **OLD_CHILD_EXITED)
    restart = Restart(source="companyd/agents", **OLD_RESTART)
    threshold = BudgetThreshold(source="spend", **OLD_THRESHOLD)
    assert json.dumps(exited.data) == json.dumps(OLD_CHILD_EXITED)  # keys in the same order
    assert json.dumps(restart.data) == json.dumps(OLD_RESTART)
    assert json.dumps(threshold.data) == json.dumps(OLD_THRESHOLD)


@pytest.mark.anyio
async def test_an_outbox_row_of_the_previous_version_still_renders(tmp_path: Path) -> None:
    path = tmp_path / "alerts.sqlite"
    store = AlertStore(path)
    assert await store.open() is None
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO alerts (id, key, window_end, settled, created, body) "
            "VALUES (?, ?, ?, 0, ?, ?)",
            [
                (
                    1,
                    "crash|companyd/agents|cfo",
                    T0 + 300,
                    T0,
                    _old_body(
                        "child_exited",
                        "warning",
                        "companyd/agents",
                        {**OLD_CHILD_EXITED, **OLD_RESTART},
                        {"child_exited": 1, "restart": 1},
                    ),
                ),
                (
                    2,
                    "budget_threshold|spend|agent|cfo|day|0.8",
                    T0 + 300,
                    T0,
                    _old_body(
                        "budget_threshold",
                        "warning",
                        "spend",
                        OLD_THRESHOLD,
                        {"budget_threshold": 1},
                    ),
                ),
            ],
        )
    store = AlertStore(path)
    assert await store.open() is None
    try:
        records, next_id = await store.load_active(T0)
    finally:
        await store.close()
    assert [r.id for r in records] == [1, 2] and next_id == 3
    crash, threshold = records

    rendered, buttons = render(crash.kind, crash.data, crash.source, crash.counts, AGENTS)
    assert rendered.title == "cfo crashed and was restarted"
    assert "reason: error:RuntimeError('boom')" in rendered.lines
    assert any("the supervisor gives up above 3" in line for line in rendered.lines)
    assert [b.action for b in buttons] == ["pause"]

    rendered, buttons = render(
        threshold.kind, threshold.data, threshold.source, threshold.counts, AGENTS
    )
    assert rendered.title == "cfo has used 80% of its daily budget"
    assert rendered.lines == ("$1.60 of $2.00",)
    assert [b.action for b in buttons] == ["pause", "raise"]

    # a typed event of this version coalesces into the old row as the old events did
    again = Restart(source="companyd/agents", **{**OLD_RESTART, "restarts": 2})
    merged = {**crash.data, **again.data}
    counts = {**crash.counts, "restart": 2}
    rendered, _ = render(crash.kind, merged, crash.source, counts, AGENTS)
    assert rendered.title == "cfo is crash-looping: 2 crashes"
