"""Schema errors in the operator's words.

:func:`schema_issues` turns pydantic's validation errors into issues that say what was
expected and what was found — as written in the file, with what YAML made of it when that
is a surprise (``yes`` is true, ``23:00`` is 1380) — at the position of the value, with
"did you mean" for a misspelt key or choice. :func:`closest` is that suggestion, shared
with the cross-checks.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from pydantic import BaseModel, ValidationError

from companyd.config._report import Path_, Positions, Report
from companyd.config._schema import CompanyFile
from companyd.config._tree import SchemaNode, child_schema, item_schema, schema_at, schema_keys

__all__ = ["closest", "describe", "schema_issues"]


_TYPE_WORDS = {
    "string": "text",
    "int": "a whole number",
    "float": "a number",
    "finite": "a finite number",
    "bool": "true or false",
    "dict": "a mapping (key: value)",
    "model": "a mapping (key: value)",
    "mapping": "a mapping (key: value)",
    "list": "a list",
    "tuple": "a list",
    "iterable": "a list",
    "date": "a date (YYYY-MM-DD)",
}

_MODEL_WORDS = {
    "BudgetSpec": "a budget such as {daily_usd: 2, monthly_usd: 40}, or the word 'unlimited'",
    "ModelSpec": "a model id such as claude-sonnet-5-5, or {primary: ..., fallbacks: [...]}",
    "CatchUpSpec": "skip, run_once, or {policy: run_once, grace: 2h}",
    "TriggerSpec": 'a trigger such as {cron: "0 14 * * *"} or {every: 5m}',
    "AgentSpec": "an agent: a mapping with at least 'title' and 'instructions'",
    "RoutineSpec": "a routine: a mapping with 'assignee', 'description' and 'trigger'",
    "DepartmentSpec": "a department: a mapping such as {title: Finance}",
}

_MISSING_HINTS: dict[Path_, str] = {
    ("company", "budget"): (
        " — a company-wide ceiling is required (e.g. `budget: {daily_usd: 10, "
        "monthly_usd: 200}`), or write `budget: unlimited` to opt out explicitly"
    ),
    ("company",): " — it holds the company's name and budget",
    ("agents",): " — at least one agent, keyed by slug",
}


def describe(value: Any, path: Path_, pos: Positions, *, want_text: bool = False) -> str:
    """How to show a found value: text quoted, anything else as written in the file, with
    what YAML made of it when that is a surprise (``yes`` is true, ``23:00`` is 1380).
    """
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    if isinstance(value, list):
        return f"a list {_short(value)}" if value else "an empty list"
    raw = pos.scalar.get(path)
    if raw is None or isinstance(value, str) or raw[1] is not None:
        return _short(value)
    source = raw[0]
    if isinstance(value, bool):
        as_yaml = "true" if value else "false"
    elif isinstance(value, int | float):
        as_yaml = f"the number {value!r}"
    elif isinstance(value, date):
        as_yaml = f"the date {value.isoformat()}"
    else:
        as_yaml = _short(value)
    if want_text:
        if source == str(value):
            return f"{source} (write {source!r} in quotes for text)"
        return f"{source} (YAML reads it as {as_yaml}; write {source!r} in quotes for text)"
    if isinstance(value, bool) and source.lower() not in ("true", "false"):
        return f"{source} (YAML reads it as {as_yaml})"
    return source


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


def _num(bound: Any) -> str:
    if isinstance(bound, float) and bound.is_integer():
        return str(int(bound))
    return str(bound)


def schema_issues(exc: ValidationError, data: dict[str, Any], rep: Report) -> None:
    """Add to ``rep`` one operator-worded error per pydantic error in ``exc`` (``data`` is the
    document that was validated): the position in the file, the key or value found, what was
    expected, a "did you mean" for a misspelt key. Errors under a settled path are skipped.
    """
    import difflib  # here: only an invalid document needs it (issue 31: not at start)

    pos = rep.pos
    for err in exc.errors(include_url=False):
        path, value = _document_path(tuple(err["loc"]), data)
        if rep.is_settled(path):
            continue
        kind = err["type"]
        ctx = err.get("ctx") or {}
        found = describe(value, path, pos, want_text=kind == "string_type")
        key = False
        if kind == "extra_forbidden":
            key = True
            msg = f"unknown key {path[-1]!r}" + _did_you_mean(str(path[-1]), path[:-1])
        elif kind == "missing":
            key = True
            hint = _MISSING_HINTS.get(path, "")
            msg = f"required key {str(path[-1])!r} is missing; add it{hint}"
            # point at the parent's key, where the missing entry belongs
            rep.add(path, msg, at=pos.of(path[:-1], key=True))
            continue
        elif kind == "literal_error":
            choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
            close = (
                difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
                if isinstance(value, str)
                else []
            )
            hint = f"; did you mean {close[0]!r}?" if close else ""
            msg = f"expected one of {', '.join(choices)}, got {found}{hint}"
        elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
            bound = _num(next(iter(ctx.values()), "?"))
            words = {
                "greater_than": f"greater than {bound}",
                "greater_than_equal": f"at least {bound}",
                "less_than": f"less than {bound}",
                "less_than_equal": f"at most {bound}",
            }[kind]
            what = "a duration" if _is_duration(path) else "a number"
            msg = f"expected {what} {words}, got {found}"
        elif kind == "string_too_short" or (kind == "too_short" and isinstance(value, str)):
            msg = f"expected non-empty text, got {found}"
        elif kind == "int_from_float":
            msg = f"expected a whole number, got {found}"
        elif kind == "model_type":
            want = _MODEL_WORDS.get(str(ctx.get("class_name")), "a mapping (key: value)")
            msg = f"expected {want}, got {found}"
        elif kind.endswith(("_type", "_parsing")) or kind == "finite_number":
            word = _TYPE_WORDS.get(kind.split("_")[0], kind.split("_")[0])
            msg = f"expected {word}, got {found}"
            if word == "a list" and isinstance(value, str):
                msg += f"; write a one-item list as [{value}]"
        elif kind == "value_error":
            msg = str(ctx.get("error", err["msg"]))
            # validators quote the Python value (True); show it as written (yes) instead
            if msg.endswith(f"got {value!r}"):
                msg = msg[: -len(repr(value))] + found
        else:
            text = str(err["msg"])
            msg = f"{text[:1].lower()}{text[1:]}, got {found}"
        rep.add(path, msg, key=key)


def _is_duration(path: Path_) -> bool:
    return bool(path) and str(path[-1]) in (
        "max_seconds",
        "heartbeat_seconds",
        "colleague_timeout_seconds",
        "every",
        "grace",
        "min",
        "max",
        "reset_after",
        "timeout_seconds",
        "coalesce_seconds",
        "runaway_window",
    )


def _document_path(loc: tuple[Any, ...], data: Any) -> tuple[Path_, Any]:
    """The document path (canonical keys, list indices) of a pydantic error location, and
    the value found there. Pydantic adds tags such as ``function-before[...]``; they are not
    keys of the document and are dropped.
    """
    path: list[str | int] = []
    node: Any = data
    schema: SchemaNode = CompanyFile
    items: SchemaNode = None  # the model of a list's items, when the node is such a list
    for part in loc:
        if isinstance(part, int):
            if isinstance(node, list) and 0 <= part < len(node):
                path.append(part)
                node = node[part]
                schema, items = items, None
            continue
        items = None
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            canonical, other = schema_keys(schema)
            name_to_key = {n: k for k, n in canonical.items()}
            key = name_to_key.get(part) or other.get(part) or (part if part in canonical else None)
            if key is None and isinstance(node, dict) and part in node:
                key = part  # an unknown key
            if key is None or not isinstance(node, dict):
                # not a key, or a value a validator expanded (`catch_up: run_once` becomes
                # {policy: run_once}): the error belongs to the value as written
                continue
            path.append(key)
            items = item_schema(schema, key)
            schema = child_schema(schema, key)
            node = node.get(key)
        elif isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
            schema = child_schema(schema, part)
    return tuple(path), node


def _did_you_mean(key: str, parent_path: Path_) -> str:
    schema = schema_at(parent_path)
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return ""
    keys = sorted(schema_keys(schema)[0])
    close = closest(key.lower().replace("-", "_"), keys, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ";"
    return f"{hint} valid keys here: {', '.join(keys)}"


def closest(name: str, choices: list[str], cutoff: float = 0.6) -> list[str]:
    """The most similar of ``choices`` (ties go to the one sharing the longest prefix)."""
    import difflib  # here: only a misspelt name needs it (issue 31: not at the daemon's start)

    best: list[tuple[float, int, str]] = []
    for c in choices:
        ratio = difflib.SequenceMatcher(None, name, c).ratio()
        if ratio >= cutoff:
            n = min(len(name), len(c))
            prefix = next((i for i in range(n) if name[i] != c[i]), n)
            best.append((ratio, prefix, c))
    return [max(best)[2]] if best else []
