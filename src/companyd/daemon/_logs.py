"""Logging for the daemon: stderr for journald, text or JSON, secrets never printed.

* **Where**: stderr only. Under systemd, journald stores it with timestamps, the unit name
  and the pid; ``journalctl -u companyd`` reads it back.
* **Text** (default): ``2026-11-22 10:00:00,123 WARNING companyd.spend: message``. Under
  journald (``$JOURNAL_STREAM`` names our stderr) the timestamp is left out, because
  journald adds its own, and each line starts with a syslog priority prefix such as
  ``<4>`` so that ``journalctl -p warning`` filters by severity (sd-daemon(3)).
* **JSON** (``--log-format json``): one object per line with ``ts``, ``level``,
  ``logger``, ``msg``, and ``exc`` / ``event`` when present.
* **Redaction**: the one redactor of :mod:`companyd._secrets` (:data:`~companyd._secrets.SECRETS`:
  every secret company.yaml names is registered when it is read, and values that look like
  secrets are masked by pattern) cleans the message, its arguments, the exception text,
  the stack and the attached event — in every record, whichever logger wrote it.
* **Never blocking the loop**: records are formatted and redacted on the calling thread
  (cheap), then handed over a bounded queue to one writer thread, so a slow or stalled
  journald pipe cannot freeze the event loop. When the queue is full, records are dropped
  and counted, and the count is reported once writing resumes.

:func:`log_events` turns every :class:`~companyd.events.Event` into a log line at a level
derived from its severity, so the journal tells the same story as alerts and metrics.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import logging.handlers
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

from companyd._secrets import SECRETS, Redactor
from companyd.events import Event, EventBus, Severity

__all__ = [
    "LOG_FORMATS",
    "LoggingHandle",
    "Redactor",
    "add_logging_arguments",
    "log_events",
    "setup_logging",
    "under_journald",
]

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
#: syslog priorities journald understands as line prefixes (sd-daemon(3)).
_SYSLOG_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}

_SEVERITY_LEVEL = {
    Severity.DEBUG: logging.DEBUG,
    Severity.INFO: logging.INFO,
    Severity.WARNING: logging.WARNING,
    Severity.CRITICAL: logging.CRITICAL,
}

#: Libraries whose INFO lines are per-request noise (httpx logs every Telegram long poll).
_NOISY = {
    "httpx": logging.WARNING,
    "httpcore": logging.WARNING,
    "telegram": logging.WARNING,
    "uvicorn": logging.WARNING,  # "Started server process", "Waiting for connections…"
    "sse_starlette": logging.WARNING,
}


def under_journald(stream: TextIO | None = None, env: Mapping[str, str] | None = None) -> bool:
    """True when ``stream`` (stderr by default) is the journal stream systemd connected.

    ``$JOURNAL_STREAM`` is ``<device>:<inode>`` of that stream; comparing it with the
    actual file (as systemd.exec(5) recommends) avoids mistaking a redirected stderr — a
    child started from a unit whose stderr went to a file — for the journal.
    """
    env = os.environ if env is None else env
    value = env.get("JOURNAL_STREAM", "")
    if not value:
        return False
    stream = sys.stderr if stream is None else stream
    try:
        dev, ino = (int(p) for p in value.split(":", 1))
        st = os.fstat(stream.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


class TextFormatter(logging.Formatter):
    """Human-readable lines; journald style (priority prefix, no time) when asked."""

    def __init__(self, *, journald: bool, syslog_prefix: bool = True) -> None:
        fmt = (
            "%(levelname)s %(name)s: %(message)s"
            if journald
            else ("%(asctime)s %(levelname)s %(name)s: %(message)s")
        )
        super().__init__(fmt)
        self.journald = journald
        self.syslog_prefix = syslog_prefix and journald

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if self.syslog_prefix:
            text = f"<{_syslog_priority(record.levelno)}>{text}"
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (ISO 8601 UTC), level, logger, msg, exc?, event?."""

    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            obj["exc"] = record.exc_text
        if record.stack_info:
            obj["stack"] = record.stack_info
        event = getattr(record, "event", None)
        if event is not None:
            obj["event"] = event
        return json.dumps(obj, ensure_ascii=False, default=str)


def _syslog_priority(levelno: int) -> int:
    for level in (logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO):
        if levelno >= level:
            return _SYSLOG_PRIORITY[level]
    return _SYSLOG_PRIORITY[logging.DEBUG]


class _QueueHandler(logging.handlers.QueueHandler):
    """Formats on the caller's thread, then enqueues without ever blocking.

    The record is formatted here (with the real formatter) so the writer thread only
    writes strings; a full queue drops the record and counts it.
    """

    def __init__(self, q: queue.Queue[Any], formatter: logging.Formatter) -> None:
        super().__init__(q)
        self.setFormatter(formatter)
        self.dropped = 0

    def prepare(self, record: logging.LogRecord) -> Any:
        assert self.formatter is not None
        return self.formatter.format(copy.copy(record))

    def enqueue(self, record: Any) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1


class _Writer(threading.Thread):
    def __init__(self, q: queue.Queue[Any], stream: TextIO, handler: _QueueHandler) -> None:
        super().__init__(name="companyd-log-writer", daemon=True)
        self.q = q
        self.stream = stream
        self.handler = handler
        self._reported = 0

    def run(self) -> None:
        while True:
            item = self.q.get()
            try:
                if item is None:
                    return
                self._write(item)
                dropped = self.handler.dropped
                if dropped != self._reported:
                    self._write(self._dropped_line(dropped - self._reported))
                    self._reported = dropped
            finally:
                self.q.task_done()

    def _dropped_line(self, n: int) -> str:
        record = logging.LogRecord(
            __name__,
            logging.WARNING,
            __file__,
            0,
            "%d log lines were dropped because stderr could not keep up",
            (n,),
            None,
        )
        assert self.handler.formatter is not None
        return self.handler.formatter.format(record)

    def _write(self, line: str) -> None:
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # stderr is gone (closed pipe): nowhere left to report it


class LoggingHandle:
    """What :func:`setup_logging` installed; :meth:`close` flushes and removes it.

    Attributes:
        redactor: register more secrets with ``handle.redactor.add(value)``.
        format: ``"text"`` or ``"json"``.
        journald: whether journald style was chosen.
    """

    def __init__(
        self,
        *,
        handler: logging.Handler,
        redactor: Redactor,
        fmt: LogFormat,
        journald: bool,
        writer: _Writer | None,
        q: queue.Queue[Any] | None,
    ) -> None:
        self.handler = handler
        self.redactor = redactor
        self.format = fmt
        self.journald = journald
        self._writer = writer
        self._queue = q
        self._closed = False

    @property
    def dropped(self) -> int:
        """Log records dropped because the writer's queue was full (0 without a queue)."""
        return self.handler.dropped if isinstance(self.handler, _QueueHandler) else 0

    def flush(self, timeout: float = 5.0) -> None:
        """Wait (up to ``timeout`` seconds) until queued lines are written.

        Blocking; call it from a thread or at exit, not from the event loop.
        """
        if self._queue is None:
            self.handler.flush()
            return
        end = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < end:
            time.sleep(0.005)

    def close(self) -> None:
        """Flush, stop the writer thread and detach the handler from the root logger
        (idempotent).
        """
        global _installed
        if self._closed:
            return
        self._closed = True
        if _installed is self:
            _installed = None
        logging.getLogger().removeHandler(self.handler)
        if self._queue is not None and self._writer is not None:
            with contextlib.suppress(queue.Full):
                self._queue.put(None, timeout=5.0)
            self._writer.join(timeout=5.0)
        self.handler.close()


_installed: LoggingHandle | None = None


def setup_logging(
    *,
    level: str | int = "INFO",
    fmt: str = "text",
    stream: TextIO | None = None,
    journald: bool | None = None,
    syslog_prefix: bool = True,
    secrets: Iterable[str] = (),
    threaded: bool = True,
    queue_size: int = 10_000,
) -> LoggingHandle:
    """Configure the root logger for the daemon and return a handle.

    Replaces the handler a previous call installed (other handlers are left alone).

    Args:
        level: root level name or number (``"DEBUG"``, ``"INFO"``, …).
        fmt: ``"text"`` or ``"json"``.
        stream: where lines go (default: ``sys.stderr``).
        journald: force journald style on/off; default: :func:`under_journald`.
        syslog_prefix: prefix ``<N>`` priorities in journald style.
        secrets: values to register with the process's redactor (more via
            ``handle.redactor.add``; :data:`~companyd._secrets.SECRETS` is that redactor).
        threaded: write from a background thread (True for the daemon; tests may pass
            False to write synchronously).
        queue_size: lines that may wait for the writer before new ones are dropped.

    Raises:
        ValueError: unknown ``fmt`` or ``level``, naming the valid choices.
    """
    global _installed
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; expected one of: {', '.join(LOG_FORMATS)}")
    levelno = _level(level)
    out = sys.stderr if stream is None else stream
    use_journald = under_journald(out) if journald is None else journald
    formatter: logging.Formatter = (
        JsonFormatter()
        if fmt == "json"
        else TextFormatter(journald=use_journald, syslog_prefix=syslog_prefix)
    )
    redactor = SECRETS
    redactor.add_all(secrets)
    if _installed is not None:
        _installed.close()
    handler: logging.Handler
    writer: _Writer | None = None
    q: queue.Queue[Any] | None = None
    if threaded:
        q = queue.Queue(maxsize=queue_size)
        qh = _QueueHandler(q, formatter)
        writer = _Writer(q, out, qh)
        writer.start()
        handler = qh
    else:
        handler = logging.StreamHandler(out)
        handler.setFormatter(formatter)
    handler.addFilter(redactor)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(levelno)
    for name, lib_level in _NOISY.items():
        if levelno > logging.DEBUG:
            logging.getLogger(name).setLevel(max(lib_level, levelno))
    _installed = LoggingHandle(
        handler=handler,
        redactor=redactor,
        fmt=fmt,
        journald=use_journald,
        writer=writer,
        q=q,
    )
    return _installed


def _level(level: str | int) -> int:
    if isinstance(level, int):
        return level
    value = logging.getLevelName(level.upper())
    if not isinstance(value, int):
        raise ValueError(
            f"unknown log level {level!r}; expected one of: debug, info, warning, error, critical"
        )
    return value


def log_events(bus: EventBus, logger: logging.Logger | None = None) -> Callable[[], None]:
    """Log every event published on ``bus``; returns the function that stops it.

    The level follows the event's severity (debug → DEBUG, info → INFO, warning →
    WARNING, critical → CRITICAL); the line reads ``kind source: key=value …`` and the
    whole event is attached as ``record.event`` (the JSON format prints it as ``event``).
    It inspects no field of any kind, so it writes each event's JSON view (``kind``,
    ``data``) rather than matching on the event classes, and an event without a class
    (:class:`~companyd.events.Other`) logs the same way.
    """
    target = logger or logging.getLogger("companyd.events")

    def listener(event: Event) -> None:
        level = _SEVERITY_LEVEL.get(event.severity, logging.INFO)
        if not target.isEnabledFor(level):
            return
        details = " ".join(f"{k}={v!r}" for k, v in event.data.items())
        target.log(
            level,
            "%s %s%s",
            event.kind,
            event.source,
            f": {details}" if details else "",
            extra={"event": event.to_dict()},
        )

    return bus.add_listener(listener)


def add_logging_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--log-format`` and ``--log-level`` (for ``companyd run``)."""
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="stderr log format: human-readable text (default) or one JSON object per line",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="lowest level written (default: info)",
    )
