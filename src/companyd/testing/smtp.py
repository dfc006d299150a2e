"""A real SMTP server on loopback for tests (``aiosmtpd``, a test extra): the email channel
(an Apprise ``mailto://`` URL, docs/alerts.md "Other channels") meets it over a socket.

    with SmtpSink() as smtp:
        env["EMAIL_URL"] = smtp.url()      # plain SMTP, a login it accepts
        ...
        smtp.messages                      # every message accepted (email.message.EmailMessage)
        smtp.logins                        # (user, password) of every login
        smtp.envelopes                     # (MAIL FROM, RCPT TO) of every message

The server runs on aiosmtpd's own thread; every message it accepts is kept, parsed with the
modern email policy (decoded headers).
"""

from __future__ import annotations

import socket
from email import message_from_bytes, policy
from email.message import Message
from typing import Any

__all__ = ["SmtpSink", "text_of"]


class SmtpSink:
    """See module docstring."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        from aiosmtpd.controller import Controller

        self.host = host
        self.messages: list[Message] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self.logins: list[tuple[str, str]] = []
        with socket.socket() as s:  # aiosmtpd's start() connects to the port it was given
            s.bind((host, 0))
            self.port = int(s.getsockname()[1])
        self._controller = Controller(
            self,
            hostname=host,
            port=self.port,
            authenticator=self._login,
            auth_require_tls=False,  # plain SMTP on loopback
        )

    def _login(self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
        from aiosmtpd.smtp import AuthResult

        self.logins.append((data.login.decode(), data.password.decode()))
        return AuthResult(success=True)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        """Aiosmtpd's hook: keep the message."""
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        self.messages.append(message_from_bytes(envelope.content, policy=policy.default))
        return "250 OK"

    def url(self, password: str = "smtp-pass-9f8e7d6c5b4a") -> str:
        """An Apprise URL for this server: plain SMTP (``mode=insecure``), user ``founder``
        with ``password``, from companyd@example.com to founder@example.com.
        """
        return (
            f"mailto://founder:{password}@{self.host}:{self.port}"
            "?from=companyd@example.com&to=founder@example.com&mode=insecure"
        )

    def __enter__(self) -> SmtpSink:
        self._controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._controller.stop()


def text_of(msg: Message) -> str:
    """The text/plain part of ``msg`` ("" without one)."""
    for part in msg.walk() if msg.is_multipart() else [msg]:
        if part.get_content_type() == "text/plain":
            payload = part.get_payload(decode=True)
            return payload.decode() if isinstance(payload, bytes) else ""
    return ""
