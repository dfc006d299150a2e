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


def test_the_worked_examples_of_docs_alerts_md_load_and_apprise_takes_their_urls() -> None:
    import asyncio
    import re
    from pathlib import Path

    from companyd.alerts import probe_channel

    doc = (Path(__file__).parents[2] / "docs" / "alerts.md").read_text(encoding="utf-8")
    section = doc.split("## Other channels")[1].split("\n## ")[0]
    example = section.split("```yaml\n")[1].split("```")[0]
    cfg = load(MINIMAL + example)
    email, slack = cfg.spec.alerts.channels
    assert (email.url_env, email.min_severity, email.deliver) == (
        "FOUNDER_EMAIL_URL",
        "critical",
        False,
    )
    assert (slack.url_env, slack.min_severity, slack.deliver) == (
        "SLACK_ALERTS_URL",
        "warning",
        True,
    )
    urls = dict(re.findall(r"^([A-Z_]+)='([^']+)'$", section, flags=re.M))
    environ = {
        "FOUNDER_EMAIL_URL": urls["FOUNDER_EMAIL_URL"],
        "SLACK_ALERTS_URL": urls["SLACK_ALERTS_URL"],
    }
    for spec in (email, slack):
        probe = asyncio.run(probe_channel(spec, environ))
        assert probe.problem is None, probe
    assert asyncio.run(probe_channel(email, environ)).shown == "mailtos"


def test_the_channel_url_is_a_secret_reference_and_known_to_the_redactor() -> None:
    from companyd.config import secret_references, secret_values

    cfg = load(MINIMAL + CHANNELS + "    - {name: slack, url_env: SLACK_URL}\n")
    url = "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#alerts"
    refs = {r.path: r for r in secret_references(cfg, {"SLACK_URL": url})}
    ref = refs["alerts.channels.slack.url_env"]
    assert (ref.kind, ref.name, ref.is_set) == ("env", "SLACK_URL", True)
    assert url in secret_values(cfg, {"SLACK_URL": url})
    assert not {r.path: r for r in secret_references(cfg, {})}[ref.path].is_set
    # show-config lists it with whether it is set, never its value
    shown = resolved_view(cfg)
    assert url not in str(shown)
