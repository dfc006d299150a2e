"""What the Bot API stand-in records and hands out: messages, calls, files, users.

:class:`SentMessage` is a message the bot sent as the stand-in holds it now (edits applied),
:class:`Upload` a file uploaded with it (``sendDocument``), :class:`ApiCall` one Bot API
request with the status it was answered; :func:`user_json` and :func:`bot_id` build the
``User`` objects Telegram puts in updates and in ``getMe``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ApiCall", "DownMode", "SentMessage", "Upload", "bot_id", "chat_json", "user_json"]

#: How the stand-in is down: ``"refuse"`` closes the port, ``"502"`` answers Bad Gateway.
DownMode = Literal["refuse", "502"]


@dataclass(frozen=True)
class Upload:
    """A file uploaded in a multipart request: the name the client gave it, its media type
    and its bytes, as received.
    """

    file_name: str
    mime_type: str
    data: bytes

    def summary(self) -> dict[str, Any]:
        """The file as a recorded call's parameter shows it: name, media type and size."""
        return {"file_name": self.file_name, "mime_type": self.mime_type, "size": len(self.data)}


@dataclass
class SentMessage:
    """A message the bot sent, as the stand-in holds it now.

    Attributes:
        chat_id: the chat it went to (an int for numeric ids).
        message_id: the id the stand-in gave it.
        text: its current text (after edits); for a document, its caption ("" without one).
        reply_markup: its current inline keyboard (decoded JSON), or None.
        date: epoch seconds when it was sent.
        disable_notification: whether it was sent silently.
        reply_to: the message it answers (``reply_parameters.message_id`` or
            ``reply_to_message_id``), or None.
        edits: each edit in order: ``{"method", "text"?, "reply_markup"?}``.
        document: the file a ``sendDocument`` uploaded, or None for a text message.
    """

    chat_id: int | str
    message_id: int
    text: str
    reply_markup: dict[str, Any] | None
    date: int
    disable_notification: bool = False
    edits: list[dict[str, Any]] = field(default_factory=list)
    reply_to: int | None = None
    document: Upload | None = None

    def buttons(self) -> list[tuple[str, str]]:
        """The inline buttons as ``(label, callback_data)``, row by row."""
        rows = (self.reply_markup or {}).get("inline_keyboard") or []
        return [(b.get("text", ""), b.get("callback_data", "")) for row in rows for b in row]

    def to_dict(self) -> dict[str, Any]:
        """The message as the control API's ``/messages`` lists it."""
        return {
            "chat_id": self.chat_id,
            "message_id": self.message_id,
            "text": self.text,
            "reply_markup": self.reply_markup,
            "date": self.date,
            "disable_notification": self.disable_notification,
            "edits": list(self.edits),
            "reply_to": self.reply_to,
            "document": None
            if self.document is None
            else {
                **self.document.summary(),
                "data_base64": base64.b64encode(self.document.data).decode("ascii"),
            },
        }


@dataclass(frozen=True)
class ApiCall:
    """One Bot API request: the method, its decoded parameters and the HTTP status answered."""

    method: str
    params: dict[str, Any]
    status: int

    def to_dict(self) -> dict[str, Any]:
        """The call as the control API's ``/calls`` lists it."""
        return {"method": self.method, "params": self.params, "status": self.status}


def bot_id(token: str | None) -> int:
    """The bot's user id: the digits before the ``:`` of ``token``, else a fixed id."""
    if token and token.split(":")[0].isdigit():
        return int(token.split(":")[0])
    return 1000001


def user_json(uid: int, first_name: str, username: str | None) -> dict[str, Any]:
    """A Telegram ``User`` object for a human (``is_bot`` false); ``username`` only when given."""
    user: dict[str, Any] = {"id": uid, "is_bot": False, "first_name": first_name}
    if username:
        user["username"] = username
    return user


def chat_json(chat_id: int | str) -> dict[str, Any]:
    """The ``ChatFullInfo`` ``getChat`` answers for ``chat_id`` (a private chat for a positive
    id, else a channel).
    """
    return {
        "id": chat_id if isinstance(chat_id, int) else -1000000000001,
        "type": "private" if isinstance(chat_id, int) and chat_id > 0 else "channel",
        "first_name": "Op",
        "accent_color_id": 0,
        "max_reaction_count": 11,
        "accepted_gift_types": {
            "unlimited_gifts": False,
            "limited_gifts": False,
            "unique_gifts": False,
            "premium_subscription": False,
            "gifts_from_channels": False,
        },
    }
