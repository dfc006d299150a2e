"""companyd.config: loading, resolution, aliases, YAML corner cases and secret references."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from companyd.config import (
    CompanyConfig,
    load_config,
    load_config_text,
    parse_duration,
    secret_references,
)
from companyd.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "company.yaml"

MINIMAL = """\
schema: companyd/v1
company:
  name: Acme
  budget: {daily_usd: 5}
agents:
  ceo:
    title: CEO
    instructions: Lead.
  cfo:
    title: CFO
    reports_to: ceo
    instructions: Count.
"""


def load(text: str, base: Path | None = None) -> CompanyConfig:
    return load_config_text(textwrap.dedent(text), file="c.yaml", base_dir=base)


def errors(text: str, base: Path | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(text, base)
    return [str(i) for i in info.value.issues]


# -- the example company ----------------------------------------------------------------


def test_example_company_resolves_with_defaults_filled_in() -> None:
    cfg = load_config(EXAMPLE)
    assert cfg.path == EXAMPLE
    assert list(cfg.agents) == [
        "ceo",
        "cfo",
        "accountant",
        "coo",
        "lawyer",
        "marketing",
        "cto",
        "improver",
    ]
    assert cfg.root_agent() == "ceo"
    assert cfg.tree_depth() == 3
    assert set(cfg.departments) == {"finance", "operations", "growth", "engineering"}
    assert cfg.departments["finance"].agents == ("cfo", "accountant")
    # defaults fill what an agent leaves out; its own settings win
    cfo, accountant, ceo = cfg.agents["cfo"], cfg.agents["accountant"], cfg.agents["ceo"]
    assert cfo.model.chain == ("claude-sonnet-5-5", "claude-haiku-5-5")
    assert accountant.model.chain == ("claude-haiku-5-5",)
    assert cfo.budget is not None and cfo.budget.daily_usd == 2
    assert ceo.budget is not None and ceo.budget.daily_usd == 3
    assert accountant.restart == "transient" and cfo.restart == "permanent"
    assert cfg.agents["marketing"].limits.max_seconds == 300
    assert cfo.limits.max_seconds == 600
    assert cfo.heartbeat_seconds == 300
    assert "cash, runway and spend" in cfo.instructions
    # routines take the company time zone unless they name one
    assert cfg.routines["weekly-spend-review"].timezone == "UTC"
    assert cfg.routines["daily-post"].cron == "0 14 * * *"
    assert cfg.routines["heartbeat"].every == 300
    assert cfg.routines["month-close"].catch_up.grace == 86400
    assert cfg.warnings == ()
    assert cfg.text == EXAMPLE.read_text(encoding="utf-8")


def test_starter_written_by_init_is_valid() -> None:
    from importlib.resources import files

    text = files("companyd").joinpath("starter.yaml").read_text(encoding="utf-8")
    cfg = load_config_text(text, file="starter.yaml")
    assert cfg.warnings == ()
    assert cfg.root_agent() == "ceo"


# -- durations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (90, 90.0),
        (1.5, 1.5),
        ("90", 90.0),
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("2d", 172800.0),
        (" 1h 30m ", 5400.0),
        ("0.5h", 1800.0),
    ],
)
def test_parse_duration_accepts_the_documented_forms(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", [True, "soon", "5 minutes", "5ms", "", "m5", math.inf, None])
def test_parse_duration_refuses_anything_else_and_names_the_forms(value: object) -> None:
    with pytest.raises(ValueError, match=r"30s, 5m, 1h30m or 1d.*got"):
        parse_duration(value)


# -- spellings --------------------------------------------------------------------------


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


# -- YAML corner cases ------------------------------------------------------------------


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


def test_leading_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    f = tmp_path / "company.yaml"
    f.write_bytes(b"\xef\xbb\xbf" + MINIMAL.encode())
    assert load_config(f).name == "Acme"


def test_utf16_file_is_reported_as_not_utf8(tmp_path: Path) -> None:
    f = tmp_path / "company.yaml"
    f.write_bytes(MINIMAL.encode("utf-16"))
    with pytest.raises(ConfigError) as info:
        load_config(f)
    first = str(info.value.issues[0])
    assert first.startswith(f"{f}:1:1: expected UTF-8 text, got")


def test_unreadable_paths_have_no_position(tmp_path: Path) -> None:
    for path, words in [
        (tmp_path / "nope.yaml", "file not found; create one with `companyd init`"),
        (tmp_path, "expected a file, got a directory"),
    ]:
        with pytest.raises(ConfigError) as info:
            load_config(path)
        (issue,) = info.value.issues
        assert (issue.line, issue.column) == (0, 0)
        assert words in issue.message


def test_a_file_far_larger_than_any_company_yaml_is_refused_without_reading_it_all(
    tmp_path: Path,
) -> None:
    # A sparse 64 MB file (or a path such as /dev/zero) was read whole into memory first:
    # slow at best, an "internal error: MemoryError" at worst.
    f = tmp_path / "company.yaml"
    with f.open("wb") as out:
        out.write(MINIMAL.encode())
        out.truncate(64 * 1024 * 1024)
    with pytest.raises(ConfigError) as info:
        load_config(f)
    (issue,) = info.value.issues
    assert (issue.line, issue.column) == (0, 0)
    assert issue.message.startswith(
        "expected a company.yaml of at most 10 MB, got a larger file"
    ), issue.message


# -- instruction files ------------------------------------------------------------------


def test_instructions_file_is_loaded_relative_to_the_company_file(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "cfo.md").write_text("You own the cash.\n", encoding="utf-8")
    f = tmp_path / "company.yaml"
    f.write_text(
        MINIMAL.replace("instructions: Count.", "instructions_file: agents/cfo.md"),
        encoding="utf-8",
    )
    cfg = load_config(f)
    assert cfg.agents["cfo"].instructions == "You own the cash.\n"


def test_instructions_file_that_is_not_utf8_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "cfo.md").write_bytes(b"caf\xe9")
    lines = errors(MINIMAL.replace("instructions: Count.", "instructions_file: cfo.md"), tmp_path)
    assert lines == [
        "c.yaml:12:24: agents.cfo.instructions_file: expected UTF-8 text in 'cfo.md', got the "
        "byte at offset 3"
    ]


def test_instructions_file_far_larger_than_any_prompt_is_an_error(tmp_path: Path) -> None:
    with (tmp_path / "cfo.md").open("wb") as out:
        out.truncate(64 * 1024 * 1024)
    lines = errors(MINIMAL.replace("instructions: Count.", "instructions_file: cfo.md"), tmp_path)
    assert lines == [
        "c.yaml:12:24: agents.cfo.instructions_file: expected instructions of at most 1 MB in "
        "'cfo.md', got a larger file; check the path"
    ]


def test_crewai_role_and_goal_become_instructions() -> None:
    cfg = load(
        MINIMAL.replace(
            "instructions: Count.",
            "role: Finance lead\n    goal: Keep runway above 12 months\n    backstory: Ex-banker.",
        )
    )
    assert cfg.agents["cfo"].instructions == (
        "Role: Finance lead\nGoal: Keep runway above 12 months\nEx-banker."
    )


# -- warnings ---------------------------------------------------------------------------


def test_unknown_model_is_a_warning_not_an_error() -> None:
    cfg = load(MINIMAL + "    model: {primary: claude-nova-9, fallbacks: [openai/gpt-4o]}\n")
    assert [str(w) for w in cfg.warnings] == [
        "c.yaml:13:22: warning: agents.cfo.model.primary: unknown model id 'claude-nova-9': it "
        "will be priced at the most expensive known rate; check the spelling, or add its "
        "price under 'pricing'",
        "c.yaml:13:49: warning: agents.cfo.model.fallbacks.0: model 'openai/gpt-4o' names the "
        "provider 'openai', but companyd calls only Anthropic's Messages API: this model will "
        "fail at run time; use a Claude model id",
    ]


def test_a_routine_of_a_disabled_agent_is_a_warning_not_an_error() -> None:
    # Switching an agent off must not make yesterday's file refuse to start or reload.
    cfg = load(
        MINIMAL
        + "    enabled: false\n"
        + "routines:\n"
        + "  close:\n"
        + "    assignee: cfo\n"
        + "    description: Close the month.\n"
        + "    trigger: {cron: '0 8 1 * *'}\n"
        + "  paused:\n"
        + "    assignee: cfo\n"
        + "    description: Off with its agent.\n"
        + "    trigger: {every: 1h}\n"
        + "    enabled: false\n"
    )
    assert [str(w) for w in cfg.warnings] == [
        "c.yaml:16:15: warning: routines.close.assignee: assignee 'cfo' has `enabled: false`: "
        "every fire of this routine will be cancelled; enable the agent, or set "
        "`enabled: false` on this routine too",
    ]


def test_a_priced_model_is_known() -> None:
    cfg = load(
        MINIMAL + "    model: claude-nova-9\npricing:\n  claude-nova-9: {input: 1, output: 2}\n"
    )
    assert cfg.warnings == ()


# -- resolution of paths and secrets ----------------------------------------------------


def test_state_dir_and_memory_path_resolution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "company.yaml"
    f.write_text(MINIMAL + "state_dir: var\nmemory: {path: kg/memory.jsonl}\n", encoding="utf-8")
    cfg = load_config(f)
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    assert cfg.state_dir() == tmp_path / "var"
    assert cfg.state_dir("/srv/x") == Path("/srv/x")
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/companyd:/other")
    assert cfg.state_dir() == Path("/var/lib/companyd")
    assert cfg.memory_path(cfg.state_dir()) == tmp_path / "kg" / "memory.jsonl"


def test_secret_references_report_presence_never_values(tmp_path: Path) -> None:
    cfg = load(
        MINIMAL
        + "    mcp_servers:\n      gh: {command: gh-mcp, env_from: {GITHUB_TOKEN: GH_TOKEN}}\n"
        + "alerts:\n  telegram: {chat_ids_env: CHAT}\n"
    )
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "telegram_bot_token").write_text("123:abc")
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-not-shown",
        "GH_TOKEN": "",
        "CREDENTIALS_DIRECTORY": str(creds),
    }
    refs = {(r.path, r.kind, r.name): r.is_set for r in secret_references(cfg, env)}
    assert refs == {
        ("anthropic.api_key_env", "env", "ANTHROPIC_API_KEY"): True,
        ("anthropic.api_key_credential", "credential", "anthropic_api_key"): False,
        ("alerts.telegram.bot_token_env", "env", "TELEGRAM_BOT_TOKEN"): False,
        ("alerts.telegram.bot_token_credential", "credential", "telegram_bot_token"): True,
        ("alerts.telegram.chat_ids_env", "env", "CHAT"): False,
        ("agents.cfo.mcp_servers.gh.env_from.GITHUB_TOKEN", "env", "GH_TOKEN"): False,
    }


# -- error reporting --------------------------------------------------------------------


def test_errors_are_sorted_by_position_and_each_reported_once() -> None:
    lines = errors(
        """\
        company: {name: Acme, budget: {daily_usd: 0}}
        agents:
          ceo: {title: CEO, instructions: Lead., consult: [cfo, nobody]}
          cfo: {title: CFO, reports_to: nobody, instructions: Count.}
        """
    )
    assert [line.split(": ", 2)[:2] for line in lines] == [
        ["c.yaml:1:43", "company.budget.daily_usd"],
        ["c.yaml:3:57", "agents.ceo.consult.1"],
        ["c.yaml:4:33", "agents.cfo.reports_to"],
    ]


def test_cross_checks_run_even_when_the_schema_fails_elsewhere() -> None:
    lines = errors(
        MINIMAL.replace("daily_usd: 5", "daily_usd: lots").replace(
            "reports_to: ceo", "reports_to: boss"
        )
    )
    assert len(lines) == 2
    assert "daily_usd: expected a number, got 'lots'" in lines[0]
    assert "reports_to: expected the name of an agent for reports_to, got 'boss'" in lines[1]


def test_a_malformed_agent_does_not_cascade_into_org_chart_errors() -> None:
    lines = errors(
        MINIMAL.replace("  ceo:\n    title: CEO\n    instructions: Lead.\n", "  ceo: 5\n")
    )
    assert lines == [
        "c.yaml:6:8: agents.ceo: expected an agent: a mapping with at least 'title' and "
        "'instructions', got 5"
    ]


def test_secret_under_an_unknown_key_is_one_error_not_two() -> None:
    lines = errors(MINIMAL + "alerts:\n  telegram:\n    bot_token: '123456:abcdef'\n")
    assert len(lines) == 1
    assert "alerts.telegram.bot_token: expected a reference to a secret" in lines[0]
    assert "'bot_token_env: NAME' or 'bot_token_credential: NAME'" in lines[0]


def test_keys_with_line_breaks_stay_on_one_line() -> None:
    lines = errors('"a\\rb": 1\n"c\\u2028d": 2\n' + MINIMAL)
    assert "c.yaml:1:1: a\\rb: unknown key 'a\\rb'" in lines[0]
    assert "c.yaml:2:1: c\\u2028d: unknown key 'c\\u2028d'" in lines[1]
    assert all(len(line.splitlines()) == 1 for line in lines)


def test_config_error_str_is_one_line_per_issue() -> None:
    with pytest.raises(ConfigError) as info:
        load("company: 1\nagents: 2\n")
    assert str(info.value).splitlines() == [str(i) for i in info.value.issues]
    assert len(info.value.issues) == 2
