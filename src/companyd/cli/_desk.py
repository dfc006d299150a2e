"""The founder's desk from the command line: ``companyd inbox`` and ``companyd answer``.

``companyd inbox`` lists what waits for the founder — tool calls to approve, agents'
questions, improver proposals, quarantined tasks — oldest first, each with the command that
acts on it. Approvals and proposals are decided with ``companyd approve ID`` /
``companyd reject ID [REASON]`` (:mod:`companyd.cli._roles`), questions answered with
``companyd answer ID TEXT``. With a daemon running they go through its control socket;
without one they read and write the state directory's stores directly, and the waiting run
finds the decision when the daemon starts again.
"""

from __future__ import annotations

import argparse
import getpass
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from companyd.cli._daemon import add_daemon_arguments, call_daemon, company_zone, running_daemon
from companyd.cli._main import print_json
from companyd.errors import CompanydError

if TYPE_CHECKING:
    from companyd.desk import Desk, ItemState

__all__ = ["decide_offline", "login", "register"]

#: How each inbox action is written on the command line.
_CLI_ACTIONS = {
    "approve": "companyd approve {id}",
    "reject": "companyd reject {id} [REASON]",
    "answer": 'companyd answer {id} "…"',
    "changes": 'companyd answer {id} "what to change"',
    "retry": "companyd retry {id}",
}


def register(sub: Any) -> None:
    """Add ``inbox`` and ``answer`` to the subcommands."""
    p = sub.add_parser(
        "inbox",
        help="what waits for you: approvals, questions, proposals, quarantined tasks",
        description="What waits for the founder, oldest first, each with the command that "
        "acts on it.",
    )
    add_daemon_arguments(p)
    p.set_defaults(func=_inbox)

    p = sub.add_parser(
        "answer",
        help="answer an agent's question (an id from `companyd inbox`)",
        description="Answer an agent's question (q-…), or ask for changes to a result "
        "(r-…): the waiting run goes on with your text.",
    )
    p.add_argument("item_id", help="the question's id, q-…")
    p.add_argument("text", nargs="+", help="your answer")
    add_daemon_arguments(p)
    p.set_defaults(func=_answer)


def _desk(args: argparse.Namespace) -> Desk:
    """The company's desk, where its daemon keeps it (a file or its PostgreSQL schema)."""
    from companyd.clock import SystemClock
    from companyd.config import default_config_path, load_config, state_backend
    from companyd.desk import Desk
    from companyd.events import EventBus

    cfg = load_config(args.config or default_config_path())
    path = cfg.state_dir(args.state_dir) / "desk.sqlite"
    # its events go nowhere: a queued question's turn is the daemon's to announce
    return Desk(
        path, bus=EventBus(), clock=SystemClock(), backend=state_backend(cfg), announces=False
    )


def _inbox(args: argparse.Namespace) -> int:
    def from_files() -> int:
        import asyncio  # only without a daemon: the answer from the files

        result = asyncio.run(_inbox_offline(args))
        if args.json:
            print_json(result)
            return 0
        return _print_inbox(result, company_zone(args))

    return call_daemon(
        args, "inbox", lambda result: _print_inbox(result, company_zone(args)), otherwise=from_files
    )


async def _inbox_offline(args: argparse.Namespace) -> dict[str, Any]:
    import asyncio

    from companyd.admin import result_data
    from companyd.clock import SystemClock
    from companyd.config import default_config_path, load_config, state_backend
    from companyd.desk import Desk, Proposals, gather_inbox
    from companyd.events import EventBus
    from companyd.runs import Journal

    cfg = load_config(args.config or default_config_path())
    state = cfg.state_dir(args.state_dir)
    clock = SystemClock()
    backend = state_backend(cfg)
    # A store not written yet has nothing: reading must not create it.
    desk = Desk(
        state / "desk.sqlite", bus=EventBus(), clock=clock, backend=backend, announces=False
    )
    proposals = Proposals(state, cfg, bus=EventBus(), clock=clock, backend=backend)
    # on PostgreSQL a reader migrates nothing: the daemons of the company own the schema
    journal = Journal(state / "runs.sqlite", backend=backend, readonly=backend.kind == "postgres")
    try:
        inbox = await gather_inbox(
            desk if await desk.present() else None,
            proposals if await proposals.present() else None,
            journal if await asyncio.to_thread(journal.exists) else None,
        )
        return dict(result_data("inbox", inbox))
    finally:
        await desk.close()
        await proposals.close()
        await journal.close()


def _print_inbox(result: Mapping[str, Any], tz: str) -> int:
    """The inbox as text, each item's time in ``tz`` (the company's zone, named)."""
    items = list(result.get("items") or [])
    if not items:
        print("nothing waits for you")
        return 0
    from companyd.admin import format_when, waiting_text

    now = time.time()
    for i in items:
        created = i.get("created")
        when = format_when(created, tz) if isinstance(created, int | float) else "?"
        print(f"{i.get('id')}  {i.get('kind'):11} {when}  {i.get('summary')}")
        print(f"    {waiting_text(i.get('created'), i.get('deadline'), now, i.get('kind'))}")
        acts = [_CLI_ACTIONS[a].format(id=i.get("id")) for a in i.get("actions") or []]
        if acts:
            print("    " + "  ·  ".join(acts))
    return 0


def _answer(args: argparse.Namespace) -> int:
    from companyd.desk import ItemState

    text = " ".join(args.text)
    if running_daemon(args) is not None:
        return call_daemon(
            args,
            "answer",
            _print_message,
            item_id=args.item_id,
            text=text,
            by=login(),  # who decided, for the run's transcript
            via="cli",
        )
    result = decide_offline(args, args.item_id, ItemState.ANSWERED, text)
    if args.json:
        print_json(result)
        return 0
    return _print_message(result)


def decide_offline(
    args: argparse.Namespace, item_id: str, state: ItemState, text: str
) -> dict[str, Any]:
    """Decide a desk item with no daemon running here: written to the desk, where the run
    finds it when the daemon starts again (on PostgreSQL, a daemon of the company on another
    host finds it within seconds).
    """
    import asyncio

    from companyd.admin import result_data
    from companyd.desk import decide

    async def go() -> dict[str, Any]:
        desk = _desk(args)
        try:
            if not await desk.present():
                raise CompanydError(
                    f"nothing on the founder's desk has id {item_id!r}; pending: (none)"
                )
            done = await decide(desk, item_id, state, text, by=login(), via="cli")
        finally:
            await desk.close()
        result = dict(result_data("answer", done))
        result["message"] += (
            "; the daemon acts on it when it starts again"
            if desk.backend.kind == "sqlite"
            # a daemon of this company on another host reads the same schema
            else "; a daemon of this company on another host acts on it within seconds, "
            "otherwise the daemon acts on it when it starts"
        )
        return result

    return asyncio.run(go())


def login() -> str:
    """Who runs this command, as a decision on the founder's desk keeps it: the login name,
    else ``uid N`` (a container's user without a name).
    """
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid {os.getuid()}"


def _print_message(result: Mapping[str, Any]) -> int:
    print(result.get("message") or result)
    return 0
