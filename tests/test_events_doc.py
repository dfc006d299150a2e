"""docs/events.md documents every known event kind (alerts, logs and operators rely on it)."""

from __future__ import annotations

from pathlib import Path

from companyd.events import KINDS

DOC = (Path(__file__).resolve().parents[1] / "docs" / "events.md").read_text(encoding="utf-8")


def test_every_known_event_kind_is_documented() -> None:
    missing = [k for k in KINDS if f"`{k}`" not in DOC]
    assert missing == [], f"add these kinds to docs/events.md: {missing}"
