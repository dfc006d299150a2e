"""``done_when:`` in company.yaml (issue 27): regexes, JSON Schemas and tool names are checked
at load, with file, line and field; the resolved routine carries the conditions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from companyd.agents._verification import CLAIM_CHECK_RULE, evaluate
from companyd.config import load_config_text
from companyd.config._done_when import MEMORY_TOOLS
from companyd.errors import ConfigError
from companyd.memory._tools import TOOL_NAMES

ROOT = Path(__file__).resolve().parents[2]

HEAD = """\
schema: companyd/v1
company: {name: Acme, budget: {daily_usd: 5}}
agents:
  ceo: {title: CEO, instructions: Lead., tools: {deny: [delete_entities]}}
routines:
  post:
    assignee: ceo
    description: Write the post.
    trigger: {cron: "0 14 * * *"}
"""


def _errors(done_when: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config_text(HEAD + "    done_when:\n" + done_when, file="c.yaml")
    return [str(i) for i in info.value.issues]


def test_a_bad_regex_names_its_line_field_and_what_to_do() -> None:
    [err] = _errors('      - {output_matches: "id=(\\\\d+"}\n')
    assert err.startswith("c.yaml:11:")
    assert "routines.post.done_when.0.output_matches" in err
    assert "expected a regular expression" in err and "'id=(\\\\d+'" in err
    assert "missing ), unterminated subpattern at position 3" in err


def test_a_bad_json_schema_is_an_error_at_load() -> None:
    [err] = _errors("      - {output_json_schema: {type: objekt}}\n")
    assert "routines.post.done_when.0.output_json_schema" in err
    assert "expected a valid JSON Schema" in err and "'objekt'" in err


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("{$schema: 5}", "expected '$schema' to name a JSON Schema draft jsonschema knows"),
        ("{$schema: 'http://nope'}", "got 'http://nope'; fix it, or leave '$schema' out"),
        ("{$ref: '#/nope'}", "expected a JSON Schema that can be applied"),
    ],
)
def test_a_schema_that_cannot_be_applied_is_an_error_too(schema: str, message: str) -> None:
    [err] = _errors(f"      - {{output_json_schema: {schema}}}\n")
    assert "done_when.0.output_json_schema" in err and message in err


def test_one_kind_per_item_and_refinements_with_their_kind() -> None:
    errs = _errors(
        "      - {memory_written: true, output_max_chars: 3}\n"
        "      - {entity: x, output_matches: a}\n"
    )
    assert any("expected exactly one of 'tool'" in e and "done_when.0" in e for e in errs)
    assert any("'entity' refines a 'memory_written' condition" in e for e in errs)


def test_a_tool_the_agent_cannot_have_is_an_error() -> None:
    errs = _errors("      - {tool: post_update}\n      - {tool: delete_entities}\n")
    assert any(
        "done_when.0.tool" in e and "expected one of 'ceo''s tools, got 'post_update'" in e
        for e in errs
    ), errs
    assert any("done_when.1.tool" in e and "is in 'ceo''s tools.deny" in e for e in errs)


def test_resolved_conditions_and_defaults() -> None:
    cfg = load_config_text(
        HEAD
        + "    done_when:\n      - {tool: add_observations, result_matches: 'ok'}\n"
        + "      - {output_max_chars: 280}\n    on_unmet: report\n",
        file="c.yaml",
    )
    r = cfg.routines["post"]
    assert r.done_when == (
        {"tool": "add_observations", "result_matches": "ok"},
        {"output_max_chars": 280},
    )
    assert r.on_unmet == "report"
    assert hash(r) == hash(r)  # a resolved routine stays hashable, as before
    assert cfg.agents["ceo"].claim_check is True
    off = load_config_text(HEAD.replace("routines:", "defaults: {claim_check: false}\nroutines:"))
    assert off.agents["ceo"].claim_check is False


def test_the_built_in_tool_names_are_the_memory_servers() -> None:
    # config sits below memory, so it keeps its own copy of the names
    assert frozenset((*TOOL_NAMES, "recall")) == MEMORY_TOOLS


def test_the_claim_check_rule_is_documented_word_for_word() -> None:
    doc = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    assert f"  > {CLAIM_CHECK_RULE}\n" in doc
    # and the follow-up the agent is sent, as the docs show it
    verdict = evaluate([{"tool": "post_update"}], "Done — posted.", [])
    assert f"```text\n{verdict.follow_up()}\n```" in doc
