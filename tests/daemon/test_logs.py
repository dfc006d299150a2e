"""Daemon logging: journald style, JSON lines, redaction, the writer thread, event logging."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from companyd.daemon._logs import (
    LoggingHandle,
    Redactor,
    log_events,
    setup_logging,
    under_journald,
)
from companyd.events import EventBus, Severity

SECRET = "sk-ant-api03-SECRETSECRET"
TOKEN = "123456:AAH-bot/token+x"  # needs URL-encoding


@pytest.fixture
def handles() -> Iterator[list[LoggingHandle]]:
    """Closes whatever setup_logging installed, and restores the root logger's level."""
    root = logging.getLogger()
    level = root.level
    made: list[LoggingHandle] = []
    yield made
    for h in made:
        h.close()
    root.setLevel(level)


def _setup(handles: list[LoggingHandle], **kwargs: Any) -> tuple[LoggingHandle, io.StringIO]:
    stream = io.StringIO()
    kwargs.setdefault("threaded", False)
    h = setup_logging(stream=stream, **kwargs)
    handles.append(h)
    return h, stream


def test_text_format_outside_journald_has_timestamps(handles: list[LoggingHandle]) -> None:
    _, out = _setup(handles, journald=False)
    logging.getLogger("companyd.spend").warning("budget %d%% used", 80)
    line = out.getvalue().strip()
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING companyd\.spend: budget 80% used", line
    ), line


def test_journald_style_drops_timestamps_and_prefixes_priorities(
    handles: list[LoggingHandle],
) -> None:
    _, out = _setup(handles, journald=True)
    log = logging.getLogger("companyd.x")
    log.info("up")
    log.warning("slow")
    log.error("broken")
    log.critical("gone")
    assert out.getvalue().splitlines() == [
        "<6>INFO companyd.x: up",
        "<4>WARNING companyd.x: slow",
        "<3>ERROR companyd.x: broken",
        "<2>CRITICAL companyd.x: gone",
    ]


def test_journald_is_detected_from_journal_stream_naming_our_stderr(tmp_path: Path) -> None:
    with open(tmp_path / "stderr", "w") as stream, open(tmp_path / "other", "w") as other:
        st = os.fstat(stream.fileno())
        env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        assert under_journald(stream, env)
        assert not under_journald(other, env)  # redirected elsewhere: not the journal
        assert not under_journald(stream, {})
        assert not under_journald(stream, {"JOURNAL_STREAM": "garbage"})
        assert not under_journald(io.StringIO(), env)  # no file descriptor


def test_json_lines_carry_level_logger_message_and_exception(handles: list[LoggingHandle]) -> None:
    _, out = _setup(handles, fmt="json")
    log = logging.getLogger("companyd.agents")
    log.info("run %s started", "run-1")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("run failed")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["level"] == "info" and first["logger"] == "companyd.agents"
    assert first["msg"] == "run run-1 started"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", first["ts"])
    assert second["level"] == "error" and "RuntimeError: boom" in second["exc"]
    assert "Traceback" in second["exc"]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_registered_secrets_never_reach_the_output(handles: list[LoggingHandle], fmt: str) -> None:
    h, out = _setup(handles, fmt=fmt, secrets=[SECRET])
    h.redactor.add(TOKEN)  # registered later, e.g. after the credentials were read
    log = logging.getLogger("companyd.llm.claude")
    log.warning("calling with key %s", SECRET)
    inline = "inline " + SECRET  # already in the message, not an argument
    log.warning(inline)
    log.info("GET https://api.telegram.org/bot%s/getUpdates", "123456%3AAAH-bot%2Ftoken%2Bx")
    try:
        raise ValueError(f"invalid x-api-key {SECRET!r} for bot {TOKEN}")
    except ValueError:
        log.exception("request failed")
    log.warning("stack", stack_info=True, extra={"note": SECRET})
    text = out.getvalue()
    assert SECRET not in text and TOKEN not in text and "123456%3AAAH" not in text
    assert text.count("***") >= 5
    assert "invalid x-api-key '***' for bot ***" in text


def test_event_data_attached_to_records_is_redacted(handles: list[LoggingHandle]) -> None:
    _, out = _setup(handles, fmt="json", secrets=[SECRET])
    bus = EventBus()
    stop = log_events(bus)
    bus.emit("run_failed", "companyd/agents/cfo", reason=f"401 for key {SECRET}")
    stop()
    line = json.loads(out.getvalue())
    assert SECRET not in json.dumps(line)
    assert line["event"]["data"]["reason"] == "401 for key ***"


def test_short_or_empty_values_are_not_treated_as_secrets() -> None:
    r = Redactor(["", "abc"])
    r.add(None)
    assert r.count == 0
    assert r.redact("abc") == "abc"


def test_events_are_logged_at_the_level_of_their_severity(handles: list[LoggingHandle]) -> None:
    _, out = _setup(handles, journald=True, level="debug")
    bus = EventBus()
    stop = log_events(bus)
    bus.emit("restart", "companyd/agents/finance", child="cfo", restarts=2)
    bus.emit("max_intensity", "companyd/agents")
    bus.emit("child_started", "companyd/agents", child="ceo")
    bus.emit("agent_paused", "companyd/agents/cfo", severity=Severity.INFO, agent="cfo")
    stop()
    bus.emit("restart", "companyd/agents", child="ignored")  # after stop: not logged
    assert out.getvalue().splitlines() == [
        "<4>WARNING companyd.events: restart companyd/agents/finance: child='cfo' restarts=2",
        "<2>CRITICAL companyd.events: max_intensity companyd/agents",
        "<7>DEBUG companyd.events: child_started companyd/agents: child='ceo'",
        "<6>INFO companyd.events: agent_paused companyd/agents/cfo: agent='cfo'",
    ]


def test_the_writer_thread_writes_and_close_flushes(handles: list[LoggingHandle]) -> None:
    h, out = _setup(handles, threaded=True, journald=True)
    for i in range(100):
        logging.getLogger("companyd.t").info("line %d", i)
    h.close()
    lines = out.getvalue().splitlines()
    assert lines == [f"<6>INFO companyd.t: line {i}" for i in range(100)]


class _StuckStream(io.StringIO):
    """stderr that hangs on its first write until released (a stalled journald pipe)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def write(self, s: str) -> int:
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(10)
        return super().write(s)


def test_a_stalled_stderr_drops_lines_instead_of_blocking_the_caller(
    handles: list[LoggingHandle],
) -> None:
    stream = _StuckStream()
    h = setup_logging(stream=stream, threaded=True, queue_size=1, journald=True)
    handles.append(h)
    # only this test's records (and the writer's own notice) reach the queue: a thread left
    # by another test of this worker (an Apprise send) may log meanwhile, and one record more
    # in a queue of one changes what is dropped
    ours = ("companyd.t", "companyd.daemon._logs")
    h.handler.addFilter(lambda record: record.name in ours)
    log = logging.getLogger("companyd.t")
    log.info("first")  # taken by the writer, which then hangs in write()
    assert stream.entered.wait(10)
    log.info("second")  # waits in the queue (size 1)
    for i in range(3):
        log.info("lost %d", i)  # queue full: dropped at once, the caller is not blocked
    assert h.dropped == 3
    stream.release.set()
    h.close()
    assert stream.getvalue().splitlines() == [
        "<6>INFO companyd.t: first",
        # told as soon as writing works again, before the line that waited
        "<4>WARNING companyd.daemon._logs: 3 log lines were dropped because stderr could not "
        "keep up",
        "<6>INFO companyd.t: second",
    ]


def test_setup_replaces_its_own_handler_only(handles: list[LoggingHandle]) -> None:
    root = logging.getLogger()
    other = logging.NullHandler()
    root.addHandler(other)
    try:
        h1, _ = _setup(handles)
        h2, out2 = _setup(handles)
        assert h1.handler not in root.handlers
        assert h2.handler in root.handlers and other in root.handlers
        logging.getLogger("companyd").warning("once")
        assert out2.getvalue().count("once") == 1
    finally:
        root.removeHandler(other)


def test_bad_format_or_level_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown log format 'xml'; expected one of: text, json"):
        setup_logging(fmt="xml", stream=io.StringIO())
    with pytest.raises(ValueError, match=r"unknown log level 'loud'; expected one of: debug"):
        setup_logging(level="loud", stream=io.StringIO())
