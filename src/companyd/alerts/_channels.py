"""The founder's other channels: Slack, Discord, email, ntfy … through Apprise (private).

``alerts.channels: [{name, url_env, min_severity, deliver}]`` (docs/alerts.md, "Other
channels"). Each channel is one Apprise URL, read from the environment variable
``url_env`` (it carries a token: registered with the secret redactor the moment it is
read, never logged, shown or stored). Telegram stays the interactive channel (buttons,
replies); a channel only *receives*:

* **alerts** at or above its ``min_severity`` — one message per story: the first event of
  a coalescing key (the pager's; :meth:`Fanout.items`) within ``alerts.coalesce_seconds``
  is sent, the repeats that Telegram folds into an edit are not (a channel cannot edit) —
  except while quiet hours hold the story: its repeats are folded into the held message,
  which says how many times it happened as Telegram's does (``(×n)`` in the digest, the
  ``×n in …`` line in a single alert);
* **routine results** that go to the founder (a ``deliver:`` with ``telegram`` or
  ``digest``) when the channel says ``deliver: true``.

Both go through the durable outbound queue (:mod:`companyd.alerts._outbound`, the alert
outbox's ``outbound`` table): written before any send, retried with backoff while a
channel is down, neither lost nor repeated across a restart. A channel is an
:class:`AppriseTarget` of that queue (kind ``apprise``, target name ``channel:NAME``, so a
channel and a webhook may share a name). Apprise is blocking: each send runs in a daemon
thread of its own (at most :data:`SEND_THREADS` at once per channel), within
:data:`SEND_DEADLINE` seconds; a send stuck past it never holds the daemon's exit, nor the
other channels' sends.

Apprise says only whether a send worked, not why it failed in a way a program can read:
a URL Apprise cannot use is a permanent failure (recorded, said once); every failed send is
transient (retried), its reason taken from Apprise's own log lines, redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from companyd._secrets import protect, redact
from companyd.alerts._outbound import (
    OutboundMessage,
    PermanentSendError,
    Queued,
    TransientSendError,
)
from companyd.alerts._policy import RANK, Policy, quiet_until, severity_of
from companyd.alerts._render import ICONS, compose, digest_line
from companyd.alerts._render_kinds import joining_data, render, story_count, story_key
from companyd.alerts._values import result_cost
from companyd.events import Event, RoutineResult

if TYPE_CHECKING:
    from companyd.admin import ChannelHealth
    from companyd.config import ChannelSpec

__all__ = [
    "KIND",
    "SEND_DEADLINE",
    "AppriseTarget",
    "Fanout",
    "channel_url",
    "service_of",
    "target_name",
]

log = logging.getLogger("companyd.alerts.service")

#: The target kind of a channel in the outbound queue.
KIND = "apprise"
#: Seconds (real time) one Apprise send may take, its retries inside it included; a send
#: still running then counts as failed (transient) and its thread is left to finish.
SEND_DEADLINE = 25.0
#: Threads for Apprise sends at once, per channel: blocking calls kept off the event loop
#: and off the default executor, so a hanging SMTP server cannot starve the daemon's file
#: and database work — and per channel, so an endpoint that holds its sends for ever (a
#: trickling answer defeats Apprise's socket timeouts) stops only its own channel.
SEND_THREADS = 2
#: A result longer than this is cut (with a mark) before it is queued: the services behind
#: Apprise have their own, smaller limits, and Apprise splits or truncates to them.
MAX_BODY = 30_000

#: Each channel's sends in their threads now (across event loops and reloads, which make
#: new targets): at most :data:`SEND_THREADS` per channel.
_SLOTS: dict[str, threading.BoundedSemaphore] = {}
_SLOTS_LOCK = threading.Lock()


def _slots(channel: str) -> threading.BoundedSemaphore:
    with _SLOTS_LOCK:
        return _SLOTS.setdefault(channel, threading.BoundedSemaphore(SEND_THREADS))


def _in_thread(channel: str, fn: Callable[..., None], *args: Any) -> asyncio.Future[None]:
    """Run ``fn(*args)`` in a daemon thread of its own; its outcome as a future of the
    running loop. At most :data:`SEND_THREADS` run at once for ``channel``: with all of its
    slots held (sends stuck past their deadline) a new send to it fails at once
    (transient) instead of starting one more thread; the other channels are not held up.

    Daemon threads, not a :class:`~concurrent.futures.ThreadPoolExecutor`: the interpreter
    joins a pool's threads at exit, so one send stuck in an endpoint that never answers
    would hold a stopped daemon's exit for ever (past systemd's stop timeout, SIGKILL). A
    daemon thread is dropped at exit; what it was sending stays pending in the outbox.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    slots = _slots(channel)
    if not slots.acquire(blocking=False):
        raise TransientSendError(
            f"{SEND_THREADS} earlier sends to channel {channel!r} are still stuck in its "
            "endpoint; trying later"
        )

    def settle(exc: BaseException | None) -> None:
        if done.cancelled():
            return
        if exc is None:
            done.set_result(None)
        else:
            done.set_exception(exc)

    def work() -> None:
        outcome: BaseException | None = None
        try:
            fn(*args)
        except BaseException as exc:  # handed to the loop, which raises it in the send
            outcome = exc
        finally:
            slots.release()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, outcome)

    try:
        threading.Thread(target=work, name="apprise", daemon=True).start()
    except BaseException:
        slots.release()
        raise
    return done


def target_name(channel: str) -> str:
    """The queue's target name of channel ``channel``."""
    return f"channel:{channel}"


def channel_url(spec: ChannelSpec, environ: Mapping[str, str] | None = None) -> str | None:
    """The channel's Apprise URL from ``$url_env`` (None: not set, or empty), registered as a
    secret — whole and by its password and path parts — before anything can print it.
    """
    env = os.environ if environ is None else environ
    url = (env.get(spec.url_env) or "").strip()
    if not url:
        return None
    _protect_url(url)
    return url


def _protect_url(url: str) -> None:
    """Register ``url``, its password, and the parts of its path and query that look like
    tokens (8+ characters with a digit or a capital: a Slack token, a Discord webhook id):
    Apprise's own log lines may quote one alone. Plain words (``alerts``, a user name) and
    addresses (``to=``) are left readable.
    """
    protect(url)
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return
    if parts.password:
        protect(urllib.parse.unquote(parts.password))
    pieces = [p for p in parts.path.split("/") if p]
    pieces += [v for _, v in urllib.parse.parse_qsl(parts.query)]
    for piece in map(urllib.parse.unquote, pieces):
        if len(piece) >= 8 and "@" not in piece and re.search(r"[0-9A-Z]", piece):
            protect(piece)


def service_of(url: str) -> str:
    """What a channel's URL is, without its secrets: its scheme (``slack``, ``mailto``)."""
    return url.split("://", 1)[0].lower() if "://" in url else "?"


_NOTIFY_TYPES = {"critical": "failure", "warning": "warning", "info": "info", "result": "success"}


def _notify(url: str, title: str, body: str, severity: str) -> None:
    """One Apprise send (blocking; on :func:`_pool`). Raises a send error saying why."""
    import apprise  # imported only when a channel sends: most daemons never need it

    # The send stays in this (daemon) thread: Apprise's own thread pool, whose threads the
    # interpreter joins at exit, serves parallel sends (one URL: nothing to parallelise)
    # and its per-service timeout (0: none; SEND_DEADLINE bounds the wait instead).
    app = apprise.Apprise(asset=apprise.AppriseAsset(async_mode=False, service_timeout=0))
    if not app.add(url):
        raise PermanentSendError(
            f"Apprise cannot use this {service_of(url)}:// URL (unknown service or malformed); "
            "fix it in the environment variable and restart"
        )
    with apprise.LogCapture(level=logging.WARNING) as captured:  # type: ignore[no-untyped-call]
        ok = app.notify(
            body=body or title,
            title=title,
            notify_type=_NOTIFY_TYPES.get(severity, "info"),
        )
    if not ok:
        said = [line for line in captured.getvalue().splitlines() if line.strip()]
        why = said[-1].split(" - ", 2)[-1] if said else "no reason given"
        raise TransientSendError(f"{service_of(url)} send failed: {redact(why)}")


def _shown(data: Mapping[str, Any]) -> tuple[str, str, str]:
    """A message's title, body and severity; what a quiet window held (``items``): one
    story as it is, several as one digest — as Telegram's at the window's end.

    A story's repeats held with it are items of the same ``story``, each rendered with the
    story so far (``count``): the latest tells it, from when its first began.
    """
    items = data.get("items")
    if not isinstance(items, list) or not items:
        title, body = str(data.get("title") or ""), str(data.get("body") or "")
        return title, body, str(data.get("severity") or "info")
    stories: dict[Any, list[Mapping[str, Any]]] = {}
    for n, i in enumerate(items):
        stories.setdefault(i.get("story") or n, []).append(i)  # rows of old: one each
    if len(stories) == 1:
        return _shown(items[-1])
    severity = max((str(i.get("severity") or "info") for i in items), key=lambda s: RANK.get(s, 1))
    # a story's latest item tells it (its count), from when its first began
    told = [(s[-1], s[0].get("at") or "") for s in stories.values()]
    lines = [digest_line(str(i.get("title") or ""), int(i.get("count") or 1), at) for i, at in told]
    title = f"{ICONS['digest']} While quiet hours were on: {len(stories)} alerts"
    return title, "\n".join([*lines, str(data.get("company") or "")]).strip(), severity


class AppriseTarget:
    """A channel as a target of the outbound queue (:class:`companyd.alerts._outbound.Target`).

    ``url`` None: ``$url_env`` was not set when the pager started — each send fails
    (transiently: the messages wait in the outbox until the daemon is restarted with it).
    Each send's outcome is kept for status (:meth:`health`): failing since ``now()`` of the
    first failure, with the (redacted) reason, until a send works.
    """

    def __init__(
        self,
        spec: ChannelSpec,
        url: str | None,
        *,
        deadline: float = SEND_DEADLINE,
        now: Callable[[], float] = time.time,
    ):
        self.spec = spec
        self._url = url
        self._deadline = deadline
        self._now = now
        #: when the sends started failing (None: the last one worked, or none was tried)
        self.failing_since: float | None = None
        #: why the last send failed ("" when it did not)
        self.error = ""

    @property
    def name(self) -> str:
        return target_name(self.spec.name)

    @property
    def kind(self) -> str:
        return KIND

    @property
    def url(self) -> str | None:
        """Its Apprise URL (a secret: never shown), None when ``$url_env`` was not set."""
        return self._url

    @property
    def configured(self) -> bool:
        """Whether its URL was found in the environment."""
        return self._url is not None

    def health(self) -> ChannelHealth:
        """This channel for status (never its URL)."""
        if self._url is None:
            state: Literal["ok", "failing", "unset"] = "unset"
            error = f"${self.spec.url_env} is not set"
        else:
            state = "ok" if self.failing_since is None else "failing"
            error = self.error
        return {"name": self.spec.name, "state": state, "since": self.failing_since, "error": error}

    async def send(self, message: OutboundMessage) -> None:
        """Send ``message`` (``data``: ``title``, ``body``, ``severity``) through Apprise, in
        a thread, within the deadline.
        """
        try:
            await self._send(message)
        except Exception as exc:
            if self.failing_since is None:
                self.failing_since = self._now()
            self.error = redact(str(exc) or type(exc).__name__)
            raise
        self.failing_since, self.error = None, ""

    async def _send(self, message: OutboundMessage) -> None:
        if self._url is None:
            raise TransientSendError(
                f"${self.spec.url_env} is not set (channel {self.spec.name!r}); set it and "
                "restart companyd"
            )
        title, body, severity = _shown(message.data)
        call = _in_thread(self.spec.name, _notify, self._url, title, body, severity)
        try:
            async with asyncio.timeout(self._deadline):
                await asyncio.shield(call)
        except TimeoutError:
            raise TransientSendError(
                f"{service_of(self._url)} did not answer within {self._deadline:g} s"
            ) from None


@dataclass
class _Story:
    """One coalescing key's story in its window, as a channel was told it: ``held_until``
    the end of the quiet window that holds it (None: sent at once), ``counts`` its events
    by kind and ``data`` their merged fields (rendered as Telegram renders its alert).
    """

    id: str
    kind: str
    #: the first event's source: the story is rendered as that event's kind tells it
    source: str
    end: float
    held_until: float | None
    severity: str
    counts: dict[str, int] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    first_ts: float = 0.0
    last_ts: float = 0.0


class Fanout:
    """Which alerts and results go to which channel, as queue items (see module docstring).

    Owned by the pager (one per run); ``channels`` and ``policy`` are replaced on reload.
    The coalescing windows are in memory: after a restart, a story still going on may be
    told once more.
    """

    def __init__(self, channels: Sequence[ChannelSpec], policy: Policy) -> None:
        self.channels = tuple(channels)
        self.policy = policy
        self._windows: dict[str, _Story] = {}  # coalescing key → its story in its window

    def items(self, event: Event, now: float) -> list[Queued]:
        """The queue items ``event`` makes (none for most events)."""
        if not self.channels:
            return []
        if isinstance(event, RoutineResult):
            return self._result(event, now)
        return self._alert(event, now)

    def _alert(self, event: Event, now: float) -> list[Queued]:
        # each channel has its own floor: rank the event without the pager's min_severity
        severity = severity_of(replace(self.policy, min_rank=0), event)
        if severity is None:
            return []
        to = [c for c in self.channels if RANK[severity] >= RANK[c.min_severity]]
        if not to:
            return []
        key = story_key(event.kind, event.source, event.data)
        until = self._quiet_until(severity, now)
        story = self._windows.get(key)
        if story is not None and story.end > now:
            if story.held_until is None or until is None:
                return []  # the same story: Telegram edits its message, a channel is not told
            # held: the quiet window's message says how many times it happened (Telegram's
            # held alert counts its repeats as well)
            story.counts[event.kind] = story.counts.get(event.kind, 0) + 1
            severity = max(severity, story.severity, key=lambda s: RANK.get(s, 1))
            story.severity = severity
            story.data = {**story.data, **joining_data(story.kind, event.kind, event.data)}
            story.last_ts = max(story.last_ts, event.ts)
        else:
            self._windows = {k: v for k, v in self._windows.items() if v.end > now}
            story = _Story(
                id=f"{key}@{event.ts!r}",
                kind=event.kind,
                source=event.source,
                end=now + self.policy.coalesce,
                held_until=until,
                severity=severity,
                counts={event.kind: 1},
                data=dict(event.data),
                first_ts=event.ts,
                last_ts=event.ts,
            )
            self._windows[key] = story
        rendered, _ = render(
            story.kind, story.data, story.source, story.counts, self.policy.agents, self.policy.tz
        )
        count = story_count(story.kind, story.counts)
        text = redact(
            compose(
                severity=severity,
                rendered=rendered,
                count=count,
                first_ts=story.first_ts,
                last_ts=story.last_ts,
                company=self.policy.company,
                tz=self.policy.tz,
            )
        )
        title, _, body = text.partition("\n")
        data: dict[str, Any] = {
            "title": title,
            "body": body,
            "severity": severity,
            "kind": event.kind,
            "source": event.source,
        }
        if until is not None:
            # held as Telegram holds it: into the window's one message per channel
            at = datetime.fromtimestamp(story.first_ts, self.policy.tz).strftime("%H:%M")
            item = {**data, "at": at, "story": story.id, "count": count}
            held = {"items": [item], "company": self.policy.company}
            return [
                Queued(
                    target=target_name(c.name),
                    kind=KIND,
                    key=f"quiet:{until!r}",
                    type="alert",
                    timestamp=until,
                    data=held,
                    not_before=until,
                    fold=True,
                )
                for c in to
            ]
        return [
            Queued(
                target=target_name(c.name),
                kind=KIND,
                key=f"alert:{key}@{event.ts!r}",
                type="alert",
                timestamp=event.ts,
                data=data,
            )
            for c in to
        ]

    def _quiet_until(self, severity: str, now: float) -> float | None:
        """When the quiet window ``now`` is in ends, for what it holds (None: not held —
        outside the window, or critical).
        """
        if severity == "critical":
            return None
        return quiet_until(now, self.policy.quiet, self.policy.quiet_tz)

    def _result(self, event: RoutineResult, now: float) -> list[Queued]:
        if not {"telegram", "digest"} & set(event.deliver):
            return []  # a result for memory or a file only is not the founder's to read
        to = [c for c in self.channels if c.deliver]
        if not to:
            return []
        answer = event.answer
        if len(answer) > MAX_BODY:
            answer = answer[: MAX_BODY - 2] + "\n…"
        lines = []
        if event.unverified:
            lines.append(f"⚠ unverified: {event.unverified}")
        lines += [answer, f"— {result_cost(event.data)} · {event.run_id}"]
        # the result's own facts too: a result no channel took is kept whole in the inbox
        facts = {k: v for k, v in event.data.items() if k != "deliver"}
        data = {
            **facts,
            "title": f"📝 {event.routine} — {event.agent}",
            "body": redact("\n".join(lines)),
            "severity": "result",
        }
        return [
            Queued(
                target=target_name(c.name),
                kind=KIND,
                key=f"result:{event.run_id}",
                type="result",
                timestamp=event.ended if event.ended else event.ts,
                data=data,
                # held through quiet hours like Telegram's, then sent whole, on its own
                not_before=self._quiet_until("result", now),
            )
            for c in to
        ]
