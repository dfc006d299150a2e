"""companyd._secrets: one redactor for logs, alerts, CLI output, control answers and config
errors; known values and values that only look like secrets.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from companyd._secrets import SECRETS, Redactor, protect, redact
from companyd.alerts import _telegram as alerts_telegram
from companyd.config import load_config, load_config_text
from companyd.daemon import _logs as logs
from companyd.errors import ConfigError

KEY = "sk-ant-api03-" + "Q" * 40
BOT = "7012345678:AAHq" + "z" * 31
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


def test_one_redactor_serves_logs_and_alerts() -> None:
    assert logs.Redactor is Redactor
    assert alerts_telegram.redact is redact
    assert alerts_telegram.protect is protect


def test_values_that_look_like_secrets_are_masked_without_being_registered() -> None:
    text = redact(
        f"got {KEY!r}; url https://api.telegram.org/bot{BOT}/getMe; "
        "db postgres://app:hunter2hunter@db/x; gh ghp_" + "a" * 36
    )
    assert KEY not in text and BOT not in text and "hunter2hunter" not in text
    assert "ghp_aaaa" not in text
    assert "'<anthropic-api-key>'" in text and "/bot<telegram-bot-token>/getMe" in text


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://app:saffron@tundra@db.internal/x",  # an unencoded "@"
        "postgresql://app:juniper/cobalt@db.internal/x",  # an unencoded "/"
        "postgresql://app:hemlock#walrus?zephyr@db/x",  # "#" and "?"
        "host=db user=app password='tamarind ocelot' dbname=x",  # key=value, quoted
        "host=db user=app password=verbena dbname=x",  # key=value, bare
        "postgresql://db/x?user=app&password=cobaltripple",  # in the query
    ],
)
def test_a_database_password_looks_like_a_secret_however_it_is_written(text: str) -> None:
    """Issue 32 item 6: masked by pattern, unregistered (an error quoting a URL that is
    not the company's own); each shape's password words appear nowhere else.
    """
    masked = redact(f"cannot connect to {text}: refused")
    for word in ("tundra", "cobalt", "walrus", "zephyr", "ocelot", "verbena", "ripple"):
        assert word not in masked, masked
    assert masked.startswith("cannot connect to ") and masked.endswith("refused")


def test_known_values_are_masked_in_any_shape_they_travel() -> None:
    r = Redactor(["plainsecretvalue", "12345:tok/en+with=chars"])
    assert r.redact("a plainsecretvalue b") == "a *** b"
    assert r.redact("u=12345%3Atok%2Fen%2Bwith%3Dchars") == "u=***"
    assert Redactor(["", "abc"]).count == 0


def test_the_process_redactor_cleans_every_log_record() -> None:
    protect("a-registered-value-nobody-guesses")
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    log = logging.getLogger("test_secrets.any")
    log.addHandler(handler)
    try:
        log.warning("x %s y %s", "a-registered-value-nobody-guesses", KEY)
    finally:
        log.removeHandler(handler)
    assert "a-registered-value-nobody-guesses" not in out.getvalue()
    assert KEY not in out.getvalue()


def test_setup_logging_uses_the_process_redactor() -> None:
    h = logs.setup_logging(stream=io.StringIO(), threaded=False)
    try:
        assert h.redactor is SECRETS
    finally:
        h.close()


def _errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config_text(textwrap.dedent(text), file="c.yaml")
    return [str(i) for i in info.value.issues]


@pytest.mark.parametrize("secret", [KEY, BOT, "x" + KEY, f"prefix {BOT}"])
@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("    reports_to: ceo\n", "    reports_to: ceo\n    department: {s!r}\n"),
        ("    reports_to: ceo\n", "    reports_to: {s!r}\n"),
        ("  name: Acme\n", "  name: Acme\n  timezone: {s!r}\n"),
        ("schema: companyd/v1\n", "schema: {s!r}\n"),
        ("    title: CFO\n", "    title: CFO\n    {s}: 1\n"),
        ("agents:\n", "agents:\n  {s!r}: {{title: X, instructions: Y, reports_to: ceo}}\n"),
        ("    title: CFO\n", "    title: CFO\n    model: {s!r}\n"),
    ],
)
def test_a_config_error_never_echoes_a_secret(secret: str, old: str, new: str) -> None:
    """An API key pasted into the wrong key is named as a secret, never repeated (it used to
    come back in the 'change rejected' alert on Telegram).
    """
    lines = _errors(MINIMAL.replace(old, new.format(s=secret), 1))
    assert lines
    text = "\n".join(lines)
    assert KEY not in text and BOT not in text, text
    assert BOT.partition(":")[2] not in text, text


def test_a_known_secret_value_is_not_echoed_even_if_it_looks_harmless(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "harmless-looking-key-value")
    SECRETS.add("harmless-looking-key-value")
    lines = _errors(
        MINIMAL.replace("  name: Acme\n", "  name: Acme\n  timezone: harmless-looking-key-value\n")
    )
    assert "harmless-looking-key-value" not in "\n".join(lines)


@pytest.mark.parametrize("field", ["agents.cfo.instructions", "company.context"])
def test_the_secret_scan_finds_a_bot_token_inside_longer_text(field: str) -> None:
    prose = f"Post with the bot {BOT} when done, please."
    doc = MINIMAL.replace("    instructions: Count.\n", f"    instructions: {prose!r}\n")
    if field == "company.context":
        doc = MINIMAL.replace("  name: Acme\n", f"  name: Acme\n  context: {prose!r}\n")
    lines = _errors(doc)
    assert any(
        f"{field}: expected no secrets" in line and "Telegram bot token" in line for line in lines
    ), lines
    assert BOT not in "\n".join(lines)


def test_validate_cli_never_prints_the_secret(tmp_path: Path) -> None:
    cfg = tmp_path / "company.yaml"
    cfg.write_text(
        MINIMAL.replace("    reports_to: ceo\n", f"    reports_to: ceo\n    department: {KEY}\n")
    )
    for extra in ([], ["--json"]):
        p = subprocess.run(
            [sys.executable, "-m", "companyd", "validate", *extra, str(cfg)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COMPANYD_CONFIG": ""},
        )
        assert p.returncode == 1
        assert "department" in p.stdout + p.stderr
        assert KEY not in p.stdout + p.stderr


def test_load_config_registers_every_secret_the_config_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "telegram_bot_token").write_text("5550001:cred-token-value-for-the-bot\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    monkeypatch.setenv("MY_KEY_VAR", "custom-env-api-key-value")
    monkeypatch.setenv("DAEMON_GH", "token-for-the-tool-server")
    cfg = tmp_path / "company.yaml"
    cfg.write_text(
        MINIMAL.replace(
            "    instructions: Count.\n",
            "    instructions: Count.\n    mcp_servers:\n      gh:\n        command: gh-mcp\n"
            "        env_from: {GITHUB_TOKEN: DAEMON_GH}\n",
        )
        + "anthropic:\n  api_key_env: MY_KEY_VAR\n"
        + "alerts:\n  telegram:\n    chat_ids: [1]\n    bot_token_env: null\n"
    )
    load_config(cfg)
    text = redact(
        "custom-env-api-key-value 5550001:cred-token-value-for-the-bot token-for-the-tool-server"
    )
    assert "custom-env-api-key-value" not in text
    assert "cred-token-value-for-the-bot" not in text
    assert "token-for-the-tool-server" not in text
    assert json.dumps(SECRETS.redact_data({"k": ["custom-env-api-key-value"]})) == '{"k": ["***"]}'


def test_show_config_never_prints_a_known_secret(tmp_path: Path) -> None:
    """The value of the API key variable, written into instructions in a shape no pattern
    knows, is masked in show-config's YAML as in its JSON.
    """
    cfg = tmp_path / "company.yaml"
    cfg.write_text(
        MINIMAL.replace("instructions: Count.", "instructions: 'Use key opaque-value-4c1d9e.'")
    )
    env = {**os.environ, "ANTHROPIC_API_KEY": "opaque-value-4c1d9e", "COMPANYD_CONFIG": ""}
    for extra in ([], ["--json"]):
        p = subprocess.run(
            [sys.executable, "-m", "companyd", "show-config", *extra, "--config", str(cfg)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert p.returncode == 0, p.stderr
        assert "Use key ***." in p.stdout and "opaque-value-4c1d9e" not in p.stdout


def test_a_secret_pasted_as_a_key_is_named_as_a_secret() -> None:
    lines = _errors(MINIMAL.replace("    title: CFO\n", f"    title: CFO\n    {KEY}: 1\n"))
    assert any("looks like an Anthropic API key" in line for line in lines), lines
    assert KEY not in "\n".join(lines)
