"""The improver proposes, the operator decides; applied changes reload and can be reverted.

The store's own tests run on both backends (``state_backend``: proposals.sqlite, a
company's PostgreSQL schema); the daemon's end-to-end tests and those about the SQLite file
on SQLite.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from pathlib import Path

import psycopg
import pytest

from agentkit import PerAgent, running_company, tool_results, write_company
from companyd.admin import AdminError
from companyd.admin._results import ProposalDecision
from companyd.alerts._ops import act, command_reply
from companyd.clock import SystemClock
from companyd.config import load_config
from companyd.desk import Proposal, ProposalError, Proposals
from companyd.desk import _proposals as improver
from companyd.events import EventBus
from companyd.storage import SQLITE, Backend
from companyd.testing.messages_api import MessagesAPIServer, reply_text, reply_tool_use

pytestmark = pytest.mark.anyio

NEW = "Write one post a day, under 200 characters, about a customer problem we solved."


async def test_a_proposal_is_applied_only_on_approval_and_can_be_reverted(tmp_path: Path) -> None:
    cfg = write_company(
        tmp_path,
        {
            "ceo": {},
            "marketing": {"reports_to": "ceo", "instructions": "Write posts."},
            "improver": {"reports_to": "ceo", "can_modify": ["marketing"]},
        },
    )
    original = cfg.read_text()
    model = PerAgent(
        improver=[
            reply_tool_use("read_agent", {"agent": "marketing"}),
            reply_tool_use("read_agent", {"agent": "ceo"}),
            reply_tool_use(
                "propose_change",
                {"agent": "marketing", "instructions": NEW, "reason": "posts were too long"},
            ),
            reply_text("Proposed a change for marketing."),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            out = await d.ask("improver", "Improve marketing.")
            assert out.status == "ok", out
            results = [
                tool_results(r) for r in srv.requests if r.body["messages"][-1]["role"] == "user"
            ]
            read = results[1][0]["content"]
            assert "Write posts." in read  # it saw the current instructions
            assert "may only read or change marketing" in results[2][0]["content"]
            # nothing changed yet
            assert cfg.read_text() == original
            pending = (await d.proposals()).proposals
            assert [p["status"] for p in pending] == ["pending"]
            pid = pending[0]["id"]
            assert f"+      {NEW}" in pending[0]["diff"]
            created = d.bus.recent({"proposal_created"})
            assert created and created[-1].data["proposal_id"] == pid

            applied = await d.approve(pid)
            assert isinstance(applied, ProposalDecision) and applied.status == "applied"
            assert NEW in cfg.read_text()
            assert d.config.agents["marketing"].instructions.strip() == NEW
            assert "# " not in NEW and cfg.read_text().count("instructions:") == 3
            reloaded = d.bus.recent({"daemon_reloaded"})[-1].data
            assert reloaded["restarted"] == ["marketing"]

            with pytest.raises(AdminError, match="is applied, not pending"):
                await d.approve(pid)

            reverted = await d.revert(pid)
            assert reverted.status == "reverted"
            assert cfg.read_text() == original
            assert d.config.agents["marketing"].instructions == "Write posts."


async def test_a_file_edited_since_the_proposal_is_never_overwritten(tmp_path: Path) -> None:
    cfg = write_company(
        tmp_path,
        {"ceo": {}, "improver": {"reports_to": "ceo", "can_modify": ["ceo"]}},
    )
    model = PerAgent(
        improver=[
            reply_tool_use(
                "propose_change",
                {"agent": "ceo", "instructions": "Decide faster.", "reason": "slow decisions"},
            ),
            reply_text("ok"),
        ]
    )
    with MessagesAPIServer(responder=model) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            await d.ask("improver", "Improve the CEO.")
            pid = (await d.proposals()).proposals[0]["id"]
            edited = cfg.read_text().replace("Test Co", "Test Company")
            cfg.write_text(edited)
            with pytest.raises(AdminError, match="changed since proposal"):
                await d.approve(pid)
            assert cfg.read_text() == edited
            rejected = await d.reject(pid)
            assert isinstance(rejected, ProposalDecision) and rejected.status == "rejected"


# -- applying without the model: the store on real files ---------------------------------

HAND_WRITTEN = """\
# Test company — kept in git; comments and order matter
schema: companyd/v1
company:
  name: Test Co   # the name
  budget: unlimited
agents:
  ceo:
    title: CEO
    instructions: |-  # the CEO's brief
      Run the company.

  # marketing follows, after a blank line
  marketing:
    title: Marketing
    reports_to: ceo
    instructions: Write posts.  # short on purpose
    # model: later
  improver:
    title: Improver
    reports_to: ceo
    instructions: Improve.
    can_modify: [marketing, ceo]
"""


def _store(cfg_path: Path, state: Path, backend: Backend = SQLITE) -> Proposals:
    store: Proposals

    async def reload() -> None:
        store.reconfigure(await asyncio.to_thread(load_config, cfg_path))

    store = Proposals(
        state,
        load_config(cfg_path),
        bus=EventBus(),
        clock=SystemClock(),
        reload=reload,
        backend=backend,
    )
    return store


@pytest.mark.parametrize("agent", ["ceo", "marketing"])
async def test_apply_keeps_every_comment_and_blank_line_and_revert_restores_the_bytes(
    tmp_path: Path, agent: str, state_backend: Backend
) -> None:
    cfg = tmp_path / "company.yaml"
    cfg.write_text(HAND_WRITTEN, encoding="utf-8")
    store = _store(cfg, tmp_path / "state", state_backend)
    p = await store.propose("improver", agent, "Be brief.\nBe kind.", "clearer")
    await store.approve(p.id)
    await store.close()
    text = cfg.read_text(encoding="utf-8")
    assert store.config.agents[agent].instructions.strip() == "Be brief.\nBe kind."

    def comments(t: str) -> list[str]:
        return [line[line.index("#") :] for line in t.splitlines() if "#" in line]

    assert comments(text) == comments(HAND_WRITTEN)
    # only the instructions' lines changed: blank lines and the rest are where they were
    kept = [line for line in HAND_WRITTEN.splitlines() if "Run the company" not in line]
    kept = [line for line in kept if "Write posts" not in line and "instructions" not in line]
    assert [line for line in text.splitlines() if line in kept] == kept
    # a restart (or the standby that took over) reverts what the first store applied
    again = _store(cfg, tmp_path / "state", state_backend)
    try:
        await again.revert(p.id)
    finally:
        await again.close()
    assert cfg.read_text(encoding="utf-8") == HAND_WRITTEN


async def test_apply_writes_through_a_symlink_and_keeps_owner_and_mode(tmp_path: Path) -> None:
    # /etc/companyd/company.yaml -> the operator's git checkout
    repo = tmp_path / "repo"
    repo.mkdir()
    real = repo / "company.yaml"
    real.write_text(HAND_WRITTEN, encoding="utf-8")
    os.chmod(real, 0o640)
    if os.geteuid() == 0:
        os.chown(real, 1234, 2345)
    owner = (real.stat().st_uid, real.stat().st_gid)
    link = tmp_path / "etc" / "company.yaml"
    link.parent.mkdir()
    link.symlink_to(real)
    store = _store(link, tmp_path / "state")
    p = await store.propose("improver", "marketing", "Post daily.", "cadence")
    await store.approve(p.id)
    assert link.is_symlink() and link.resolve() == real
    assert "Post daily." in real.read_text(encoding="utf-8")
    assert store.config.agents["marketing"].instructions.strip() == "Post daily."
    st = real.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (*owner, 0o640)
    assert sorted(x.name for x in repo.iterdir()) == ["company.yaml"]  # no temp file left
    await store.revert(p.id)
    assert link.is_symlink() and real.read_text(encoding="utf-8") == HAND_WRITTEN
    assert (real.stat().st_uid, real.stat().st_gid) == owner


async def test_revert_after_a_hand_edit_is_refused_saying_so_and_decisions_are_final(
    tmp_path: Path, state_backend: Backend
) -> None:
    cfg = tmp_path / "company.yaml"
    cfg.write_text(HAND_WRITTEN, encoding="utf-8")
    store = _store(cfg, tmp_path / "state", state_backend)
    p = await store.propose("improver", "marketing", "Post daily.", "cadence")
    q = await store.propose("improver", "ceo", "Decide faster.", "slow")
    assert (await store.reject(q.id)).status == "rejected"
    with pytest.raises(ProposalError, match="is rejected, not pending"):
        await store.approve(q.id)
    await store.approve(p.id)
    edited = cfg.read_text(encoding="utf-8").replace("Test Co ", "Test Company ")
    cfg.write_text(edited, encoding="utf-8")
    with pytest.raises(ProposalError) as err:
        await store.revert(p.id)
    msg = str(err.value)
    assert "not reverted" in msg and "edited" in msg and "Reject" not in msg
    assert cfg.read_text(encoding="utf-8") == edited
    assert (await store.get(p.id))[0].status == "applied"
    cfg.write_text(edited.replace("Test Company ", "Test Co "), encoding="utf-8")
    assert (await store.revert(p.id)).status == "reverted"
    assert cfg.read_text(encoding="utf-8") == HAND_WRITTEN
    with pytest.raises(ProposalError, match="is reverted; only applied ones revert"):
        await store.revert(p.id)
    assert cfg.read_text(encoding="utf-8") == HAND_WRITTEN
    assert [(x.id, x.status) for x in await store.list(include_decided=False)] == []
    assert {x.id: x.status for x in await store.list()} == {p.id: "reverted", q.id: "rejected"}
    await store.close()


async def test_an_instructions_file_proposal_is_written_atomically_and_reloaded(
    tmp_path: Path,
) -> None:
    (tmp_path / "marketing.md").write_text("Write posts.\n", encoding="utf-8")
    cfg = write_company(
        tmp_path,
        {
            "ceo": {},
            "marketing": {"reports_to": "ceo", "instructions": None},
            "improver": {"reports_to": "ceo", "can_modify": ["marketing"]},
        },
    )
    cfg.write_text(
        cfg.read_text().replace("instructions: null", "instructions_file: marketing.md"),
        encoding="utf-8",
    )
    before = cfg.read_bytes()
    with MessagesAPIServer(responder=PerAgent()) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            p = await d.proposal_store.propose("improver", "marketing", NEW, "shorter")
            assert p.file == str(tmp_path / "marketing.md")
            applied = await d.approve(p.id)
            assert isinstance(applied, ProposalDecision) and applied.status == "applied"
            assert (tmp_path / "marketing.md").read_text() == NEW + "\n"
            assert cfg.read_bytes() == before
            assert d.config.agents["marketing"].instructions.strip() == NEW
            assert d.bus.recent({"daemon_reloaded"})[-1].data["restarted"] == ["marketing"]
            await d.revert(p.id)
            assert (tmp_path / "marketing.md").read_text() == "Write posts.\n"
            assert d.config.agents["marketing"].instructions.strip() == "Write posts."
            # a rejection keeps who rejected it, through what, and why (the reason was
            # dropped: `proposals --json` had none of the three)
            q = await d.proposal_store.propose("improver", "marketing", NEW, "again")
            said = await d.reject(q.id, "not before the launch", by="root", via="cli")
            assert isinstance(said, ProposalDecision)
            assert (said.decided_by, said.via, said.note) == (
                "root",
                "cli",
                "not before the launch",
            )
            assert said.message == f"rejected {q.id} by root: not before the launch"
            (listed,) = [x for x in (await d.proposals()).proposals if x["id"] == q.id]
            assert (listed["decided_by"], listed["via"], listed["note"]) == (
                "root",
                "cli",
                "not before the launch",
            )
            assert sorted(x.name for x in tmp_path.iterdir()) == [
                "company.yaml",
                "marketing.md",
                "state",
            ]


async def test_concurrent_decisions_one_wins_and_a_timed_out_approve_still_completes(
    tmp_path: Path,
) -> None:
    cfg = write_company(
        tmp_path,
        {
            "ceo": {},
            "marketing": {"reports_to": "ceo", "instructions": "Write posts."},
            "improver": {"reports_to": "ceo", "can_modify": ["marketing"]},
        },
    )
    with MessagesAPIServer(responder=PerAgent()) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            # the CLI approves while a Telegram button rejects, and vice versa
            for first, second in (("approve", "reject"), ("reject", "approve")):
                p = await d.proposal_store.propose("improver", "marketing", NEW, "shorter")
                both = await asyncio.gather(
                    getattr(d, first)(p.id), getattr(d, second)(p.id), return_exceptions=True
                )
                won = [r for r in both if isinstance(r, ProposalDecision)]
                lost = [r for r in both if isinstance(r, AdminError)]
                assert len(won) == len(lost) == 1, both
                status = won[0].status
                assert f"is {status}, not pending" in str(lost[0])
                assert (await d.proposal_store.get(p.id))[0].status == status
                assert (NEW in cfg.read_text()) == (status == "applied")
                if status == "applied":
                    await d.revert(p.id)
            assert d.config.agents["marketing"].instructions.strip() == "Write posts."
            # an approve whose asker gives up (the Telegram button's 30 s) while a reload
            # holds the way still reloads once it can: "applied" means running
            p = await d.proposal_store.propose("improver", "marketing", NEW, "shorter")
            async with d._reload_lock:
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await d.approve(p.id)
            async with asyncio.timeout(20):
                while d.config.agents["marketing"].instructions.strip() != NEW:
                    await asyncio.sleep(0.05)
            assert (await d.proposal_store.get(p.id))[0].status == "applied"


async def test_an_approval_outlasting_the_phone_s_wait_is_said_to_go_on_not_to_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Approve pressed on Telegram (button or /approve) while a reload holds the way: the
    phone stops waiting, the approval does not (it reloads once it can) — so the founder
    reads that it goes on, not "no answer; try again" (the next try finds it decided).
    """
    monkeypatch.setattr("companyd.alerts._ops.ADMIN_TIMEOUT", 1.0)
    cfg = write_company(
        tmp_path,
        {
            "ceo": {},
            "marketing": {"reports_to": "ceo", "instructions": "Write posts."},
            "improver": {"reports_to": "ceo", "can_modify": ["marketing", "ceo"]},
        },
    )
    with MessagesAPIServer(responder=PerAgent()) as srv:
        async with running_company(cfg, tmp_path / "state", srv) as d:
            goes_on = (
                "takes longer than 1 s (a proposal is applied and the company reloaded); "
                "it goes on: /inbox shows whether it still waits"
            )
            p = await d.proposal_store.propose("improver", "marketing", NEW, "shorter")
            async with d._reload_lock:
                done, said = await act(d, {"action": "approve", "arg": p.id})
            assert not done  # the alert keeps its buttons: nothing is claimed done yet
            assert said == f"approving {p.id} {goes_on}", said
            async with asyncio.timeout(20):
                while d.config.agents["marketing"].instructions.strip() != NEW:
                    await asyncio.sleep(0.05)
            assert (await d.proposal_store.get(p.id))[0].status == "applied"

            q = await d.proposal_store.propose("improver", "ceo", "Decide faster.", "slow")
            async with d._reload_lock:
                reply = await command_reply(d, "approve", [q.id], d.config.agents)
            assert reply == f"⏳ approving {q.id} {goes_on}", reply
            async with asyncio.timeout(20):
                while d.config.agents["ceo"].instructions.strip() != "Decide faster.":
                    await asyncio.sleep(0.05)
            assert (await d.proposal_store.get(q.id))[0].status == "applied"


async def test_a_proposal_making_company_yaml_invalid_is_refused_when_made(tmp_path: Path) -> None:
    cfg = tmp_path / "company.yaml"
    cfg.write_text(HAND_WRITTEN, encoding="utf-8")
    store = _store(cfg, tmp_path / "state")
    with pytest.raises(ProposalError, match=r"would make company\.yaml invalid.*secret"):
        await store.propose("improver", "marketing", "Use sk-ant-api03-abcdefghijkl.", "key")
    with pytest.raises(ProposalError, match="no agent named 'cfo'"):
        await store.propose("improver", "cfo", "Count.", "")
    assert cfg.read_text(encoding="utf-8") == HAND_WRITTEN
    assert await store.list() == []


async def test_an_unwritable_company_yaml_refuses_the_approval_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state_backend: Backend
) -> None:
    # Under the systemd unit /etc/companyd is read-only to the daemon (ProtectSystem=strict).
    # Root ignores permissions, so the read-only file system is simulated at the one call
    # that writes the file; everything else is real.
    import errno

    from companyd.desk import _proposals as improver

    cfg = tmp_path / "company.yaml"
    cfg.write_text(HAND_WRITTEN, encoding="utf-8")
    store = _store(cfg, tmp_path / "state", state_backend)
    p = await store.propose("improver", "marketing", "Post daily.", "cadence")

    def read_only(path: Path, text: str) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(improver, "write_atomic", read_only)
    with pytest.raises(ProposalError) as info:
        await store.approve(p.id)
    message = str(info.value)
    assert "cannot write" in message and "Read-only file system" in message
    assert "nothing was changed" in message and "ReadWritePaths=/etc/companyd" in message
    assert "docs/deploy.md" in message
    assert cfg.read_text(encoding="utf-8") == HAND_WRITTEN
    assert (await store.get(p.id))[0].status == "pending"
    await store.close()


async def test_an_instructions_file_replaced_by_a_fifo_is_refused_not_read(tmp_path: Path) -> None:
    """A read that blocks in a thread would hold the daemon's stop forever (asyncio waits for
    its executor's threads): the FIFO is refused at once.
    """
    (tmp_path / "marketing.md").write_text("Write posts.\n", encoding="utf-8")
    cfg = write_company(
        tmp_path,
        {
            "ceo": {},
            "marketing": {"reports_to": "ceo", "instructions": None},
            "improver": {"reports_to": "ceo", "can_modify": ["marketing"]},
        },
    )
    cfg.write_text(
        cfg.read_text().replace("instructions: null", "instructions_file: marketing.md"),
        encoding="utf-8",
    )
    store = _store(cfg, tmp_path / "state")
    (tmp_path / "marketing.md").unlink()
    os.mkfifo(tmp_path / "marketing.md")
    try:
        async with asyncio.timeout(10):
            with pytest.raises(ProposalError, match=r"not a regular file \(a FIFO"):
                await store.propose("improver", "marketing", NEW, "shorter")
    finally:
        # release a reader stuck on the FIFO, if the refusal did not happen
        with contextlib.suppress(OSError):  # ENXIO: no reader left, as it should be
            os.close(os.open(tmp_path / "marketing.md", os.O_WRONLY | os.O_NONBLOCK))


# -- a proposals.sqlite written before the stores shared companyd._sqlite ---------------

#: The schema as the code before companyd._sqlite created it (git show 17215ca:...).
OLD_PROPOSALS = """
CREATE TABLE IF NOT EXISTS proposals (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    proposer TEXT NOT NULL,
    reason TEXT NOT NULL,
    file TEXT NOT NULL,
    diff TEXT NOT NULL,
    old_text TEXT NOT NULL,
    new_text TEXT NOT NULL,
    base_sha TEXT NOT NULL,
    new_sha TEXT NOT NULL,
    status TEXT NOT NULL,
    created REAL NOT NULL,
    decided REAL
);
"""


async def test_a_proposal_store_written_by_the_old_code_opens_unchanged(tmp_path: Path) -> None:
    cfg = write_company(tmp_path, {"ceo": {}})
    state = tmp_path / "state"
    path = state / "proposals.sqlite"
    state.mkdir()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(OLD_PROPOSALS)  # no user_version: 0
    conn.execute(
        "INSERT INTO proposals VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            "prop-1",
            "ceo",
            "improver",
            "why",
            str(cfg),
            "diff",
            "old",
            "new",
            "a",
            "b",
            "pending",
            1.0,
            None,
        ),
    )
    before = conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    conn.close()
    store = _store(cfg, state)
    async with asyncio.timeout(10):
        assert [p.id for p in await store.list()] == ["prop-1"]
        rejected = await store.reject("prop-1", "stale", by="root", via="cli")
        await store.close()
    assert rejected.status == "rejected"
    # version 2 keeps who decided and why: the old rows stay, the three columns are added
    assert (rejected.decided_by, rejected.via, rejected.note) == ("root", "cli", "stale")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    after = dict(conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall())
    assert {name: after[name] for name, _ in before if name != "proposals"} == {
        name: sql for name, sql in before if name != "proposals"
    }
    columns = [r[1] for r in conn.execute("PRAGMA table_info(proposals)")]
    assert columns[-3:] == ["decided_by", "via", "note"] and len(columns) == 16
    conn.close()


# -- several deciders on one store (two daemons on one database, the CLI beside one) -----


async def test_two_stores_deciding_the_same_proposal_at_once_decide_it_once(
    tmp_path: Path, state_backend: Backend
) -> None:
    """Each store has its own thread and connection, as two daemons would: of two
    decisions at once exactly one acts (the file is written at most once) and the other is
    refused with the status the first left. Seen failing before the decision was one
    transaction: two rejections both "won".
    """
    cfg = tmp_path / "company.yaml"
    cfg.write_text(HAND_WRITTEN, encoding="utf-8")
    a = _store(cfg, tmp_path / "state", state_backend)
    b = _store(cfg, tmp_path / "state", state_backend)
    try:
        for first, second in (("reject", "reject"), ("approve", "approve"), ("reject", "approve")):
            p = await a.propose("improver", "marketing", f"Post {first} {second}.", "cadence")
            both = await asyncio.gather(
                getattr(a, first)(p.id), getattr(b, second)(p.id), return_exceptions=True
            )
            won = [r for r in both if isinstance(r, Proposal)]
            lost = [r for r in both if isinstance(r, ProposalError)]
            assert len(won) == len(lost) == 1, both
            assert str(lost[0]) == f"proposal {p.id} is {won[0].status}, not pending"
            assert (await b.get(p.id))[0].status == won[0].status
            applied = f"Post {first} {second}." in cfg.read_text(encoding="utf-8")
            assert applied == (won[0].status == "applied")
            if applied:
                await b.revert(p.id)
        assert cfg.read_text(encoding="utf-8") == HAND_WRITTEN
    finally:
        await a.close()
        await b.close()


async def test_asking_whether_a_proposal_store_exists_creates_nothing(
    tmp_path: Path, state_backend: Backend
) -> None:
    cfg = tmp_path / "company.yaml"
    cfg.write_text(HAND_WRITTEN, encoding="utf-8")
    store = _store(cfg, tmp_path / "state", state_backend)
    try:
        assert not await store.present()
        assert not await store.present()
        assert not (tmp_path / "state").exists()
        await store.propose("improver", "marketing", "Post daily.", "cadence")
        assert await store.present()
    finally:
        await store.close()


async def test_a_file_written_before_a_failed_commit_is_put_back(
    tmp_path: Path, pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database connection dies between the file's change and the commit of the new
    status (a server restart, a network cut): the file is put back, so the proposal is
    still pending and its file still what it was — never applied on disk but pending in the
    store — and approving it again works.
    """
    assert pg_backend.dsn is not None
    dsn = pg_backend.dsn
    cfg = tmp_path / "company.yaml"
    cfg.write_text(HAND_WRITTEN, encoding="utf-8")
    store = _store(cfg, tmp_path / "state", pg_backend)
    real_write = improver.write_atomic
    cuts: list[int] = []

    def write_then_cut(path: Path, text: str) -> None:
        real_write(path, text)
        if cuts:
            return  # only the first approval loses its connection
        with psycopg.connect(dsn, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE state = "
                "'idle in transaction' AND query LIKE 'UPDATE proposals%'"
            ).fetchall()
        cuts.append(len(rows))

    monkeypatch.setattr(improver, "write_atomic", write_then_cut)
    try:
        p = await store.propose("improver", "marketing", "Post daily.", "cadence")
        with pytest.raises(psycopg.OperationalError):
            await store.approve(p.id)
        assert cuts == [1]
        assert cfg.read_text(encoding="utf-8") == HAND_WRITTEN
        assert (await store.get(p.id))[0].status == "pending"
        assert (await store.approve(p.id)).status == "applied"
        assert "Post daily." in cfg.read_text(encoding="utf-8")
    finally:
        await store.close()


@pytest.mark.anyio
async def test_the_pager_reads_the_proposals_decided_without_it(tmp_path: Path) -> None:
    # `companyd reject prop-…` with the daemon stopped: at the next start the proposal's
    # message loses its buttons (ResultRecords.proposals_decided answers the pager)
    from companyd.clock import ManualClock
    from companyd.daemon._deliveries import ResultRecords
    from companyd.runs import Journal

    cfg = tmp_path / "company.yaml"
    cfg.write_text(HAND_WRITTEN, encoding="utf-8")
    store = _store(cfg, tmp_path / "state")
    journal = Journal(tmp_path / "runs.sqlite")
    try:
        rejected = await store.propose("improver", "ceo", "Be brief.", "shorter")
        waiting = await store.propose("improver", "ceo", "Be kind.", "kinder")
        await store.reject(rejected.id, "too soon", by="root", via="cli")
        records = ResultRecords(journal, None, ManualClock(), lambda: 30.0, proposals=store)
        (action,) = await records.proposals_decided([rejected.id, waiting.id, "prop-gone"])
        assert (action.action, action.target, action.via, action.ok) == (
            "reject",
            rejected.id,
            "cli",
            True,
        )
        assert action.message == f"rejected {rejected.id} by root: too soon"
    finally:
        await journal.close()
        await store.close()
