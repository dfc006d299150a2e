"""``alerts.channels`` (docs/alerts.md, "Other channels"): what loads, and the errors."""

from __future__ import annotations

from companyd.config import resolved_view

from .configkit import MINIMAL, errors, load

CHANNELS = "alerts:\n  channels:\n"


def test_a_channel_loads_with_its_defaults_and_shows_only_its_variable() -> None:
    cfg = load(MINIMAL + CHANNELS + "    - {name: slack, url_env: SLACK_URL, deliver: true}\n")
    [slack] = cfg.spec.alerts.channels
    assert (slack.name, slack.url_env, slack.min_severity, slack.deliver) == (
        "slack",
        "SLACK_URL",
        "warning",
        True,
    )
    shown = resolved_view(cfg)["alerts"]["channels"]
    assert shown == [
        {"name": "slack", "url_env": "SLACK_URL", "min_severity": "warning", "deliver": True}
    ]


def test_an_unknown_severity_lists_the_valid_ones_at_its_line() -> None:
    [line] = errors(MINIMAL + CHANNELS + "    - {name: s, url_env: S, min_severity: urgent}\n")
    assert line.startswith("c.yaml:15:")
    assert "alerts.channels.0.min_severity: expected one of critical, warning, info" in line
    assert "'urgent'" in line


def test_a_missing_key_is_named_not_the_entry_index() -> None:
    [line] = errors(MINIMAL + CHANNELS + "    - {name: email}\n")
    assert "alerts.channels.0.url_env: required key 'url_env' is missing" in line, line


def test_the_url_itself_is_refused_with_what_to_do() -> None:
    [line] = errors(MINIMAL + CHANNELS + "    - {name: s, url: 'slack://a/b/c'}\n")
    assert "alerts.channels.0:" in line and "environment variable" in line and "url_env" in line


def test_bad_names_and_repeats_are_clear_errors() -> None:
    [line] = errors(MINIMAL + CHANNELS + "    - {name: Slack!, url_env: S}\n")
    assert "alerts.channels.0.name: expected a channel name" in line and "'Slack!'" in line
    twice = "    - {name: s, url_env: A}\n    - {name: s, url_env: B}\n"
    [line] = errors(MINIMAL + CHANNELS + twice)
    assert "channel name(s) 's' used twice" in line
    [line] = errors(MINIMAL + CHANNELS + "    - {name: s, url_env: 'my url'}\n")
    assert "alerts.channels.0.url_env: expected the name of an environment variable" in line
