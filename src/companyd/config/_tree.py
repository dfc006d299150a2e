"""The schema as a navigable tree: which model sits at a path of the document, and how
its keys may be spelled.

The wording of errors, the secret scan and the README test walk the schema through these
functions. :func:`canonicalize` renames accepted alternative spellings (``reportsTo``,
peers' ``cronExpression``) to the canonical key before validation, with a deprecation
warning for each.
"""

from __future__ import annotations

import functools
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from companyd.config._report import Path_, Report
from companyd.config._schema import CompanyFile

__all__ = [
    "PEER_SPELLINGS",
    "MapOf",
    "SchemaNode",
    "canonicalize",
    "child_schema",
    "file_key",
    "schema_at",
    "schema_keys",
    "schema_of",
]


class MapOf:
    """A schema node that is a mapping from free-form names to ``inner``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner


SchemaNode = type[BaseModel] | MapOf | None


def schema_of(annotation: Any) -> SchemaNode:
    """The model (or mapping of models) inside an annotation such as ``X | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is dict and len(args) == 2:
        return MapOf(args[1])
    if origin is tuple:
        return None
    for a in args:
        found = schema_of(a)
        if found is not None:
            return found
    return None


def file_key(name: str, info: FieldInfo) -> str:
    """How a field is spelled in company.yaml (``schema_`` is ``schema``)."""
    return info.alias if name.endswith("_") and info.alias else name


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(p.title() for p in rest)


#: Spellings from peer tools (Paperclip, OpenClaw, CrewAI; docs/configuration.md) that are
#: accepted, with a deprecation warning, besides each field's camelCase form.
PEER_SPELLINGS: dict[str, dict[str, str]] = {
    "TriggerSpec": {"cronExpression": "cron", "intervalSec": "every", "tz": "timezone"},
    "TelegramSpec": {"chat_id_env": "chat_ids_env"},
    "AgentSpec": {"llm": "model"},
    "RoutineSpec": {"agent": "assignee"},
}


@functools.cache
def schema_keys(model: type[BaseModel]) -> tuple[dict[str, str], dict[str, str]]:
    """(canonical file key → field name, other accepted spelling → canonical file key)."""
    canonical = {file_key(n, f): n for n, f in model.model_fields.items()}
    other: dict[str, str] = dict(PEER_SPELLINGS.get(model.__name__, {}))
    for n, f in model.model_fields.items():
        key = file_key(n, f)
        for spelling in (f.alias, _camel(key)):
            if spelling and spelling != key and spelling not in canonical:
                other[spelling] = key
    return canonical, other


def child_schema(schema: SchemaNode, key: str | int) -> SchemaNode:
    """The schema node under ``key`` (any accepted spelling) of ``schema``, if known."""
    if isinstance(schema, MapOf):
        return schema_of(schema.inner)
    if isinstance(schema, type) and isinstance(key, str):
        canonical, other = schema_keys(schema)
        name = canonical.get(key) or canonical.get(other.get(key, ""))
        if name is None and key in schema.model_fields:
            name = key
        if name is not None:
            return schema_of(schema.model_fields[name].annotation)
    return None


def item_schema(schema: SchemaNode, key: str) -> SchemaNode:
    """The model of the items of the list field ``key`` of ``schema`` (a ``tuple[X, ...]``
    of models, e.g. ``alerts.webhooks``), if it is one.
    """
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return None
    canonical, other = schema_keys(schema)
    name = canonical.get(key) or canonical.get(other.get(key, "")) or key
    info = schema.model_fields.get(name)
    if info is None:
        return None
    for annotation in (info.annotation, *typing.get_args(info.annotation)):
        if typing.get_origin(annotation) is tuple:
            args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
            return schema_of(args[0]) if len(args) == 1 else None
    return None


def schema_at(path: Path_) -> SchemaNode:
    """The schema node at ``path`` of the document, if the schema knows that path."""
    schema: SchemaNode = CompanyFile
    for part in path:
        schema = child_schema(schema, part)
        if schema is None:
            return None
    return schema


def canonicalize(node: Any, schema: SchemaNode, path: Path_, rep: Report) -> Any:
    """Rename accepted alternative spellings (``reportsTo``) to the canonical snake_case key,
    warning once for each; both spellings at once is an error.
    """
    if not isinstance(node, dict):
        return node
    if isinstance(schema, MapOf):
        inner = schema_of(schema.inner)
        return {k: canonicalize(v, inner, (*path, k), rep) for k, v in node.items()}
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return node
    _, other = schema_keys(schema)
    out: dict[str, Any] = {}
    for k, v in node.items():
        key = k
        if k in other:
            key = other[k]
            if key in node:
                rep.add(
                    (*path, k),
                    f"{k!r} and {key!r} are the same setting, given twice; keep only {key!r}",
                    key=True,
                )
                rep.settle((*path, k))
                continue
            rep.warn(
                (*path, k),
                f"{k!r} is a deprecated spelling of {key!r}; it works for now — write "
                f"{key!r} instead",
                key=True,
            )
            rep.pos.move((*path, k), (*path, key))
        out[key] = canonicalize(v, child_schema(schema, key), (*path, key), rep)
    return out
