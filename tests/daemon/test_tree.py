"""The company tree built from company.yaml, and config changes applied to it live."""

from __future__ import annotations

import asyncio
import collections
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from companyd.clock import ManualClock
from companyd.config import AgentConfig, CompanyConfig, load_config, load_config_text
from companyd.daemon._demo import CrashSwitch
from companyd.daemon._tree import (
    ROOT_MAX_RESTARTS,
    ROOT_MAX_SECONDS,
    CompanyTree,
    build_company_tree,
    placeholder_agent,
    placeholder_service,
    plan_agents_diff,
)
from companyd.events import Event, EventBus
from companyd.supervision import (
    ChildSpec,
    InvalidSpec,
    Supervisor,
    SupervisorStartError,
)
from companyd.supervision._child import ChildContext

pytestmark = pytest.mark.anyio

DEADLINE = 5.0
EXAMPLE = Path(__file__).resolve().parents[2] / "company.yaml"
SERVICES = ("memory", "spend", "alerts", "scheduler", "control")


def company(**changes: Any) -> dict[str, Any]:
    """A small valid company.yaml as a dict: ceo on top, two departments, one nested."""
    doc: dict[str, Any] = {
        "schema": "companyd/v1",
        "company": {"name": "T", "budget": {"daily_usd": 5}},
        "supervisor": {"strategy": "one_for_one", "max_restarts": 3, "max_seconds": 60},
        "departments": {
            "finance": {
                "supervisor": {"strategy": "one_for_one", "max_restarts": 1, "max_seconds": 60},
                "departments": {"audit": {}},
            },
            "growth": {"supervisor": {"backoff": {"min": "2s", "max": "1m"}}},
        },
        "agents": {
            "ceo": {"title": "CEO", "instructions": "lead"},
            "cfo": {
                "title": "CFO",
                "reports_to": "ceo",
                "department": "finance",
                "instructions": "x",
            },
            "accountant": {
                "title": "Acc",
                "reports_to": "cfo",
                "department": "finance",
                "restart": "transient",
                "instructions": "x",
            },
            "auditor": {
                "title": "Aud",
                "reports_to": "cfo",
                "department": "audit",
                "instructions": "x",
            },
            "marketing": {
                "title": "Mkt",
                "reports_to": "ceo",
                "department": "growth",
                "instructions": "x",
            },
        },
    }
    for path, value in changes.items():
        node = doc
        keys = path.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        if value is None:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
    return doc


def cfg(doc: dict[str, Any]) -> CompanyConfig:
    return load_config_text(yaml.safe_dump(doc, sort_keys=False))


class Agents:
    """An agent factory counting starts per slug."""

    def __init__(self) -> None:
        self.starts: collections.Counter[str] = collections.Counter()
        self.configs: dict[str, AgentConfig] = {}

    def __call__(self, agent: AgentConfig) -> ChildSpec:
        async def run(ctx: ChildContext) -> None:
            self.starts[agent.slug] += 1
            self.configs[agent.slug] = agent
            ctx.started()
            await ctx.stopping.wait()

        return ChildSpec(id=agent.slug, start=run)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def bus(clock: ManualClock) -> EventBus:
    return EventBus(clock)


def build(
    config: CompanyConfig,
    bus: EventBus,
    clock: ManualClock,
    agent_child: Callable[[AgentConfig], ChildSpec],
    services: tuple[str, ...] = SERVICES,
) -> CompanyTree:
    return build_company_tree(
        config,
        bus=bus,
        clock=clock,
        services=[placeholder_service(s) for s in services],
        agent_child=agent_child,
    )


def ids(sup: Supervisor) -> list[str]:
    return [c.id for c in sup.which_children()]


def paths(tree: CompanyTree) -> dict[str, str]:
    """Every running child's path → its state, the whole tree."""
    out: dict[str, str] = {}

    def walk(node: dict[str, Any]) -> None:
        for row in node["children"]:
            out[row["path"]] = row["state"]
            walk(row)

    walk(tree.snapshot())
    return out


# ---------------------------------------------------------------------------------------
# Building


async def test_the_example_company_builds_the_documented_tree(
    bus: EventBus, clock: ManualClock
) -> None:
    config = load_config(EXAMPLE)
    tree = build(config, bus, clock, placeholder_agent)
    async with tree:
        assert ids(tree) == ["memory", "spend", "alerts", "agents", "scheduler", "control"]
        assert tree.flags.max_restarts == ROOT_MAX_RESTARTS
        assert tree.flags.max_seconds == ROOT_MAX_SECONDS
        assert ids(tree.agents) == ["ceo", "finance", "operations", "growth", "engineering"]
        assert ids(tree.departments["finance"]) == ["cfo", "accountant"]
        assert tree.departments["finance"].which_child("accountant").restart == "transient"
        growth = tree.departments["growth"]
        assert (growth.flags.max_restarts, growth.flags.max_seconds) == (5, 300)
        assert tree.departments["growth"].path == "companyd/agents/growth"
        assert all(state == "running" for state in paths(tree).values())
        assert len(paths(tree)) == 6 + 5 + 7  # services, agents' children, department members


async def test_nested_departments_disabled_agents_and_department_backoff(
    bus: EventBus, clock: ManualClock
) -> None:
    doc = company()
    doc["agents"]["intern"] = {
        "title": "I",
        "reports_to": "ceo",
        "department": "finance",
        "instructions": "x",
        "enabled": False,
    }
    seen: dict[str, ChildSpec] = {}

    def factory(agent: AgentConfig) -> ChildSpec:
        spec = placeholder_agent(agent)
        seen[agent.slug] = spec
        return spec

    tree = build(cfg(doc), bus, clock, factory)
    async with tree:
        assert ids(tree.agents) == ["ceo", "finance", "growth"]
        assert ids(tree.departments["finance"]) == ["cfo", "accountant", "audit"]
        assert ids(tree.departments["audit"]) == ["auditor"]
        assert tree.departments["audit"].path == "companyd/agents/finance/audit"
        assert "intern" not in seen
        assert tree.departments["finance"].which_child("audit").type == "supervisor"


async def test_the_agents_subtree_goes_before_scheduler_and_control(
    bus: EventBus, clock: ManualClock
) -> None:
    async with build(cfg(company()), bus, clock, placeholder_agent, ("memory", "control")) as tree:
        assert ids(tree) == ["memory", "agents", "control"]
    async with build(cfg(company()), bus, clock, placeholder_agent, ("memory",)) as tree:
        assert ids(tree) == ["memory", "agents"]
    with pytest.raises(InvalidSpec, match="must not include 'agents'"):
        build(cfg(company()), bus, clock, placeholder_agent, ("memory", "agents"))


async def test_the_tree_applies_restart_type_and_backoff_from_the_config(
    bus: EventBus, clock: ManualClock
) -> None:
    """The factory says permanent and no backoff; company.yaml says otherwise and wins."""
    switch = CrashSwitch()
    events: list[Event] = []
    bus.add_listener(events.append)

    def factory(agent: AgentConfig) -> ChildSpec:
        spec = switch.agent_child(agent)
        return ChildSpec(id=spec.id, start=spec.start)

    async with build(cfg(company()), bus, clock, factory) as tree:
        assert tree.departments["finance"].which_child("accountant").restart == "transient"
        switch.crash("marketing")
        async with asyncio.timeout(DEADLINE):
            while not [e for e in events if e.kind == "backoff"]:
                await asyncio.sleep(0)
        backoff = next(e for e in events if e.kind == "backoff")
        assert backoff.source == "companyd/agents/growth"
        assert 2.0 <= backoff.data["delay"] <= 2.0 * 1.2  # min 2 s, jitter 0.2 by default
        switch.crash("cfo")  # finance has no backoff: restarted at once
        async with asyncio.timeout(DEADLINE):
            while tree.departments["finance"].which_child("cfo").restarts != 1:
                await asyncio.sleep(0)
        assert len([e for e in events if e.kind == "backoff"]) == 1


async def _idle(ctx: ChildContext) -> None:
    ctx.started()
    await ctx.stopping.wait()


async def test_an_agent_factory_returning_the_wrong_id_fails_the_start(
    bus: EventBus, clock: ManualClock
) -> None:
    tree = build(cfg(company()), bus, clock, lambda a: ChildSpec(id="x" + a.slug, start=_idle))
    with pytest.raises(SupervisorStartError) as err:
        await tree.start()
    assert err.value.child == "agents"
    assert "must return a ChildSpec with id 'ceo'" in str(err.value.reason)


# ---------------------------------------------------------------------------------------
# Restart behaviour


async def test_a_crashing_agent_escalates_to_its_department_only(
    bus: EventBus, clock: ManualClock
) -> None:
    switch = CrashSwitch()
    events: list[Event] = []
    bus.add_listener(events.append)
    tree = build(cfg(company()), bus, clock, switch.agent_child)
    async with tree:
        before = paths(tree)
        marketing_started = tree.departments["growth"].which_child("marketing").started_at
        ceo_started = tree.agents.which_child("ceo").started_at
        clock.advance(1)
        finance = tree.departments["finance"]
        switch.crash("cfo")  # finance allows 1 restart...
        async with asyncio.timeout(DEADLINE):
            while (
                finance.which_child("cfo").restarts != 1
                or finance.which_child("cfo").state != "running"
            ):
                await asyncio.sleep(0)
        switch.crash("cfo")  # ...so the second crash escalates to agents
        async with asyncio.timeout(DEADLINE):
            while tree.agents.which_child("finance").restarts != 1 or (
                tree.agents.which_child("finance").state != "running"
            ):
                await asyncio.sleep(0)
        gave_up = [e.source for e in events if e.kind == "max_intensity"]
        assert gave_up == ["companyd/agents/finance"]
        # cfo's restart by finance is still counted after finance's own restart (status read
        # "finance ↻1, cfo ↻0" after cfo had crashed twice; docs/daemon.md: since the daemon
        # started)
        assert finance.which_child("cfo").restarts == 1
        [cfo] = [n for n in finance.snapshot()["children"] if n["id"] == "cfo"]
        assert cfo["restarts"] == 1
        assert tree.agents.restarts_in_window() == 1
        assert tree.restarts_in_window() == 0
        assert paths(tree) == before  # everything back, same shape
        assert tree.departments["growth"].which_child("marketing").started_at == marketing_started
        assert tree.agents.which_child("ceo").started_at == ceo_started


# ---------------------------------------------------------------------------------------
# Applying config changes


def test_plan_agents_diff() -> None:
    old = cfg(company())
    doc = company()
    del doc["agents"]["auditor"]
    doc["agents"]["analyst"] = {
        "title": "An",
        "reports_to": "cfo",
        "department": "finance",
        "instructions": "x",
    }
    doc["agents"]["marketing"]["instructions"] = "new voice"
    doc["agents"]["accountant"]["department"] = "growth"
    doc["departments"]["growth"]["supervisor"]["max_restarts"] = 9
    doc["departments"]["sales"] = {}
    plan = plan_agents_diff(old, cfg(doc))
    assert plan.added_agents == ("analyst",)
    assert plan.removed_agents == ("auditor",)
    assert set(plan.changed_agents) == {"marketing", "accountant"}
    assert plan.added_departments == ("sales",)
    assert plan.changed_departments == ("growth",)
    assert plan.removed_departments == ()
    assert not plan.restart_agents and not plan.empty
    # growth restarts in place for its new settings: its agents restart with it
    assert plan.restarted_agents == ("accountant", "marketing")
    top = copy.deepcopy(doc)
    top["supervisor"]["max_restarts"] = 5
    assert set(plan_agents_diff(cfg(doc), cfg(top)).restarted_agents) == {
        a for a, spec in doc["agents"].items() if spec.get("enabled", True)
    }
    ignore_text = plan_agents_diff(
        old, cfg(doc), needs_restart=lambda a, b: a.model != b.model
    ).changed_agents
    assert ignore_text == ("accountant",)  # a move is always a change
    assert plan_agents_diff(old, cfg(company())).empty


async def apply(tree: CompanyTree, new: CompanyConfig, **kw: Any) -> Any:
    async with asyncio.timeout(DEADLINE):
        return await tree.apply_agents_diff(tree.config, new, **kw)


@pytest.fixture
async def running(bus: EventBus, clock: ManualClock) -> Any:
    agents = Agents()
    tree = build(cfg(company()), bus, clock, agents)
    await tree.start()
    yield tree, agents
    await tree.stop()


async def test_adding_removing_and_changing_agents_touches_nothing_else(running: Any) -> None:
    tree, agents = running
    doc = company()
    doc["agents"]["analyst"] = {
        "title": "An",
        "reports_to": "cfo",
        "department": "finance",
        "instructions": "x",
    }
    del doc["agents"]["auditor"]
    doc["agents"]["marketing"]["instructions"] = "new voice"
    diff = await apply(tree, cfg(doc))
    assert diff.failures == () and diff.deferred == ()
    assert ids(tree.departments["finance"]) == ["cfo", "accountant", "audit", "analyst"]
    assert ids(tree.departments["audit"]) == []
    assert agents.configs["marketing"].instructions == "new voice"
    assert agents.starts == {
        "ceo": 1,
        "cfo": 1,
        "accountant": 1,
        "auditor": 1,
        "marketing": 2,
        "analyst": 1,
    }
    assert tree.agents.restarts_in_window() == 0  # none of this is a restart
    # the next restart of finance rebuilds it from the new config, in file order
    await tree.agents.terminate_child("finance")
    await tree.agents.restart_child("finance")
    assert ids(tree.departments["finance"]) == ["cfo", "accountant", "analyst", "audit"]


async def test_moving_an_agent_between_departments(running: Any) -> None:
    tree, agents = running
    doc = company()
    doc["agents"]["accountant"]["department"] = "growth"
    diff = await apply(tree, cfg(doc))
    assert diff.changed_agents == ("accountant",)
    assert ids(tree.departments["finance"]) == ["cfo", "audit"]
    assert ids(tree.departments["growth"]) == ["marketing", "accountant"]
    assert tree.departments["growth"].which_child("accountant").restart == "transient"
    assert agents.starts["cfo"] == 1 and agents.starts["marketing"] == 1


async def test_adding_and_removing_departments(running: Any) -> None:
    tree, agents = running
    doc = company()
    doc["departments"]["sales"] = {"supervisor": {"strategy": "one_for_all"}}
    doc["agents"]["seller"] = {
        "title": "S",
        "reports_to": "ceo",
        "department": "sales",
        "instructions": "x",
    }
    del doc["departments"]["finance"]["departments"]
    del doc["agents"]["auditor"]
    diff = await apply(tree, cfg(doc))
    assert diff.added_departments == ("sales",) and diff.removed_departments == ("audit",)
    assert ids(tree.agents) == ["ceo", "finance", "growth", "sales"]
    assert tree.departments["sales"].flags.strategy == "one_for_all"
    assert ids(tree.departments["sales"]) == ["seller"]
    assert ids(tree.departments["finance"]) == ["cfo", "accountant"]
    assert "audit" not in tree.departments
    assert agents.starts["cfo"] == 1 and agents.starts["seller"] == 1


async def test_changing_a_department_restarts_it_in_place(running: Any) -> None:
    tree, agents = running
    doc = company()
    doc["departments"]["finance"]["supervisor"]["strategy"] = "rest_for_one"
    diff = await apply(tree, cfg(doc))
    assert diff.changed_departments == ("finance",)
    assert tree.departments["finance"].flags.strategy == "rest_for_one"
    assert ids(tree.agents) == ["ceo", "finance", "growth"]  # same place
    assert agents.starts == {"ceo": 1, "cfo": 2, "accountant": 2, "auditor": 2, "marketing": 1}


async def test_changing_the_top_supervisor_restarts_the_agents_subtree_only(running: Any) -> None:
    tree, agents = running
    doc = company()
    doc["supervisor"]["strategy"] = "one_for_all"
    memory_started = tree.which_child("memory").started_at
    diff = await apply(tree, cfg(doc))
    assert diff.restart_agents
    assert tree.agents.flags.strategy == "one_for_all"
    assert set(agents.starts.values()) == {2}
    assert ids(tree) == ["memory", "spend", "alerts", "agents", "scheduler", "control"]
    assert tree.which_child("memory").started_at == memory_started
    assert tree.restarts_in_window() == 0


async def test_a_diff_to_a_supervisor_that_is_down_is_deferred_to_its_next_start(
    running: Any,
) -> None:
    tree, agents = running
    await tree.agents.terminate_child("finance")
    doc = company()
    doc["agents"]["cfo"]["instructions"] = "changed"
    doc["agents"]["analyst"] = {
        "title": "An",
        "reports_to": "cfo",
        "department": "finance",
        "instructions": "x",
    }
    diff = await apply(tree, cfg(doc))
    assert diff.deferred == ("companyd/agents/finance",)
    assert diff.failures == ()
    await tree.agents.restart_child("finance")
    assert ids(tree.departments["finance"]) == ["cfo", "accountant", "analyst", "audit"]
    assert agents.configs["cfo"].instructions == "changed"


async def test_a_new_agent_that_fails_to_start_is_reported_not_raised(
    bus: EventBus, clock: ManualClock
) -> None:
    def factory(agent: AgentConfig) -> ChildSpec:
        if agent.slug == "broken":

            async def fail(ctx: ChildContext) -> None:
                raise RuntimeError("no api key")

            return ChildSpec(id="broken", start=fail)
        return placeholder_agent(agent)

    async with build(cfg(company()), bus, clock, factory) as tree:
        doc = copy.deepcopy(company())
        doc["agents"]["broken"] = {"title": "B", "reports_to": "ceo", "instructions": "x"}
        diff = await apply(tree, cfg(doc))
        assert len(diff.failures) == 1 and "no api key" in diff.failures[0]
        assert ids(tree.agents) == ["ceo", "finance", "growth"]
        assert diff.to_dict()["added_agents"] == ("broken",)


async def test_an_empty_diff_does_nothing(running: Any) -> None:
    tree, agents = running
    diff = await apply(tree, cfg(company()))
    assert diff.empty and agents.starts.total() == 5


async def test_apply_refuses_an_old_config_the_tree_does_not_run(running: Any) -> None:
    tree, _ = running
    other = company()
    other["agents"]["ceo"]["instructions"] = "something else"
    with pytest.raises(ValueError, match="not the config this tree runs"):
        await tree.apply_agents_diff(cfg(other), cfg(company()))


async def test_concurrent_reloads_are_applied_one_after_the_other(running: Any) -> None:
    tree, agents = running
    first, second = company(), company()
    first["agents"]["cfo"]["instructions"] = "v2"
    second["agents"]["cfo"]["instructions"] = "v3"
    a = asyncio.ensure_future(tree.apply_config(cfg(first)))
    b = asyncio.ensure_future(tree.apply_config(cfg(second)))
    async with asyncio.timeout(DEADLINE):
        results = await asyncio.gather(a, b)
    assert [r.changed_agents for r in results] == [("cfo",), ("cfo",)]
    assert agents.configs["cfo"].instructions == "v3" and agents.starts["cfo"] == 3
