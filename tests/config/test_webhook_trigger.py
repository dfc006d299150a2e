"""The ``webhook`` trigger of a routine: alone or with ``cron``/``every`` (docs/triggers.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from companyd.config import resolved_view
from companyd.scheduler._triggers import build_trigger, describe_schedule, next_after

from .configkit import MINIMAL, errors, load

ROUTINE = "routines:\n  pay:\n    assignee: cfo\n    description: Book it.\n    trigger: "


def test_a_webhook_only_routine_resolves_and_never_fires_on_the_clock(tmp_path: Path) -> None:
    cfg = load(MINIMAL + ROUTINE + "{webhook: {secret_env: PAY_SECRET}}\n", tmp_path)
    r = cfg.routines["pay"]
    assert r.cron is None and r.every is None
    assert r.webhook is not None and r.webhook.secret_env == "PAY_SECRET"
    assert (r.webhook.max_body, r.webhook.rate_limit) == (1 << 20, 60)
    assert describe_schedule(r) == "webhook"
    trigger = build_trigger(r)
    assert repr(trigger) == repr(build_trigger(r))  # the identity kept across restarts
    assert next_after(trigger, datetime(2027, 1, 1, tzinfo=UTC)) is None
    shown = resolved_view(cfg)["routines"]["pay"]["trigger"]
    assert shown == {"webhook": {"secret_env": "PAY_SECRET", "max_body": 1 << 20, "rate_limit": 60}}


def test_a_webhook_combines_with_a_clock_trigger() -> None:
    cfg = load(MINIMAL + ROUTINE + "{every: 1h, webhook: {secret_env: S, rate_limit: 5}}\n")
    r = cfg.routines["pay"]
    assert r.every == 3600.0 and r.webhook is not None and r.webhook.rate_limit == 5
    assert describe_schedule(r) == "every 1h + webhook"


def test_bad_webhook_settings_are_clear_errors() -> None:
    lines = errors(MINIMAL + ROUTINE + "{webhook: {secret_env: 'my secret'}}\n")
    assert len(lines) == 1 and "routines.pay.trigger.webhook.secret_env" in lines[0], lines
    lines = errors(MINIMAL + ROUTINE + "{webhook: {secret_env: S, max_body: 0}}\n")
    assert len(lines) == 1 and "routines.pay.trigger.webhook.max_body" in lines[0], lines
    lines = errors(MINIMAL + ROUTINE + "{webhook: {secret: whsec_abc}}\n")
    # the secret itself is refused (it belongs in the environment), and its name is asked for
    assert any("webhook.secret: expected a reference to a secret" in line for line in lines)
    assert any("required key 'secret_env' is missing" in line for line in lines), lines
    lines = errors(MINIMAL + ROUTINE + "{timezone: UTC, webhook: {secret_env: S}}\n")
    assert len(lines) == 1 and "'timezone' applies to 'cron' only" in lines[0], lines


def test_the_worked_example_of_docs_triggers_md_loads() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "triggers.md").read_text(encoding="utf-8")
    example = doc.split("3. The routine:")[1].split("```yaml\n")[1].split("```")[0]
    routine = "\n".join(line[3:] for line in example.splitlines())  # the list's indent
    agents = MINIMAL.replace("  cfo:", "  accountant:")
    cfg = load(agents + routine + "\n")
    r = cfg.routines["book-payment"]
    assert r.webhook is not None and r.webhook.secret_env == "STRIPE_WEBHOOK_SECRET"
    assert r.webhook.max_body == 65536 and r.concurrency == "queue"
