"""``companyd runs`` as text (companyd.cli._runs_text): the list names each run's routine."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from companyd.cli._runs_text import run_list_lines


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
