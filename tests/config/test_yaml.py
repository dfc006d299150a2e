"""YAML corner cases (config/_yaml.py): merge keys and anchors, keys as written, alias
bombs and deep nesting refused.
"""

from __future__ import annotations

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
