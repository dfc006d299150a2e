"""The README stays true: its quick start is exactly two one-line commands, its
configuration reference documents every key of the schema and nothing else, its CLI
reference covers every registered subcommand, and its dependency table every dependency.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tomllib
from pathlib import Path

from pydantic import BaseModel

from companyd.cli import _main as cli
from companyd.config import CompanyFile
from companyd.config._tree import PEER_SPELLINGS, MapOf, file_key, schema_keys, schema_of

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")

#: How the reference writes the names a user chooses, by the key that holds them.
PLACEHOLDERS = {
    "agents": "<agent>",
    "routines": "<routine>",
    "departments": "<dept>",
    "mcp_servers": "<server>",
    "pricing": "<model>",
}


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section."""
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"README has no '## {heading}' section"
    return m.group(1)


def quick_start_command(which: str) -> str:
    """The command under ``### Quick start: <which>`` — the same extraction .ci/run does."""
    m = re.search(
        rf"^### Quick start: {which}\n.*?^```(?:sh|bash)?\n(.*?)^```",
        README,
        re.M | re.S,
    )
    assert m, f"README has no fenced command under '### Quick start: {which}'"
    return m.group(1).strip()


def test_quick_start_is_exactly_two_one_line_commands() -> None:
    body = section(README, "Quick start")
    assert len(re.findall(r"^```", body, re.M)) == 4, "expected exactly two fenced blocks"
    run, test = quick_start_command("run"), quick_start_command("test")
    for command in (run, test):
        assert "\n" not in command
        assert command.startswith("python3 -m venv .venv && ")
    assert run.endswith(".venv/bin/companyd run --offline")
    # every core (see README deps); a module's shared daemon stays on one worker (docs/testing.md)
    assert test.endswith(".venv/bin/python -m pytest -n auto --dist loadgroup")
    assert "pip install -e '.[test]'" in test


def test_ci_runs_the_readme_commands() -> None:
    # .ci/run reads both commands from the README with its own (awk) extraction.
    proc = subprocess.run(
        [str(ROOT / ".ci" / "run"), "--print-commands"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [quick_start_command("run"), quick_start_command("test")]


# -- configuration reference ------------------------------------------------------------


def schema_nodes() -> dict[str, type[BaseModel]]:
    """Every place a schema model appears, as README writes it ('' is the top level)."""
    found: dict[str, type[BaseModel]] = {}

    def walk(model: type[BaseModel], path: str, seen: frozenset[type[BaseModel]]) -> None:
        found[path] = model
        for name, info in model.model_fields.items():
            key = file_key(name, info)
            inner = schema_of(info.annotation)
            child_path = f"{path}.{key}" if path else key
            if isinstance(inner, MapOf):
                inner = schema_of(inner.inner)
                if inner is None:
                    continue  # a map of plain values (env, routes): a leaf
                child_path += f".{PLACEHOLDERS[key]}"
            # A model nested in itself (departments in departments) is documented once.
            if isinstance(inner, type) and inner not in seen:
                walk(inner, child_path, seen | {inner})

    walk(CompanyFile, "", frozenset({CompanyFile}))
    return found


def documented_tables() -> dict[str, list[tuple[str, str]]]:
    """README path → [(key, default column)] from the configuration reference."""
    body = section(README, "Configuration reference")
    tables: dict[str, list[tuple[str, str]]] = {}
    for block in re.split(r"^### ", body, flags=re.M)[1:]:
        heading, _, rest = block.partition("\n")
        paths = [""] if heading.strip() == "Top level" else re.findall(r"`([^`]+)`", heading)
        assert paths, f"heading {heading!r} names no path"
        rows = []
        for line in rest.splitlines():
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if len(cells) == 4 and cells[0].startswith("`"):
                rows.append((cells[0].strip("`"), cells[2]))
        assert rows, f"section {heading!r} has no key table"
        for p in paths:
            assert p not in tables, f"{p!r} is documented twice"
            tables[p] = rows
    return tables


def test_every_schema_key_is_documented_and_nothing_else() -> None:
    nodes = schema_nodes()
    tables = documented_tables()
    assert sorted(set(nodes) - set(tables)) == [], "schema nodes missing from the README"
    assert sorted(set(tables) - set(nodes)) == [], "README documents nodes the schema lacks"
    for path, model in nodes.items():
        canonical = schema_keys(model)[0]
        documented = [key for key, _ in tables[path]]
        where = path or "the top level"
        assert sorted(documented) == sorted(canonical), f"keys of {where} differ from the schema"
        for key, default in tables[path]:
            required = model.model_fields[canonical[key]].is_required()
            assert (default == "required") == required, (
                f"{where}.{key}: README says {default!r}, the schema says "
                f"{'required' if required else 'optional'}"
            )


def test_accepted_alternative_spellings_are_listed() -> None:
    body = section(README, "Configuration reference")
    for spellings in PEER_SPELLINGS.values():
        for spelling in spellings:
            assert f"`{spelling}`" in body, spelling


# -- CLI reference ----------------------------------------------------------------------


def test_every_subcommand_is_documented() -> None:
    # One direction only: areas are built in parallel branches, so the README may already
    # describe commands whose module has not been merged into this tree yet.
    broken: list[str] = []
    parser = cli._build_parser(broken)
    assert broken == []
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    documented = set(re.findall(r"^### companyd ([\w-]+)", section(README, "Command line"), re.M))
    assert {"validate", "init", "show-config"} <= set(sub.choices)
    assert sorted(set(sub.choices) - documented) == [], "subcommands missing from the README"


# -- dependencies -----------------------------------------------------------------------


def test_every_dependency_has_a_reason() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    names = {re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0].lower() for r in requirements}
    rows = re.findall(r"^\| ([\w.-]+) \| (.+) \|$", section(README, "Dependencies"), re.M)
    table = {name.lower(): why for name, why in rows if name not in ("package", "---")}
    assert sorted(names - set(table)) == [], "dependencies without a row in the README"
    assert sorted(set(table) - names) == [], "README rows for packages that are not used"
    assert all(len(why) > 15 for why in table.values())


def test_the_options_the_command_reference_names_exist() -> None:
    # Every `--option` in a command's usage line (`companyd CMD [...]`, in backticks) is one
    # its parser takes: e.g. install-service's --instance.
    parser = cli._build_parser([])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    body = section(README, "Command line")
    checked = 0
    for m in re.finditer(r"^### companyd ([\w-]+)\n\n`companyd \1 ([^`]*)`", body, re.M):
        name, usage = m.group(1), m.group(2)
        command = sub.choices.get(name)
        if command is None or any(
            isinstance(a, argparse._SubParsersAction) for a in command._actions
        ):
            continue  # built in another branch (see above), or options of its subcommands
        known = {s for a in command._actions for s in a.option_strings}
        written = set(re.findall(r"--[a-z][\w-]*", usage))
        assert written <= known, f"companyd {name}: README names {sorted(written - known)}"
        checked += 1
    assert checked > 0
