"""Loading company.yaml (config/_load.py): the example and the starter resolve; the file is
read as UTF-8 of bounded size; every problem is reported at once, sorted, one line each.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from companyd.config import load_config, load_config_text
from companyd.errors import ConfigError

from .configkit import EXAMPLE, MINIMAL, errors, load

# -- the example company ---------------------------------------------------------------


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


# -- reading the file ------------------------------------------------------------------


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


# -- error reporting -------------------------------------------------------------------


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
