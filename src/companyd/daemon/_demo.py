"""``companyd demo --crash-test``: watch the supervision tree recover, offline.

The demo builds the real tree from company.yaml — the real supervisors, strategies,
intensities and backoff — with placeholder bodies for the services and the agents (no LLM
call, no network, no state written). Then:

1. it crashes one agent on purpose and prints the events that show it restarted and that
   nothing else was touched;
2. it makes the same agent crash every time it starts, until its department's supervisor
   reaches its restart intensity, gives up, and its own supervisor restarts the department.

It exits 0 when everything behaved as described, 1 otherwise (so it doubles as a check).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any, TextIO

from companyd._aio import race
from companyd.clock import Clock, SystemClock
from companyd.config import AgentConfig, CompanyConfig
from companyd.daemon._tree import (
    AGENTS,
    ROOT,
    CompanyTree,
    build_company_tree,
    placeholder_service,
)
from companyd.errors import CompanydError, UnknownName
from companyd.events import (
    Backoff,
    ChildExited,
    ChildStarted,
    ChildStartFailed,
    ChildTerminated,
    Event,
    EventBus,
    MaxIntensity,
    Restart,
    SupStarted,
    SupStopped,
)
from companyd.supervision import ChildContext, ChildSpec, SupervisorGaveUp

__all__ = ["SERVICES", "CrashSwitch", "crash_test", "render_tree", "show_tree"]

#: The built-in services, as placeholders, in the daemon's start order.
SERVICES = ("memory", "spend", "alerts", "scheduler", "control")

#: Seconds the demo waits for any one thing to happen (plus the longest backoff delay).
_PATIENCE = 10.0


class CrashSwitch:
    """Placeholder agent bodies that crash on command.

    ``agent_child`` is an agent factory for :func:`~companyd.daemon._tree.build_company_tree`.
    ``crash(slug)`` makes the agent's current run raise; ``looping`` holds the slugs that
    crash again right after every start (a crash loop).
    """

    def __init__(self) -> None:
        self._triggers: dict[str, asyncio.Event] = {}
        self.looping: set[str] = set()

    def agent_child(self, agent: AgentConfig) -> ChildSpec:
        """The child spec of a placeholder body for ``agent``: it reports started and waits for a
        stop or a :meth:`crash`, which makes it raise; a slug in :attr:`looping` raises right after
        every start.
        """
        slug = agent.slug

        async def run(ctx: ChildContext) -> None:
            trigger = asyncio.Event()
            self._triggers[slug] = trigger
            ctx.started()
            if slug in self.looping:
                await asyncio.sleep(0)
                raise RuntimeError(f"crash test: {slug} crashed again right after starting")
            await race(ctx.stopping.wait(), trigger.wait())
            if trigger.is_set() and not ctx.stopping.is_set():
                raise RuntimeError(f"crash test: {slug} crashed on purpose")

        return ChildSpec(id=slug, start=run, restart=agent.restart)

    def crash(self, slug: str) -> None:
        """Make the agent's current run raise."""
        trigger = self._triggers.get(slug)
        if trigger is None:
            raise KeyError(f"agent {slug!r} has not started; started: {', '.join(self._triggers)}")
        trigger.set()


# ---------------------------------------------------------------------------------------
# Rendering


def render_tree(snapshot: dict[str, Any]) -> list[str]:
    """The running tree as indented lines, from :meth:`Supervisor.snapshot`."""
    lines = [f"{snapshot['path']:<34} {_flags(snapshot)}"]

    def walk(node: dict[str, Any], prefix: str, in_agents: bool) -> None:
        rows = node["children"]
        for i, row in enumerate(rows):
            last = i == len(rows) - 1
            label = f"{prefix}{'└─ ' if last else '├─ '}{row['id']}"
            if row["kind"] == "supervisor":
                lines.append(f"{label:<34} {_flags(row)}")
                walk(row, prefix + ("   " if last else "│  "), True)
            elif in_agents:
                lines.append(f"{label:<34} agent, {row['restart']}")
            else:
                lines.append(f"{label:<34} service")

    walk(snapshot, "", False)
    return lines


def _flags(node: dict[str, Any]) -> str:
    if "strategy" not in node:
        return f"supervisor ({node['state']})"
    return (
        f"supervisor: {node['strategy']}, at most {node['max_restarts']} restarts "
        f"within {node['max_seconds']:g} s"
    )


def describe(event: Event) -> str:
    """One plain-English line for a supervision event."""
    match event:
        case ChildExited(child=child, action=action, reason=reason, restart_type=restart_type):
            verdict = "so it is restarted" if action == "restart" else "so it is not restarted"
            return f"{child} exited: {reason} — {restart_type}, {verdict}"
        case Restart(group=group, restarts=restarts, max_restarts=most, max_seconds=within):
            return (
                f"restarting {', '.join(group)} (restart {restarts} of at most {most} "
                f"within {within:g} s)"
            )
        case ChildStarted(child=child, phase=phase):
            return f"{child} is running again" if phase == "restart" else f"{child} started"
        case ChildTerminated(child=child, reason=reason):
            return f"{child} stopped ({reason})"
        case MaxIntensity(restarts=restarts, max_restarts=most, max_seconds=within):
            return (
                f"GIVES UP: {restarts} restarts within {within:g} s is more "
                f"than {most}; it stops its children and exits"
            )
        case SupStarted(children=children):
            return f"supervisor up with {len(children)} children"
        case SupStopped(reason=reason):
            return f"supervisor stopped ({reason})"
        case Backoff(child=child, delay=delay):
            return f"waiting {delay:.2f} s before restarting {child} (backoff)"
        case ChildStartFailed(child=child, reason=reason):
            return f"{child} failed to start: {reason}"
        case _:
            return ", ".join(f"{k}={v}" for k, v in event.data.items())


def _print_events(out: TextIO, events: list[Event], t0: float) -> None:
    width = max((len(e.source) for e in events), default=0)
    for e in events:
        ms = (e.ts - t0) * 1000
        out.write(f"   {ms:+8.2f} ms  {e.source:<{width}}  {e.kind:<16} {describe(e)}\n")


def _uptimes(snapshot: dict[str, Any]) -> dict[str, float | None]:
    """Path → started_at of every child in the tree."""
    out: dict[str, float | None] = {}

    def walk(node: dict[str, Any]) -> None:
        for row in node["children"]:
            out[row["path"]] = row["started_at"]
            walk(row)

    walk(snapshot)
    return out


# ---------------------------------------------------------------------------------------
# The crash test


def _pick_victim(config: CompanyConfig) -> AgentConfig:
    candidates = [a for a in config.agents.values() if a.enabled and a.restart != "temporary"]
    if not candidates:
        raise ValueError(
            "the crash test needs an enabled agent whose restart is permanent or transient; "
            f"{config.path} has none"
        )
    for agent in candidates:
        dept = agent.department
        if dept is not None and config.departments[dept].supervisor.backoff is None:
            return agent
    return candidates[0]


class _Recorder:
    def __init__(self, bus: EventBus) -> None:
        self.items: list[Event] = []
        self.changed = asyncio.Event()
        self.hooks: list[Callable[[Event], None]] = []
        bus.add_listener(self._on)

    def _on(self, event: Event) -> None:
        self.items.append(event)
        for hook in self.hooks:
            hook(event)
        self.changed.set()

    async def wait(self, seen: Callable[[Event], bool], timeout: float, *, since: int) -> Event:
        """The first event from index ``since`` on that ``seen`` accepts."""
        async with asyncio.timeout(timeout):
            while True:
                for e in self.items[since:]:
                    if seen(e):
                        return e
                self.changed.clear()
                await self.changed.wait()


async def crash_test(
    config: CompanyConfig,
    *,
    agent: str | None = None,
    out: TextIO = sys.stdout,
    clock: Clock | None = None,
) -> int:
    """Run the crash test on ``config`` and narrate it on ``out``. Returns the exit code.

    Raises:
        UnknownName: ``agent`` is not in company.yaml (exit 1, as in every command).
        CompanydError: ``agent`` is temporary or disabled: there is nothing to watch.
    """
    clock = clock or SystemClock()
    bus = EventBus(clock)
    rec = _Recorder(bus)
    switch = CrashSwitch()
    if agent is None:
        victim = _pick_victim(config)
    elif agent not in config.agents:
        raise UnknownName(
            f"unknown agent {agent!r} in {config.path}; agents: {', '.join(config.agents)}"
        )
    else:
        victim = config.agents[agent]
    if victim.restart == "temporary" or not victim.enabled:
        what = "disabled" if not victim.enabled else "temporary"
        raise CompanydError(
            f"agent {victim.slug!r} is {what}; a supervisor never restarts it, so "
            "there is nothing to watch — pick another with --agent"
        )
    tree = build_company_tree(
        config,
        bus=bus,
        clock=clock,
        services=[placeholder_service(s) for s in SERVICES],
        agent_child=switch.agent_child,
    )
    dept = victim.department
    home = f"{ROOT}/{AGENTS}" + "".join(f"/{d}" for d in _lineage(config, dept))
    parent = home.rsplit("/", 1)[0]
    victim_path = f"{home}/{victim.slug}"
    settings = config.departments[dept].supervisor if dept is not None else config.spec.supervisor
    ok = True

    out.write(
        f"companyd crash test — {config.name}, offline: placeholder agents and services, no "
        "LLM calls, no network.\n\nThe supervision tree built from "
        f"{config.path.name}:\n\n"
    )
    await tree.start()
    try:
        for line in render_tree(tree.snapshot()):
            out.write(f"   {line}\n")

        # -- act 1 ----------------------------------------------------------------------
        out.write(
            f"\n1. One crash. {victim.slug} raises an exception on purpose. Its supervisor, "
            f"{home}, restarts it by its strategy ({settings.strategy}).\n\n"
        )
        before = _uptimes(tree.snapshot())
        mark = len(rec.items)
        t0 = clock.time()
        switch.crash(victim.slug)
        await rec.wait(
            lambda e: (
                isinstance(e, ChildStarted)
                and e.source == home
                and e.child == victim.slug
                and e.phase == "restart"
            ),
            _PATIENCE + (settings.backoff.max if settings.backoff else 0),
            since=mark,
        )
        _print_events(out, rec.items[mark:], t0)
        after = _uptimes(tree.snapshot())
        touched = sorted(p for p in before if after.get(p) != before[p])
        untouched = [p.rsplit("/", 1)[1] for p in before if p not in touched]
        if victim_path in touched and all(p.startswith(home + "/") for p in touched):
            others = ", ".join(p.rsplit("/", 1)[1] for p in touched if p != victim_path)
            also = f" ({settings.strategy} also restarted {others})" if others else ""
            out.write(
                f"\n   ✓ {victim.slug} was restarted{also}; nothing else was touched — "
                f"{len(untouched)} other children kept running: {', '.join(untouched)}.\n"
            )
        else:
            ok = False
            out.write(f"\n   ✗ expected only {victim_path} to restart; restarted: {touched}\n")

        # -- act 2 ----------------------------------------------------------------------
        limit = settings.max_restarts
        window = settings.max_seconds
        out.write(
            f"\n2. A crash loop. Now {victim.slug} crashes every time it starts. {home} allows "
            f"at most {limit} restarts within {window:g} s; one more and it gives up: it stops "
            f"its children and exits, and {parent} decides what happens next.\n"
        )
        if settings.backoff is not None:
            out.write(
                f"   ({home} waits {settings.backoff.min:g}–{settings.backoff.max:g} s before "
                "each restart (backoff), so this takes a while.)\n"
            )
        out.write("\n")
        before = _uptimes(tree.snapshot())
        mark = len(rec.items)
        t0 = clock.time()

        def stop_looping(event: Event) -> None:
            # Once the department gave up, its restart starts the agent clean.
            if isinstance(event, MaxIntensity) and event.source == home:
                switch.looping.discard(victim.slug)

        rec.hooks.append(stop_looping)
        switch.looping.add(victim.slug)
        switch.crash(victim.slug)
        parent_id = home.rsplit("/", 1)[1]
        patience = _PATIENCE + (settings.backoff.max * (limit + 1) if settings.backoff else 0)
        try:
            gave_up = await rec.wait(
                lambda e: isinstance(e, MaxIntensity) and e.source == home, patience, since=mark
            )
            back = await rec.wait(
                lambda e: (
                    isinstance(e, ChildStarted) and e.source == parent and e.child == parent_id
                ),
                _PATIENCE,
                since=mark,
            )
        except TimeoutError:
            ok = False
            _print_events(out, rec.items[mark:], t0)
            out.write(f"\n   ✗ {home} did not give up and come back within {patience:g} s\n")
        else:
            _print_events(out, rec.items[mark : rec.items.index(back) + 1], t0)
            restart_above = [
                e for e in rec.items[mark:] if isinstance(e, Restart) and e.source == parent
            ]
            counted = restart_above[-1].data if restart_above else None
            out.write(
                f"\n   ✓ {home} gave up after {gave_up.data['restarts']} restarts within "
                f"{window:g} s (counting the one in step 1). max_intensity is a critical event: "
                "it pages the operator.\n"
            )
            if counted is not None:
                out.write(
                    f"   ✓ Above it, {parent} restarted it — restart {counted['restarts']} of at "
                    f"most {counted['max_restarts']} within {counted['max_seconds']:g} s there — "
                    f"and it came back with fresh children.\n"
                )
            after = _uptimes(tree.snapshot())
            outside = [p for p in before if not p.startswith(home + "/") and p != home]
            moved = [p for p in outside if after.get(p) != before[p]]
            if moved:
                ok = False
                out.write(f"   ✗ outside {home}, these restarted too: {', '.join(moved)}\n")
            else:
                out.write(
                    f"   ✓ Nothing outside {home} was touched ({len(outside)} children kept "
                    "running).\n"
                )
    finally:
        await tree.stop()
    try:
        await tree.wait()
    except SupervisorGaveUp as exc:
        ok = False
        out.write(f"\n   ✗ the root gave up: {exc}\n")
    out.write(
        "\nIn the daemon these events go to the log, to `companyd status` and, by severity, to "
        "Telegram. Had the parent given up as well, the failure would climb one more level; "
        "when the root gives up, the daemon exits with status 1 and systemd restarts it.\n"
    )
    out.write("\nResult: " + ("all as expected.\n" if ok else "NOT as expected (see ✗ above).\n"))
    return 0 if ok else 1


def _lineage(config: CompanyConfig, dept: str | None) -> list[str]:
    chain: list[str] = []
    while dept is not None:
        chain.append(dept)
        dept = config.departments[dept].parent
    return list(reversed(chain))


async def show_tree(config: CompanyConfig, out: TextIO) -> int:
    """``companyd demo``: start the company's supervision tree with placeholder services and
    agents, write it to ``out`` as an indented tree, stop it, and return exit code 0.
    """
    switch = CrashSwitch()
    tree: CompanyTree = build_company_tree(
        config,
        bus=EventBus(),
        clock=SystemClock(),
        services=[placeholder_service(s) for s in SERVICES],
        agent_child=switch.agent_child,
    )
    await tree.start()
    try:
        for line in render_tree(tree.snapshot()):
            out.write(f"   {line}\n")
    finally:
        await tree.stop()
    out.write("\nRun `companyd demo --crash-test` to crash an agent and watch the tree recover.\n")
    return 0
