"""The verification rules themselves (companyd.agents._verification.evaluate, pure): each
``done_when`` kind met and unmet with its plain-words reason, and the claim check's
conservative rule (docs/agents.md, "Verification").
"""

from __future__ import annotations

from typing import Any

import pytest

from companyd.agents._verification import ToolCall, calls_of, evaluate
from companyd.runs import Step

TOOLS = ["post_update", "read_inbox", "create_entities", "add_observations", "recall", "consult"]


def call(name: str, ok: bool = True, result: str = "done", **given: Any) -> ToolCall:
    return ToolCall(tool_use_id=f"tu-{name}", name=name, input=given, ok=ok, result=result, seq=3)


def reasons(conditions: list[dict[str, Any]], answer: str, calls: list[ToolCall]) -> list[str]:
    verdict = evaluate(conditions, answer, calls, tools=TOOLS)
    return [c.evidence for c in verdict.checks if not c.met]


def test_tool_conditions() -> None:
    posted = {"tool": "post_update", "result_matches": r"posted id=\d+"}
    assert reasons([posted], "Posted.", [call("post_update", result="posted id=7: hi")]) == []
    assert reasons([posted], "Done — posted.", []) == [
        "no successful call of post_update; the answer says 'posted'"
    ]
    assert reasons([posted], "Here it is.", [call("post_update", ok=False, result="HTTP 500")]) == [
        "no successful call of post_update: 1 call(s) failed (the last: 'HTTP 500')"
    ]
    assert reasons([posted], "Sent.", [call("post_update", result="queued")]) == [
        r"no result of post_update matches /posted id=\d+/ (its last result: 'queued'); "
        "the answer says 'sent'"
    ]


def test_memory_conditions() -> None:
    wrote = call("add_observations", observations=[{"entityName": "Acme", "contents": ["x"]}])
    assert reasons([{"memory_written": True}], "ok", [wrote]) == []
    assert reasons([{"memory_written": True, "entity": "Acme"}], "ok", [wrote]) == []
    assert reasons([{"memory_written": True, "entity": "Globex"}], "ok", [wrote]) == [
        "no write to entity 'Globex' in the company memory (the run wrote to Acme)"
    ]
    read = call("read_graph")
    assert reasons([{"memory_written": True}], "ok", [read]) == ["no write to the company memory"]


def test_output_conditions() -> None:
    assert reasons([{"output_max_chars": 5}], "12345", []) == []
    assert reasons([{"output_max_chars": 5}], "123456", []) == [
        "the answer is 6 characters, more than 5"
    ]
    assert reasons([{"output_matches": r"^Q\d"}], "Q1 is up", []) == []
    assert reasons([{"output_matches": r"^Q\d"}], "up", []) == [r"the answer does not match /^Q\d/"]
    schema = {"type": "object", "required": ["title"]}
    assert reasons([{"output_json_schema": schema}], '```json\n{"title": "x"}\n```', []) == []
    assert reasons([{"output_json_schema": schema}], '{"name": 1}', []) == [
        "the answer's JSON does not match the schema: 'title' is a required property"
    ]
    [why] = reasons([{"output_json_schema": schema}], "Here you go", [])
    assert why.startswith("the answer is not JSON (Expecting value")
    # a schema that fails only when applied (a $ref deep inside) is unmet, never a crash
    deep = {"properties": {"a": {"$ref": "#/nope"}}}
    [why] = reasons([{"output_json_schema": deep}], '{"a": 1}', [])
    assert why.startswith("the schema could not be applied (")
    assert why.endswith("; fix output_json_schema in company.yaml")


@pytest.mark.parametrize(
    ("answer", "calls", "unmet"),
    [
        # a tool named in a sentence without a negation is a claim
        (
            "I used post_update to share it.",
            [],
            ["the answer names post_update, but no call of post_update succeeded in this run"],
        ),
        ("I used post_update to share it.", [call("post_update")], []),
        # a failed call does not hold the claim
        (
            "Shared with post_update.",
            [call("post_update", ok=False)],
            ["the answer names post_update, but no call of post_update succeeded in this run"],
        ),
        # a negation anywhere in the sentence: no claim
        ("post_update failed, so nothing went out.", [], []),
        ("I could not call post_update.", [], []),
        # plain-word tool names are never claims
        ("I will recall this and consult the CFO.", [], []),
        # a tool the agent does not have is not a claim either
        ("I used send_email.", [], []),
        # memory claims
        (
            "I saved it in the company memory.",
            [],
            ["the answer says it saved to the company memory, but the run wrote nothing to it"],
        ),
        ("Recorded the decision to memory.", [call("create_entities")], []),
        (
            "Recorded the decision to memory.",
            [call("read_graph")],
            ["the answer says it saved to the company memory, but the run wrote nothing to it"],
        ),
        ("Nothing was saved to the company memory.", [], []),
        ("The memory of the launch is fresh.", [], []),  # no save verb
    ],
)
def test_the_claim_check(answer: str, calls: list[ToolCall], unmet: list[str]) -> None:
    assert reasons([], answer, calls) == unmet


def test_claim_check_off_and_tools_left_to_done_when() -> None:
    assert evaluate([], "I used post_update.", [], tools=TOOLS, claim_check=False).checks == ()
    verdict = evaluate([{"tool": "post_update"}], "I used post_update.", [], tools=TOOLS)
    assert [c.source for c in verdict.checks] == ["done_when"]  # one reason, not two


def test_calls_are_read_from_journaled_steps() -> None:
    def step(seq: int, kind: str, key: str | None, payload: dict[str, Any]) -> Step:
        return Step(seq=seq, kind=kind, key=key, payload=payload, ts=0.0)

    rejected = [{"type": "text", "text": "rejected by the founder"}]
    steps = [
        step(1, "llm", None, {}),
        step(2, "tool_start", "a", {"name": "post_update", "input": {"text": "x"}}),
        step(3, "tool_result", "a", {"type": "tool_result", "content": "posted id=1"}),
        step(4, "approval", "b", {"name": "post_update", "input": {}}),
        step(5, "tool_result", "b", {"type": "tool_result", "is_error": True, "content": rejected}),
    ]
    got = calls_of(steps)
    assert [(c.name, c.ok, c.result, c.seq) for c in got] == [
        ("post_update", True, "posted id=1", 3),
        ("post_update", False, "rejected by the founder", 5),
    ]
