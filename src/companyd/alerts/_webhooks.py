"""Webhooks out: events as Standard Webhooks-signed JSON POSTs (docs/webhooks.md).

:class:`WebhookTarget` is the outbound queue's ``webhook`` target
(:mod:`companyd.alerts._outbound`): it POSTs a message's JSON body to the configured URL
with the ``webhook-id`` (the message's id, the same on every retry), ``webhook-timestamp``
(the attempt's time) and ``webhook-signature`` headers of the Standard Webhooks scheme,
signed with the ``standardwebhooks`` package. A 2xx answer is done; 408, 429 and 5xx, a
refused connection or a timeout are transient (retried); any other answer (a 3xx is not
followed, a 4xx) is permanent.

:func:`event_type` maps the daemon's events to the public event types
(:data:`EVENT_TYPES`); :func:`webhook_targets` builds the targets of ``alerts.webhooks``
from the environment, saying once which cannot be used (its secret missing or malformed):
such a target's messages are queued anyway and wait in the outbox until it can.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from companyd._secrets import protect
from companyd.alerts._outbound import (
    OutboundMessage,
    OutboundQueue,
    PermanentSendError,
    Queued,
    TransientSendError,
)
from companyd.clock import Clock
from companyd.config import WEBHOOK_EVENT_TYPES
from companyd.events import (
    BudgetThreshold,
    Event,
    FounderApprovalRequested,
    FounderResultForApproval,
    LeadershipTaken,
    RoutineMissed,
    RunFailed,
    RunFinished,
)

if TYPE_CHECKING:
    import httpx

    from companyd.alerts._outbox import AlertStore
    from companyd.config import OutboundWebhookSpec

__all__ = [
    "EVENT_TYPES",
    "WebhookTarget",
    "Webhooks",
    "event_type",
    "webhook_targets",
]

log = logging.getLogger("companyd.alerts.service")

#: The public event types a webhook can subscribe to (``alerts.webhooks[].events``).
EVENT_TYPES: tuple[str, ...] = WEBHOOK_EVENT_TYPES

#: Seconds to wait for a receiver's answer (connect, send and read).
TIMEOUT = 15.0


def event_type(event: Event) -> str | None:
    """The public type of ``event`` (``run.completed`` …), or None when webhooks do not
    carry it.
    """
    match event:
        case RunFinished(status="unverified"):
            return "run.unverified"
        case RunFinished():
            return "run.completed"
        case RunFailed():
            return "run.failed"
        case FounderApprovalRequested() | FounderResultForApproval():
            return "approval.requested"
        case BudgetThreshold():
            return "budget.threshold"
        case RoutineMissed():
            return "routine.missed"
        case LeadershipTaken():
            return "leader.changed"
    return None


def event_key(event: Event, type_: str) -> str:
    """What identifies ``event`` among the queued ones (one row per target and key)."""
    data = event.data
    for field in ("run_id", "item_id", "fire_id", "key"):
        if data.get(field):
            return f"{type_}:{data[field]}:{event.ts:.6f}"
    return f"{type_}:{event.source}:{event.ts:.6f}"


def event_data(event: Event) -> dict[str, Any]:
    """The ``data`` of a webhook message for ``event``: its facts (as ``companyd events``
    shows them), the daemon's name of its kind (``event``), its source and severity.
    """
    return {
        **event.data,
        "event": event.kind,
        "source": event.source,
        "severity": str(event.severity),
    }


@dataclass
class WebhookTarget:
    """One ``alerts.webhooks`` entry as an outbound target (see module docstring).

    Args:
        name: the webhook's name (``deliver: [webhook:NAME]``).
        url: where to POST.
        secret: the Standard Webhooks secret (``whsec_`` + base64).
        client: the HTTP client (shared by the pager's webhooks; closed by its owner).
        now: the time an attempt is signed at (``webhook-timestamp``): the pager's clock,
            which receivers check against theirs (within 5 minutes).
    """

    name: str
    url: str
    secret: str
    client: httpx.AsyncClient
    now: Callable[[], float] = time.time
    kind: str = "webhook"

    def __post_init__(self) -> None:
        from standardwebhooks import Webhook

        self._signer = Webhook(self.secret)

    def headers(self, message: OutboundMessage, now: float) -> dict[str, str]:
        """The Standard Webhooks headers for one attempt of ``message`` at ``now``."""
        when = datetime.fromtimestamp(now, UTC)
        return {
            "content-type": "application/json",
            "user-agent": "companyd",
            "webhook-id": message.id,
            "webhook-timestamp": str(int(now)),
            "webhook-signature": self._signer.sign(message.id, when, message.body),
        }

    async def send(self, message: OutboundMessage) -> None:
        """POST ``message`` (see the module docstring for what each answer means)."""
        import httpx

        headers = self.headers(message, self.now())
        try:
            answer = await self.client.post(
                self.url, content=message.body.encode("utf-8"), headers=headers
            )
        except httpx.TimeoutException as exc:
            raise TransientSendError(f"no answer from {self.url} in {TIMEOUT:.0f} s") from exc
        except (httpx.TransportError, OSError) as exc:
            raise TransientSendError(
                f"cannot reach {self.url}: {type(exc).__name__}: {exc}"
            ) from exc
        status = answer.status_code
        if 200 <= status < 300:
            return
        said = f"{self.url} answered {status} {answer.reason_phrase}".rstrip()
        if status in (408, 429) or status >= 500:
            raise TransientSendError(said, retry_after=_retry_after(answer.headers))
        if 300 <= status < 400:
            said += " (a redirect is not followed: put the final URL in alerts.webhooks)"
        raise PermanentSendError(said)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: the usual backoff is close enough


def webhook_targets(
    specs: tuple[OutboundWebhookSpec, ...],
    client: httpx.AsyncClient,
    now: Callable[[], float] = time.time,
) -> tuple[dict[str, WebhookTarget], dict[str, str]]:
    """The usable targets of ``alerts.webhooks`` by name, and why each other one is not
    (by name): its ``secret_env`` unset or empty, or not a Standard Webhooks secret.
    """
    targets: dict[str, WebhookTarget] = {}
    unusable: dict[str, str] = {}
    for spec in specs:
        secret = os.environ.get(spec.secret_env, "").strip()
        if not secret:
            unusable[spec.name] = (
                f"${spec.secret_env} is not set; set it to the webhook's secret (whsec_…) and "
                "restart companyd"
            )
            continue
        protect(secret)
        try:
            targets[spec.name] = WebhookTarget(spec.name, spec.url, secret, client, now)
        except Exception as exc:  # the library's own errors for a bad secret
            unusable[spec.name] = (
                f"${spec.secret_env} is not a Standard Webhooks secret ({type(exc).__name__}); "
                "expected whsec_ followed by base64"
            )
    return targets, unusable


class Webhooks:
    """The pager's webhooks out: the targets of ``alerts.webhooks``, the outbound queue over
    the alert outbox, and what each event or result puts in it.

    Args:
        specs: ``alerts.webhooks``.
        clock: the pager's clock (backoff, signatures' timestamps).
        delivers: each routine's ``deliver:`` list: a webhook a routine delivers its
            result to gets one message per run of it (the result, ``run.completed`` or
            ``run.unverified`` with the answer), not the bare event besides.
    """

    def __init__(
        self,
        specs: tuple[OutboundWebhookSpec, ...],
        clock: Clock,
        delivers: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.specs = specs
        self._clock = clock
        #: routine → the webhooks its ``deliver:`` names: they get its runs' results, not
        #: also the bare ``run.completed`` / ``run.unverified`` of the same run
        self._delivers = _webhooks_delivered(delivers)
        self.queue: OutboundQueue | None = None
        self._client: httpx.AsyncClient | None = None
        #: why a configured webhook cannot be used (by name), said once at start
        self.unusable: dict[str, str] = {}

    @property
    def configured(self) -> bool:
        """Whether company.yaml names any webhook."""
        return bool(self.specs)

    async def start(self, store: AlertStore) -> OutboundQueue:
        """The queue over ``store`` (opened), with every usable target (none: it waits for
        a reload to add one); says once which webhook cannot be used and why (its messages
        are queued and wait).
        """
        self.unusable = {}
        self.queue = OutboundQueue(
            store,
            self._targets(),
            self._clock,
            kind="webhook",
            configured=[s.name for s in self.specs],  # one whose secret is unset too
            section="alerts.webhooks",
        )
        return self.queue

    def reconfigure(
        self,
        specs: tuple[OutboundWebhookSpec, ...],
        delivers: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        """Apply a reloaded ``alerts.webhooks`` (and the routines' ``deliver:`` lists) at
        once: what events make from now on, and — while the queue runs — where and how its
        messages are sent (URL, secret); a removed webhook's messages are no longer sent.
        """
        self.specs = specs
        self._delivers = _webhooks_delivered(delivers)
        if self.queue is not None:
            self.queue.set_targets(self._targets(), configured=[s.name for s in specs])

    def _targets(self) -> dict[str, WebhookTarget]:
        """The usable targets of :attr:`specs`, secrets read from the environment now; each
        webhook that cannot be used is said once (again only when its reason changes).
        """
        if not self.specs:
            return {}
        if self._client is None:
            import httpx  # only with a webhook: most daemons never need it

            self._client = httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False)
        targets, unusable = webhook_targets(self.specs, self._client, self._clock.time)
        for name, why in unusable.items():
            if self.unusable.get(name) != why:
                log.error(
                    "alerts: webhook %s cannot be used: %s; its events are kept in the outbox "
                    "until then",
                    name,
                    why,
                )
        self.unusable = unusable
        return targets

    def items(self, event: Event) -> list[Queued]:
        """The messages ``event`` makes: one per webhook subscribed to its type."""
        type_ = event_type(event)
        if type_ is None:
            return []
        wanted = [s for s in self.specs if type_ in s.events]
        if isinstance(event, RunFinished) and event.routine:
            # the result, with its answer, goes to these as this run's message
            result_to = self._delivers.get(event.routine, frozenset())
            wanted = [s for s in wanted if s.name not in result_to]
        if not wanted:
            return []
        key, data = event_key(event, type_), event_data(event)
        return [
            Queued(
                target=s.name, kind="webhook", key=key, type=type_, timestamp=event.ts, data=data
            )
            for s in wanted
        ]

    async def take(self, events: Sequence[Event]) -> None:
        """Queue the messages of ``events`` (one transaction)."""
        if self.queue is None:
            return
        items = [q for e in events for q in self.items(e)]
        if items:
            await self.queue.enqueue(items)

    async def result(self, name: str, data: Mapping[str, Any], when: float) -> bool:
        """Queue a routine's result for webhook ``name`` (``deliver: [webhook:NAME]``) as
        ``run.completed`` (``run.unverified`` when its run ended so). False when there is no
        such webhook or no queue (the pager cannot keep it); True when queued (or already).
        """
        if self.queue is None or name not in {s.name for s in self.specs}:
            return False
        type_ = "run.unverified" if data.get("unverified") else "run.completed"
        body = {k: v for k, v in data.items() if k != "deliver"}
        key = f"result:{data.get('run_id')}"
        await self.queue.enqueue(
            [Queued(target=name, kind="webhook", key=key, type=type_, timestamp=when, data=body)]
        )
        return True

    async def close(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        self.queue = None


def _webhooks_delivered(
    delivers: Mapping[str, tuple[str, ...]] | None,
) -> dict[str, frozenset[str]]:
    """Routine → the webhooks its ``deliver:`` names (``webhook:NAME``)."""
    return {
        r: frozenset(d.partition(":")[2] for d in ds if d.startswith("webhook:"))
        for r, ds in (delivers or {}).items()
    }
