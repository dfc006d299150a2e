"""The read-only views (companyd.supervision._views): counts and the status snapshot (D7).

Every test runs real children (asyncio tasks) under a real Supervisor, with a ManualClock for
every window, timeout and delay, so nothing here sleeps for real except for a few loop
iterations. Section numbers refer to §1 of ../shared/reference/otp-supervisor.md; the test
kit is in supkit.py.
"""

from __future__ import annotations

import json

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.supervision import ChildNotFound, Supervisor

from .supkit import Events, Probe, make

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------------------------------
# More OTP behaviour


async def test_count_children_counts_supervisors_and_workers(
    bus: EventBus, clock: ManualClock
) -> None:
    sub = Supervisor("sub", [Probe("w").spec()])
    specs = [Probe("a").spec(), sub.child_spec(), Probe("b", modes=("ignore",)).spec()]
    async with make(bus, clock, specs) as sup:
        counts = sup.count_children()
        assert (counts.specs, counts.active, counts.supervisors, counts.workers) == (3, 2, 1, 2)
        assert sup.which_child("sub").type == "supervisor"
        with pytest.raises(ChildNotFound):
            sup.which_child("nope")


async def test_snapshot_is_the_status_tree(
    bus: EventBus, clock: ManualClock, events: Events
) -> None:
    """The node shape `companyd status` renders (docs/daemon.md, "tree")."""
    w, ok, bad = Probe("w"), Probe("ok"), Probe("bad")
    sub = Supervisor("sub", [w.spec()])
    specs = [sub.child_spec(), ok.spec(restart="transient"), bad.spec(restart="temporary")]
    async with make(bus, clock, specs, max_restarts=5) as sup:
        clock.advance(30)
        ok.run.exit("normal")
        await events.wait_for("child_exited", child="ok")
        w.run.crash()
        await events.wait_for("child_started", count=2, child="w")
        clock.advance(5)
        snap = sup.snapshot()
    json.dumps(snap)
    assert {k: snap[k] for k in ("id", "path", "kind", "state", "restarts", "uptime_s")} == {
        "id": "sup",
        "path": "sup",
        "kind": "supervisor",
        "state": "running",
        "restarts": 0,
        "uptime_s": 35.0,
    }
    assert snap["strategy"] == "one_for_one" and snap["restarts_in_window"] == 0
    node_sub, node_ok, node_bad = snap["children"]
    assert (node_sub["id"], node_sub["kind"], node_sub["state"]) == ("sub", "supervisor", "running")
    assert node_sub["strategy"] == "one_for_one" and node_sub["restarts_in_window"] == 1
    (node_w,) = node_sub["children"]
    assert node_w["path"] == "sup/sub/w" and node_w["restarts"] == 1
    assert node_w["uptime_s"] == 5.0
    assert node_w["last_exit"] == "error:RuntimeError('w crashed')"
    assert (node_ok["state"], node_ok["uptime_s"], node_ok["last_exit"]) == (
        "stopped",
        None,
        "normal",
    )
    assert (node_bad["kind"], node_bad["state"], node_bad["children"]) == ("worker", "running", [])
