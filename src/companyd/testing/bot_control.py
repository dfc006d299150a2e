"""Driving a Bot API stand-in that runs in another process (``python -m
companyd.testing.bot_api``) through its JSON control API.
"""

from __future__ import annotations

from typing import Any

from companyd.testing.bot_objects import DownMode

__all__ = ["BotApiControl"]


class BotApiControl:
    """Client of a stand-in's control API (``python -m companyd.testing.bot_api``).

    Args:
        control_url: the ``control_url`` the process printed.
        timeout: seconds per request.
    """

    def __init__(self, control_url: str, timeout: float = 10.0) -> None:
        import httpx  # python-telegram-bot's HTTP client; always installed with companyd

        self._client = httpx.AsyncClient(base_url=control_url, timeout=timeout, trust_env=False)

    async def aclose(self) -> None:
        """Close the HTTP client (the stand-in process keeps running)."""
        await self._client.aclose()

    async def __aenter__(self) -> BotApiControl:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _get(self, path: str) -> Any:
        resp = await self._client.get(path)
        resp.raise_for_status()
        return resp.json()

    async def _post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        resp = await self._client.post(path, json=body or {})
        resp.raise_for_status()
        return resp.json()

    async def state(self) -> dict[str, Any]:
        """``GET /state``: whether the API is up, its mode, its URL and the updates pending."""
        return dict(await self._get("/state"))

    async def messages(self) -> list[dict[str, Any]]:
        """``GET /messages``: every message sent, with its text, markup and edits."""
        return list(await self._get("/messages"))

    async def calls(self) -> list[dict[str, Any]]:
        """``GET /calls``: every Bot API call, ``{"method", "params", "status"}``."""
        return list(await self._get("/calls"))

    async def callback_answers(self) -> list[dict[str, Any]]:
        """``GET /callback_answers``: every ``answerCallbackQuery`` received."""
        return list(await self._get("/callback_answers"))

    async def command(self, chat_id: int, text: str, user_id: int | None = None) -> int:
        """Queue a text message from ``chat_id`` for ``getUpdates``; returns its ``update_id``."""
        body: dict[str, Any] = {"chat_id": chat_id, "text": text}
        if user_id is not None:
            body["user_id"] = user_id
        return int((await self._post("/command", body))["update_id"])

    async def press(self, chat_id: int, message_id: int, data: str) -> str:
        """Queue a press of the inline button with callback ``data`` under message
        ``message_id``; returns the callback query's id.
        """
        body = {"chat_id": chat_id, "message_id": message_id, "data": data}
        return str((await self._post("/press", body))["callback_query_id"])

    async def update(self, update: dict[str, Any]) -> int:
        """Queue a raw update for ``getUpdates``; returns the ``update_id`` assigned to it."""
        return int((await self._post("/update", update))["update_id"])

    async def down(self, mode: DownMode = "refuse") -> None:
        """Start an outage: ``"refuse"`` closes the Bot API port, ``"502"`` answers every request
        ``502 Bad Gateway``.
        """
        await self._post("/down", {"mode": mode})

    async def up(self) -> None:
        """End an outage: the Bot API answers normally again."""
        await self._post("/up")

    async def fail(
        self,
        count: int = 1,
        *,
        status: int = 429,
        retry_after: int | None = 1,
        method: str | None = None,
    ) -> None:
        """Answer the next ``count`` requests (of ``method``, or any but ``getUpdates``) with
        ``status`` (``retry_after`` for 429; ``status=0``: close the connection unanswered).
        """
        body = {"count": count, "status": status, "retry_after": retry_after, "method": method}
        await self._post("/fail", body)

    async def clear_failures(self) -> None:
        """Forget the failures still queued by :meth:`fail`."""
        await self._post("/fail/clear")

    async def reset(self) -> None:
        """Forget recorded calls, messages and callback answers (not pending updates)."""
        await self._post("/reset")
