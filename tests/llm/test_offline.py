"""The offline stand-in's answers (companyd.llm._offline): whole sentences, never cut
mid-word — an answer that stops mid-sentence reads as a truncation bug (issue 28).
"""

from __future__ import annotations

import asyncio

import pytest

from companyd.llm._model import ModelRequest
from companyd.llm._offline import OfflineModel


def _answer(prompt: str) -> str:
    request = ModelRequest(
        model="claude-sonnet-5-5",
        system="s",
        messages=[{"role": "user", "content": f"Task t-1 from routine:x\n\n{prompt}"}],
        metadata={"agent": "marketing"},
    )
    response = asyncio.run(OfflineModel().create(request))
    assert response.stop_reason == "end_turn" and response.offline
    text = response.content[0]
    assert text["type"] == "text"
    return str(text["text"])


@pytest.mark.parametrize(
    "prompt",
    [
        "Draft today's social post about one concrete customer problem we solve. Keep it "
        "under 200 words, in a friendly voice, and end with a question that invites replies "
        "from founders who run their company alone.",
        "Summarise the week's spend by agent and flag anything above the budget",
        " ".join(["word"] * 80),
    ],
)
def test_an_offline_answer_is_whole_sentences(prompt: str) -> None:
    answer = _answer(prompt)
    assert answer.startswith("[offline] marketing handled the task: ")
    assert answer.endswith((".", "!", "?")), answer
    said = answer.removeprefix("[offline] marketing handled the task: ")
    # every word shown is a whole word of the task (none cut in the middle)
    words = {w.strip(".") for w in prompt.split()}
    assert all(w.strip(".") in words for w in said.split() if w != "(…)."), said


def test_a_short_task_is_named_whole() -> None:
    answer = _answer("What did we spend on LLM calls this week?")
    said = "What did we spend on LLM calls this week?"
    assert answer == f"[offline] marketing handled the task: {said}"
