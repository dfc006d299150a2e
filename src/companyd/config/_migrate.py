"""``companyd migrate``: bring a company.yaml written for an older companyd to today's format.

company.yaml names its format in ``schema:`` (``companyd/v1``; a file without the key is
version 1, the format from before the key existed). Two kinds of rewrite make an older
file current, both as **text edits at the positions the YAML parser reports**, so every
comment, blank line, quote style and key order the operator wrote stays where it was:

* **schema steps** (:data:`STEPS`): step *n* takes a file from version *n* to *n + 1*
  (a rename, a moved section) and the ``schema:`` line is set to the version reached.
  There are none yet: version 1 is the only format so far; the list is where the next
  format change goes, with its test;
* **deprecated spellings** (:data:`companyd.config._tree.PEER_SPELLINGS` and the camelCase
  forms): ``reportsTo``, ``cronExpression``, ``llm`` ... are still read, with a warning
  ("works for now"); ``migrate`` writes the canonical key instead, so the file keeps
  loading when a later format drops them.

``--check`` says what would change and exits 1 when something would (0 when the file is
current), changing nothing; ``--write`` keeps the original as ``company.yaml.bak`` and
replaces the file atomically (:func:`companyd._fs.write_atomic`: the old file or the new
one, never half), and only if the rewritten text loads. A file in a newer format than this
code knows is refused (exit 78) with the way back. docs/upgrade.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from companyd._fs import write_atomic
from companyd.config._load import load_config_text
from companyd.config._report import Path_, Positions, Report, dotted
from companyd.config._schema import SCHEMA_VERSION, CompanyFile
from companyd.config._tree import MapOf, SchemaNode, child_schema, schema_keys, schema_of
from companyd.config._yaml import compose
from companyd.errors import EX_CONFIG, CompanydError, ConfigError

__all__ = [
    "STEPS",
    "ConfigMigration",
    "MigrationRefused",
    "file_version",
    "migration_problems",
    "plan_migration",
    "write_migration",
]

#: One format step: the text of a version-*n* file → the text of version *n + 1* (the
#: ``schema:`` line is set by the caller).
Step = Callable[[str], str]

#: The format steps, in order: ``STEPS[n - 1]`` takes version *n* to *n + 1*, so the current
#: version is ``len(STEPS) + 1`` (checked against :data:`SCHEMA_VERSION` by the tests).
STEPS: tuple[Step, ...] = ()

_SCHEMA_NAME = re.compile(r"companyd/v(\d{1,6})")


class MigrationRefused(CompanydError):
    """The file cannot be migrated by this companyd (newer format, or it does not parse);
    exit 78 like a config error at start.
    """

    exit_code = EX_CONFIG


@dataclass
class ConfigMigration:
    """What ``migrate`` would do to one file.

    Attributes:
        path: the file.
        version: its format version (1 when ``schema:`` is absent).
        target: the version it would reach.
        changes: one line per change, in file order ("line 7: 'reportsTo' → 'reports_to'").
        text: the original text.
        new_text: the rewritten text (== ``text`` when nothing changes).
    """

    path: Path
    version: int
    target: int
    changes: list[str] = field(default_factory=list)
    text: str = ""
    new_text: str = ""

    @property
    def needed(self) -> bool:
        """Something would change."""
        return self.new_text != self.text

    def to_dict(self) -> dict[str, Any]:
        """As ``--json`` prints it."""
        return {
            "path": str(self.path),
            "schema": self.version,
            "target": self.target,
            "needed": self.needed,
            "changes": self.changes,
        }


def file_version(data: Any) -> int:
    """The format version of parsed company.yaml data (1 without ``schema:``).

    Raises:
        MigrationRefused: ``schema:`` is not a ``companyd/vN`` name.
    """
    value = data.get("schema") if isinstance(data, dict) else None
    if value is None:
        return 1
    match = _SCHEMA_NAME.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise MigrationRefused(
            f"schema: {value!r} is not a companyd format name (expected 'companyd/vN', e.g. "
            f"'companyd/v{SCHEMA_VERSION}'); fix the line, or remove it to mean version 1"
        )
    return int(match.group(1))


def _offsets(text: str) -> list[int]:
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    return starts


def _deprecated_keys(
    node: Any, schema: SchemaNode, path: Path_, out: list[tuple[Path_, str]]
) -> None:
    """Collect (path of the key as written, canonical key) for every deprecated spelling."""
    if not isinstance(node, dict):
        return
    if isinstance(schema, MapOf):
        inner = schema_of(schema.inner)
        for k, v in node.items():
            _deprecated_keys(v, inner, (*path, k), out)
        return
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return
    _, other = schema_keys(schema)
    for k, v in node.items():
        key = other.get(k, k) if isinstance(k, str) else k
        if key != k and key not in node:  # both spellings at once: the loader's error
            out.append(((*path, k), key))
        _deprecated_keys(v, child_schema(schema, key), (*path, key), out)


def _rename_keys(text: str, renames: Sequence[tuple[tuple[int, int], str, str]]) -> str:
    """Replace each key (position, old, new) in ``text``, keeping its quotes."""
    starts = _offsets(text)
    # from the end, so earlier offsets stay valid
    for (line, col), old, new in sorted(renames, reverse=True):
        at = starts[line - 1] + col - 1
        quote = text[at] if text[at] in "\"'" else ""
        written = f"{quote}{old}{quote}"
        if text[at : at + len(written)] != written:
            raise MigrationRefused(
                f"line {line}: expected the key {old!r} at column {col}; the file changed "
                "while it was read — run `companyd migrate` again"
            )
        text = text[:at] + f"{quote}{new}{quote}" + text[at + len(written) :]
    return text


def _set_schema_line(text: str, data: dict[str, Any], pos: Positions, version: int) -> str:
    value = f"companyd/v{version}"
    if "schema" in data:
        line, col = pos.value[("schema",)]
        starts = _offsets(text)
        at = starts[line - 1] + col - 1
        old = str(data["schema"])
        quote = text[at] if text[at] in "\"'" else ""
        written = f"{quote}{old}{quote}"
        return text[:at] + f"{quote}{value}{quote}" + text[at + len(written) :]
    return f"schema: {value}\n" + text


def _parse(text: str, path: Path) -> tuple[dict[str, Any], Positions]:
    pos = Positions()
    data = compose(text, Report(str(path), pos))
    if not isinstance(data, dict):
        raise MigrationRefused(f"a format step made {str(path)!r} unreadable (a bug: report it)")
    return data, pos


def plan_migration(
    path: Path, *, steps: Sequence[Step] = STEPS, current: int | None = None
) -> ConfigMigration:
    """What would bring ``path`` to the current format (nothing is written).

    Args:
        path: company.yaml.
        steps: the format steps (tests give their own).
        current: the version ``steps`` reach (default ``len(steps) + 1``).

    Raises:
        MigrationRefused: the file cannot be read or parsed, or is in a newer format.
    """
    current = len(steps) + 1 if current is None else current
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MigrationRefused(
            f"cannot read {str(path)!r}: {exc}; give the company.yaml to migrate with --config"
        ) from exc
    plan = ConfigMigration(path=path, version=1, target=current, text=text, new_text=text)
    pos = Positions()
    rep = Report(str(path), pos)
    data = compose(text, rep)
    if not isinstance(data, dict) or rep.errors():
        why = "; ".join(str(i) for i in rep.errors()) or "it is not a YAML mapping"
        raise MigrationRefused(
            f"cannot migrate {str(path)!r}: {why}; fix it first (`companyd validate` says how)"
        )
    plan.version = version = file_version(data)
    if version > current:
        raise MigrationRefused(
            f"{str(path)!r} is in format companyd/v{version}, newer than this companyd knows "
            f"(companyd/v{current}); upgrade companyd, or put back the file from before the "
            "upgrade (company.yaml.bak, or config/company.yaml in the pre-upgrade backup)"
        )
    new = text
    for n in range(version, current):
        new = steps[n - 1](new)
        plan.changes.append(f"format companyd/v{n} → companyd/v{n + 1}")
    if version < current:
        data, pos = _parse(new, path)
        new = _set_schema_line(new, data, pos, current)
        data, pos = _parse(new, path)
    found: list[tuple[Path_, str]] = []
    _deprecated_keys(data, CompanyFile, (), found)
    renames = []
    for key_path, canonical in found:
        line, col = pos.key[key_path]
        old = str(key_path[-1])
        renames.append(((line, col), old, canonical))
        plan.changes.append(
            f"line {line}: {dotted(key_path)}: {old!r} → {canonical!r} (deprecated spelling)"
        )
    plan.new_text = _rename_keys(new, renames)
    return plan


def migration_problems(plan: ConfigMigration) -> str | None:
    """What stops the migrated text from loading (its issues, one per line), or None: the
    problems ``--write`` would refuse over, which ``--check`` says too.
    """
    try:
        load_config_text(plan.new_text, file=str(plan.path), base_dir=plan.path.parent)
    except ConfigError as exc:
        return str(exc)
    return None


def write_migration(plan: ConfigMigration) -> Path | None:
    """Write ``plan`` (if anything changes): the original to ``<file>.bak``, then the new
    text atomically. The new text must load first. Returns the ``.bak`` path, or None.

    Raises:
        MigrationRefused: the rewritten file would not load (nothing written).
    """
    if not plan.needed:
        return None
    problems = migration_problems(plan)
    if problems is not None:
        raise MigrationRefused(
            f"the migrated {str(plan.path)!r} would not load, so nothing was written:\n"
            f"{problems}\n"
            "fix these in the file (they are not migration problems), then run migrate again"
        )
    bak = plan.path.with_name(plan.path.name + ".bak")
    write_atomic(bak, plan.text.encode("utf-8"))  # 0600: a copy nobody else needs
    write_atomic(plan.path, plan.new_text.encode("utf-8"), like_existing=True)
    return bak
