"""docs/events.md documents every known event kind (alerts, logs and operators rely on it)."""

from __future__ import annotations

from pathlib import Path

from companyd.events import EVENT_TYPES, KINDS
from companyd.events._catalog import MODULES

DOC = (Path(__file__).resolve().parents[1] / "docs" / "events.md").read_text(encoding="utf-8")


def test_every_known_event_kind_is_documented() -> None:
    missing = [k for k in KINDS if f"`{k}`" not in DOC]
    assert missing == [], f"add these kinds to docs/events.md: {missing}"


def test_each_module_of_kinds_has_its_section_in_order() -> None:
    # the sections follow events.catalog.MODULES: supervision, daemon, agents, money,
    # routines, memory, pager, tools
    sections = DOC.split("\n## ")[1 : 1 + len(MODULES)]
    for module, section in zip(MODULES, sections, strict=True):
        kinds = [c.KIND for c in EVENT_TYPES.values() if c.__module__ == module.__name__]
        misplaced = [k for k in kinds if f"| `{k}` |" not in section]
        assert misplaced == [], f"{module.__name__}: move {misplaced} to {section[:40]!r}"
