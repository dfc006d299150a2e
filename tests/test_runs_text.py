"""``companyd runs`` as text (companyd.cli.runs_text): the list names each run's routine."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from companyd.cli.runs_text import run_list_lines


def test_the_run_list_shows_the_routine_of_each_run() -> None:
    runs: list[Mapping[str, Any]] = [
        {
            "run_id": "run-aaaaaaaaaaaa",
            "agent": "marketing",
            "routine": "daily-post",
            "status": "ok",
            "started": 1_795_000_000.0,
            "cost_usd": 0.0057,
            "steps": 2,
            "answer": "Five ways clinics lose patients.",
        },
        {
            "run_id": "run-bbbbbbbbbbbb",
            "agent": "cfo",
            "routine": None,
            "status": "ok",
            "started": 1_795_000_100.0,
            "cost_usd": 0.0054,
            "steps": 2,
            "answer": "We spent $3.",
        },
    ]
    head, post, asked = run_list_lines(runs)
    assert head.split()[:4] == ["started", "(UTC)", "agent", "routine"]
    assert post.split()[3] == "daily-post"
    assert asked.split()[3] == "-"  # asked by the founder: no routine
    # the columns line up
    assert head.index("routine") == post.index("daily-post") == asked.index("- ")


def _cost_cells(lines: list[str]) -> list[str]:
    return [w for line in lines[1:] for w in line.split() if w.startswith("$")]


def test_every_cost_in_the_run_list_has_the_same_precision_and_none_shows_as_zero() -> None:
    """Issue 28: money within one table has one precision, with enough digits that an
    amount that is not zero is not shown as zero.
    """
    base = {"agent": "cfo", "routine": None, "status": "ok", "steps": 1, "answer": "."}
    runs: list[Mapping[str, Any]] = [
        {**base, "run_id": "run-aaaaaaaaaaaa", "started": 1_795_000_000.0, "cost_usd": 1.25},
        {**base, "run_id": "run-bbbbbbbbbbbb", "started": 1_795_000_100.0, "cost_usd": 0.00002},
        {**base, "run_id": "run-cccccccccccc", "started": 1_795_000_200.0, "cost_usd": 0.0},
    ]
    assert _cost_cells(run_list_lines(runs)) == ["$1.25000", "$0.00002", "$0.00000"]
    cheap: list[Mapping[str, Any]] = [
        {**r, "cost_usd": c} for r, c in zip(runs, (0.0057, 0.0054, 0.0), strict=True)
    ]
    assert _cost_cells(run_list_lines(cheap)) == ["$0.0057", "$0.0054", "$0.0000"]
