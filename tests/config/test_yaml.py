"""YAML corner cases (config/_yaml.py): merge keys and anchors, keys as written, alias
bombs and deep nesting refused.
"""

from __future__ import annotations

import pytest

from .configkit import MINIMAL, errors, load

# -- YAML corner cases -----------------------------------------------------------------


def test_merge_keys_and_anchors_are_honoured() -> None:
    cfg = load(
        """\
        company: {name: Acme, budget: {daily_usd: 5}}
        agents:
          ceo: {title: CEO, instructions: Lead.}
          cfo: &staff
            title: CFO
            reports_to: ceo
            instructions: Count.
            limits: {max_steps: 3}
          coo:
            <<: *staff
            title: COO
        """
    )
    coo = cfg.agents["coo"]
    assert coo.title == "COO"
    assert coo.reports_to == "ceo"
    assert coo.limits.max_steps == 3


def test_an_error_inside_a_merged_anchor_is_reported_once() -> None:
    lines = errors(
        """\
        company: {name: Acme, budget: {daily_usd: 5}}
        agents:
          ceo: {title: CEO, instructions: Lead.}
          cfo: &staff
            title: CFO
            reports_to: ceo
            instructions: Count.
            limits: {max_steps: x, max_steps: 2}
          coo:
            <<: *staff
            title: COO
        """
    )
    assert lines == [
        "c.yaml:8:25: agents.cfo.limits.max_steps: expected a whole number, got 'x'",
        "c.yaml:8:28: agents.cfo.limits.max_steps: duplicate key 'max_steps' (first at line "
        "8); YAML would silently keep only the last one — merge them into one entry",
    ]


def test_keys_are_text_as_written() -> None:
    # YAML 1.1 reads the key `on` as True and `1` as an int: they must stay "on" and "1".
    lines = errors(MINIMAL + "alerts:\n  on: [crash]\n")
    assert lines[0].startswith("c.yaml:14:3: alerts.on: unknown key 'on'")


def test_alias_bomb_is_refused_quickly() -> None:
    layers = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 9):
        layers.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    lines = errors("\n".join(layers) + "\n")
    assert lines == [
        "c.yaml:1:1: expected at most 100000 values, got more (YAML aliases expanding into "
        "each other?); company.yaml is never this large"
    ]


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    lines = errors("a: " + "[" * 500 + "]" * 500 + "\n")  # deeper than PyYAML can recurse
    assert len(lines) == 1 and "levels of nesting" in lines[0]
    lines = errors("company: " + "{a: " * 60 + "1" + "}" * 60 + "\n")
    assert any("levels of nesting" in line for line in lines)


# -- syntax errors in the operator's words -------------------------------------------------
# (name: Acme is line 3 of MINIMAL; each case replaces it)

SYNTAX = [
    (
        "name: *Acme* Inc",
        "c.yaml:3:9: YAML syntax error: '*' starts an alias (a reference to an '&anchor') and "
        "'&' an anchor; to write text that starts with either, put the value in quotes",
    ),
    (
        "name: *acme",
        "c.yaml:3:9: YAML syntax error: the alias *acme refers to no '&acme' above it; define "
        "that anchor first, or put the value in quotes if it is text",
    ),
    (
        "name: `acme`",
        "c.yaml:3:9: YAML syntax error: a value cannot start with '`' (YAML reserves it); put "
        "the value in quotes",
    ),
    (
        "name: | Acme",
        "c.yaml:3:9: YAML syntax error: '|' and '>' start a text on the lines below, indented; "
        "move the text there, or put the value in quotes",
    ),
    (
        "name: ? Acme",
        "c.yaml:3:9: YAML syntax error: a value cannot start with '? '; put the value in quotes",
    ),
    (
        'name: "Acme" Inc',
        "c.yaml:3:16: YAML syntax error: text after a value's closing quote or bracket; put the "
        "whole value in quotes (a quote inside it doubled: 'it''s')",
    ),
    (  # the would-be key runs into the next line's key (the scanner's "simple key" case)
        "name:Acme\n  budget:",
        "c.yaml:3:3: YAML syntax error: no space after the colon in 'name:Acme', so YAML reads "
        "it as text, not as the key 'name'; write `name: Acme`",
    ),
    (
        "name: Acme\n  tags:\n    - a\n    b: c",
        "c.yaml:6:5: YAML syntax error: a 'key: value' line among the items of a list (the "
        "block from line 5); start it with '- ' to make it an item, or indent it less to end "
        "the list",
    ),
    (  # a key indented deeper than the one above: more of that key's value
        "name: Acme\n    timezone: UTC",
        "c.yaml:4:5: YAML indentation: this line is indented more than the key on line 3, so "
        "YAML reads it as more of that key's value, which cannot hold ': '; indent it like "
        "that key (or, if it is text, put the whole value in quotes)",
    ),
    (  # ': ' in a one-line value: PyYAML's case, told as before
        "name: Acme: Inc",
        "c.yaml:3:13: YAML syntax error: a ': ' where a value was expected; put the value in "
        "quotes if it contains ': ', or fix the indentation",
    ),
    (  # nothing matches: PyYAML's words, with where its context started
        "name: Acme\n  tags: [a, b",
        "c.yaml:5:9: YAML syntax error: expected ',' or ']', but got ':'; fix the syntax at "
        "this position (is the '{' or '[' on line 4 left unclosed?)",
    ),
]


@pytest.mark.parametrize(("line", "message"), SYNTAX, ids=[s[0] for s in SYNTAX])
def test_syntax_errors_say_what_to_change(line: str, message: str) -> None:
    text = MINIMAL.replace("name: Acme", line, 1)
    assert text != MINIMAL
    assert errors(text) == [message]


def test_a_quote_never_closed_is_shown_where_it_opens() -> None:
    text = MINIMAL.replace("instructions: Count.", 'instructions: "Count.', 1)
    assert errors(text) == [
        "c.yaml:12:19: YAML syntax error: this quote is never closed; close it at the end of "
        "its value"
    ]


def test_an_anchor_nothing_refers_to_is_a_warning() -> None:
    # `&Co` makes an anchor, and YAML drops it from the value without a word
    cfg = load(MINIMAL.replace("name: Acme", "name: &Co Acme", 1))
    assert cfg.name == "Acme"
    assert [str(w) for w in cfg.warnings] == [
        "c.yaml:3:9: warning: the anchor &Co is never used (no *Co refers to it), so YAML "
        "drops '&Co' from the value; if it is part of the text, put the whole value in "
        "quotes, or else remove it"
    ]
    used = load(MINIMAL.replace("name: Acme", "name: &n Acme\n  context: *n", 1))
    assert used.warnings == ()


def test_a_comment_that_reads_like_text_is_a_warning() -> None:
    # ` #` starts a YAML comment: "Acme #1 bakery" is the name "Acme", the rest dropped
    cfg = load(MINIMAL.replace("name: Acme", "name: Acme #1 bakery", 1))
    assert cfg.name == "Acme"
    assert [str(w) for w in cfg.warnings] == [
        "c.yaml:3:14: warning: company.name: YAML reads '#1 bakery' as a comment, so this "
        "value is 'Acme' without it; if the '#…' is part of the text, put the whole value in "
        "quotes; if it is a comment, write '# ' with a space after the '#'"
    ]
    # a comment written as one, a quoted value, a number: nothing to say
    for line in ("name: Acme  # the legal name", 'name: "Acme #1"', "name: Acme\n  #1 x"):
        assert load(MINIMAL.replace("name: Acme", line, 1)).warnings == (), line
    quoted = load(MINIMAL.replace("name: Acme", 'name: "Acme #1"', 1))
    assert quoted.name == "Acme #1"


def test_a_bracket_left_open_at_the_end_is_named_on_its_own_line() -> None:
    # PyYAML's context mark for "a flow node" is where the value was expected (the line
    # after), not the bracket: the hint named the wrong line
    text = MINIMAL + "notes: [\n"
    line = text.count("\n")  # the bracket's line, 1-based
    (message,) = errors(text)
    assert message.endswith(f"(is the '{{' or '[' on line {line} left unclosed?)"), message
