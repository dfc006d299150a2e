"""The typed events: one class per kind, the kind table derived from them, and a JSON view
identical to the untyped events they replaced (logged, stored and sent as they are).
"""

from __future__ import annotations

import json
import math

from companyd.clock import ManualClock
from companyd.events import (
    EVENT_TYPES,
    KINDS,
    ChildExited,
    EventBus,
    Other,
    RoutineSkipped,
    RunStarted,
    Severity,
    event_from,
    event_from_dict,
)


def test_the_kind_table_is_the_classes() -> None:
    assert set(KINDS) == set(EVENT_TYPES)
    for kind, cls in EVENT_TYPES.items():
        assert kind == cls.KIND
        assert KINDS[kind] is cls.severity
    assert KINDS["max_intensity"] is Severity.CRITICAL
    assert KINDS["child_exited"] is Severity.INFO


def test_data_is_the_fields_in_order_leaving_out_unset_optional_ones() -> None:
    e = ChildExited(
        source="companyd/agents",
        child="cfo",
        restart_type="permanent",
        action="restart",
        reason="error:RuntimeError('boom')",
        exception="RuntimeError",
        message="boom",
    )
    assert list(e.data) == ["child", "restart_type", "action", "reason", "exception", "message"]
    fresh = RunStarted(source="agent/cfo", agent="cfo", task_id="t1", run_id="r1", routine=None)
    # ``routine`` is always sent (None included); ``resumed_at_step`` only for a resumed run
    assert fresh.data == {"agent": "cfo", "task_id": "t1", "run_id": "r1", "routine": None}
    resumed = RunStarted(
        source="agent/cfo",
        agent="cfo",
        task_id="t1",
        run_id="r1",
        routine="daily",
        resumed_at_step=3,
    )
    assert resumed.data["resumed_at_step"] == 3


def test_publish_stamps_with_the_bus_clock_and_the_kind_default_severity() -> None:
    bus = EventBus(ManualClock(start=1_700_000_000.0))
    unstamped = ChildExited(
        source="p", child="c", restart_type="temporary", action="none", reason="normal"
    )
    assert math.isnan(unstamped.ts)
    e = bus.publish(unstamped)
    assert e.ts == 1_700_000_000.0 and bus.recent() == [e]
    assert e.severity is Severity.INFO
    skipped = bus.publish(
        RoutineSkipped(
            source="scheduler",
            severity=Severity.DEBUG,
            routine="r",
            agent="a",
            scheduled="2026-01-01T00:00:00+00:00",
            reason="stopped",
            run_id=None,
            outcome="stopped",
            fire_kind="cron",
            fire_id="f1",
            count=2,
            first="2025-12-31T00:00:00+00:00",
        )
    )
    assert skipped.to_dict() == {
        "kind": "routine_skipped",
        "ts": 1_700_000_000.0,
        "source": "scheduler",
        "severity": "debug",
        "data": {
            "routine": "r",
            "agent": "a",
            "scheduled": "2026-01-01T00:00:00+00:00",
            "reason": "stopped",
            "run_id": None,
            "outcome": "stopped",
            "fire_kind": "cron",
            "fire_id": "f1",
            "count": 2,
            "first": "2025-12-31T00:00:00+00:00",
        },
    }


def test_json_round_trip_gives_back_the_typed_event() -> None:
    e = ChildExited(
        source="p", ts=5.0, child="c", restart_type="permanent", action="restart", reason="killed"
    )
    back = event_from_dict(json.loads(json.dumps(e.to_dict())))
    assert back == e and isinstance(back, ChildExited)


def test_data_that_does_not_fit_its_class_is_kept_as_it_is() -> None:
    # a kind no class describes, and a known kind with fields of another version
    new = event_from("routine_succeeded", source="scheduler", data={"routine": "r"})
    assert isinstance(new, Other) and new.kind == "routine_succeeded"
    assert new.severity is Severity.INFO and new.data == {"routine": "r"}
    old = event_from("restart", source="x", data={"child": "y", "within_seconds": 5})
    assert isinstance(old, Other) and old.kind == "restart"
    assert old.severity is Severity.WARNING  # still the kind's default
    assert old.to_dict()["data"] == {"child": "y", "within_seconds": 5}


def test_emit_builds_the_typed_event_when_the_data_fits() -> None:
    bus = EventBus(ManualClock(start=10.0))
    e = bus.emit("state_disk_recovered", "companyd", what="spend ledger", failures=2, message="ok")
    assert type(e).__name__ == "StateDiskRecovered" and e.ts == 10.0
    assert e.severity is Severity.INFO


def test_each_class_is_named_after_its_kind() -> None:
    for kind, cls in EVENT_TYPES.items():
        assert cls.__name__ == kind.title().replace("_", ""), kind


# -- the event classes behave as frozen keyword-only dataclasses (tests/test_frozen.py) ----


def test_an_event_is_hashable_comparable_and_matched_by_its_fields() -> None:
    a = ChildExited(
        source="s", child="cfo", restart_type="permanent", action="restart", reason="killed"
    )
    b = ChildExited(
        source="s", child="cfo", restart_type="permanent", action="restart", reason="killed"
    )
    assert a == b and len({a, b}) == 1 and a != Other(name="child_exited", source="s")
    match a:
        case RunStarted():
            raise AssertionError("matched another class")
        case ChildExited(child="cfo", reason=reason):
            assert reason == "killed"
        case _:
            raise AssertionError("not matched")
    assert Other(name="x", source="s").fields == {} and Other(name="x", source="s").fields is not (
        Other(name="x", source="s").fields
    )
