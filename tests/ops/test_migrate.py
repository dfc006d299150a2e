"""``companyd migrate`` and the company.yaml format version (docs/upgrade.md).

* deprecated spellings are rewritten to their canonical keys as text edits: comments,
  quotes and layout stay; ``--check`` changes nothing and exits 1; ``--write`` keeps a
  ``.bak``; the result loads without a deprecation warning;
* the format-step framework: a file of an older ``schema:`` is brought to the current one
  through each step (a step list given by the test, since version 1 is the only format);
* a company.yaml in a newer format is refused by ``run`` with 78 and the way back;
* ``doctor`` reports a config or a state that needs migrating.
"""

from __future__ import annotations

import contextlib
import io
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from companyd.cli import main
from companyd.config import load_config
from companyd.config._migrate import STEPS, MigrationRefused, plan_migration, write_migration
from companyd.config._schema import SCHEMA, SCHEMA_VERSION
from companyd.errors import EX_CONFIG
from companyd.ops._doctor import check_upgrade
from companyd.runs._schema import MIGRATIONS as JOURNAL_STEPS

OLD = """\
# my company — kept in git
schema: companyd/v1
company:
  name: Acme   # the name
  timezone: UTC
  budget: {daily_usd: 5}
agents:
  ceo: {title: CEO, instructions: lead}
  cfo:
    title: CFO
    "reportsTo": ceo     # keep this comment
    llm: claude-sonnet-4-5-20250929
    instructions: money
routines:
  daily:
    agent: cfo           # who runs it
    description: Count the money.
    trigger: {cronExpression: "0 9 * * *", tz: UTC}
"""

NEW = """\
# my company — kept in git
schema: companyd/v1
company:
  name: Acme   # the name
  timezone: UTC
  budget: {daily_usd: 5}
agents:
  ceo: {title: CEO, instructions: lead}
  cfo:
    title: CFO
    "reports_to": ceo     # keep this comment
    model: claude-sonnet-4-5-20250929
    instructions: money
routines:
  daily:
    assignee: cfo           # who runs it
    description: Count the money.
    trigger: {cron: "0 9 * * *", timezone: UTC}
"""


def test_the_step_list_reaches_the_current_format() -> None:
    assert len(STEPS) + 1 == SCHEMA_VERSION
    assert f"companyd/v{SCHEMA_VERSION}" == SCHEMA


def test_check_says_what_would_change_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "company.yaml"
    path.write_text(OLD, encoding="utf-8")
    assert main(["migrate", "--check", "--config", str(path)]) == 1
    out = capsys.readouterr().out
    assert "line 11: agents.cfo.reportsTo: 'reportsTo' → 'reports_to'" in out
    assert "line 18: routines.daily.trigger.cronExpression" in out
    assert path.read_text(encoding="utf-8") == OLD
    assert not path.with_name("company.yaml.bak").exists()


def test_write_rewrites_spellings_keeps_comments_and_a_bak(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "company.yaml"
    path.write_text(OLD, encoding="utf-8")
    before = load_config(path)
    assert any("deprecated spelling" in str(w) for w in before.warnings)
    assert main(["migrate", "--write", "--config", str(path)]) == 0
    assert "the original is kept as" in capsys.readouterr().out
    assert path.read_text(encoding="utf-8") == NEW
    assert path.with_name("company.yaml.bak").read_text(encoding="utf-8") == OLD
    after = load_config(path)
    assert not any("deprecated spelling" in str(w) for w in after.warnings)
    assert after.agents["cfo"].reports_to == "ceo"
    assert after.spec == before.spec  # the same company, only spelled canonically
    # now current: --check is 0 and --write changes nothing
    assert main(["migrate", "--config", str(path)]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_write_refuses_a_result_that_would_not_load(tmp_path: Path) -> None:
    path = tmp_path / "company.yaml"
    broken = OLD.replace("instructions: money", "instructions: money\n    colour: blue")
    path.write_text(broken, encoding="utf-8")
    with pytest.raises(MigrationRefused, match="nothing was written"):
        write_migration(plan_migration(path))
    assert path.read_text(encoding="utf-8") == broken
    assert not path.with_name("company.yaml.bak").exists()
    # --check says so before the founder runs --write, and still exits 1 (needed)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["migrate", "--check", "--config", str(path)])
    assert rc == 1, err.getvalue()
    assert "but the file has other problems, which --write would refuse over" in out.getvalue()
    assert "colour" in out.getvalue() and "would migrate" in out.getvalue()


def _v1_to_v2(text: str) -> str:
    """A format step as the next one would be written: a renamed key."""
    return text.replace("\nstate_dir:", "\nstate_directory:")


@pytest.mark.parametrize("schema_line", ["schema: companyd/v1\n", "schema: 'companyd/v1'\n", ""])
def test_the_framework_applies_each_format_step_and_sets_the_version(
    tmp_path: Path, schema_line: str
) -> None:
    path = tmp_path / "company.yaml"
    body = "# top\ncompany: {name: A}\nstate_dir: /srv/a   # here\nagents: {}\n"
    path.write_text(schema_line + body, encoding="utf-8")
    plan = plan_migration(path, steps=(_v1_to_v2,))
    assert plan.version == 1 and plan.target == 2
    assert plan.changes[0] == "format companyd/v1 → companyd/v2"
    assert "state_directory: /srv/a   # here" in plan.new_text
    if schema_line:
        quote = "'" if "'" in schema_line else ""
        assert plan.new_text.startswith(f"schema: {quote}companyd/v2{quote}\n# top\n")
    else:
        assert plan.new_text.startswith("schema: companyd/v2\n# top\n")
    # a file already at the target is left alone
    path.write_text("schema: companyd/v2\n" + body, encoding="utf-8")
    assert not plan_migration(path, steps=(_v1_to_v2,)).needed


def test_a_newer_company_yaml_is_refused_by_migrate_and_by_run_with_78(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "company.yaml"
    path.write_text(NEW.replace("companyd/v1", "companyd/v2"), encoding="utf-8")
    assert main(["migrate", "--config", str(path)]) == EX_CONFIG
    assert "newer than this companyd knows" in capsys.readouterr().err
    proc = subprocess.run(
        [sys.executable, "-m", "companyd", "run", "--offline", "--config", str(path),
         "--state-dir", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == EX_CONFIG, proc.stderr
    assert "'companyd/v2' is the format of a newer companyd" in proc.stderr
    assert "upgrade companyd" in proc.stderr and "company.yaml.bak" in proc.stderr
    assert "did you mean" not in proc.stderr
    assert not (tmp_path / "s").exists()  # nothing was started


def test_doctor_reports_a_config_and_a_state_that_need_migrating(tmp_path: Path) -> None:
    path = tmp_path / "company.yaml"
    path.write_text(OLD, encoding="utf-8")
    state = tmp_path / "s"
    state.mkdir()
    conn = sqlite3.connect(state / "runs.sqlite", isolation_level=None)
    from companyd._sqlite import apply_migrations

    apply_migrations(conn, JOURNAL_STEPS[:1])
    conn.close()
    check = check_upgrade(path, load_config(path), state)
    assert check.status == "warning"
    assert "company.yaml needs migrating (5 change(s)" in check.summary
    assert "the next start migrates runs.sqlite at schema step 1" in check.summary
    assert check.fix and "companyd migrate --write" in check.fix
    # a state from a newer companyd is a problem, with the way back
    conn = sqlite3.connect(state / "runs.sqlite", isolation_level=None)
    conn.execute("PRAGMA user_version = 40")
    conn.close()
    check = check_upgrade(path, load_config(path), state)
    assert check.status == "problem"
    assert "written by a newer companyd" in check.summary
    assert check.fix and "companyd restore" in check.fix
    # current config and state: ok
    path.write_text(NEW, encoding="utf-8")
    (state / "runs.sqlite").unlink()
    assert check_upgrade(path, load_config(path), state).status == "ok"
