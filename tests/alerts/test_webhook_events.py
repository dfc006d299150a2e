"""Which daemon events become which webhook event types, and which webhooks get them
(companyd.alerts._webhooks): the seven public types, a webhook's ``events`` list, and one
message per run for a webhook the routine delivers its result to.
"""

from __future__ import annotations

from companyd.alerts._webhooks import EVENT_TYPES, Webhooks, event_type
from companyd.clock import ManualClock
from companyd.config import OutboundWebhookSpec
from companyd.events import (
    BudgetThreshold,
    Event,
    FounderApprovalRequested,
    LeadershipTaken,
    RoutineMissed,
    RunFailed,
    RunFinished,
    RunStarted,
)

T = 1_800_000_000.0


def finished(status: str = "ok", routine: str | None = "daily-post") -> RunFinished:
    return RunFinished(
        source="agents/marketing",
        ts=T,
        status=status,
        agent="marketing",
        task_id="t1",
        run_id="run-1",
        routine=routine,
        cost_usd=0.01,
        steps=2,
        models=["claude-sonnet-4-5"],
        offline=False,
        reason="no file written" if status == "unverified" else None,
    )


EVENTS: dict[str, Event] = {
    "run.completed": finished(),
    "run.unverified": finished("unverified"),
    "run.failed": RunFailed(
        source="agents/cfo",
        ts=T,
        status="error",
        reason="boom",
        agent="cfo",
        task_id="t2",
        run_id="run-2",
        routine=None,
        cost_usd=0.0,
        steps=1,
        models=[],
        offline=False,
    ),
    "approval.requested": FounderApprovalRequested(
        source="agents/cfo",
        ts=T,
        item_id="desk-1",
        agent="cfo",
        run_id="run-3",
        routine=None,
        deadline=T + 3600,
        tool="pay_invoice",
        input="{}",
        reason="pay it",
    ),
    "budget.threshold": BudgetThreshold(
        source="spend",
        ts=T,
        scope="company",
        agent=None,
        period="day",
        key="company:day",
        level=0.8,
        used_usd=4.0,
        limit_usd=5.0,
        resets_at="2027-01-16T00:00:00Z",
        message="80% of the daily budget",
    ),
    "routine.missed": RoutineMissed(
        source="scheduler",
        ts=T,
        routine="daily-post",
        agent="marketing",
        scheduled="2027-01-15T09:00:00Z",
        reason="companyd was down",
        run_id=None,
        outcome="missed",
        fire_kind="catch_up",
        fire_id="f1",
    ),
    "leader.changed": LeadershipTaken(
        source="daemon", ts=T, node="b", host="host-b", epoch=7, previous="a (host-a, pid 1)"
    ),
}


def spec(name: str, *events: str) -> OutboundWebhookSpec:
    return OutboundWebhookSpec(
        name=name, url="http://127.0.0.1:1/h", secret_env="S", events=tuple(events)
    )


def test_each_public_type_comes_from_its_event_and_others_from_none() -> None:
    assert sorted(EVENTS) == sorted(EVENT_TYPES)
    for type_, ev in EVENTS.items():
        assert event_type(ev) == type_, ev
    started = RunStarted(
        source="agents/cfo", agent="cfo", task_id="t", run_id="r", routine=None, ts=T
    )
    assert event_type(started) is None


def test_a_webhook_gets_the_types_it_lists_with_the_event_s_facts() -> None:
    hooks = Webhooks(
        (spec("ops", "run.failed", "leader.changed"), spec("all", *EVENT_TYPES)), ManualClock()
    )
    got = {t: [q.target for q in hooks.items(ev)] for t, ev in EVENTS.items()}
    assert got["run.failed"] == ["ops", "all"] and got["leader.changed"] == ["ops", "all"]
    assert got["budget.threshold"] == ["all"]
    (q,) = hooks.items(EVENTS["budget.threshold"])
    assert q.type == "budget.threshold" and q.timestamp == T
    assert q.data["used_usd"] == 4.0 and q.data["event"] == "budget_threshold"
    assert q.data["source"] == "spend" and q.data["severity"] == "warning"
    # two events of one kind are two messages (their keys differ), one event one key
    later = EVENTS["budget.threshold"].at(T + 60)
    assert hooks.items(later)[0].key != q.key == hooks.items(EVENTS["budget.threshold"])[0].key


def test_a_webhook_the_routine_delivers_to_gets_its_result_not_the_bare_run_event() -> None:
    specs = (spec("ops", "run.completed"), spec("audit", "run.completed"))
    hooks = Webhooks(specs, ManualClock(), {"daily-post": ("telegram", "webhook:ops")})
    assert [q.target for q in hooks.items(finished())] == ["audit"]
    other = finished(routine="weekly-report")
    assert [q.target for q in hooks.items(other)] == ["ops", "audit"]
    assert [q.target for q in hooks.items(finished(routine=None))] == ["ops", "audit"]
