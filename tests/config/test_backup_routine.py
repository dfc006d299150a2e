"""The backup routine kind: ``backup: {every, keep, to}`` instead of an agent's task."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from companyd.config import BACKUP_ASSIGNEE, load_config, resolved_view

from .configkit import MINIMAL, errors, load


def test_a_backup_routine_resolves_with_its_directory_next_to_the_file(tmp_path: Path) -> None:
    cfg = load(
        MINIMAL + "routines:\n  nightly:\n    backup: {every: 1d, keep: 3, to: backups}\n",
        tmp_path,
    )
    r = cfg.routines["nightly"]
    assert r.backup is not None and r.backup.every == 86400.0 and r.backup.keep == 3
    assert r.backup.to == (tmp_path / "backups").absolute()
    assert r.every == 86400.0 and r.cron is None and r.assignee == BACKUP_ASSIGNEE
    assert r.assignee not in cfg.agents
    shown = resolved_view(cfg)["routines"]["nightly"]
    assert shown["backup"] == {"every": 86400.0, "keep": 3, "to": str(tmp_path / "backups")}
    assert "assignee" not in shown


def test_keep_defaults_to_14_and_must_be_positive() -> None:
    cfg = load(MINIMAL + "routines:\n  b:\n    backup: {every: 12h, to: /var/backups/x}\n")
    backup = cfg.routines["b"].backup
    assert backup is not None and backup.keep == 14
    lines = errors(MINIMAL + "routines:\n  b:\n    backup: {every: 1d, keep: 0, to: x}\n")
    assert any("routines.b.backup.keep" in line for line in lines), lines


def test_a_backup_routine_takes_no_agent_task() -> None:
    lines = errors(
        MINIMAL
        + "routines:\n  b:\n    backup: {every: 1d, to: x}\n    assignee: cfo\n"
        + "    description: Back up.\n"
    )
    assert len(lines) == 1, lines
    assert "routines.b: a backup routine runs no agent" in lines[0]
    assert "remove 'assignee', 'description'" in lines[0]


def test_an_ordinary_routine_still_needs_its_assignee_description_and_trigger() -> None:
    lines = errors(MINIMAL + "routines:\n  r:\n    description: Count.\n")
    assert len(lines) == 1, lines
    assert "required key(s) 'assignee', 'trigger' missing" in lines[0]
    assert "or 'backup: {every, keep, to}'" in lines[0]


def test_show_config_prints_every_section_with_every_effective_default(tmp_path: Path) -> None:
    """Issue 28: `show-config` omitted deliver, approval, defaults, dashboard, retention and
    state. Every section of the schema is there now, and a routine shows its resolved
    deliver (telegram by default with an expected_output) and approval.
    """
    from companyd.config import SECTIONS, AgentConfig, CompanyFile
    from companyd.config._schema import RoutineSpec

    path = tmp_path / "company.yaml"
    path.write_text(
        "schema: companyd/v1\n"
        "company: {name: Acme, timezone: UTC, budget: {daily_usd: 5}}\n"
        "agents:\n  ceo: {title: CEO, instructions: lead}\n"
        "routines:\n"
        "  post:\n    assignee: ceo\n    description: Post.\n    expected_output: A post.\n"
        "    trigger: {cron: '0 9 * * *'}\n",
        encoding="utf-8",
    )
    view = resolved_view(load_config(path))
    sections = {"schema" if k == "schema_" else k for k in CompanyFile.model_fields}
    assert sections <= set(view), sections - set(view)
    assert list(view) == list(SECTIONS)
    every_agent_field = {f.name for f in dataclasses.fields(AgentConfig)} - {"slug"}
    assert every_agent_field <= set(view["agents"]["ceo"]), every_agent_field - set(
        view["agents"]["ceo"]
    )
    post = view["routines"]["post"]
    assert set(RoutineSpec.model_fields) - {"backup"} <= set(post)
    assert post["deliver"] == ["telegram"] and post["approval"] == "none"
    assert view["retention"]["runs_days"] == 90 and view["state"]["backend"] == "sqlite"
    assert view["dashboard"]["listen"] == "127.0.0.1:8470"
    assert view["defaults"]["limits"]["max_steps"] == 20
