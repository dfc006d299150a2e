"""``companyd runs`` as text (companyd.cli._runs_text): the list names each run's routine."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from companyd.cli._runs_text import last_lines, run_list_lines


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
    assert head.split()[:3] == ["started", "agent", "routine"]
    assert post.split()[:5] == ["2026-11-18", "11:06", "UTC", "marketing", "daily-post"]
    assert asked.split()[4] == "-"  # asked by the founder: no routine
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


def test_offline_costs_are_labelled_simulated_in_runs_and_runs_last() -> None:
    """Issue 28: offline spend is labelled simulated everywhere — `companyd runs` marks the
    cost of an offline run and says what the mark means; `runs last` says it in its header.
    """
    base = {"agent": "cfo", "routine": "weekly", "status": "ok", "steps": 1, "answer": "."}
    runs: list[Mapping[str, Any]] = [
        {**base, "run_id": "run-aaaaaaaaaaaa", "started": 1_795_000_000.0, "cost_usd": 0.0052,
         "offline": True},
        {**base, "run_id": "run-bbbbbbbbbbbb", "started": 1_795_000_100.0, "cost_usd": 0.0061,
         "offline": False},
    ]  # fmt: skip
    head, offline, real, note = run_list_lines(runs)
    assert "$0.0052*" in offline.split() and "$0.0061" in real.split()
    assert note.startswith("* simulated: the offline model's calls")
    assert head.index("cost") + len("cost") == offline.index("*") + 1  # still aligned
    assert " · $0.0052 (simulated) · " in last_lines(runs[0])[0]
    assert "(simulated)" not in last_lines(runs[1])[0]


def test_runs_show_says_who_answered_a_question_of_the_run() -> None:
    # an approval's step said "approved by Op via telegram"; an ask_founder answer said
    # only "The founder answered: …" — the desk's question now has its founder line
    from companyd.cli._runs_text import _decision

    answered = {
        "item_id": "q-8f8eb0d258",
        "round": 1,
        "decision": "answered",
        "by": "root",
        "via": "cli",
        "asked": 1_800_000_000.0,
        "decided": 1_800_000_060.0,
        "text": "the blue one",
    }
    assert _decision(answered, "UTC") == (
        "answered by root via cli at 2027-01-15 08:01:00 UTC (q-8f8eb0d258): the blue one"
    )
    waiting = {**answered, "decision": "pending", "decided": None, "text": ""}
    assert _decision(waiting, "UTC") == (
        "a question awaits an answer since 2027-01-15 08:00:00 UTC (q-8f8eb0d258)"
    )
