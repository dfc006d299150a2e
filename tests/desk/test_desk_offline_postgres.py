"""The founder's commands without a daemon (``inbox``, ``answer``, ``approve``/``reject``,
``proposals``, ``runs show``) on a company whose desk and proposals live on PostgreSQL:
they read and decide in the company's schema — the same rows a daemon on another host
reads — and, before anything was written there, find it empty without creating it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentkit import write_company
from companyd.cli import main
from companyd.clock import SystemClock
from companyd.config import load_config
from companyd.desk import Desk, DeskItem, ItemKind, ItemState, Proposals
from companyd.events import EventBus
from companyd.runs import Journal, Task
from companyd.storage import Backend


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    rc = main(list(argv))
    out = capsys.readouterr()
    try:
        return rc, json.loads(out.out)
    except json.JSONDecodeError:
        return rc, out.out + out.err


def _desk(cfg: Path, backend: Backend) -> Desk:
    return Desk(
        cfg.parent / "state" / "desk.sqlite", bus=EventBus(), clock=SystemClock(), backend=backend
    )


async def _ask(cfg: Path, backend: Backend) -> tuple[list[DeskItem], str]:
    desk = _desk(cfg, backend)
    store = Proposals(
        cfg.parent / "state", load_config(cfg), bus=EventBus(), clock=SystemClock(), backend=backend
    )
    try:
        common: dict[str, Any] = {"agent": "ceo", "routine": None, "timeout": 3600.0}
        items = [
            await desk.request(
                key="run-q/tu-1",
                kind=ItemKind.QUESTION,
                run_id="run-q",
                payload={"question": "Friday or Monday?"},
                **common,
            ),
            await desk.request(
                key="run-a/tu-1",
                kind=ItemKind.APPROVAL,
                run_id="run-a",
                payload={"tool": "post_tweet", "input": {"text": "hi"}, "reason": "launch"},
                **common,
            ),
            await desk.request(
                key="task-1/result/1",
                kind=ItemKind.RESULT,
                run_id="run-1",
                payload={"answer": "Five ways…", "task": "Draft the post.", "round": 1},
                **common,
            ),
        ]
        proposal = await store.propose("improver", "ceo", "Decide faster.", "slow")
    finally:
        await desk.close()
        await store.close()
    return items, proposal.id


async def _journal_run(state: Path, backend: Backend) -> None:
    """Run ``run-1`` in the company's run journal, for ``runs show``."""
    journal = Journal(state / "runs.sqlite", backend=backend)
    try:
        task = Task(
            id="task-1", agent="ceo", prompt="Draft the post.", source="operator", created=1.0
        )
        await journal.add_task(task, 1.0)
        await journal.start_run(task, "run-1", 1, 1.0)
    finally:
        await journal.close()


async def _stored(cfg: Path, backend: Backend, item_id: str) -> DeskItem | None:
    desk = _desk(cfg, backend)
    try:
        return await desk.get(item_id)
    finally:
        await desk.close()


async def _present(cfg: Path, backend: Backend) -> tuple[bool, bool]:
    desk = _desk(cfg, backend)
    store = Proposals(
        cfg.parent / "state", load_config(cfg), bus=EventBus(), clock=SystemClock(), backend=backend
    )
    try:
        return await desk.present(), await store.present()
    finally:
        await desk.close()
        await store.close()


def test_the_founders_commands_without_a_daemon_work_in_the_companys_schema(
    tmp_path: Path,
    pg_backend: Backend,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert pg_backend.dsn is not None
    monkeypatch.setenv("COMPANYD_DATABASE_URL", pg_backend.dsn)
    cfg = write_company(
        tmp_path, {"ceo": {}}, state={"backend": "postgres", "schema": pg_backend.schema}
    )
    conf = ("--config", str(cfg))

    # nothing written yet: empty, and reading creates nothing
    assert _cli(capsys, "inbox", *conf, "--json") == (0, {"items": []})
    assert _cli(capsys, "proposals", *conf, "--json") == (0, {"proposals": []})
    rc, out = _cli(capsys, "answer", "q-0000000000", "Friday", *conf)
    assert rc != 0 and "nothing on the founder's desk has id 'q-0000000000'" in out
    assert asyncio.run(_present(cfg, pg_backend)) == (False, False)

    (question, approval, result), proposal = asyncio.run(_ask(cfg, pg_backend))
    asyncio.run(_journal_run(tmp_path / "state", pg_backend))
    rc, inbox = _cli(capsys, "inbox", *conf, "--json")
    assert rc == 0
    assert [i["id"] for i in inbox["items"]] == [question.id, approval.id, result.id, proposal]

    rc, out = _cli(capsys, "answer", question.id, "Friday", *conf)
    assert rc == 0 and "a daemon of this company on another host acts on it within" in out
    assert _cli(capsys, "approve", approval.id, *conf)[0] == 0
    assert _cli(capsys, "reject", result.id, "off-brand", *conf)[0] == 0
    assert _cli(capsys, "approve", proposal, *conf)[0] == 0
    rc, out = _cli(capsys, "approve", approval.id, *conf)
    assert rc != 0 and f"approval {approval.id} was already approved by" in out

    answered = asyncio.run(_stored(cfg, pg_backend, question.id))
    assert answered is not None
    assert (answered.state, answered.text, answered.via) == (ItemState.ANSWERED, "Friday", "cli")
    rc, shown = _cli(capsys, "runs", "show", "run-1", *conf, "--json")
    assert rc == 0, shown
    assert [(d["item_id"], d["decision"], d["text"]) for d in shown["decisions"]] == [
        (result.id, "rejected", "off-brand")
    ]
    rc, listed = _cli(capsys, "proposals", *conf, "--json")
    assert [(p["id"], p["status"]) for p in listed["proposals"]] == [(proposal, "applied")]
    assert "Decide faster." in cfg.read_text(encoding="utf-8")
    assert _cli(capsys, "inbox", *conf, "--json") == (0, {"items": []})
    # the desk and the proposals (and the journal) went to the schema, not to files
    assert not (tmp_path / "state").exists() or list((tmp_path / "state").iterdir()) == []
