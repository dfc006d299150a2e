"""Helpers for the operator-tool tests: a small company on disk with a state directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

TOKEN = "123456:doctor-stand-in-token-abcdefghijklmnop"
API_KEY = "sk-ant-doctor-test-key"
CHAT = 4242


def write_company(
    tmp_path: Path, *, api_url: str | None = "http://127.0.0.1:9", **extra: Any
) -> Path:
    """company.yaml with two agents, Telegram via $TELEGRAM_BOT_TOKEN / $TELEGRAM_CHAT_ID at
    ``api_url``, and ``state`` as its state directory.
    """
    doc: dict[str, Any] = {
        "schema": "companyd/v1",
        "company": {"name": "Acme Ops", "timezone": "UTC", "budget": {"daily_usd": 10}},
        "agents": {
            "ceo": {"title": "CEO", "instructions": "lead"},
            "cfo": {"title": "CFO", "reports_to": "ceo", "instructions": "money"},
        },
        "alerts": {
            "telegram": {
                "bot_token_env": "TELEGRAM_BOT_TOKEN",
                "chat_ids_env": "TELEGRAM_CHAT_ID",
                "api_url": api_url,
            }
        },
        **extra,
    }
    path = tmp_path / "company.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def env(
    base_url: str, *, key: str = API_KEY, token: str = TOKEN, chats: str = str(CHAT)
) -> dict[str, str]:
    """The environment the service would have: API key, bot token, chat ids."""
    return {
        "ANTHROPIC_API_KEY": key,
        "ANTHROPIC_BASE_URL": base_url,
        "TELEGRAM_BOT_TOKEN": token,
        "TELEGRAM_CHAT_ID": chats,
        "COMPANYD_TEST_NO_NET": "1",
    }
