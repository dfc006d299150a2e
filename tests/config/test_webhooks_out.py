"""``alerts.webhooks`` and ``deliver: [webhook:NAME]`` (docs/webhooks.md): resolved, shown in
the config view, and every mistake a clear error at its file, line and field.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from standardwebhooks import WebhookVerificationError

from companyd.alerts._outbound import OutboundMessage, message_body
from companyd.alerts._webhooks import WebhookTarget
from companyd.config import resolved_view, secret_references, secret_values

from .configkit import MINIMAL, errors, load

HOOK = (
    "alerts:\n  webhooks:\n    - name: ops\n      url: https://hooks.example.com/companyd\n"
    "      secret_env: OPS_WEBHOOK_SECRET\n      events: [run.failed, budget.threshold]\n"
)
ROUTINE = (
    "routines:\n  pay:\n    assignee: cfo\n    description: Book it.\n"
    "    trigger: {every: 1h}\n    deliver: "
)


def test_webhooks_resolve_and_show_in_the_config_view() -> None:
    cfg = load(MINIMAL + HOOK + ROUTINE + "[file, 'webhook:ops']\n")
    (hook,) = cfg.spec.alerts.webhooks
    assert (hook.name, hook.url, hook.secret_env) == (
        "ops",
        "https://hooks.example.com/companyd",
        "OPS_WEBHOOK_SECRET",
    )
    assert hook.events == ("run.failed", "budget.threshold")
    assert cfg.routines["pay"].deliver == ("file", "webhook:ops")
    shown = resolved_view(cfg)["alerts"]["webhooks"]
    assert shown == [
        {
            "name": "ops",
            "url": "https://hooks.example.com/companyd",
            "secret_env": "OPS_WEBHOOK_SECRET",
            "events": ["run.failed", "budget.threshold"],
        }
    ]


def test_an_unknown_event_type_lists_the_valid_ones_at_its_line() -> None:
    lines = errors(MINIMAL + HOOK.replace("budget.threshold", "run.finished"))
    assert len(lines) == 1, lines
    assert lines[0].startswith("c.yaml:18:28: alerts.webhooks.0.events.1: "), lines
    assert "'run.finished'" in lines[0]
    for valid in ("run.completed", "run.unverified", "approval.requested", "leader.changed"):
        assert valid in lines[0]


def test_an_unknown_webhook_in_deliver_names_the_configured_ones() -> None:
    lines = errors(MINIMAL + HOOK + ROUTINE + "[file, 'webhook:opps']\n")
    assert len(lines) == 1, lines
    assert "routines.pay.deliver.1" in lines[0], lines
    assert "'webhook:opps'" in lines[0] and "did you mean 'webhook:ops'?" in lines[0]
    assert "alerts.webhooks: ops" in lines[0]
    lines = errors(MINIMAL + ROUTINE + "['webhook:ops']\n")
    assert len(lines) == 1 and "none is configured" in lines[0], lines


def test_bad_webhook_entries_are_clear_errors() -> None:
    bad_url = errors(MINIMAL + HOOK.replace("https://hooks.example.com/companyd", "hooks.local"))
    assert len(bad_url) == 1 and "alerts.webhooks.0.url" in bad_url[0], bad_url
    assert "expected an http:// or https:// URL, got 'hooks.local'" in bad_url[0]
    bad_env = errors(MINIMAL + HOOK.replace("OPS_WEBHOOK_SECRET", "whsec_abc def"))
    assert len(bad_env) == 1 and "alerts.webhooks.0.secret_env" in bad_env[0], bad_env
    twice = errors(MINIMAL + HOOK + HOOK.split("\n", 2)[2])
    assert len(twice) == 1 and "'ops' used twice" in twice[0], twice
    no_secret = errors(MINIMAL + HOOK.replace("      secret_env: OPS_WEBHOOK_SECRET\n", ""))
    assert any("required key 'secret_env' is missing" in line for line in no_secret), no_secret
    not_a_delivery = errors(MINIMAL + ROUTINE + "[slack]\n")
    assert len(not_a_delivery) == 1 and "routines.pay.deliver.0" in not_a_delivery[0]
    assert "'webhook:NAME'" in not_a_delivery[0] and "'telegram'" in not_a_delivery[0]


DOC = Path(__file__).parents[2] / "docs" / "webhooks.md"


def test_the_example_of_docs_webhooks_md_loads() -> None:
    example = yaml.safe_load(DOC.read_text(encoding="utf-8").split("```yaml\n")[1].split("```")[0])
    text = MINIMAL + yaml.safe_dump({"alerts": example["alerts"]})
    (hook,) = load(text).spec.alerts.webhooks
    assert hook.name == "ops" and hook.secret_env == "OPS_WEBHOOK_SECRET"
    assert example["routines"]["daily-post"]["deliver"] == ["telegram", "webhook:ops"]


def test_the_verifying_example_of_docs_webhooks_md_verifies_a_message_we_sign(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    monkeypatch.setenv("OPS_WEBHOOK_SECRET", secret)
    code = DOC.read_text(encoding="utf-8").split("```python\n")[1].split("```")[0]
    seen: list[tuple[Any, ...]] = []
    space: dict[str, Any] = {"already_seen": lambda i: False, "print": lambda *a: seen.append(a)}
    exec(code, space)  # the page's own snippet, as a receiver would run it
    body = message_body("run.failed", time.time(), {"run_id": "run-1"})
    msg = OutboundMessage(
        id="msg_1",
        target="ops",
        type="run.failed",
        timestamp=time.time(),
        data={},
        body=body,
        attempt=1,
    )
    target = WebhookTarget("ops", "http://127.0.0.1:1/", secret, client=None)  # type: ignore[arg-type]
    space["handle"](body.encode(), target.headers(msg, time.time()))
    assert seen == [("run.failed", {"run_id": "run-1"})]
    forged = target.headers(msg, time.time()) | {"webhook-signature": "v1,AAAA"}
    with pytest.raises(WebhookVerificationError):
        space["handle"](body.encode(), forged)


def test_the_webhook_secret_is_a_secret_reference_and_known_to_the_redactor() -> None:
    cfg = load(MINIMAL + HOOK)
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    refs = {r.path: r for r in secret_references(cfg, {"OPS_WEBHOOK_SECRET": secret})}
    ref = refs["alerts.webhooks.ops.secret_env"]
    assert (ref.kind, ref.name, ref.is_set) == ("env", "OPS_WEBHOOK_SECRET", True)
    assert secret in secret_values(cfg, {"OPS_WEBHOOK_SECRET": secret})
    assert not secret_references(cfg, {})[-1].is_set
