"""The pure parts of the Spend and Memory pages: the stacked chart's series and the
neighbourhood's ring layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from companyd.dashboard._graph import HEIGHT, WIDTH, ring_layout
from companyd.dashboard._pages.spend import stacked_series


@dataclass
class Report:
    """The fields of a per-day ``SpendReport`` that the chart reads."""

    period: dict[str, str]
    rows: list[dict[str, Any]] = field(default_factory=list)


def row(day: str, key: str | None, usd: float) -> dict[str, Any]:
    return {"day": day, "key": key, "cost_usd": usd}


def test_every_day_of_the_period_has_a_value_per_group_most_expensive_first() -> None:
    report = Report(
        {"from": "2026-11-01", "to": "2026-11-03"},
        [
            row("2026-11-01", "cfo", 1.0),
            row("2026-11-01", "ceo", 3.0),
            row("2026-11-03", None, 2.5),
        ],
    )
    s = stacked_series(report, limit=10.0)
    assert s["days"] == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert s["groups"] == ["ceo", "(none)", "cfo"]
    assert s["usd"] == [[3.0, 0.0, 0.0], [0.0, 0.0, 2.5], [1.0, 0.0, 0.0]]
    assert s["totals"] == [4.0, 0.0, 2.5]
    assert s["epochs"][1] - s["epochs"][0] == 86400
    assert s["limit_drawn"] is True  # 4.0 is within a fifth of 10.0


def test_a_budget_far_above_the_spend_is_not_drawn_and_a_long_period_keeps_spent_days() -> None:
    tiny = stacked_series(Report({"from": "2026-11-01", "to": "2026-11-01"}, [
        row("2026-11-01", "cfo", 0.02)]), limit=10.0)  # fmt: skip
    assert tiny["limit"] == 10.0 and tiny["limit_drawn"] is False
    assert (
        stacked_series(Report({"from": "2026-11-01", "to": "2026-11-01"}), None)["limit_drawn"]
        is False
    )
    years = Report({"from": "2000-01-01", "to": "2026-11-25"}, [row("2026-11-02", "cfo", 1.0)])
    assert stacked_series(years, None)["days"] == ["2026-11-02"]


def test_the_ring_layout_centres_the_entity_and_rings_its_neighbours() -> None:
    layout = ring_layout(
        "Acme",
        [{"name": "Bob", "distance": 1}, {"name": "Clinic", "distance": 1},
         {"name": "Far", "distance": 2}],
        ["Northwind"],
        [{"from": "Bob", "to": "Acme", "relationType": "works_at"},
         {"from": "Far", "to": "Clinic", "relationType": "x"},
         {"from": "Ghost", "to": "Acme", "relationType": "not drawn"}],
    )  # fmt: skip
    nodes = {n["name"]: n for n in layout.nodes}
    assert nodes["Acme"]["kind"] == "center"
    assert (nodes["Acme"]["x"], nodes["Acme"]["y"]) == (WIDTH / 2, HEIGHT / 2)
    assert nodes["Northwind"]["kind"] == "end" and nodes["Northwind"]["distance"] == 3
    for n in layout.nodes:
        assert 0 <= n["x"] <= WIDTH and 0 <= n["y"] <= HEIGHT, n
    assert [e["label"] for e in layout.edges] == ["Bob works_at Acme", "Far x Clinic"]
    assert ring_layout("Acme", [], [], []).nodes[0]["name"] == "Acme"
    long = ring_layout("x" * 40, [], [], []).nodes[0]["label"]
    assert len(long) == 18 and long.endswith("…")
