"""Are the founder's other channels and the webhooks set up right? For ``companyd doctor``.

:func:`probe_channel` and :func:`probe_webhook` check one ``alerts.channels`` or
``alerts.webhooks`` entry as the pager would use it: the environment variable it names is
set (never showing its value: a channel's URL and a webhook's secret are registered with the
redactor as they are read, and a channel is shown only by its service, ``slack`` or
``mailto``), a channel's URL is one Apprise can use, a webhook's secret is a Standard
Webhooks secret — and, with ``send_test``, one test message goes out through the very
target the pager uses (:class:`~companyd.alerts._channels.AppriseTarget`,
:class:`~companyd.alerts._webhooks.WebhookTarget`), outside the outbox (nothing is queued,
nothing retried), and the answer is reported.

A webhook's test event has the type ``test`` (``{"type": "test", "timestamp", "data":
{"message"}}``), signed like every other; a receiver that accepts only the documented
types may answer it with a 4xx, which is reported as such.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from companyd._secrets import protect, redact
from companyd.alerts._channels import SEND_DEADLINE, AppriseTarget, channel_url, service_of
from companyd.alerts._outbound import (
    OutboundMessage,
    SendError,
    message_body,
    new_message_id,
)

if TYPE_CHECKING:
    from companyd.config import ChannelSpec, OutboundWebhookSpec

__all__ = ["TargetProbe", "probe_channel", "probe_webhook"]

#: A test send's bound (real time), the receiver's answer included.
TEST_DEADLINE = 20.0


@dataclass(frozen=True)
class TargetProbe:
    """What a probe found for one channel or webhook.

    Attributes:
        name: its name in company.yaml.
        env: the environment variable it reads (``url_env`` or ``secret_env``).
        shown: what may be shown of where it goes: a channel's service (``slack``), a
            webhook's URL (company.yaml has it already); None when unknown.
        problem: why it cannot be used or the test failed (None: it can, or it worked).
        tested: a test message was tried (then ``problem`` is why it failed, if it did).
        sent: a test message went out and was accepted.
    """

    name: str
    env: str
    shown: str | None
    problem: str | None
    tested: bool = False
    sent: bool = False


async def probe_channel(
    spec: ChannelSpec,
    environ: Mapping[str, str] | None = None,
    *,
    send_test: bool = False,
    company: str = "companyd",
    deadline: float = TEST_DEADLINE,
) -> TargetProbe:
    """Check channel ``spec`` (see module docstring)."""
    url = channel_url(spec, environ)
    if url is None:
        return TargetProbe(spec.name, spec.url_env, None, f"${spec.url_env} is not set")
    service = service_of(url)
    import apprise  # only when a channel is configured

    usable = await asyncio.to_thread(apprise.Apprise().add, url)
    if not usable:
        problem = f"${spec.url_env} holds a {service}:// URL Apprise cannot use"
        return TargetProbe(spec.name, spec.url_env, service, problem)
    if not send_test:
        return TargetProbe(spec.name, spec.url_env, service, None)
    target = AppriseTarget(spec, url, deadline=min(deadline, SEND_DEADLINE))
    data = {
        "title": f"✅ {company}: test message",
        "body": f"companyd doctor --send-test: channel {spec.name!r} reaches you.",
        "severity": "info",
    }
    message = OutboundMessage(
        id=new_message_id(),
        target=target.name,
        type="test",
        timestamp=time.time(),
        data=data,
        body=message_body("test", time.time(), data),
        attempt=1,
    )
    try:
        await target.send(message)
    except SendError as exc:
        return TargetProbe(spec.name, spec.url_env, service, redact(str(exc)), tested=True)
    return TargetProbe(spec.name, spec.url_env, service, None, tested=True, sent=True)


async def probe_webhook(
    spec: OutboundWebhookSpec,
    environ: Mapping[str, str] | None = None,
    *,
    send_test: bool = False,
    deadline: float = TEST_DEADLINE,
) -> TargetProbe:
    """Check webhook ``spec`` (see module docstring)."""
    import httpx

    from companyd.alerts._webhooks import WebhookTarget

    env = os.environ if environ is None else environ
    secret = (env.get(spec.secret_env) or "").strip()
    if not secret:
        return TargetProbe(spec.name, spec.secret_env, spec.url, f"${spec.secret_env} is not set")
    protect(secret)
    async with httpx.AsyncClient(timeout=deadline, follow_redirects=False) as client:
        try:
            target = WebhookTarget(spec.name, spec.url, secret, client)
        except Exception as exc:  # the library's own errors for a bad secret
            problem = (
                f"${spec.secret_env} is not a Standard Webhooks secret ({type(exc).__name__}); "
                "expected whsec_ followed by base64"
            )
            return TargetProbe(spec.name, spec.secret_env, spec.url, problem)
        if not send_test:
            return TargetProbe(spec.name, spec.secret_env, spec.url, None)
        data = {"message": f"companyd doctor --send-test: webhook {spec.name!r}"}
        now = time.time()
        message = OutboundMessage(
            id=new_message_id(),
            target=spec.name,
            type="test",
            timestamp=now,
            data=data,
            body=message_body("test", now, data),
            attempt=1,
        )
        try:
            async with asyncio.timeout(deadline):
                await target.send(message)
        except SendError as exc:
            problem = redact(str(exc))
            return TargetProbe(spec.name, spec.secret_env, spec.url, problem, tested=True)
        except TimeoutError:
            problem = f"no answer from {spec.url} within {deadline:g} s"
            return TargetProbe(spec.name, spec.secret_env, spec.url, problem, tested=True)
    return TargetProbe(spec.name, spec.secret_env, spec.url, None, tested=True, sent=True)
