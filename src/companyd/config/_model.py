"""The resolved view: what the rest of companyd reads of a loaded company.yaml.

:func:`resolve` turns a validated :class:`~companyd.config._schema.CompanyFile` into a
:class:`CompanyConfig`: agents and routines with defaults filled in, instruction files in
place, departments as nodes of the supervision tree. It only reads a spec that passed
every check; it never fails.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from companyd._frozen import Frozen
from companyd.config._default_path import DEFAULT_STATE_DIR
from companyd.config._schema import (
    BudgetSpec,
    CatchUpSpec,
    CompanyFile,
    DepartmentSpec,
    LimitsSpec,
    McpServerSpec,
    ModelSpec,
    RestartType,
    RoutineSpec,
    SupervisorSpec,
    ToolsSpec,
    WebhookTriggerSpec,
)
from companyd.errors import ConfigIssue


class AgentConfig(Frozen):
    """An agent with every default applied; what the runtime reads."""

    slug: str
    title: str
    reports_to: str | None
    department: str | None
    instructions: str
    model: ModelSpec
    budget: BudgetSpec | None
    limits: LimitsSpec
    restart: RestartType
    tools: ToolsSpec
    #: tools whose calls wait for the founder (the agent's and the defaults')
    require_approval: frozenset[str] = frozenset()
    #: how long an approval or a question waits for the founder, seconds
    approval_timeout: float = 86_400.0
    #: how many of its ``ask_founder`` questions may wait for the founder at once
    max_open_questions: int = 3
    #: how much of one tool result the model reads; the rest is cut, its size noted
    max_result_chars: int = 100_000
    consult: tuple[str, ...]
    max_consult_depth: int
    colleague_timeout_seconds: float = 300.0
    mcp_servers: Mapping[str, McpServerSpec]
    heartbeat_seconds: float
    can_modify: tuple[str, ...]
    enabled: bool
    #: check the final answer's claims of tool use (``defaults.claim_check``)
    claim_check: bool = True


#: The ``assignee`` of a backup routine: not a valid agent slug, so it names no agent (the
#: routine history's agent column and ``companyd jobs`` show it).
BACKUP_ASSIGNEE = "(backup)"


class BackupConfig(Frozen):
    """A scheduled backup: every ``every`` seconds into ``to`` (absolute), newest ``keep``
    kept.
    """

    every: float
    keep: int
    to: Path


class RoutineConfig(Frozen):
    """A routine with its trigger time zone resolved.

    A backup routine (``backup`` set) runs no agent: its ``assignee`` is
    :data:`BACKUP_ASSIGNEE`, its ``every`` the backup's, its ``description`` says where.
    """

    slug: str
    assignee: str
    description: str
    expected_output: str | None
    cron: str | None
    every: float | None
    timezone: str
    concurrency: Literal["skip_if_active", "queue"]
    catch_up: CatchUpSpec
    precondition: Literal["always", "memory_changed", "inbox_nonempty"]
    reviewer: str | None
    enabled: bool
    #: ``required``: the fire counts as done only once the founder approves its result
    approval: Literal["none", "required"] = "none"
    backup: BackupConfig | None = None
    #: where the result goes (``deliver:``; default ``telegram`` with an expected_output)
    deliver: tuple[str, ...] = ()
    #: the ``done_when`` conditions as plain data (docs/agents.md, "Verification")
    done_when: tuple[Mapping[str, Any], ...] = field(default=(), hash=False)  # keeps it hashable
    #: ``retry`` (one follow-up in the same run) or ``report``
    on_unmet: Literal["retry", "report"] = "retry"
    #: runs a day (in ``timezone``) past which a fire is skipped; None: no limit
    max_runs_per_day: int | None = None
    #: failed runs in a row that pause the routine; None: never paused
    pause_after_failures: int | None = None
    #: ``trigger.webhook``: ``POST /hooks/<slug>`` fires it (docs/triggers.md); None: no hook
    webhook: WebhookTriggerSpec | None = None


class DepartmentConfig(Frozen):
    """A department as a node of the supervision tree."""

    slug: str
    title: str | None
    supervisor: SupervisorSpec
    parent: str | None
    departments: tuple[str, ...]
    agents: tuple[str, ...]


@functools.lru_cache(maxsize=4)
def _sha256(text: str) -> str:
    # once per text: status is built every few seconds (the STATUS= line); hashlib here,
    # not at import: loading company.yaml (validate, the daemon's start) does not need it
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class CompanyConfig(Frozen):
    """A validated company.yaml, resolved.

    Attributes:
        path: the file it was read from (absolute).
        spec: the file as validated, unresolved.
        agents: slug → resolved agent, in file order.
        routines: slug → resolved routine, in file order.
        departments: slug → department, depth-first in file order.
        warnings: non-fatal findings (unknown model ids, …).
        text: the exact file contents (for reload diffs and the improver).
    """

    path: Path
    spec: CompanyFile
    agents: Mapping[str, AgentConfig]
    routines: Mapping[str, RoutineConfig]
    departments: Mapping[str, DepartmentConfig]
    warnings: tuple[ConfigIssue, ...] = ()
    text: str = field(default="", repr=False)

    def text_sha256(self) -> str:
        """The SHA-256 of :attr:`text` (hex): what status says the daemon runs, and what
        ``doctor`` compares the file on disk with.
        """
        return _sha256(self.text)

    @property
    def name(self) -> str:
        """``company.name``: the company's display name."""
        return self.spec.company.name

    @property
    def timezone(self) -> str:
        """``company.timezone``: the IANA zone that days, months and cron schedules are counted
        in.
        """
        return self.spec.company.timezone

    @property
    def base_dir(self) -> Path:
        """The directory that holds company.yaml, symlinks resolved: relative paths in the
        file (``state_dir``, ``memory.path``, ``instructions_file``) resolve against it.
        """
        return Path(os.path.realpath(self.path)).parent

    def state_dir(self, override: str | os.PathLike[str] | None = None) -> Path:
        """State directory: ``override`` (CLI), then ``$STATE_DIRECTORY``, then company.yaml's
        ``state_dir``, then ``state``; the last two relative to :attr:`base_dir`, never to
        the working directory, so one company.yaml always means one state directory.
        """
        if override is not None:
            return Path(override).absolute()
        env = os.environ.get("STATE_DIRECTORY")
        if env:
            return Path(env.split(":")[0]).absolute()
        if self.spec.state_dir:
            return (self.base_dir / self.spec.state_dir).absolute()
        return self.base_dir / DEFAULT_STATE_DIR

    def memory_path(self, state_dir: Path) -> Path:
        """The knowledge-graph file: ``memory.path`` relative to company.yaml, else
        ``<state_dir>/memory.jsonl``.
        """
        if self.spec.memory.path:
            return (self.base_dir / self.spec.memory.path).absolute()
        return state_dir / "memory.jsonl"

    def root_agent(self) -> str:
        """The one agent that reports to nobody."""
        return next(a.slug for a in self.agents.values() if a.reports_to is None)

    def tree_depth(self) -> int:
        """Depth of the org chart (reports_to), the root agent being depth 1."""

        def depth(slug: str) -> int:
            d = 1
            while (boss := self.agents[slug].reports_to) is not None:
                d += 1
                slug = boss
            return d

        return max((depth(s) for s in self.agents), default=0)


def default_deliveries(r: RoutineSpec) -> tuple[str, ...]:
    """A routine's ``deliver:`` list as written, else ``telegram`` when it names an
    ``expected_output`` (a result someone waits for) and nothing otherwise (a heartbeat
    stays quiet).
    """
    if r.deliver is not None:
        return tuple(r.deliver)
    return ("telegram",) if r.expected_output else ()


def resolve(
    spec: CompanyFile,
    path: Path,
    text: str,
    warnings: tuple[ConfigIssue, ...],
    instruction_files: Mapping[str, str],
) -> CompanyConfig:
    """The resolved view of ``spec``, which passed every check; ``instruction_files``
    holds the text of each agent's ``instructions_file``.
    """
    d = spec.defaults
    agents: dict[str, AgentConfig] = {}
    for slug, a in spec.agents.items():
        if a.instructions_file is not None:
            instructions = instruction_files[slug]
        elif a.instructions is not None:
            instructions = a.instructions
        else:
            parts = [
                f"Role: {a.role}" if a.role else "",
                f"Goal: {a.goal}" if a.goal else "",
                a.backstory or "",
            ]
            instructions = "\n".join(p for p in parts if p)
        agents[slug] = AgentConfig(
            slug=slug,
            title=a.title,
            reports_to=a.reports_to,
            department=a.department,
            instructions=instructions,
            model=a.model or d.model,
            budget=a.budget or d.budget,
            limits=a.limits or d.limits,
            restart=a.restart or d.restart,
            tools=a.tools,
            require_approval=frozenset(a.tools.require_approval + d.tools.require_approval),
            approval_timeout=a.tools.approval_timeout or d.tools.approval_timeout,
            max_open_questions=a.tools.max_open_questions or d.tools.max_open_questions,
            max_result_chars=a.tools.max_result_chars or d.tools.max_result_chars,
            consult=a.consult,
            max_consult_depth=a.max_consult_depth,
            colleague_timeout_seconds=a.colleague_timeout_seconds,
            mcp_servers=dict(a.mcp_servers),
            heartbeat_seconds=a.heartbeat_seconds or d.heartbeat_seconds,
            can_modify=a.can_modify,
            enabled=a.enabled,
            claim_check=d.claim_check,
        )
    base_dir = Path(os.path.realpath(path)).parent  # as CompanyConfig.base_dir
    routines = {slug: _routine(slug, r, spec, base_dir) for slug, r in spec.routines.items()}
    departments: dict[str, DepartmentConfig] = {}

    def add(depts: Mapping[str, DepartmentSpec], parent: str | None) -> None:
        for slug, dept in depts.items():
            departments[slug] = DepartmentConfig(
                slug=slug,
                title=dept.title,
                supervisor=dept.supervisor,
                parent=parent,
                departments=tuple(dept.departments),
                agents=tuple(s for s, a in spec.agents.items() if a.department == slug),
            )
            add(dept.departments, slug)

    add(spec.departments, None)
    return CompanyConfig(
        path=path,
        spec=spec,
        agents=agents,
        routines=routines,
        departments=departments,
        warnings=warnings,
        text=text,
    )


def _routine(slug: str, r: RoutineSpec, spec: CompanyFile, base_dir: Path) -> RoutineConfig:
    if r.backup is not None:
        to = (base_dir / os.path.expanduser(r.backup.to)).absolute()
        return RoutineConfig(
            slug=slug,
            assignee=BACKUP_ASSIGNEE,
            description=f"back up the company to {str(to)!r}",
            expected_output=None,
            cron=None,
            every=r.backup.every,
            timezone=spec.company.timezone,
            concurrency=r.concurrency,
            catch_up=r.catch_up,
            precondition="always",
            reviewer=None,
            enabled=r.enabled,
            backup=BackupConfig(every=r.backup.every, keep=r.backup.keep, to=to),
        )
    # the schema's validator guarantees these for a routine without `backup`
    assert r.assignee is not None and r.description is not None and r.trigger is not None
    return RoutineConfig(
        slug=slug,
        assignee=r.assignee,
        description=r.description,
        expected_output=r.expected_output,
        cron=r.trigger.cron,
        every=r.trigger.every,
        timezone=r.trigger.timezone or spec.company.timezone,
        concurrency=r.concurrency,
        catch_up=r.catch_up,
        precondition=r.precondition,
        reviewer=r.reviewer,
        enabled=r.enabled,
        approval=r.approval,
        deliver=default_deliveries(r),
        done_when=tuple(c.as_dict() for c in r.done_when),
        on_unmet=r.on_unmet,
        max_runs_per_day=_routine_limit(r, spec, "max_runs_per_day"),
        pause_after_failures=_routine_limit(r, spec, "pause_after_failures"),
        webhook=r.trigger.webhook,
    )


def _routine_limit(r: RoutineSpec, spec: CompanyFile, key: str) -> int | None:
    """A runaway guard of a routine (``key``): its own, else its assignee's ``routines``,
    else ``defaults.routines``.
    """
    value: int | None = getattr(r, key)
    agent = spec.agents.get(r.assignee or "")
    if value is None and agent is not None:
        value = getattr(agent.routines, key)
    if value is None:
        value = getattr(spec.defaults.routines, key)
    return value
