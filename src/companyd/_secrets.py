"""The one secret redactor: every text companyd shows, logs, stores or sends passes it.

companyd knows two kinds of secret:

* **known values** — what company.yaml names by reference: the Anthropic API key, the
  Telegram bot token (and its secret half after ``:``), every systemd credential and every
  environment variable passed to a tool server through ``env_from``. They are registered
  with :data:`SECRETS` (``SECRETS.add(value)``) as soon as they are read, with their
  URL-encoded forms (a bot token travels in every Bot API URL).
* **values that look like secrets** — an ``sk-ant-…`` key, a bot token ``NNNN:AA…``, a
  GitHub, Slack or AWS key, the password in ``scheme://user:password@host`` (up to the
  URL's last ``@``) or in ``password=…`` (a libpq key=value string) — masked by
  pattern even when nothing registered them: an API key pasted into the wrong key of
  company.yaml must not come back in the error message that rejects it.

:func:`redact` applies both. The same registry is the log filter (:meth:`Redactor.filter`,
installed on the daemon's handler) and, from the first registration on, a log record
factory that cleans every record whichever logger or library created it (httpx logs each
Bot API URL at INFO, python-telegram-bot puts the token into ``InvalidToken``).
"""

from __future__ import annotations

import _thread
import json
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import logging

# logging, traceback and urllib.parse are imported where they are used: every CLI command
# imports this module, and most of them never log or register a secret (issue 31).

__all__ = [
    "MASK",
    "MIN_SECRET_LENGTH",
    "SECRETS",
    "SECRET_PATTERNS",
    "Redactor",
    "protect",
    "redact",
]

MASK = "***"

#: Shorter values are not treated as secrets: masking "abc" everywhere would mangle logs
#: and no real API key or bot token is that short.
MIN_SECRET_LENGTH = 6

#: Values that look like secrets: (pattern, what it looks like, what replaces it). The
#: config loader's secret scan uses the same list, so what it refuses is what is masked.
#: A bot token is digits, ``:``, then 30+ characters; it may follow letters (``/bot123:…``
#: in a Bot API URL) but not more digits.
SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"), "an Anthropic API key", "<anthropic-api-key>"),
    (
        re.compile(r"(?<![0-9])[0-9]{6,12}:[A-Za-z0-9_\-]{30,}"),
        "a Telegram bot token",
        "<telegram-bot-token>",
    ),
    (re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_\-]{20,}"), "an API key", "<api-key>"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), "a GitHub token", "<github-token>"),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"), "a Slack token", "<slack-token>"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "an AWS access key", "<aws-access-key>"),
    # to the last "@" of the URL: a password may hold an unencoded "@", "/", "#" or "?"
    (re.compile(r"(?<=://)[^/\s:@]+:[^\s\"'<>`]+(?=@)"), "a URL with a password in it", "user:***"),
    # a libpq key=value string or a URL query: password=… or password='… quoted …'
    (
        re.compile(r"(?<![A-Za-z0-9_])password\s*=\s*(?:'(?:[^'\\]|\\.)*'?|[^\s&'\"<>]+)"),
        "a password= setting",
        "password=***",
    ),
)
#: A cheap test per pattern, in the same order: the pattern itself runs only where its
#: trigger is present (a regex scan of a 170 kB status answer costs ~60 ms; these ~2 ms).
_TRIGGERS: tuple[Callable[[str], object], ...] = (
    lambda t: "sk-" in t,
    re.compile(r":[A-Za-z0-9_\-]{30}").search,
    lambda t: "sk-" in t,
    re.compile(r"gh[pousr]_").search,
    lambda t: "xox" in t,
    lambda t: "AKIA" in t,
    lambda t: "://" in t,
    lambda t: "password" in t,
)


def _suspects(text: str) -> list[tuple[re.Pattern[str], str]]:
    """The patterns (with their labels) that match somewhere in ``text``."""
    return [
        (rx, label)
        for trigger, (rx, _, label) in zip(_TRIGGERS, SECRET_PATTERNS, strict=True)
        if trigger(text) and rx.search(text)
    ]


class Redactor:
    """A set of known secrets plus the patterns of :data:`SECRET_PATTERNS`.

    :data:`SECRETS` is the process's one instance; other instances exist only for tests.
    As a logging filter (an object with ``filter``, which is all ``addFilter`` needs; not
    a :class:`logging.Filter` subclass, so that importing it does not import logging) it
    rewrites records in place (message with its arguments,
    exception and stack text, and an attached ``event`` dict); install it on handlers, not
    loggers (logger filters do not see records propagated from child loggers).
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: dict[str, str] = {}  # value -> what replaces it
        self._order: list[tuple[str, str]] = []  # longest first
        self._lock = _thread.allocate_lock()  # threading.Lock, without threading's import
        for s in secrets:
            self.add(s)

    def add(self, secret: str | None, label: str = MASK) -> None:
        """Register a secret (and its URL-encoded forms). Empty, None and values shorter than
        :data:`MIN_SECRET_LENGTH` are ignored. ``label`` replaces it (``***``); a value
        registered twice keeps its first label.
        """
        if not secret or len(secret.strip()) < MIN_SECRET_LENGTH:
            return
        secret = secret.strip()
        import urllib.parse

        with self._lock:
            forms = {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote(secret)}
            for form in forms:
                self._secrets.setdefault(form, label)
            # Longest first, so a secret containing another is masked whole.
            self._order = sorted(self._secrets.items(), key=lambda kv: len(kv[0]), reverse=True)
        if self is SECRETS:
            _install_record_factory()

    def add_all(self, secrets: Iterable[str | None]) -> None:
        for s in secrets:
            self.add(s)

    @property
    def count(self) -> int:
        return len(self._order)

    def known(self, text: str) -> bool:
        """Whether ``text`` holds a registered secret or something that looks like one."""
        return any(s in text for s, _ in self._order) or bool(_suspects(text))

    def redact(self, text: str) -> str:
        """``text`` with every registered secret and every value that looks like one
        replaced.
        """
        for secret, label in self._order:
            if secret in text:
                text = text.replace(secret, label)
        for rx, label in _suspects(text):
            text = rx.sub(label, text)
        return text

    def redact_data(self, value: Any) -> Any:
        """``value`` (JSON-like data) with every string in it redacted."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {self.redact_data(k): self.redact_data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_data(v) for v in value]
        return value

    def scrub(self, record: logging.LogRecord) -> None:
        """Rewrite ``record`` in place so that no secret is left in it."""
        try:
            message = record.getMessage()
        except Exception:  # a bad %-format: the logging module reports it as usual
            return
        if self.known(message):
            record.msg = self.redact(message)
            record.args = None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            import traceback

            text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            if self.known(text):
                # The formatted text replaces the exception object, which would print the
                # secret again in any handler that formats it itself.
                record.exc_text = self.redact(text)
                record.exc_info = None
        elif record.exc_text and self.known(record.exc_text):
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info and self.known(record.stack_info):
            record.stack_info = self.redact(record.stack_info)
        event = getattr(record, "event", None)
        if isinstance(event, dict):
            dumped = json.dumps(event, default=str)
            if self.known(dumped):
                record.event = json.loads(self.redact(dumped))

    def filter(self, record: logging.LogRecord) -> bool:
        self.scrub(record)
        return True


#: The process's redactor: every secret companyd reads is registered here.
SECRETS = Redactor()

_factory_lock = _thread.allocate_lock()
_factory_installed = False


def _install_record_factory() -> None:
    """Once per process: clean every log record as it is created, so that no handler
    (pytest's caplog, a library's own) ever sees a registered secret.
    """
    global _factory_installed
    with _factory_lock:
        if _factory_installed:
            return
        import logging

        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            SECRETS.scrub(record)
            return record

        logging.setLogRecordFactory(factory)
        _factory_installed = True


def redact(text: str) -> str:
    """``text`` with every known secret and every value that looks like a secret masked."""
    return SECRETS.redact(text)


def protect(secret: str, label: str = MASK) -> None:
    """Register ``secret`` with :data:`SECRETS`; a Telegram bot token (``id:secret``) is
    registered whole and by its secret half, both shown as ``<telegram-bot-token>``.
    """
    if re.fullmatch(r"\s*[0-9]+:\S+\s*", secret or ""):
        label = "<telegram-bot-token>"
        SECRETS.add(secret, label)
        half = secret.strip().partition(":")[2]
        if len(half) >= 8:
            SECRETS.add(half, label)
        return
    SECRETS.add(secret, label)
    _install_record_factory()
