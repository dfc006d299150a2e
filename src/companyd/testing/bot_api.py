"""A loopback stand-in for the Telegram Bot API that the real python-telegram-bot talks to.

:class:`BotApiServer` is a small HTTP/1.1 server on ``127.0.0.1`` speaking the part of the Bot
API companyd uses. Point python-telegram-bot at it with
``ApplicationBuilder().base_url(f"{server.url}/bot")`` (or company.yaml's
``alerts.telegram.api_url: <server.url>``) and it answers like Telegram does:

* ``getMe``, ``getChat`` (see ``chats``), ``sendMessage``, ``sendDocument`` (an uploaded
  file, kept with its name and bytes: :attr:`SentMessage.document`), ``editMessageText``,
  ``editMessageReplyMarkup``, ``answerCallbackQuery``, ``setMyCommands``,
  ``getMyCommands``, ``deleteWebhook``, ``close`` and ``logOut``;
* ``getUpdates`` as a long poll: it returns as soon as an update with ``update_id >= offset``
  exists, or after ``timeout`` seconds with ``[]``; updates below ``offset`` are confirmed
  and forgotten, as Telegram does.

It records everything it was sent (:attr:`BotApiServer.messages` with each message's edits,
:attr:`BotApiServer.calls`, :attr:`BotApiServer.callback_answers`), lets a test inject
updates (:meth:`BotApiServer.inject_command`, :meth:`BotApiServer.inject_reply`,
:meth:`BotApiServer.press_button`) and fail on
purpose: :meth:`BotApiServer.go_down` closes the port (``connection refused``) or answers
``502 Bad Gateway`` until :meth:`BotApiServer.go_up`; :meth:`BotApiServer.fail_next` answers
the next requests with an error such as ``429`` and ``retry_after``, or (``status=0``) drops
the connection without an answer, as a broken network does. Failures can target one method:
``fail_next(10**6, status=401, method="getUpdates")`` breaks command polling while sending
keeps working, until :meth:`BotApiServer.clear_failures`.

Requests are decoded as python-telegram-bot sends them: ``application/x-www-form-urlencoded``
with string values as they are and every other value JSON-encoded. JSON bodies are accepted
too, and ``multipart/form-data`` (file uploads). A document given by ``file_id`` or URL
instead of an upload is answered with 400.

Run it as a separate process for a daemon subprocess or the chaos benchmark::

    python -m companyd.testing.bot_api --port 0 --control-port 0

It prints one JSON line ``{"api_url": ..., "control_url": ..., "pid": ...}`` on stdout and
serves until SIGTERM/SIGINT. The control API (JSON over HTTP, always up, even while the Bot
API port is down) is driven with :class:`BotApiControl`:

=========================  ==============================================================
``GET  /state``            ``{"up", "mode", "api_url", "updates_pending"}``
``GET  /messages``         every message sent, with ``text``, ``reply_markup``, ``edits``
``GET  /calls``            every Bot API call: ``{"method", "params", "status"}``
``GET  /callback_answers`` every ``answerCallbackQuery``
``POST /command``          ``{"chat_id", "text", "user_id"?}`` → ``{"update_id"}``
``POST /press``            ``{"chat_id", "message_id", "data", "user_id"?}``
``POST /update``           a raw update (``update_id`` is assigned)
``POST /down``             ``{"mode": "refuse" | "502"}``
``POST /up``
``POST /fail``             ``{"count", "status", "retry_after"?, "method"?, "description"?}``
``POST /fail/clear``       forget the failures still queued
``POST /reset``            forget recorded calls and messages
=========================  ==============================================================

The stand-in never logs request paths: they carry the bot token.

This module is the server (state, faults, injection, the Bot API methods, the control API,
the command line). The HTTP/1.1 plumbing and the parameter decoding live in
:mod:`companyd.testing.bot_http`, the recorded objects in :mod:`companyd.testing.bot_objects`,
the control API's client in :mod:`companyd.testing.bot_control`; their names are re-exported
here, where the tests and benchmarks import them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

# Re-exported: tests and benchmarks import the whole stand-in from this module.
from companyd.testing.bot_control import BotApiControl as BotApiControl
from companyd.testing.bot_http import (
    Dropped,
    HttpError,
    HttpListener,
    Request,
    chat_id_param,
    decode_params,
    error_body,
    int_param,
    json_response,
    markup_param,
)
from companyd.testing.bot_objects import ApiCall as ApiCall
from companyd.testing.bot_objects import DownMode as DownMode
from companyd.testing.bot_objects import SentMessage as SentMessage
from companyd.testing.bot_objects import Upload as Upload
from companyd.testing.bot_objects import bot_id, chat_json, user_json

__all__ = [
    "ApiCall",
    "BotApiControl",
    "BotApiServer",
    "DownMode",
    "SentMessage",
    "Upload",
    "main",
]


@dataclass
class _Failure:
    count: int
    status: int
    retry_after: int | None
    method: str | None
    description: str | None


class BotApiServer:
    """The Bot API stand-in. Use as ``async with BotApiServer() as server:``.

    Args:
        token: if given, requests for any other token are answered ``401 Unauthorized``
            (as Telegram does); if None any token is accepted.
        port: port for the Bot API (0 = any free port).
        control_port: if not None, also serve the JSON control API on this port (0 = any).
        bot_username: the bot's ``username`` in ``getMe``.
        chats: the chats ``getChat`` finds (any other is "chat not found", as for a chat
            that never opened the bot); None: every chat exists.
        clock: wall-clock source for message dates (default :func:`time.time`).

    Attributes:
        messages: every message sent, in order, with edits applied.
        calls: every Bot API request in order (``getUpdates`` included).
        callback_answers: parameters of every ``answerCallbackQuery``.
        commands: the last ``setMyCommands`` list.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        port: int = 0,
        control_port: int | None = None,
        bot_username: str = "companyd_test_bot",
        chats: Iterable[int | str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._token = token
        self.chats = None if chats is None else set(chats)
        self._clock = clock
        self._bot_user = {
            "id": bot_id(token),
            "is_bot": True,
            "first_name": "companyd",
            "username": bot_username,
            "can_join_groups": False,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }
        self._api = HttpListener(self._handle_api, port, self._pulse)
        self._control = (
            HttpListener(self._handle_control, control_port, self._pulse)
            if control_port is not None
            else None
        )
        self.mode: Literal["up", "refuse", "502"] = "up"
        self.messages: list[SentMessage] = []
        self.calls: list[ApiCall] = []
        self.callback_answers: list[dict[str, Any]] = []
        self.commands: list[dict[str, Any]] = []
        self._updates: list[dict[str, Any]] = []
        self._next_update_id = 1
        self._next_message_id = 1
        self._next_callback_id = 1
        self._failures: list[_Failure] = []
        self._changed = asyncio.Event()
        self._started = False
        #: Bot API requests being answered right now (a long poll counts until it returns).
        self.in_flight = 0
        #: ``getUpdates`` long polls waiting for an update right now. A test that plays the
        #: founder writing once the program listens waits for ``polling > 0``: a long poll
        #: is recorded in ``calls`` only when it returns (after its whole timeout).
        self.polling = 0

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Open the Bot API port (and the control port, if any)."""
        await self._api.open()
        if self._control is not None:
            await self._control.open()
        self._started = True

    async def close(self) -> None:
        """Close every port and connection."""
        await self._api.close()
        if self._control is not None:
            await self._control.close()
        self._started = False

    async def __aenter__(self) -> BotApiServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def port(self) -> int:
        """The Bot API port (bound at :meth:`start`; kept across :meth:`go_down` /
        :meth:`go_up`).
        """
        return self._api.port

    @property
    def url(self) -> str:
        """The API root, e.g. ``http://127.0.0.1:PORT`` (company.yaml's ``api_url``)."""
        return f"http://127.0.0.1:{self._api.port}"

    @property
    def control_url(self) -> str | None:
        """The root of the JSON control API, or None when the server runs without one."""
        return f"http://127.0.0.1:{self._control.port}" if self._control is not None else None

    # -- faults -------------------------------------------------------------------------

    async def go_down(self, mode: DownMode = "refuse") -> None:
        """Simulate an outage: ``"refuse"`` closes the port and every connection (clients see
        connection refused), ``"502"`` answers every request ``502 Bad Gateway``.
        """
        if mode not in ("refuse", "502"):
            raise ValueError(f"unknown outage mode {mode!r}; expected 'refuse' or '502'")
        self.mode = mode
        if mode == "refuse":
            await self._api.close()
        self._pulse()

    async def go_up(self) -> None:
        """End an outage: listen again on the same port and answer normally."""
        self.mode = "up"
        if not self._api.listening:
            await self._api.open()
        self._pulse()

    def fail_next(
        self,
        count: int = 1,
        *,
        status: int = 429,
        retry_after: int | None = 1,
        method: str | None = None,
        description: str | None = None,
    ) -> None:
        """Answer the next ``count`` requests (of ``method``, or any but ``getUpdates``) with
        an error: ``status`` with Telegram's error body, and ``parameters.retry_after`` for
        429; ``status=0`` closes the connection without an answer (a network error).

        A failure queued for ``getUpdates`` ends the long poll in flight (with no updates),
        so the next poll meets it.
        """
        self._failures.append(
            _Failure(
                count=count,
                status=status,
                retry_after=retry_after if status == 429 else None,
                method=method,
                description=description,
            )
        )
        self._pulse()

    def clear_failures(self) -> None:
        """Forget the failures still queued by :meth:`fail_next`."""
        self._failures.clear()
        self._pulse()

    # -- injection ----------------------------------------------------------------------

    def inject_update(self, update: dict[str, Any]) -> int:
        """Queue a raw update for ``getUpdates``; its ``update_id`` is assigned here."""
        update = dict(update)
        update["update_id"] = self._next_update_id
        self._next_update_id += 1
        self._updates.append(update)
        self._pulse()
        return int(update["update_id"])

    def inject_command(
        self,
        chat_id: int,
        text: str,
        *,
        user_id: int | None = None,
        first_name: str = "Op",
        username: str | None = "operator",
    ) -> int:
        """Queue a text message from a private chat, marking a leading ``/command`` as a
        ``bot_command`` entity (as Telegram does). Returns the update id.
        """
        uid = user_id if user_id is not None else chat_id
        msg: dict[str, Any] = {
            "message_id": self._new_message_id(),
            "date": int(self._clock()),
            "chat": {"id": chat_id, "type": "private", "first_name": first_name},
            "from": user_json(uid, first_name, username),
            "text": text,
        }
        if text.startswith("/"):
            length = len(text.split()[0]) if text.split() else 1
            msg["entities"] = [{"type": "bot_command", "offset": 0, "length": length}]
        return self.inject_update({"message": msg})

    def inject_reply(
        self,
        chat_id: int,
        message_id: int,
        text: str,
        *,
        user_id: int | None = None,
        first_name: str = "Op",
        username: str | None = "operator",
    ) -> tuple[int, int]:
        """Queue a text message from a private chat that replies (Telegram's "Reply") to the
        message ``message_id`` the bot sent there. Returns ``(update_id, message_id)`` of
        the reply.

        Raises:
            KeyError: no message ``message_id`` was sent to ``chat_id``.
        """
        sent = self.find_message(chat_id, message_id)
        if sent is None:
            raise KeyError(f"no message {message_id!r} was sent to chat {chat_id!r}")
        uid = user_id if user_id is not None else chat_id
        chat = {"id": chat_id, "type": "private", "first_name": first_name}
        mid = self._new_message_id()
        msg: dict[str, Any] = {
            "message_id": mid,
            "date": int(self._clock()),
            "chat": chat,
            "from": user_json(uid, first_name, username),
            "text": text,
            "reply_to_message": self._message_json(sent),
        }
        return self.inject_update({"message": msg}), mid

    def press_button(
        self,
        chat_id: int,
        message_id: int,
        data: str,
        *,
        user_id: int | None = None,
        first_name: str = "Op",
        username: str | None = "operator",
    ) -> tuple[int, str]:
        """Queue a ``callback_query`` pressing an inline button on a message the bot sent.

        Returns ``(update_id, callback_query_id)``.

        Raises:
            KeyError: no message ``message_id`` was sent to ``chat_id``.
        """
        sent = self.find_message(chat_id, message_id)
        if sent is None:
            raise KeyError(
                f"no message {message_id!r} was sent to chat {chat_id!r}; "
                f"sent: {[(m.chat_id, m.message_id) for m in self.messages]}"
            )
        cq_id = str(self._next_callback_id)
        self._next_callback_id += 1
        message: dict[str, Any] = {
            "message_id": sent.message_id,
            "date": sent.date,
            "chat": {"id": chat_id, "type": "private", "first_name": first_name},
            "from": dict(self._bot_user),
            "text": sent.text,
        }
        if sent.reply_markup:
            message["reply_markup"] = sent.reply_markup
        uid = user_id if user_id is not None else chat_id
        update_id = self.inject_update(
            {
                "callback_query": {
                    "id": cq_id,
                    "from": user_json(uid, first_name, username),
                    "message": message,
                    "chat_instance": f"ci-{chat_id}",
                    "data": data,
                }
            }
        )
        return update_id, cq_id

    # -- reading what was sent ----------------------------------------------------------

    def find_message(self, chat_id: int | str, message_id: int) -> SentMessage | None:
        """The message ``message_id`` sent to ``chat_id`` (as it is now, edits applied), or None."""
        for m in self.messages:
            if m.message_id == message_id and str(m.chat_id) == str(chat_id):
                return m
        return None

    def texts(self, chat_id: int | str | None = None) -> list[str]:
        """Current texts of the messages sent (to ``chat_id``), oldest first."""
        return [m.text for m in self.messages if chat_id is None or str(m.chat_id) == str(chat_id)]

    def calls_of(self, method: str) -> list[ApiCall]:
        """The recorded calls of Bot API ``method`` (e.g. ``sendMessage``), oldest first."""
        return [c for c in self.calls if c.method == method]

    def reset(self) -> None:
        """Forget recorded calls, messages and callback answers (not pending updates)."""
        self.messages.clear()
        self.calls.clear()
        self.callback_answers.clear()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Return once ``predicate()`` holds; re-checked after every request and injection.

        Raises:
            TimeoutError: it did not hold within ``timeout`` seconds.
        """
        async with asyncio.timeout(timeout):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

    def _pulse(self) -> None:
        self._changed.set()

    def _new_message_id(self) -> int:
        mid = self._next_message_id
        self._next_message_id += 1
        return mid

    # -- the Bot API --------------------------------------------------------------------

    async def _handle_api(self, request: Request) -> tuple[int, str, bytes]:
        self.in_flight += 1
        self._pulse()
        try:
            return await self._answer_api(request)
        finally:
            self.in_flight -= 1

    async def _answer_api(self, request: Request) -> tuple[int, str, bytes]:
        if self.mode == "502":
            self._pulse()
            return 502, "text/html", b"<html><body><h1>502 Bad Gateway</h1></body></html>"
        path = urlsplit(request.path).path
        parts = path.strip("/").split("/")
        if len(parts) != 2 or not parts[0].startswith("bot"):
            return json_response(404, {"ok": False, "error_code": 404, "description": "Not Found"})
        token, method = parts[0][3:], parts[1]
        if self._token is not None and token != self._token:
            self.calls.append(ApiCall(method=method, params={}, status=401))
            self._pulse()
            return json_response(
                401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
            )
        try:
            params = decode_params(request)
        except HttpError as exc:
            return json_response(exc.status, error_body(exc.status, exc.description))
        # a call is recorded with its files' names and sizes; the bytes go with the message
        shown = {k: v.summary() if isinstance(v, Upload) else v for k, v in params.items()}
        failure = self._take_failure(method)
        if failure is not None:
            self.calls.append(ApiCall(method=method, params=shown, status=failure.status))
            self._pulse()
            if failure.status == 0:
                raise Dropped
            body = error_body(failure.status, failure.description)
            if failure.retry_after is not None:
                body["parameters"] = {"retry_after": failure.retry_after}
                body["description"] = (
                    failure.description or f"Too Many Requests: retry after {failure.retry_after}"
                )
            return json_response(failure.status, body)
        try:
            if method == "getUpdates":
                result = await self._get_updates(params)
            else:
                result = self._call(method, params)
        except HttpError as exc:
            self.calls.append(ApiCall(method=method, params=shown, status=exc.status))
            self._pulse()
            return json_response(exc.status, error_body(exc.status, exc.description))
        self.calls.append(ApiCall(method=method, params=shown, status=200))
        self._pulse()
        return json_response(200, {"ok": True, "result": result})

    def _take_failure(self, method: str) -> _Failure | None:
        for f in self._failures:
            if f.method == method or (f.method is None and method != "getUpdates"):
                f.count -= 1
                if f.count <= 0:
                    self._failures.remove(f)
                return f
        return None

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = int_param(params.get("offset"), 0)
        limit = max(1, min(100, int_param(params.get("limit"), 100)))
        timeout = max(0.0, float(params.get("timeout") or 0))
        if offset:
            # Telegram forgets every update below the offset: it is confirmed.
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
        deadline = asyncio.get_running_loop().time() + timeout
        waiting = False
        try:
            while True:
                ready = [u for u in self._updates if u["update_id"] >= offset][:limit]
                if ready or self.mode != "up" or not self._api.listening:
                    return ready
                if any(f.method == "getUpdates" for f in self._failures):
                    return []  # the next poll meets the failure
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    return []
                if not waiting:
                    waiting = True
                    self.polling += 1
                    self._pulse()  # wakes wait_for (its waiters stay woken after clear)
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await self._changed.wait()
        finally:
            if waiting:
                self.polling -= 1

    def _call(self, method: str, params: dict[str, Any]) -> Any:
        if method == "getMe":
            return dict(self._bot_user)
        if method == "getChat":
            return self._get_chat(params)
        if method in ("deleteWebhook", "close", "logOut", "setWebhook"):
            return True
        if method == "setMyCommands":
            commands = params.get("commands")
            if not isinstance(commands, list):
                raise HttpError(400, "Bad Request: commands must be a JSON array")
            self.commands = commands
            return True
        if method == "getMyCommands":
            return list(self.commands)
        if method == "sendMessage":
            return self._send_message(params)
        if method == "sendDocument":
            return self._send_document(params)
        if method in ("editMessageText", "editMessageReplyMarkup"):
            return self._edit(method, params)
        if method == "answerCallbackQuery":
            if not params.get("callback_query_id"):
                raise HttpError(400, "Bad Request: callback_query_id is required")
            self.callback_answers.append(dict(params))
            return True
        raise HttpError(404, "Not Found: method not found")

    def _get_chat(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = chat_id_param(params.get("chat_id"))
        if self.chats is not None and chat_id not in self.chats:
            raise HttpError(400, "Bad Request: chat not found")
        return chat_json(chat_id)

    def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise HttpError(400, "Bad Request: message text is empty")
        if len(text) > 4096:
            raise HttpError(400, "Bad Request: message is too long")
        return self._record(params, text, None)

    def _send_document(self, params: dict[str, Any]) -> dict[str, Any]:
        document = params.get("document")
        if not isinstance(document, Upload):
            raise HttpError(400, "Bad Request: the stand-in takes a document only as an upload")
        if not document.data:
            raise HttpError(400, "Bad Request: file must be non-empty")
        caption = params.get("caption") or ""
        if len(str(caption)) > 1024:
            raise HttpError(400, "Bad Request: message caption is too long")
        return self._record(params, str(caption), document)

    def _record(self, params: dict[str, Any], text: str, document: Upload | None) -> dict[str, Any]:
        """Record a message sent (``text``: its text or caption) and answer it."""
        chat_id = chat_id_param(params.get("chat_id"))
        markup = markup_param(params.get("reply_markup"))
        reply = params.get("reply_parameters")
        answers = reply.get("message_id") if isinstance(reply, dict) else None
        if answers is None and params.get("reply_to_message_id") is not None:
            answers = int_param(params.get("reply_to_message_id"), -1)
        msg = SentMessage(
            chat_id=chat_id,
            message_id=self._new_message_id(),
            text=text,
            reply_markup=markup,
            date=int(self._clock()),
            disable_notification=bool(params.get("disable_notification", False)),
            reply_to=int(answers) if isinstance(answers, int) else None,
            document=document,
        )
        self.messages.append(msg)
        return self._message_json(msg)

    def _edit(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = chat_id_param(params.get("chat_id"))
        message_id = int_param(params.get("message_id"), -1)
        msg = self.find_message(chat_id, message_id)
        if msg is None:
            raise HttpError(400, "Bad Request: message to edit not found")
        markup = markup_param(params.get("reply_markup"))
        if method == "editMessageText":
            text = params.get("text")
            if not isinstance(text, str) or not text.strip():
                raise HttpError(400, "Bad Request: message text is empty")
            if len(text) > 4096:
                raise HttpError(400, "Bad Request: message is too long")
            if text == msg.text and markup == msg.reply_markup:
                raise HttpError(
                    400,
                    "Bad Request: message is not modified: specified new message content and "
                    "reply markup are exactly the same as a current content and reply markup "
                    "of the message",
                )
            msg.text = text
            msg.reply_markup = markup
            msg.edits.append({"method": method, "text": text, "reply_markup": markup})
        else:
            if markup == msg.reply_markup:
                raise HttpError(400, "Bad Request: message is not modified")
            msg.reply_markup = markup
            msg.edits.append({"method": method, "reply_markup": markup})
        return self._message_json(msg)

    def _message_json(self, msg: SentMessage) -> dict[str, Any]:
        chat: dict[str, Any] = {"id": msg.chat_id, "type": "private", "first_name": "Op"}
        if isinstance(msg.chat_id, str):
            chat = {"id": -1000000000001, "type": "channel", "title": msg.chat_id}
        out: dict[str, Any] = {
            "message_id": msg.message_id,
            "date": msg.date,
            "chat": chat,
            "from": dict(self._bot_user),
        }
        if msg.document is None:
            out["text"] = msg.text
        else:
            doc = msg.document
            out["document"] = {
                "file_id": f"doc-{msg.message_id}",
                "file_unique_id": f"u{msg.message_id}",
                "file_name": doc.file_name,
                "mime_type": doc.mime_type,
                "file_size": len(doc.data),
            }
            if msg.text:
                out["caption"] = msg.text
        if msg.edits:
            out["edit_date"] = int(self._clock())
        if msg.reply_markup:
            out["reply_markup"] = msg.reply_markup
        return out

    # -- the control API ----------------------------------------------------------------

    async def _handle_control(self, request: Request) -> tuple[int, str, bytes]:
        path = urlsplit(request.path).path.rstrip("/") or "/"
        try:
            body: dict[str, Any] = json.loads(request.body) if request.body else {}
            if not isinstance(body, dict):
                raise ValueError("expected a JSON object")
        except ValueError as exc:
            return json_response(400, {"error": f"invalid JSON body: {exc}"})
        try:
            return json_response(200, await self._control_call(request.method, path, body))
        except (KeyError, ValueError, TypeError) as exc:
            return json_response(400, {"error": f"{type(exc).__name__}: {exc}"})

    async def _control_call(self, method: str, path: str, body: dict[str, Any]) -> Any:
        if method == "GET" and path == "/state":
            return {
                "up": self.mode == "up",
                "mode": self.mode,
                "api_url": self.url,
                "updates_pending": len(self._updates),
            }
        if method == "GET" and path == "/messages":
            return [m.to_dict() for m in self.messages]
        if method == "GET" and path == "/calls":
            return [c.to_dict() for c in self.calls]
        if method == "GET" and path == "/callback_answers":
            return list(self.callback_answers)
        if method == "POST" and path == "/command":
            uid = body.get("user_id")
            return {
                "update_id": self.inject_command(
                    int(body["chat_id"]), str(body["text"]), user_id=uid
                )
            }
        if method == "POST" and path == "/press":
            update_id, cq_id = self.press_button(
                int(body["chat_id"]),
                int(body["message_id"]),
                str(body["data"]),
                user_id=body.get("user_id"),
            )
            return {"update_id": update_id, "callback_query_id": cq_id}
        if method == "POST" and path == "/update":
            return {"update_id": self.inject_update(body)}
        if method == "POST" and path == "/down":
            await self.go_down(body.get("mode", "refuse"))
            return {"mode": self.mode}
        if method == "POST" and path == "/up":
            await self.go_up()
            return {"mode": self.mode}
        if method == "POST" and path == "/fail":
            self.fail_next(
                int(body.get("count", 1)),
                status=int(body.get("status", 429)),
                retry_after=body.get("retry_after", 1),
                method=body.get("method"),
                description=body.get("description"),
            )
            return {"queued": len(self._failures)}
        if method == "POST" and path == "/fail/clear":
            self.clear_failures()
            return {"queued": 0}
        if method == "POST" and path == "/reset":
            self.reset()
            return {"reset": True}
        raise KeyError(f"no control route {method} {path!r}")


async def _serve(args: argparse.Namespace) -> None:
    token = os.environ.get(args.token_env) if args.token_env else None
    server = BotApiServer(token=token, port=args.port, control_port=args.control_port)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sys.stdout.write(
        json.dumps({"api_url": server.url, "control_url": server.control_url, "pid": os.getpid()})
        + "\n"
    )
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        await server.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m companyd.testing.bot_api``: serve the stand-in until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m companyd.testing.bot_api",
        description="Loopback Telegram Bot API stand-in with a JSON control API.",
    )
    parser.add_argument("--port", type=int, default=0, help="Bot API port (0 = any free port)")
    parser.add_argument(
        "--control-port", type=int, default=0, help="control API port (0 = any free port)"
    )
    parser.add_argument(
        "--token-env",
        metavar="NAME",
        help="accept only the bot token in this environment variable (default: any token)",
    )
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
