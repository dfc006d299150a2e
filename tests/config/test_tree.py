"""Accepted spellings (config/_tree.py): camelCase and peer spellings with a deprecation
warning, canonical names in errors, bare words for the specs that take them.
"""

from __future__ import annotations

from .configkit import MINIMAL, errors, load

# -- spellings -------------------------------------------------------------------------


def test_camel_case_and_alias_spellings_work_with_a_deprecation_warning() -> None:
    cfg = load(
        """\
        company: {name: Acme, budget: {dailyUsd: 5}}
        supervisor: {within_seconds: 30, maxRestarts: 2}
        agents:
          ceo: {title: CEO, instructions: Lead.}
          cfo: {title: CFO, reportsTo: ceo, instructions: Count.}
        """
    )
    assert cfg.agents["cfo"].reports_to == "ceo"
    assert cfg.spec.supervisor.max_seconds == 30
    assert cfg.spec.supervisor.max_restarts == 2
    assert cfg.spec.company.budget.daily_usd == 5
    warnings = [str(w) for w in cfg.warnings]
    assert warnings == [
        "c.yaml:1:32: warning: company.budget.dailyUsd: 'dailyUsd' is a deprecated spelling "
        "of 'daily_usd'; it works for now — write 'daily_usd' instead",
        "c.yaml:2:14: warning: supervisor.within_seconds: 'within_seconds' is a deprecated "
        "spelling of 'max_seconds'; it works for now — write 'max_seconds' instead",
        "c.yaml:2:34: warning: supervisor.maxRestarts: 'maxRestarts' is a deprecated spelling "
        "of 'max_restarts'; it works for now — write 'max_restarts' instead",
        "c.yaml:5:21: warning: agents.cfo.reportsTo: 'reportsTo' is a deprecated spelling of "
        "'reports_to'; it works for now — write 'reports_to' instead",
    ]


def test_valid_key_lists_show_only_canonical_names() -> None:
    (line,) = errors(MINIMAL + "    reprts_to: ceo\n")
    assert "did you mean 'reports_to'?" in line
    assert "reportsTo" not in line
    assert "schema_" not in errors("schemas: x\n" + MINIMAL)[0]


def test_errors_under_a_camel_case_key_name_the_canonical_key() -> None:
    (line,) = errors(MINIMAL.replace("reports_to: ceo", "reportsTo: [ceo]"))
    assert line.startswith("c.yaml:11:16: agents.cfo.reports_to: expected text, got a list")


def test_provider_prefix_anthropic_is_accepted() -> None:
    cfg = load(MINIMAL + "    model: anthropic/claude-haiku-5-5\n")
    assert cfg.agents["cfo"].model.primary == "claude-haiku-5-5"
    assert cfg.warnings == ()


def test_bare_words_for_budget_model_and_catch_up() -> None:
    cfg = load(
        MINIMAL
        + "    budget: unlimited\n    model: claude-haiku-5-5\n"
        + "routines:\n  r:\n    assignee: cfo\n    description: D.\n"
        + "    trigger: {every: 1h}\n    catch_up: run_once\n"
    )
    budget = cfg.agents["cfo"].budget
    assert budget is not None and budget.unlimited
    assert cfg.routines["r"].catch_up.policy == "run_once"
    assert cfg.routines["r"].catch_up.grace == 3600
