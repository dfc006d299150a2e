"""A routine's ``done_when:`` conditions: what must be true of a run before it counts as done.

Each :class:`DoneWhenSpec` is one condition of exactly one kind (docs/agents.md,
"Verification"):

* ``tool: NAME`` — at least one successful call of tool NAME in the run; with
  ``result_matches: REGEX`` one such call's result text matches (``re.search``);
* ``memory_written: true`` — the run wrote to the company memory; with ``entity: NAME``, to
  that entity;
* ``output_matches: REGEX`` — the final answer matches (``re.search``);
* ``output_max_chars: N`` — the final answer is at most N characters;
* ``output_json_schema: {...}`` — the final answer is JSON valid against this JSON Schema
  (checked with the ``jsonschema`` package; the schema itself is checked here, at load).

Regular expressions and the JSON Schema are checked when company.yaml loads, so a bad one is
an error with its file, line and field rather than a surprise at run time. Whether ``tool``
names one of the assignee's tools is a cross-check
(:mod:`companyd.config._checks`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator

from companyd.config._scalars import PositiveInt, Text

__all__ = [
    "KINDS",
    "MEMORY_TOOLS",
    "OPTIONAL_BUILTINS",
    "DoneWhenSpec",
    "Regex",
    "check_json_schema",
    "check_regex",
    "conditions_of",
]

#: The one key that says what kind of condition an entry is.
KINDS = ("tool", "memory_written", "output_matches", "output_max_chars", "output_json_schema")
#: Keys that only refine a kind: key → the kind it belongs to.
REFINES = {"result_matches": "tool", "entity": "memory_written"}


def check_regex(value: str) -> str:
    """``value`` if it compiles as a Python regular expression; else a ValueError saying where
    it breaks and what to do.
    """
    try:
        re.compile(value)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise ValueError(
            f"expected a regular expression (Python `re` syntax), got {value!r}: "
            f"{exc.msg}{where}; fix it, or escape special characters such as '(' or '.' "
            'with a backslash (in YAML, quote it and double the backslash: "id=\\\\d+")'
        ) from None
    return value


def check_json_schema(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` if it is a valid JSON Schema (by its ``$schema``, else the newest draft
    ``jsonschema`` knows); else a ValueError naming what is wrong and where.
    """
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    dialect = value.get("$schema")
    if dialect is not None and (
        not isinstance(dialect, str) or validator_for(value, default=None) is None
    ):
        raise ValueError(
            f"expected '$schema' to name a JSON Schema draft jsonschema knows (e.g. "
            f"'https://json-schema.org/draft/2020-12/schema'), got {dialect!r}; fix it, or "
            "leave '$schema' out for the newest draft"
        )
    try:
        validator_for(value).check_schema(value)
    except SchemaError as exc:
        at = "/".join(str(p) for p in exc.absolute_path)
        where = f" at '{at}'" if at else ""
        raise ValueError(
            f"expected a valid JSON Schema, got one that is not{where}: {exc.message}; "
            "fix the schema (e.g. {type: object, required: [title], properties: {title: "
            "{type: string}}})"
        ) from None
    try:  # a reference to nowhere at the top shows up as soon as anything is checked
        list(validator_for(value)(value).iter_errors(None))
    except Exception as exc:
        raise ValueError(
            f"expected a JSON Schema that can be applied, got one that fails: "
            f"{type(exc).__name__}: {str(exc)[:200]}; fix its '$ref's"
        ) from None
    return value


Regex = Annotated[str, AfterValidator(check_regex)]


class DoneWhenSpec(BaseModel):
    """One condition of ``done_when:`` (exactly one of :data:`KINDS`, maybe refined)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    tool: Text | None = None
    result_matches: Regex | None = None
    memory_written: Literal[True] | None = None
    entity: Text | None = None
    output_matches: Regex | None = None
    output_max_chars: PositiveInt | None = None
    output_json_schema: Annotated[dict[str, Any], AfterValidator(check_json_schema)] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> DoneWhenSpec:
        given = [k for k in KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            what = f"got {', '.join(repr(k) for k in given)}" if given else "got none"
            raise ValueError(
                f"expected exactly one of {', '.join(repr(k) for k in KINDS)} in each "
                f"condition, {what}; write each condition as its own list item"
            )
        for key, kind in REFINES.items():
            if getattr(self, key) is not None and given[0] != kind:
                raise ValueError(f"{key!r} refines a {kind!r} condition; move it next to {kind!r}")
        return self

    def as_dict(self) -> dict[str, Any]:
        """The condition as plain data (the keys given), as a task carries it."""
        return self.model_dump(exclude_none=True)


#: The memory tools (companyd.memory._tools.TOOL_NAMES, pinned by tests/config/test_done_when.py:
#: config sits below memory) and ``recall``: every agent has them.
MEMORY_TOOLS = frozenset(
    {
        "create_entities",
        "create_relations",
        "add_observations",
        "delete_entities",
        "delete_observations",
        "delete_relations",
        "read_graph",
        "search_nodes",
        "open_nodes",
        "recall",
    }
)
#: Tools an agent has only in some configurations (colleagues, the founder, the improver).
OPTIONAL_BUILTINS = frozenset(
    {"consult", "delegate", "ask_founder", "read_agent", "propose_change"}
)


def conditions_of(raw: Any) -> list[Mapping[str, Any]]:
    """The conditions of a raw ``done_when`` value that are mappings (cross-checks read raw
    data defensively).
    """
    if not isinstance(raw, list):
        return []
    return [c for c in raw if isinstance(c, Mapping)]
