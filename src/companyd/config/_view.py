"""The resolved company.yaml as plain data: what ``show-config`` prints and the dashboard's
config view shows — every section, every effective default, secrets only by name.
"""

from __future__ import annotations

from typing import Any

from companyd.config._model import CompanyConfig
from companyd.config._secrets import secret_references

__all__ = ["SECTIONS", "resolved_view"]

#: The top-level keys of :func:`resolved_view`, in order: every section of the file
#: (``schema`` and ``state_dir`` included), plus ``file`` and ``secrets``.
SECTIONS = (
    "schema",
    "file",
    "company",
    "state_dir",
    "state",
    "memory",
    "defaults",
    "supervisor",
    "departments",
    "agents",
    "routines",
    "alerts",
    "anthropic",
    "pricing",
    "spend",
    "metrics",
    "dashboard",
    "retention",
    "telemetry",
    "secrets",
)


def resolved_view(cfg: CompanyConfig) -> dict[str, Any]:
    """The resolved config as plain JSON-able data: ``show-config`` and the dashboard's
    config view (``config_view``'s ``document``).

    Every section of the file appears (:data:`SECTIONS`), each with every effective
    default: agents and routines resolved (a routine's ``deliver`` as it will run — e.g.
    ``[telegram]`` by default with an ``expected_output`` — and its ``approval``), the
    other sections with the schema's defaults filled in; secrets appear only as
    references (``secrets``: which variable or credential, and whether it is set).
    """

    def dump(model: Any) -> Any:
        return None if model is None else model.model_dump(mode="json", by_alias=False)

    spec = cfg.spec
    state = cfg.state_dir()
    agents: dict[str, Any] = {}
    for slug, a in cfg.agents.items():
        agents[slug] = {
            "title": a.title,
            "reports_to": a.reports_to,
            "department": a.department,
            "enabled": a.enabled,
            "restart": a.restart,
            "model": dump(a.model),
            "budget": dump(a.budget),
            "limits": dump(a.limits),
            "heartbeat_seconds": a.heartbeat_seconds,
            "tools": dump(a.tools),
            # the effective ones: the agent's and the defaults' together
            "require_approval": sorted(a.require_approval),
            "approval_timeout": a.approval_timeout,
            "max_open_questions": a.max_open_questions,
            "max_result_chars": a.max_result_chars,
            "consult": list(a.consult),
            "max_consult_depth": a.max_consult_depth,
            "colleague_timeout_seconds": a.colleague_timeout_seconds,
            "can_modify": list(a.can_modify),
            "claim_check": a.claim_check,
            "mcp_servers": {name: dump(m) for name, m in a.mcp_servers.items()},
            "instructions": a.instructions,
        }
    routines: dict[str, Any] = {}
    for slug, r in cfg.routines.items():
        trigger: dict[str, Any] = (
            {"cron": r.cron, "timezone": r.timezone} if r.cron is not None else {"every": r.every}
        )
        if r.webhook is not None:
            if r.cron is None and r.every is None:
                trigger = {}
            trigger["webhook"] = dump(r.webhook)
        if r.backup is not None:
            routines[slug] = {
                "backup": {"every": r.backup.every, "keep": r.backup.keep, "to": str(r.backup.to)},
                "concurrency": r.concurrency,
                "catch_up": dump(r.catch_up),
                "enabled": r.enabled,
            }
            continue
        routines[slug] = {
            "assignee": r.assignee,
            "description": r.description,
            "expected_output": r.expected_output,
            "trigger": trigger,
            "concurrency": r.concurrency,
            "catch_up": dump(r.catch_up),
            "precondition": r.precondition,
            "reviewer": r.reviewer,
            "approval": r.approval,
            "deliver": list(r.deliver),
            "done_when": [dict(c) for c in r.done_when],
            "on_unmet": r.on_unmet,
            "max_runs_per_day": r.max_runs_per_day,
            "pause_after_failures": r.pause_after_failures,
            "enabled": r.enabled,
        }
    departments = {
        slug: {
            "title": d.title,
            "parent": d.parent,
            "supervisor": dump(d.supervisor),
            "departments": list(d.departments),
            "agents": list(d.agents),
        }
        for slug, d in cfg.departments.items()
    }
    secrets = [{"key": r.path, r.kind: r.name, "set": r.is_set} for r in secret_references(cfg)]
    return {
        "schema": spec.schema_,
        "file": str(cfg.path),
        "company": {
            "name": spec.company.name,
            "timezone": spec.company.timezone,
            "context": spec.company.context,
            "budget": dump(spec.company.budget),
        },
        "state_dir": str(state),
        "state": spec.state.model_dump(mode="json", by_alias=True),
        "memory": {**dump(spec.memory), "path": str(cfg.memory_path(state))},
        "defaults": dump(spec.defaults),
        "supervisor": dump(spec.supervisor),
        "departments": departments,
        "agents": agents,
        "routines": routines,
        "alerts": dump(spec.alerts),
        "anthropic": dump(spec.anthropic),
        "pricing": {m: dump(p) for m, p in spec.pricing.items()},
        "spend": dump(spec.spend),
        "metrics": dump(spec.metrics),
        "dashboard": dump(spec.dashboard),
        "retention": dump(spec.retention),
        "telemetry": dump(spec.telemetry),
        "secrets": secrets,
    }
