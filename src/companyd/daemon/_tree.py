"""The company's supervision tree, built from company.yaml.

::

    companyd                      root, one_for_one, 2 restarts / 60 s (docs/supervision.md)
    ├── memory  spend  alerts     the built-in services, in the order given
    ├── agents                    company.yaml `supervisor:` (strategy, intensity, backoff)
    │   ├── ceo                   agents without a department, in file order
    │   ├── finance               each department is a supervisor with its own settings
    │   │   ├── cfo
    │   │   └── accountant
    │   └── …
    └── scheduler  dashboard  control   services that need the agents running come after them

Each supervisor's children are computed by its ``init`` from the tree's *current* config,
so a restarted department (or a restarted ``agents``) always comes back as company.yaml says
now. :meth:`CompanyTree.apply_agents_diff` applies a config change to the running tree with
``terminate_child`` / ``delete_child`` / ``start_child`` on the supervisors concerned and
leaves every other child alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from companyd._frozen import Frozen
from companyd.clock import Clock
from companyd.config import AgentConfig, CompanyConfig, SupervisorSpec
from companyd.events import EventBus
from companyd.supervision import (
    DEFAULT_KILL_GRACE,
    Backoff,
    ChildContext,
    ChildNotFound,
    ChildSpec,
    InitResult,
    InvalidSpec,
    Supervisor,
    SupervisorError,
    SupervisorFlags,
    SupervisorNotRunning,
)

__all__ = [
    "AGENTS",
    "ROOT",
    "ROOT_MAX_RESTARTS",
    "ROOT_MAX_SECONDS",
    "AgentChildFactory",
    "CompanyTree",
    "TreeDiff",
    "build_company_tree",
    "placeholder_agent",
    "placeholder_service",
    "plan_agents_diff",
]

#: The root supervisor's name (and so the first segment of every path).
ROOT: Final = "companyd"
#: The id of the agents subtree under the root.
AGENTS: Final = "agents"
#: Root intensity: a service (or the whole agents subtree) failing a third time within a
#: minute is no blip; the root gives up, the daemon exits 1 and systemd restarts a fresh
#: process. Lower than the agents' default (3 / 60 s) because restarts multiply down the path.
ROOT_MAX_RESTARTS: Final = 2
ROOT_MAX_SECONDS: Final = 60.0
#: Services that need the agents running; the agents subtree starts before the first of them.
_AFTER_AGENTS: Final = ("scheduler", "control")

AgentChildFactory = Callable[[AgentConfig], ChildSpec]


def placeholder_agent(agent: AgentConfig) -> ChildSpec:
    """A stand-in agent until the agent runtime lands: ready at once, idle until stopped."""

    async def run(ctx: ChildContext) -> None:
        ctx.started()
        await ctx.stopping.wait()

    return ChildSpec(id=agent.slug, start=run, restart=agent.restart)


def placeholder_service(id: str) -> ChildSpec:
    """A stand-in built-in service (memory, spend, …): ready at once, idle until stopped."""

    async def run(ctx: ChildContext) -> None:
        ctx.started()
        await ctx.stopping.wait()

    return ChildSpec(id=id, start=run)


# ---------------------------------------------------------------------------------------
# Diff


class TreeDiff(Frozen):
    """What a config change does to the agents subtree (and, after applying, what failed).

    Agents and departments are slugs. ``changed_*`` includes moves (a new department or
    parent); a changed agent or department is stopped and started again with its new
    config. ``restart_agents`` means the top ``supervisor:`` block changed, so the whole
    agents subtree restarts. ``restarted_agents`` is every agent that keeps its slug and is
    stopped and started again: the changed ones, plus every agent inside a changed (or
    moved) department, plus all of them when ``restart_agents`` — what the reload's answer
    and its alert call restarted. ``failures`` lists what could not be applied (a child that
    failed to start), one message each; ``deferred`` lists supervisors that were not running
    (their next start reads the new config).
    """

    added_agents: tuple[str, ...] = ()
    removed_agents: tuple[str, ...] = ()
    changed_agents: tuple[str, ...] = ()
    added_departments: tuple[str, ...] = ()
    removed_departments: tuple[str, ...] = ()
    changed_departments: tuple[str, ...] = ()
    restart_agents: bool = False
    restarted_agents: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()
    deferred: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        """True when the agents subtree needs no change."""
        return not (
            self.added_agents
            or self.removed_agents
            or self.changed_agents
            or self.added_departments
            or self.removed_departments
            or self.changed_departments
            or self.restart_agents
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field, plus ``empty``, as a JSON-serialisable dict."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | {
            "empty": self.empty
        }


def _enabled(config: CompanyConfig) -> dict[str, AgentConfig]:
    return {s: a for s, a in config.agents.items() if a.enabled}


def _agent_changed(old: AgentConfig, new: AgentConfig) -> bool:
    return old != new


def plan_agents_diff(
    old: CompanyConfig,
    new: CompanyConfig,
    *,
    needs_restart: Callable[[AgentConfig, AgentConfig], bool] = _agent_changed,
) -> TreeDiff:
    """Which agents and departments a change from ``old`` to ``new`` adds, removes, changes.

    Disabled agents (``enabled: false``) count as absent. An agent whose department changed
    is "changed" (it moves); otherwise it is changed when ``needs_restart(old, new)`` (by
    default: any difference in its resolved config). A department is changed when its
    ``supervisor:`` settings or its parent changed.
    """
    oa, na = _enabled(old), _enabled(new)
    od, nd = old.departments, new.departments
    changed_agents = tuple(
        s
        for s in na
        if s in oa and (oa[s].department != na[s].department or needs_restart(oa[s], na[s]))
    )
    changed_departments = tuple(
        s
        for s in nd
        if s in od and (od[s].parent != nd[s].parent or od[s].supervisor != nd[s].supervisor)
    )
    restart_agents = old.spec.supervisor != new.spec.supervisor
    # a department restarted in place (or moved) stops and starts every agent inside it
    restarted = set(changed_departments)
    return TreeDiff(
        added_agents=tuple(s for s in na if s not in oa),
        removed_agents=tuple(s for s in oa if s not in na),
        changed_agents=changed_agents,
        added_departments=tuple(s for s in nd if s not in od),
        removed_departments=tuple(s for s in od if s not in nd),
        changed_departments=changed_departments,
        restart_agents=restart_agents,
        restarted_agents=tuple(
            s
            for s in na
            if s in oa
            and (restart_agents or s in changed_agents or _within(new, na[s].department, restarted))
        ),
    )


def _within(cfg: CompanyConfig, department: str | None, marked: set[str]) -> bool:
    """Whether ``department`` or one of its ancestors (in ``cfg``) is in ``marked``."""
    while department is not None:
        if department in marked:
            return True
        department = cfg.departments[department].parent
    return False


# ---------------------------------------------------------------------------------------
# The tree


class CompanyTree(Supervisor):
    """The root supervisor of a company, with the agents subtree built from its config.

    Build it with :func:`build_company_tree`. Besides everything a :class:`Supervisor` does,
    it knows its config (:attr:`config`), its agents supervisor (:attr:`agents`), its
    department supervisors (:attr:`departments`) and how to apply a config change
    (:meth:`apply_agents_diff`).
    """

    def __init__(
        self,
        config: CompanyConfig,
        *,
        bus: EventBus,
        clock: Clock,
        services: Sequence[ChildSpec],
        agent_child: AgentChildFactory,
        name: str = ROOT,
        kill_grace: float = DEFAULT_KILL_GRACE,
        random: Callable[[], float] | None = None,
    ) -> None:
        ids = [s.id for s in services]
        if AGENTS in ids:
            raise InvalidSpec(
                f"services must not include {AGENTS!r}: the tree builds the agents subtree "
                f"itself; services given: {', '.join(ids)}"
            )
        self._config = config
        self._services = tuple(services)
        self._agent_child = agent_child
        self._tree_kill_grace = kill_grace
        self._departments: dict[str, Supervisor] = {}
        self._reload_lock = asyncio.Lock()  # one config change at a time
        self._agents = Supervisor(AGENTS, init=self._agents_init, kill_grace=kill_grace)
        super().__init__(
            name, init=self._root_init, bus=bus, clock=clock, kill_grace=kill_grace, random=random
        )

    @property
    def config(self) -> CompanyConfig:
        """The config the tree runs now (the last one applied)."""
        return self._config

    @property
    def agents(self) -> Supervisor:
        """The agents supervisor (``<root>/agents``)."""
        return self._agents

    @property
    def departments(self) -> Mapping[str, Supervisor]:
        """Department slug → its supervisor, for departments in the current config."""
        return {s: self._department(s) for s in self._config.departments}

    # -- inits: read the current config on every (re)start -------------------------------

    def _root_init(self) -> InitResult:
        flags = SupervisorFlags(
            strategy="one_for_one", max_restarts=ROOT_MAX_RESTARTS, max_seconds=ROOT_MAX_SECONDS
        )
        services = list(self._services)
        at = next((i for i, s in enumerate(services) if s.id in _AFTER_AGENTS), len(services))
        services.insert(at, self._agents.child_spec(AGENTS))
        return flags, services

    def _agents_init(self) -> InitResult:
        cfg = self._config
        top = cfg.spec.supervisor
        agents = [a for a in _enabled(cfg).values() if a.department is None]
        depts = [d.slug for d in cfg.departments.values() if d.parent is None]
        return _flags(top), [self._agent_spec(a, top) for a in agents] + [
            self._department(d).child_spec(d) for d in depts
        ]

    def _department_init(self, slug: str) -> InitResult:
        cfg = self._config
        dept = cfg.departments.get(slug)
        if dept is None:  # removed from the config while its supervisor restarted
            return SupervisorFlags(), []
        enabled = _enabled(cfg)
        agents = [enabled[s] for s in dept.agents if s in enabled]
        return _flags(dept.supervisor), [self._agent_spec(a, dept.supervisor) for a in agents] + [
            self._department(d).child_spec(d) for d in dept.departments
        ]

    def _department(self, slug: str) -> Supervisor:
        sup = self._departments.get(slug)
        if sup is None:
            sup = Supervisor(
                slug,
                init=functools.partial(self._department_init, slug),
                kill_grace=self._tree_kill_grace,
            )
            self._departments[slug] = sup
        return sup

    def _agent_spec(self, agent: AgentConfig, node: SupervisorSpec) -> ChildSpec:
        spec = self._agent_child(agent)
        if not isinstance(spec, ChildSpec) or spec.id != agent.slug:
            raise InvalidSpec(
                f"agent_child({agent.slug!r}) must return a ChildSpec with id {agent.slug!r}, "
                f"got {spec!r}"
            )
        # company.yaml is the source of truth for the restart type and the department's
        # backoff (unless the factory chose a backoff itself).
        changes: dict[str, Any] = {}
        if spec.restart != agent.restart:
            changes["restart"] = agent.restart
        if spec.backoff is None and node.backoff is not None:
            changes["backoff"] = Backoff.from_spec(node.backoff)
        return dataclasses.replace(spec, **changes) if changes else spec

    def _node(self, slug: str | None) -> Supervisor:
        return self._agents if slug is None else self._department(slug)

    # -- reload --------------------------------------------------------------------------

    async def apply_agents_diff(
        self,
        old: CompanyConfig,
        new: CompanyConfig,
        *,
        needs_restart: Callable[[AgentConfig, AgentConfig], bool] = _agent_changed,
    ) -> TreeDiff:
        """Make the running agents subtree match ``new`` (``old`` is what it runs now).

        Removed, moved and changed agents and departments are stopped with
        ``terminate_child`` and forgotten with ``delete_child`` on the supervisor that holds
        them; added, moved and changed ones are started with ``start_child`` (so they come
        after their siblings until that supervisor's next restart, which rebuilds it in file
        order). A department whose ``supervisor:`` settings changed is restarted in place
        (``terminate_child`` + ``restart_child``) and rebuilt from ``new``. A change to the
        top ``supervisor:`` block restarts the whole agents subtree. Nothing else is touched,
        and none of this counts against any restart intensity.

        Supervisors that are not running (e.g. waiting to be restarted) are skipped; they
        read ``new`` when they start. Failures to start are collected, not raised.

        Returns:
            the plan, with ``failures`` and ``deferred`` filled in.

        Raises:
            ValueError: ``old`` is not the config the tree runs (see :attr:`config`).
        """
        async with self._reload_lock:
            if old is not self._config and old != self._config:
                raise ValueError(
                    f"apply_agents_diff: 'old' ({old.path}) is not the config this tree runs "
                    f"({self._config.path}); pass tree.config, or use apply_config(new)"
                )
            return await self._apply(old, new, needs_restart)

    async def _apply(
        self,
        old: CompanyConfig,
        new: CompanyConfig,
        needs_restart: Callable[[AgentConfig, AgentConfig], bool],
    ) -> TreeDiff:
        plan = plan_agents_diff(old, new, needs_restart=needs_restart)
        failures: list[str] = []
        deferred: list[str] = []

        async def attempt(node: Supervisor, what: str, op: Callable[[], Any]) -> None:
            try:
                await op()
            except SupervisorNotRunning:
                deferred.append(node.path)
            except ChildNotFound:
                pass  # already gone (a temporary child that ended, a department restarting)
            except SupervisorError as exc:
                failures.append(f"{what}: {exc}")

        if plan.empty:
            self._config = new
            return plan
        if plan.restart_agents:
            self._config = new
            for slug in plan.removed_departments:
                self._departments.pop(slug, None)
            await attempt(self, AGENTS, functools.partial(self.terminate_child, AGENTS))
            await attempt(self, AGENTS, functools.partial(self.restart_child, AGENTS))
            return dataclasses.replace(
                plan, failures=tuple(failures), deferred=tuple(dict.fromkeys(deferred))
            )

        rebuilt = set(plan.added_departments) | set(plan.changed_departments)
        gone = set(plan.removed_departments) | set(plan.changed_departments)

        settings_changed = [
            s
            for s in plan.changed_departments
            if old.departments[s].parent == new.departments[s].parent
        ]
        moved_departments = [s for s in plan.changed_departments if s not in settings_changed]

        # 1. Stop what leaves or moves, deepest supervisors untouched when their parent goes.
        for slug in reversed(plan.removed_agents + plan.changed_agents):
            node = old.agents[slug].department
            if _within(old, node, gone):
                continue
            sup = self._node(node)
            await attempt(sup, slug, functools.partial(self._remove, sup, slug))
        for slug in reversed(plan.removed_departments + tuple(moved_departments)):
            parent = old.departments[slug].parent
            if _within(old, parent, gone):
                continue
            sup = self._node(parent)
            await attempt(sup, slug, functools.partial(self._remove, sup, slug))

        # 2. From here on every init reads the new config.
        self._config = new
        for slug in plan.removed_departments:
            self._departments.pop(slug, None)

        # 3. Restart departments whose settings changed, in place.
        for slug in settings_changed:
            parent = new.departments[slug].parent
            if _within(new, parent, rebuilt) or _within(old, parent, gone):
                continue
            sup = self._node(parent)
            await attempt(sup, slug, functools.partial(sup.terminate_child, slug))
            await attempt(sup, slug, functools.partial(sup.restart_child, slug))

        # 4. Start what arrives or moves, in file order.
        enabled = _enabled(new)
        for slug in enabled:
            if slug not in plan.added_agents and slug not in plan.changed_agents:
                continue
            agent = enabled[slug]
            if _within(new, agent.department, rebuilt):
                continue
            sup = self._node(agent.department)
            node_spec = (
                new.spec.supervisor
                if agent.department is None
                else new.departments[agent.department].supervisor
            )
            spec = self._agent_spec(agent, node_spec)
            await attempt(sup, slug, functools.partial(sup.start_child, spec))
        for slug in new.departments:
            if slug not in plan.added_departments and slug not in moved_departments:
                continue
            parent = new.departments[slug].parent
            if _within(new, parent, rebuilt):
                continue
            sup = self._node(parent)
            spec = self._department(slug).child_spec(slug)
            await attempt(sup, slug, functools.partial(sup.start_child, spec))
        return dataclasses.replace(
            plan, failures=tuple(failures), deferred=tuple(dict.fromkeys(deferred))
        )

    @staticmethod
    async def _remove(sup: Supervisor, id: str) -> None:
        await sup.terminate_child(id)
        await sup.delete_child(id)

    async def apply_config(self, new: CompanyConfig) -> TreeDiff:
        """:meth:`apply_agents_diff` from whatever config the tree runs when its turn comes."""
        async with self._reload_lock:
            return await self._apply(self._config, new, _agent_changed)


def _flags(spec: SupervisorSpec) -> SupervisorFlags:
    return SupervisorFlags(
        strategy=spec.strategy, max_restarts=spec.max_restarts, max_seconds=spec.max_seconds
    )


def build_company_tree(
    config: CompanyConfig,
    *,
    bus: EventBus,
    clock: Clock,
    services: Sequence[ChildSpec],
    agent_child: AgentChildFactory,
    kill_grace: float = DEFAULT_KILL_GRACE,
    random: Callable[[], float] | None = None,
) -> CompanyTree:
    """The company's root supervisor (not started: ``await tree.start()``).

    Args:
        config: the validated company.yaml.
        bus: the event bus every supervisor in the tree publishes to.
        clock: the clock every supervisor in the tree measures time with (restart
            intensity, kill grace).
        services: the built-in services in start order (memory, spend, alerts, scheduler,
            control); the agents subtree is placed before the first of ``scheduler`` /
            ``control`` (at the end if neither is given).
        agent_child: builds an agent's child spec; its id must be the agent's slug. The
            tree applies the agent's restart type and its department's backoff.
        kill_grace: seconds a cancelled child gets before it is abandoned (D2).
        random: jitter source for backoff (``random.Random(seed).random`` in tests).

    Raises:
        InvalidSpec: ``services`` contains ``agents``.
    """
    return CompanyTree(
        config,
        bus=bus,
        clock=clock,
        services=services,
        agent_child=agent_child,
        kill_grace=kill_grace,
        random=random,
    )
