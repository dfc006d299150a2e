"""Secrets named by company.yaml (config/_secrets.py): references report presence, never
values.
"""

from __future__ import annotations

from pathlib import Path

from companyd.config import secret_references

from .configkit import MINIMAL, load

# -- secret references -----------------------------------------------------------------


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
