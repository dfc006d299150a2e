"""Child specs, supervisor flags and backoff (companyd.supervision._spec) against §1.1 and D8.

Every test runs real children (asyncio tasks) under a real Supervisor, with a ManualClock for
every window, timeout and delay, so nothing here sleeps for real except for a few loop
iterations. Section numbers refer to §1 of ../shared/reference/otp-supervisor.md; the test
kit is in supkit.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from companyd.supervision import (
    INFINITY,
    Backoff,
    ChildSpec,
    InvalidSpec,
    Supervisor,
    SupervisorFlags,
)
from companyd.supervision._child import ChildContext

from .supkit import Probe

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------------------------------
# §1.1 specs and flags


def test_child_spec_defaults_follow_otp() -> None:
    async def body(ctx: ChildContext) -> None: ...

    worker = ChildSpec(id="w", start=body)
    assert (worker.restart, worker.shutdown, worker.type, worker.significant) == (
        "permanent",
        5.0,
        "worker",
        False,
    )
    assert ChildSpec(id="s", start=body, type="supervisor").shutdown == INFINITY


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"id": ""}, "child id"),
        ({"id": "a/b"}, "without '/'"),
        ({"restart": "sometimes"}, "'sometimes'"),
        ({"type": "daemon"}, "'daemon'"),
        ({"shutdown": -10}, "-10"),
        ({"shutdown": "soon"}, "'soon'"),
        ({"shutdown": True}, "True"),
        ({"significant": True}, "cannot be permanent"),
        ({"significant": "yes"}, "'yes'"),
        ({"start": 42}, "42"),
    ],
)
def test_invalid_child_specs_are_refused_with_the_value(
    fields: dict[str, Any], needle: str
) -> None:
    async def body(ctx: ChildContext) -> None: ...

    with pytest.raises(InvalidSpec, match=needle.replace("(", r"\(")):
        ChildSpec(**{"id": "c", "start": body, **fields})


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ({"strategy": "one_for_some"}, "'one_for_some'"),
        ({"max_restarts": -1}, "-1"),
        ({"max_restarts": 1.5}, "1.5"),
        ({"max_seconds": 0}, "0"),
        ({"auto_shutdown": "sometimes"}, "'sometimes'"),
        ({"strategy": "simple_one_for_one", "auto_shutdown": "any_significant"}, "not allowed"),
    ],
)
def test_invalid_flags_are_refused(flags: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidSpec, match=needle):
        SupervisorFlags(**flags)


def test_supervisor_refuses_duplicates_and_bad_combinations() -> None:
    a = Probe("a")
    with pytest.raises(InvalidSpec, match="duplicate child id 'a'"):
        Supervisor("s", [a.spec(), a.spec()])
    with pytest.raises(InvalidSpec, match="auto_shutdown is 'never'"):
        Supervisor("s", [a.spec(restart="transient", significant=True)])
    with pytest.raises(InvalidSpec, match="exactly one template"):
        Supervisor("s", [a.spec(), Probe("b").spec()], strategy="simple_one_for_one")
    with pytest.raises(InvalidSpec, match="kill_grace"):
        Supervisor("s", [], kill_grace=-1)


# ---------------------------------------------------------------------------------------
# Backoff (D8, an extension)


def test_backoff_formula_caps_after_jitter_and_never_overflows() -> None:
    b = Backoff(min=1, max=60, factor=2, jitter=0.2)
    assert [b.delay(n, 0.0) for n in range(7)] == [1, 2, 4, 8, 16, 32, 60]
    assert b.delay(0, 0.5) == pytest.approx(1.1)
    assert b.delay(5, 0.999) == pytest.approx(32 * 1.1998)
    assert b.delay(6, 0.999) == 60  # 64 * 1.2 capped after the jitter: never above max
    assert b.delay(10_000, 0.5) == 60
    for bad in ({"min": -1}, {"max": 0.5}, {"factor": 0.5}, {"jitter": 2}, {"reset_after": 0}):
        with pytest.raises(InvalidSpec):
            Backoff(**bad)
