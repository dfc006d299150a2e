"""The improver: proposals to change other agents, applied only with the operator's approval.

An agent whose company.yaml entry has ``can_modify: [...]`` gets two tools
(:mod:`companyd.agents._improver`):

* ``read_agent(agent)`` — that agent's instructions, model, limits and recent runs;
* ``propose_change(agent, instructions, reason)`` — a proposal to replace its instructions.

This module is the desk's side: the proposal store the tools write to and the founder
decides on.

A proposal is a unified diff of the file that holds the instructions (company.yaml for
inline ``instructions``, or the ``instructions_file``), computed against the file as it is
now and validated as a whole company.yaml before it is stored. Nothing changes until the
operator approves it (``companyd approve ID``, or the Telegram button); then the file is
rewritten atomically and the daemon reloads. An applied proposal can be reverted
(``companyd revert ID``) as long as the file still holds what the proposal wrote. A file
edited by hand since the proposal was made is never overwritten: the proposal is refused
as stale.

Proposals live in ``proposals.sqlite`` in the state directory (a
:class:`companyd._sqlite.Database`: one worker thread, ``PRAGMA user_version`` migrations,
``synchronous=FULL`` as SQLite's default was before the stores shared one owner), or in the
``proposals`` tables of the company's PostgreSQL schema (``state: backend: postgres``,
docs/storage.md).

A decision is taken once: approving, rejecting or reverting checks the proposal's status,
writes the file and records the new status in one ``BEGIN IMMEDIATE`` transaction (the
file's write lock on SQLite, the store's advisory lock on PostgreSQL), so of two deciders
at once — two daemons on one database, the CLI beside a daemon — exactly one acts and the
other is refused with the status the first left.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml

from companyd import _fs as fs
from companyd._frozen import Frozen
from companyd._fs import read_regular_file
from companyd._sqlite import Migration, transaction
from companyd.admin import ProposalRow
from companyd.clock import Clock
from companyd.config import CompanyConfig, load_config_text
from companyd.errors import CompanydError, ConfigError
from companyd.events import EventBus, ProposalApplied, ProposalCreated
from companyd.runs import new_id
from companyd.storage import (
    SQLITE,
    Backend,
    Connection,
    Dialects,
    open_database,
    sqlite_migrations,
    store_present,
)

if TYPE_CHECKING:  # types only: they import PostgreSQL's driver (issue 31)
    from companyd.storage import StoreDatabase

__all__ = [
    "MIGRATIONS",
    "PROPOSAL_STORE_STEPS",
    "STEPS",
    "Proposal",
    "ProposalError",
    "Proposals",
    "replace_instructions",
]


class ProposalError(CompanydError):
    """A proposal cannot be made, applied, rejected or reverted as asked."""


class Proposal(Frozen):
    """A stored proposal to replace one agent's instructions.

    Attributes:
        id: the proposal's id.
        agent: the agent whose instructions it replaces.
        proposer: who proposed it.
        reason: the proposer's reason, shown to the operator.
        file: the file it changes (the agent's ``instructions_file`` or company.yaml).
        diff: the unified diff of that file.
        base_sha: SHA-256 of the file it was made against; approving refuses a file changed since.
        new_sha: SHA-256 of the file once applied.
        status: ``pending`` | ``applied`` | ``rejected`` | ``reverted``.
        created: wall-clock time it was made.
        decided: wall-clock time of its last decision, None while pending.
    """

    id: str
    agent: str
    proposer: str
    reason: str
    file: str
    diff: str
    base_sha: str
    new_sha: str
    status: str  # pending | applied | rejected | reverted
    created: float
    decided: float | None
    #: who made the last decision (a login, a Telegram name), through what (``cli``,
    #: ``telegram``, ``dashboard``), and the words with it (a rejection's reason)
    decided_by: str = ""
    via: str = ""
    note: str = ""

    def to_dict(self) -> ProposalRow:
        """The proposal as a JSON-serialisable dict (without the two hashes)."""
        return {
            "id": self.id,
            "agent": self.agent,
            "proposer": self.proposer,
            "reason": self.reason,
            "file": self.file,
            "diff": self.diff,
            "status": self.status,
            "created": self.created,
            "decided": self.decided,
            "decided_by": self.decided_by,
            "via": self.via,
            "note": self.note,
        }


_SCHEMA = """
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

# The same table on PostgreSQL: times DOUBLE PRECISION (PostgreSQL's REAL is 4 bytes).
_PG_SCHEMA = """
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
    created DOUBLE PRECISION NOT NULL,
    decided DOUBLE PRECISION
);
"""

#: Version 2: who made the last decision, through what, and the founder's words with it (a
#: rejection's reason), as the founder's desk keeps them for its items.
_DECIDERS = """
ALTER TABLE proposals ADD COLUMN decided_by TEXT NOT NULL DEFAULT '';
ALTER TABLE proposals ADD COLUMN via TEXT NOT NULL DEFAULT '';
ALTER TABLE proposals ADD COLUMN note TEXT NOT NULL DEFAULT '';
"""

#: The store's schema on both backends, one entry per version (companyd.storage).
STEPS: tuple[Dialects | str, ...] = (Dialects(sqlite=_SCHEMA, postgres=_PG_SCHEMA), _DECIDERS)


#: This store's file in the state directory → the schema steps this code knows (what
#: ``companyd run`` checks before any store opens: companyd.ops._upgrade, docs/upgrade.md).
PROPOSAL_STORE_STEPS: dict[str, int] = {"proposals.sqlite": len(STEPS)}

#: The SQLite text of :data:`STEPS`, one entry per ``PRAGMA user_version`` (companyd._sqlite).
MIGRATIONS: tuple[Migration, ...] = sqlite_migrations(STEPS)


def _read_text(path: Path) -> str:
    """``path`` as text; never a plain read: a FIFO put there after the config loaded would
    block the reading thread, and with it the daemon's stop, forever.
    """
    return read_regular_file(path, 10 * 1024 * 1024).decode("utf-8")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Proposals:
    """The proposal store and its operations.

    Args:
        state_dir: where ``proposals.sqlite`` lives.
        config: the current company (updated by :meth:`reconfigure` after reloads).
        bus: for ``proposal_created`` / ``proposal_applied`` events.
        clock: time source.
        reload: called after a proposal is applied or reverted (the daemon's reload).
        backend: where the proposals live: ``proposals.sqlite`` in ``state_dir`` (the
            default) or the ``proposals`` tables of the company's PostgreSQL schema.
    """

    def __init__(
        self,
        state_dir: Path,
        config: CompanyConfig,
        *,
        bus: EventBus,
        clock: Clock,
        reload: Callable[[], Awaitable[Any]] | None = None,
        backend: Backend = SQLITE,
    ) -> None:
        self.path = state_dir / "proposals.sqlite"
        self.config = config
        self.bus = bus
        self.clock = clock
        self._reload = reload
        self._lock = asyncio.Lock()
        self._backend = backend
        # Opened by the first query (a listing must not create the file before it is asked
        # for); synchronous=FULL: what these connections had before (SQLite's default).
        self._db = self._database(readonly=False)

    def _database(self, *, readonly: bool) -> StoreDatabase:
        return open_database(
            self._backend,
            path=self.path,
            store="proposals",
            migrations=STEPS,
            what="proposal store",
            synchronous="FULL",
            readonly=readonly,
            thread_name="proposals",
        )

    async def present(self) -> bool:
        """Whether any proposal store exists yet: its file (SQLite) or its tables
        (PostgreSQL). A reader asks first, so that reading never creates the store.
        """
        return await store_present(self._backend, self.path, lambda: self._database(readonly=True))

    async def close(self) -> None:
        """Close the database and stop its thread."""
        await self._db.close()

    def reconfigure(self, config: CompanyConfig) -> None:
        """Use ``config`` (a reloaded company.yaml) for the proposals made from now on."""
        self.config = config

    async def _q(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return await self._db.run(lambda db: db.execute(sql, args).fetchall())

    # -- creating -------------------------------------------------------------------------

    async def propose(self, proposer: str, agent: str, instructions: str, reason: str) -> Proposal:
        """Store a proposal to replace ``agent``'s instructions (validated, not applied)."""
        cfg = self.config
        if agent not in cfg.agents:
            raise ProposalError(f"no agent named {agent!r}; agents: {', '.join(cfg.agents)}")
        spec = cfg.spec.agents[agent]
        target = (
            (cfg.base_dir / spec.instructions_file).absolute()
            if spec.instructions_file
            else cfg.path
        )
        try:
            old = await asyncio.to_thread(_read_text, target)
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or str(exc)
            raise ProposalError(
                f"cannot read {str(target)!r}: {why}; fix the file, then propose again"
            ) from None
        if spec.instructions_file:
            new = instructions.rstrip("\n") + "\n"
        else:
            new = replace_instructions(old, agent, instructions)
        if old == new:
            raise ProposalError("the proposed instructions are the same as the current ones")
        company_text = new if target == cfg.path else cfg.text
        try:
            checked = load_config_text(company_text, file=cfg.path.name, base_dir=cfg.base_dir)
        except ConfigError as exc:
            raise ProposalError(f"the change would make company.yaml invalid: {exc}") from None
        if (
            target == cfg.path
            and checked.agents[agent].instructions.strip() != instructions.strip()
        ):
            raise ProposalError(
                "the instructions could not be written into company.yaml faithfully (leading "
                "spaces on the first line?); rephrase them"
            )
        import difflib  # here: only a proposal needs it (issue 31: not at the daemon's start)

        diff = "".join(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                fromfile=f"a/{target.name}",
                tofile=f"b/{target.name}",
            )
        )
        p = Proposal(
            id=new_id("prop"),
            agent=agent,
            proposer=proposer,
            reason=reason.strip() or "(no reason given)",
            file=str(target),
            diff=diff,
            base_sha=_sha(old),
            new_sha=_sha(new),
            status="pending",
            created=self.clock.time(),
            decided=None,
        )
        await self._q(
            "INSERT INTO proposals (id, agent, proposer, reason, file, diff, old_text, "
            "new_text, base_sha, new_sha, status, created, decided) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                p.id,
                p.agent,
                p.proposer,
                p.reason,
                p.file,
                p.diff,
                old,
                new,
                p.base_sha,
                p.new_sha,
                p.status,
                p.created,
                None,
            ),
        )
        self.bus.publish(
            ProposalCreated(
                source="improver",
                proposal_id=p.id,
                agent=agent,
                proposer=proposer,
                reason=p.reason,
                diff=diff[:1500],
            )
        )
        return p

    # -- deciding -------------------------------------------------------------------------

    async def list(self, include_decided: bool = True) -> list[Proposal]:
        """The latest 100 proposals, newest first; only the pending ones with
        ``include_decided=False``.
        """
        sql = f"SELECT {_COLUMNS} FROM proposals"
        if not include_decided:
            sql += " WHERE status = 'pending'"
        sql += " ORDER BY created DESC LIMIT 100"
        return [_row(r) for r in await self._q(sql)]

    async def get(self, proposal_id: str) -> tuple[Proposal, str, str]:
        """Proposal ``proposal_id`` with the file's text before and after it.

        Raises:
            ProposalError: there is no such proposal (the message lists the pending ones).
        """
        rows = await self._q(
            f"SELECT {_COLUMNS}, old_text, new_text FROM proposals WHERE id = ?", (proposal_id,)
        )
        if not rows:
            known = [p.id for p in await self.list(include_decided=False)]
            raise ProposalError(
                f"no proposal {proposal_id!r}; pending: {', '.join(known) or '(none)'}"
            )
        r = rows[0]
        return _row(r[:-2]), r[-2], r[-1]

    async def approve(self, proposal_id: str, *, by: str = "", via: str = "") -> Proposal:
        """Apply a pending proposal and reload (``by`` whom, ``via`` what: kept with it).

        Once begun it runs to the end even if the caller is cancelled (a control deadline,
        the Telegram button's timeout): a file written but not marked applied, or applied
        but not reloaded, would be a half-made decision.
        """
        return await asyncio.shield(self._approve(proposal_id, Decider(by, via)))

    async def _approve(self, proposal_id: str, decider: Decider) -> Proposal:
        async with self._lock:
            p, old, new = await self.get(proposal_id)
            if p.status != "pending":
                raise ProposalError(f"proposal {p.id} is {p.status}, not pending")
            swap = _Swap(
                path=Path(p.file),
                expect_sha=p.base_sha,
                text=new,
                undo=old,
                stale=f"{p.file} changed since proposal {p.id} was made; it was not applied. "
                "Reject it and ask for a new proposal against the current file",
            )
            await self._decide(p.id, "pending", "applied", decider, swap)
        self.bus.publish(
            ProposalApplied(
                source="improver",
                proposal_id=p.id,
                agent=p.agent,
            )
        )
        if self._reload is not None:
            await self._reload()
        return (await self.get(p.id))[0]

    async def reject(
        self, proposal_id: str, reason: str = "", *, by: str = "", via: str = ""
    ) -> Proposal:
        """Mark a pending proposal rejected (nothing is written) and return it as stored now,
        with ``reason``, ``by`` whom and ``via`` what.

        Raises:
            ProposalError: there is no such proposal, or it is not pending.
        """
        async with self._lock:
            p, _, _ = await self.get(proposal_id)
            if p.status != "pending":
                raise ProposalError(f"proposal {p.id} is {p.status}, not pending")
            await self._decide(p.id, "pending", "rejected", Decider(by, via, reason.strip()))
        return (await self.get(p.id))[0]

    async def revert(self, proposal_id: str, *, by: str = "", via: str = "") -> Proposal:
        """Undo an applied proposal and reload (to the end, like :meth:`approve`)."""
        return await asyncio.shield(self._revert(proposal_id, Decider(by, via)))

    async def _revert(self, proposal_id: str, decider: Decider) -> Proposal:
        async with self._lock:
            p, old, new = await self.get(proposal_id)
            if p.status != "applied":
                raise ProposalError(f"proposal {p.id} is {p.status}; only applied ones revert")
            swap = _Swap(
                path=Path(p.file),
                expect_sha=p.new_sha,
                text=old,
                undo=new,
                stale=(
                    f"{p.file} was edited since proposal {p.id} was applied; it was not "
                    "reverted (that would undo the edit). Undo the instructions by hand, or "
                    "restore the file as the proposal left it and revert again"
                ),
            )
            await self._decide(p.id, "applied", "reverted", decider, swap)
        if self._reload is not None:
            await self._reload()
        return (await self.get(p.id))[0]

    async def _decide(
        self,
        proposal_id: str,
        expect: str,
        status: str,
        decider: Decider,
        swap: _Swap | None = None,
    ) -> None:
        """Move ``proposal_id`` from ``expect`` to ``status`` and make ``swap`` (the file's
        change) in one ``BEGIN IMMEDIATE`` transaction on the store's thread.

        Raises:
            ProposalError: the proposal is no longer ``expect`` (decided meanwhile, here or
                by another process on the same store), or the file cannot be changed;
                nothing is changed then.
        """
        now = self.clock.time()

        def decide(db: Connection) -> None:
            swapped = False
            try:
                with transaction(db):
                    row = db.execute(
                        "SELECT status FROM proposals WHERE id = ?", (proposal_id,)
                    ).fetchone()
                    if row is None or row[0] != expect:
                        raise ProposalError(
                            f"proposal {proposal_id} is {row[0] if row else 'gone'}, not {expect}"
                            if expect == "pending"
                            else f"proposal {proposal_id} is {row[0] if row else 'gone'}; only "
                            f"{expect} ones revert"
                        )
                    db.execute(
                        "UPDATE proposals SET status = ?, decided = ?, decided_by = ?, via = ?, "
                        "note = ? WHERE id = ?",
                        (status, now, decider.by, decider.via, decider.note, proposal_id),
                    )
                    if swap is not None:
                        swap.make()
                        swapped = True
            except BaseException:
                # rolled back (the commit's failure too): the file follows the status
                if swapped and swap is not None:
                    # the status did not change: put the file back as the status says it is
                    with contextlib.suppress(OSError, ProposalError, UnicodeDecodeError):
                        swap.undo_made()
                raise

        await self._db.run(decide)


class _Swap(Frozen):
    """A proposal's change of its file: ``path`` from the text whose SHA-256 is
    ``expect_sha`` to ``text`` (``undo``: the text it had), refused as ``stale`` when the
    file holds anything else.
    """

    path: Path
    expect_sha: str
    text: str
    undo: str
    stale: str

    def make(self) -> None:
        """Write ``text`` over the file, which must still be what the proposal expects."""
        current = _read_text(self.path)
        if _sha(current) != self.expect_sha:
            raise ProposalError(self.stale)
        try:
            write_atomic(self.path, self.text)
        except OSError as exc:
            # Under the shipped systemd unit /etc/companyd is read-only to the daemon
            # (ProtectSystem=strict): say so, and how to go on, not "internal error".
            raise ProposalError(
                f"cannot write {self.path}: {exc.strerror or exc}; nothing was changed. If "
                "the daemon runs under the systemd unit, its configuration directory is "
                "read-only to it: apply the change by hand (the diff is in `companyd "
                "proposals --json`) and reject the proposal, or let approvals write "
                "there (a ReadWritePaths=/etc/companyd drop-in and a daemon user that "
                "owns the directory: docs/deploy.md, 'Improver proposals')"
            ) from None

    def undo_made(self) -> None:
        """Put back the text :meth:`make` replaced, if the file still holds what it wrote."""
        if _read_text(self.path) == self.text:
            write_atomic(self.path, self.undo)


class Decider(NamedTuple):
    """Who decides a proposal (a login, a Telegram name), through what (``cli``,
    ``telegram``, ``dashboard``), and the words with it (a rejection's reason).
    """

    by: str = ""
    via: str = ""
    note: str = ""


#: A proposal's columns as :func:`_row` reads them.
_COLUMNS = (
    "id, agent, proposer, reason, file, diff, base_sha, new_sha, status, created, decided, "
    "decided_by, via, note"
)


def _row(r: tuple[Any, ...]) -> Proposal:
    return Proposal(
        id=r[0],
        agent=r[1],
        proposer=r[2],
        reason=r[3],
        file=r[4],
        diff=r[5],
        base_sha=r[6],
        new_sha=r[7],
        status=r[8],
        created=r[9],
        decided=r[10],
        decided_by=r[11] or "",
        via=r[12] or "",
        note=r[13] or "",
    )


def write_atomic(path: Path, text: str) -> None:
    """Replace company.yaml (``path``) with ``text`` atomically, keeping its symlink, mode
    and owner (:func:`companyd._fs.write_atomic` with ``like_existing``).
    """
    fs.write_atomic(path, text.encode("utf-8"), like_existing=True)


def replace_instructions(text: str, agent: str, instructions: str) -> str:
    """company.yaml ``text`` with ``agents.<agent>.instructions`` replaced by a literal block
    holding ``instructions``; everything else (comments, order, spacing) is kept.

    Raises:
        ProposalError: if the agent or a place for its instructions cannot be found.
    """
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    agents = _child(root, "agents")
    entry = _child(agents, agent) if agents is not None else None
    if not isinstance(entry, yaml.MappingNode):
        raise ProposalError(f"agents.{agent} not found in company.yaml")
    body = instructions.strip("\n").splitlines() or [""]
    for knode, vnode in entry.value:
        if isinstance(knode, yaml.ScalarNode) and knode.value == "instructions":
            indent = " " * (knode.start_mark.column + 2)
            lines = "".join(f"{indent}{line}".rstrip() + "\n" for line in body)
            start, end = vnode.start_mark.index, vnode.end_mark.index
            rest = text[end:]
            if vnode.style in (">", "|"):
                # a block scalar's end mark sits at the start of the next line, after its
                # trailing blank lines; its header line may end with a comment: keep both
                header = text[start:end].partition("\n")[0]
                comment = header[len(header.partition("#")[0].rstrip()) :] if "#" in header else ""
                old = text[start:end]
                blank = "\n" * max(old[len(old.rstrip()) :].count("\n") - 1, 0)
                return text[:start] + "|" + comment + "\n" + lines + blank + rest
            # a plain or quoted scalar ends before its line break, and a comment after it
            # stays on the `instructions: |` line
            line, _, after = rest.partition("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                return text[:start] + "|" + line.rstrip() + "\n" + lines + after
            return text[:start] + "|\n" + lines + rest.removeprefix("\n")
    # no inline instructions yet: add them after the entry's first key line
    first_key = entry.value[0][0]
    line_end = text.index("\n", first_key.start_mark.index) + 1
    indent = " " * first_key.start_mark.column
    block = f"{indent}instructions: |\n" + "".join(
        f"{indent}  {line}".rstrip() + "\n" for line in body
    )
    return text[:line_end] + block + text[line_end:]


def _child(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            found: yaml.Node = v
            return found
    return None
