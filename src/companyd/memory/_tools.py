"""The nine MCP memory tools: definitions, argument validation, execution and replay.

Everything here matches the official server (``@modelcontextprotocol/server-memory``
2026.8.31): tool names and order, titles, descriptions, JSON schemas, annotations, the
``structuredContent`` of each result, its pretty-printed text, and the error texts, including
the zod validation messages (``Invalid input: expected array, received undefined at
entities[0].observations``). :func:`tool_definitions` is what ``tools/list`` returns.

:func:`run_tool` executes a validated call on a :class:`KnowledgeGraph` and returns the
result plus the *effect*: a journal record of what actually changed (``None`` when nothing
did), which :func:`replay` applies again on load.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from companyd._frozen import Frozen
from companyd.memory._errors import MemoryToolError
from companyd.memory._graph import KnowledgeGraph, Relation

__all__ = [
    "MUTATING_TOOLS",
    "READ_ONLY_TOOLS",
    "TOOL_NAMES",
    "error_text_unknown_tool",
    "pretty",
    "replay",
    "result_text",
    "run_tool",
    "tool_definitions",
    "validate_arguments",
]

# -- a tiny zod: just the shapes the nine tools use ------------------------------------------


class _Str(Frozen):
    description: str | None = None


class _Bool(Frozen):
    description: str | None = None


class _Arr(Frozen):
    item: _Schema
    description: str | None = None


class _Obj(Frozen):
    fields: tuple[tuple[str, _Schema], ...]
    description: str | None = None


_Schema = _Str | _Bool | _Arr | _Obj
_DRAFT7 = "http://json-schema.org/draft-07/schema#"


def _json_schema(schema: _Schema, *, output: bool) -> dict[str, Any]:
    # Mirrors zod-to-json-schema as the official server's SDK emits it: input objects are
    # open (unknown keys are stripped, not refused); output objects are closed.
    out: dict[str, Any]
    if isinstance(schema, _Str):
        out = {"type": "string"}
    elif isinstance(schema, _Bool):
        out = {"type": "boolean"}
    elif isinstance(schema, _Arr):
        out = {"type": "array", "items": _json_schema(schema.item, output=output)}
    else:
        out = {
            "type": "object",
            "properties": {k: _json_schema(v, output=output) for k, v in schema.fields},
        }
        if schema.fields:
            out["required"] = [k for k, _ in schema.fields]
        if output:
            out["additionalProperties"] = False
    if schema.description is not None:
        out["description"] = schema.description
    return out


def _js_type(value: object) -> str:
    if value is _MISSING:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, float) and not math.isfinite(value):
        # zod names a non-finite number by its value (1e400 is valid JSON: Infinity)
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object"


_MISSING = object()


def _path_text(path: Sequence[str | int]) -> str:
    text = ""
    for i, seg in enumerate(path):
        if i == 0:
            text = str(seg)
        elif isinstance(seg, int):
            text += f"[{seg}]"
        else:
            text += f".{seg}"
    return text


class _Invalid(Exception):
    pass


def _clean(schema: _Schema, value: object) -> Any:
    """The fast path of :func:`_check`: the cleaned value, or :class:`_Invalid` at the first
    problem (then :func:`_check` runs again to word every issue).
    """
    if isinstance(schema, _Str):
        if type(value) is not str and not isinstance(value, str):
            raise _Invalid
        return value
    if isinstance(schema, _Arr):
        if not isinstance(value, list | tuple):
            raise _Invalid
        item = schema.item
        if isinstance(item, _Str):
            for v in value:
                if not isinstance(v, str):
                    raise _Invalid
            return list(value)
        return [_clean(item, v) for v in value]
    if isinstance(schema, _Bool):
        if not isinstance(value, bool):
            raise _Invalid
        return value
    if not isinstance(value, Mapping):
        raise _Invalid
    out = {}
    for k, sub in schema.fields:
        if k not in value:
            raise _Invalid
        out[k] = _clean(sub, value[k])
    return out


def _check(schema: _Schema, value: object, path: list[str | int], issues: list[str]) -> Any:
    """Validate like zod v4 (every issue, in shape order) and return the value with unknown
    object keys stripped.
    """

    def issue(expected: str) -> None:
        msg = f"Invalid input: expected {expected}, received {_js_type(value)}"
        issues.append(f"{msg} at {_path_text(path)}" if path else msg)

    if isinstance(schema, _Str):
        if not isinstance(value, str):
            issue("string")
        return value
    if isinstance(schema, _Bool):
        if not isinstance(value, bool):
            issue("boolean")
        return value
    if isinstance(schema, _Arr):
        if not isinstance(value, list | tuple):
            issue("array")
            return value
        return [_check(schema.item, v, [*path, i], issues) for i, v in enumerate(value)]
    if not isinstance(value, Mapping):
        issue("object")
        return value
    return {k: _check(sub, value.get(k, _MISSING), [*path, k], issues) for k, sub in schema.fields}


# -- the nine tools --------------------------------------------------------------------------

_ENTITY = _Obj(
    fields=(
        ("name", _Str(description="The name of the entity")),
        ("entityType", _Str(description="The type of the entity")),
        (
            "observations",
            _Arr(
                item=_Str(),
                description="An array of observation contents associated with the entity",
            ),
        ),
    )
)
_RELATION = _Obj(
    fields=(
        ("from", _Str(description="The name of the entity where the relation starts")),
        ("to", _Str(description="The name of the entity where the relation ends")),
        ("relationType", _Str(description="The type of the relation")),
    )
)
_GRAPH_OUT = _Obj(fields=(("entities", _Arr(item=_ENTITY)), ("relations", _Arr(item=_RELATION))))
_SUCCESS_OUT = _Obj(fields=(("success", _Bool()), ("message", _Str())))


class _Tool(Frozen):
    name: str
    title: str
    description: str
    input: _Obj
    output: _Obj
    read_only: bool
    destructive: bool
    idempotent: bool


_TOOLS: tuple[_Tool, ...] = (
    _Tool(
        name="create_entities",
        title="Create Entities",
        description="Create multiple new entities in the knowledge graph",
        input=_Obj(fields=(("entities", _Arr(item=_ENTITY)),)),
        output=_Obj(fields=(("entities", _Arr(item=_ENTITY)),)),
        read_only=False,
        destructive=False,
        idempotent=False,
    ),
    _Tool(
        name="create_relations",
        title="Create Relations",
        description="Create multiple new relations between entities in the knowledge graph. "
        "Relations should be in active voice",
        input=_Obj(fields=(("relations", _Arr(item=_RELATION)),)),
        output=_Obj(fields=(("relations", _Arr(item=_RELATION)),)),
        read_only=False,
        destructive=False,
        idempotent=False,
    ),
    _Tool(
        name="add_observations",
        title="Add Observations",
        description="Add new observations to existing entities in the knowledge graph",
        input=_Obj(
            fields=(
                (
                    "observations",
                    _Arr(
                        item=_Obj(
                            fields=(
                                (
                                    "entityName",
                                    _Str(
                                        description="The name of the entity to add the "
                                        "observations to"
                                    ),
                                ),
                                (
                                    "contents",
                                    _Arr(
                                        item=_Str(),
                                        description="An array of observation contents to add",
                                    ),
                                ),
                            )
                        )
                    ),
                ),
            )
        ),
        output=_Obj(
            fields=(
                (
                    "results",
                    _Arr(
                        item=_Obj(
                            fields=(
                                ("entityName", _Str()),
                                ("addedObservations", _Arr(item=_Str())),
                            )
                        )
                    ),
                ),
            )
        ),
        read_only=False,
        destructive=False,
        idempotent=False,
    ),
    _Tool(
        name="delete_entities",
        title="Delete Entities",
        description="Delete multiple entities and their associated relations "
        "from the knowledge graph",
        input=_Obj(
            fields=(
                (
                    "entityNames",
                    _Arr(item=_Str(), description="An array of entity names to delete"),
                ),
            )
        ),
        output=_SUCCESS_OUT,
        read_only=False,
        destructive=True,
        idempotent=True,
    ),
    _Tool(
        name="delete_observations",
        title="Delete Observations",
        description="Delete specific observations from entities in the knowledge graph",
        input=_Obj(
            fields=(
                (
                    "deletions",
                    _Arr(
                        item=_Obj(
                            fields=(
                                (
                                    "entityName",
                                    _Str(
                                        description="The name of the entity containing "
                                        "the observations"
                                    ),
                                ),
                                (
                                    "observations",
                                    _Arr(
                                        item=_Str(),
                                        description="An array of observations to delete",
                                    ),
                                ),
                            )
                        )
                    ),
                ),
            )
        ),
        output=_SUCCESS_OUT,
        read_only=False,
        destructive=True,
        idempotent=True,
    ),
    _Tool(
        name="delete_relations",
        title="Delete Relations",
        description="Delete multiple relations from the knowledge graph",
        input=_Obj(
            fields=(
                ("relations", _Arr(item=_RELATION, description="An array of relations to delete")),
            )
        ),
        output=_SUCCESS_OUT,
        read_only=False,
        destructive=True,
        idempotent=True,
    ),
    _Tool(
        name="read_graph",
        title="Read Graph",
        description="Read the entire knowledge graph",
        input=_Obj(fields=()),
        output=_GRAPH_OUT,
        read_only=True,
        destructive=False,
        idempotent=True,
    ),
    _Tool(
        name="search_nodes",
        title="Search Nodes",
        description="Search for nodes in the knowledge graph based on a query",
        input=_Obj(
            fields=(
                (
                    "query",
                    _Str(
                        description="The search query to match against entity names, types, "
                        "and observation content"
                    ),
                ),
            )
        ),
        output=_GRAPH_OUT,
        read_only=True,
        destructive=False,
        idempotent=True,
    ),
    _Tool(
        name="open_nodes",
        title="Open Nodes",
        description="Open specific nodes in the knowledge graph by their names",
        input=_Obj(
            fields=(
                ("names", _Arr(item=_Str(), description="An array of entity names to retrieve")),
            )
        ),
        output=_GRAPH_OUT,
        read_only=True,
        destructive=False,
        idempotent=True,
    ),
)
_BY_NAME = {t.name: t for t in _TOOLS}

#: The tool names in ``tools/list`` order.
TOOL_NAMES: tuple[str, ...] = tuple(t.name for t in _TOOLS)
READ_ONLY_TOOLS = frozenset(t.name for t in _TOOLS if t.read_only)
MUTATING_TOOLS = frozenset(t.name for t in _TOOLS if not t.read_only)


def tool_definitions() -> list[dict[str, Any]]:
    """The ``tools`` array of ``tools/list``, identical to the official server's."""
    return [
        {
            "name": t.name,
            "title": t.title,
            "description": t.description,
            "inputSchema": {"$schema": _DRAFT7, **_json_schema(t.input, output=False)},
            "annotations": {
                "readOnlyHint": t.read_only,
                "destructiveHint": t.destructive,
                "idempotentHint": t.idempotent,
                "openWorldHint": False,
            },
            "execution": {"taskSupport": "forbidden"},
            "outputSchema": {"$schema": _DRAFT7, **_json_schema(t.output, output=True)},
        }
        for t in _TOOLS
    ]


def error_text_unknown_tool(name: str) -> str:
    """The official text for a call to a tool that does not exist."""
    return f"MCP error -32602: Tool {name} not found"


def validate_arguments(tool: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check ``arguments`` against ``tool``'s input schema; return them with unknown keys
    stripped.

    Raises:
        MemoryToolError: unknown tool (``MCP error -32602: Tool X not found``), or invalid
            arguments, with the official server's text (every problem, one per line).
    """
    spec = _BY_NAME.get(tool)
    if spec is None:
        raise MemoryToolError(error_text_unknown_tool(tool))
    given = {} if arguments is None else arguments
    try:
        cleaned: dict[str, Any] = _clean(spec.input, given)
        return cleaned
    except (_Invalid, RecursionError):
        pass
    issues: list[str] = []
    args = _check(spec.input, given, [], issues)
    if issues:
        raise MemoryToolError(
            "MCP error -32602: Input validation error: Invalid arguments for tool "
            f"{tool}: " + "\n".join(issues)
        )
    assert isinstance(args, dict)
    return args


def _rel(d: Mapping[str, str]) -> Relation:
    return Relation(d["from"], d["to"], d["relationType"])


_DELETED = {
    "delete_entities": "Entities deleted successfully",
    "delete_observations": "Observations deleted successfully",
    "delete_relations": "Relations deleted successfully",
}


def run_tool(
    graph: KnowledgeGraph, tool: str, args: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Execute a validated call. Returns ``(structuredContent, effect)``; ``effect`` is the
    journal record of what changed, or None if nothing did.

    Raises:
        MemoryToolError: ``Entity with name X not found`` from ``add_observations``
            (nothing is changed then).
    """
    effect: dict[str, Any] | None
    if tool == "create_entities":
        added = graph.create_entities(
            (e["name"], e["entityType"], e["observations"]) for e in args["entities"]
        )
        out = [e.to_dict() for e in added]
        return {"entities": out}, ({"op": tool, "entities": out} if out else None)
    if tool == "create_relations":
        rels = graph.create_relations(_rel(r) for r in args["relations"])
        out = [r.to_dict() for r in rels]
        return {"relations": out}, ({"op": tool, "relations": out} if out else None)
    if tool == "add_observations":
        results = graph.add_observations(
            [(o["entityName"], o["contents"]) for o in args["observations"]]
        )
        changes = [[name, added] for name, added in results if added]
        return (
            {"results": [{"entityName": n, "addedObservations": list(a)} for n, a in results]},
            {"op": tool, "observations": changes} if changes else None,
        )
    if tool == "delete_entities":
        names = graph.delete_entities(args["entityNames"])
        effect = {"op": tool, "entityNames": names} if names else None
        return {"success": True, "message": _DELETED[tool]}, effect
    if tool == "delete_observations":
        gone = graph.delete_observations(
            [(d["entityName"], d["observations"]) for d in args["deletions"]]
        )
        effect = {"op": tool, "deletions": [[n, o] for n, o in gone]} if gone else None
        return {"success": True, "message": _DELETED[tool]}, effect
    if tool == "delete_relations":
        rels = graph.delete_relations([_rel(r) for r in args["relations"]])
        effect = {"op": tool, "relations": [r.to_dict() for r in rels]} if rels else None
        return {"success": True, "message": _DELETED[tool]}, effect
    if tool == "read_graph":
        return graph.read_graph(), None
    if tool == "search_nodes":
        return graph.search_nodes(args["query"]), None
    if tool == "open_nodes":
        return graph.open_nodes(args["names"]), None
    raise MemoryToolError(error_text_unknown_tool(tool))


def replay(graph: KnowledgeGraph, effect: Mapping[str, Any]) -> bool:
    """Apply a journal record again. Returns False if it changed nothing (it was already
    applied, or it refers to entities that no longer exist).

    Raises:
        KeyError, TypeError, ValueError: the record is malformed.
    """
    before = graph.version
    op = effect["op"]
    if op == "create_entities":
        graph.create_entities(
            (str(e["name"]), str(e["entityType"]), [str(o) for o in e["observations"]])
            for e in effect["entities"]
        )
    elif op == "create_relations":
        graph.create_relations(_rel(r) for r in effect["relations"])
    elif op == "add_observations":
        graph.add_observations(
            [(str(n), [str(o) for o in obs]) for n, obs in effect["observations"]],
            skip_missing=True,
        )
    elif op == "delete_entities":
        graph.delete_entities(str(n) for n in effect["entityNames"])
    elif op == "delete_observations":
        graph.delete_observations((str(n), [str(o) for o in obs]) for n, obs in effect["deletions"])
    elif op == "delete_relations":
        graph.delete_relations([_rel(r) for r in effect["relations"]])
    else:
        raise ValueError(f"unknown journal operation {op!r}")
    return graph.version != before


def pretty(value: Any) -> str:
    """``JSON.stringify(value, null, 2)``, character for character, for JSON data of
    strings, booleans, null, lists and objects (what the tools return).
    """
    import pydantic_core  # here: the CLI's start-up imports stay lean

    try:
        # pydantic-core's encoder writes the same bytes as json.dumps(indent=2,
        # ensure_ascii=False) for such data, ~14x faster (json's indenting encoder is pure
        # Python); it refuses lone surrogates, which the json path below handles.
        return pydantic_core.to_json(value, indent=2).decode("utf-8")
    except (pydantic_core.PydanticSerializationError, UnicodeDecodeError):
        pass
    text = json.dumps(value, indent=2, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: JSON.stringify escapes them as \udxxx
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def result_text(tool: str, structured: Mapping[str, Any]) -> str:
    """The text content the official server sends next to ``structured``."""
    if tool == "create_entities":
        return pretty(structured["entities"])
    if tool == "create_relations":
        return pretty(structured["relations"])
    if tool == "add_observations":
        return pretty(structured["results"])
    if tool in _DELETED:
        return str(structured["message"])
    return pretty(structured)
