"""The knowledge graph in memory: entities, relations and the nine MCP memory operations.

:class:`KnowledgeGraph` holds no file and does no I/O; :mod:`companyd.memory._store` makes it
durable and :class:`companyd.memory._service.MemoryService` owns it inside the daemon. Its
operations follow the official MCP memory server (``@modelcontextprotocol/server-memory``
2026.8.31, docs/memory.md "Semantics"), with these deliberate fixes:

* entity names are unique: a second ``create_entities`` item with a name already created in
  the same call is skipped, just like a name already in the graph (official: stored twice);
* relations are unique by ``(from, to, relationType)``, also within one call;
* ``add_observations`` does not add the same string twice from one ``contents`` list
  (official: the check runs against the pre-call list only, so both copies are added).

Order is the file order: entities and relations keep their insertion order, new ones go to
the end, deleting keeps the order of the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from companyd.memory._errors import MemoryInconsistent, MemoryToolError

__all__ = ["Entity", "KnowledgeGraph", "Relation"]


_SURROGATE = re.compile("[\ud800-\udfff]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _pair(m: re.Match[str]) -> str:
    c = ord(m.group()) - 0x10000
    return chr(0xD800 + (c >> 10)) + chr(0xDC00 + (c & 0x3FF))


def _utf16_units(text: str) -> str:
    """``text`` with every character above U+FFFF split into its UTF-16 surrogate pair, one
    code point per JavaScript code unit.
    """
    return _ASTRAL.sub(_pair, text)


class Entity:
    """A named node with a type and an ordered list of observations (strings)."""

    __slots__ = ("entity_type", "name", "observations")

    def __init__(self, name: str, entity_type: str, observations: list[str]) -> None:
        self.name = name
        self.entity_type = entity_type
        self.observations = observations

    def to_dict(self) -> dict[str, Any]:
        """The MCP shape ``{name, entityType, observations}`` (a copy)."""
        return {
            "name": self.name,
            "entityType": self.entity_type,
            "observations": list(self.observations),
        }

    def copy(self) -> Entity:
        """An independent copy: its observation list can be changed without touching this entity."""
        return Entity(self.name, self.entity_type, list(self.observations))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Entity):
            return NotImplemented
        return (self.name, self.entity_type, self.observations) == (
            other.name,
            other.entity_type,
            other.observations,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Entity({self.name!r}, {self.entity_type!r}, {self.observations!r})"


class Relation(NamedTuple):
    """A directed, typed edge between two entity names. Endpoints need not exist."""

    source: str
    target: str
    relation_type: str

    def to_dict(self) -> dict[str, Any]:
        """The MCP shape ``{from, to, relationType}``."""
        return {"from": self.source, "to": self.target, "relationType": self.relation_type}


class KnowledgeGraph:
    """Entities and relations in file order, with the nine MCP memory operations.

    Attributes:
        preserved_lines: lines of the graph file this model does not understand (unknown
            ``type``), kept byte for byte and written back at the top of the file.
        version: increases by one on every operation that changed something; readers use it
            to cache derived views.
    """

    def __init__(self) -> None:
        self._entities: dict[str, Entity] = {}
        # name -> insertion sequence number (file order for open_nodes without a scan)
        self._order: dict[str, int] = {}
        # relation -> insertion sequence number, so results can be put back in file order
        self._relations: dict[Relation, int] = {}
        # name -> relations with that name at either end (endpoints need not be entities)
        self._touching: dict[str, set[Relation]] = {}
        self._seq = 0
        self.preserved_lines: list[bytes] = []
        self.version = 0

    # -- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entities)

    @property
    def relation_count(self) -> int:
        """The number of relations in the graph."""
        return len(self._relations)

    def entities(self) -> Iterator[Entity]:
        """Entities in file order (live objects: do not mutate)."""
        return iter(self._entities.values())

    def relations(self) -> Iterator[Relation]:
        """Relations in file order."""
        return iter(self._relations)

    def entity(self, name: str) -> Entity | None:
        """The entity called ``name`` (live object: do not mutate), or None."""
        return self._entities.get(name)

    def has_relation(self, relation: Relation) -> bool:
        """Whether this exact (source, target, type) relation is in the graph."""
        return relation in self._relations

    def relations_touching(self, names: Iterable[str]) -> list[Relation]:
        """Relations with ``from`` or ``to`` in ``names``, in file order."""
        found: set[Relation] = set()
        for name in names:
            found.update(self._touching.get(name, ()))
        return sorted(found, key=self._relations.__getitem__)

    def read_graph(self) -> dict[str, Any]:
        """``{entities, relations}``: the whole graph in file order (copies)."""
        return {
            "entities": [e.to_dict() for e in self._entities.values()],
            "relations": [r.to_dict() for r in self._relations],
        }

    def search_nodes(self, query: str) -> dict[str, Any]:
        """Entities whose name, type or any observation contains ``query`` (case-insensitive,
        Unicode lower-casing as JavaScript's ``toLowerCase``; substrings of UTF-16 code units
        as JavaScript's ``includes``), in file order, with the relations that have either end
        among them. ``""`` matches every entity.
        """
        q = query.lower()
        if _SURROGATE.search(q) is None:
            matched = [
                e
                for e in self._entities.values()
                if q in e.name.lower()
                or q in e.entity_type.lower()
                or any(q in o.lower() for o in e.observations)
            ]
        else:
            # A lone surrogate in the query: JavaScript compares UTF-16 code units, so it can
            # match one half of a pair ("🙂" is "\ud83d\ude42"). Only then are the strings
            # compared as code units; without surrogates both ways give the same answer.
            u = _utf16_units(q)
            matched = [
                e
                for e in self._entities.values()
                if u in _utf16_units(e.name.lower())
                or u in _utf16_units(e.entity_type.lower())
                or any(u in _utf16_units(o.lower()) for o in e.observations)
            ]
        return self._subgraph(matched)

    def open_nodes(self, names: Sequence[str]) -> dict[str, Any]:
        """Entities named in ``names`` (file order, unknown names skipped) with the relations
        that have either end among the entities found.
        """
        wanted = set(names)
        if len(wanted) * 4 < len(self._entities):
            found = [self._entities[n] for n in wanted if n in self._entities]
            found.sort(key=lambda e: self._order[e.name])
        else:  # most of the graph: one ordered scan
            found = [e for e in self._entities.values() if e.name in wanted]
        return self._subgraph(found)

    def _subgraph(self, entities: list[Entity]) -> dict[str, Any]:
        names = [e.name for e in entities]
        if len(names) * 4 > len(self._entities):  # most of the graph: one ordered scan
            nameset = set(names)
            rels = [r for r in self._relations if r.source in nameset or r.target in nameset]
        else:
            rels = self.relations_touching(names)
        return {
            "entities": [e.to_dict() for e in entities],
            "relations": [r.to_dict() for r in rels],
        }

    # -- writing ---------------------------------------------------------------------------

    def create_entities(self, items: Iterable[tuple[str, str, Sequence[str]]]) -> list[Entity]:
        """Add each ``(name, entityType, observations)`` whose name is not taken yet (in the
        graph or earlier in ``items``); existing entities are left as they are. Returns
        copies of the entities added, in order.
        """
        added: list[Entity] = []
        for name, entity_type, observations in items:
            if name in self._entities:
                continue
            entity = Entity(name, entity_type, list(observations))
            self._insert_entity(entity)
            added.append(entity.copy())
        if added:
            self.version += 1
        return added

    def create_relations(self, items: Iterable[Relation]) -> list[Relation]:
        """Add each relation not present yet (in the graph or earlier in ``items``). Endpoints
        are not checked: relations to names that are not entities are kept.
        """
        added: list[Relation] = []
        for rel in items:
            if rel in self._relations:
                continue
            self._add_relation(rel)
            added.append(rel)
        if added:
            self.version += 1
        return added

    def add_observations(
        self, items: Sequence[tuple[str, Sequence[str]]], *, skip_missing: bool = False
    ) -> list[tuple[str, list[str]]]:
        """Append to each named entity the strings of ``contents`` it does not have yet.

        All or nothing: if any named entity is missing, raises :class:`MemoryToolError`
        (``Entity with name X not found``, for the first missing name) and changes nothing,
        unless ``skip_missing`` (journal replay), which skips such items. Returns one
        ``(entityName, addedObservations)`` per item applied, in order.
        """
        if not skip_missing:
            for name, _ in items:
                if name not in self._entities:
                    raise MemoryToolError(f"Entity with name {name} not found")
        results: list[tuple[str, list[str]]] = []
        changed = False
        for name, contents in items:
            entity = self._entities.get(name)
            if entity is None:
                continue
            have = set(entity.observations)
            new: list[str] = []
            for content in contents:
                if content not in have:
                    have.add(content)
                    new.append(content)
            entity.observations.extend(new)
            changed = changed or bool(new)
            results.append((name, new))
        if changed:
            self.version += 1
        return results

    def delete_entities(self, names: Iterable[str]) -> list[str]:
        """Remove the named entities and every relation with either end among ``names``
        (even when no such entity exists). Missing names are ignored. Returns the names that
        removed something.
        """
        removed: list[str] = []
        for name in dict.fromkeys(names):
            hit = self._entities.pop(name, None) is not None
            if hit:
                del self._order[name]
            for rel in list(self._touching.get(name, ())):
                self._remove_relation(rel)
                hit = True
            if hit:
                removed.append(name)
        if removed:
            self.version += 1
        return removed

    def delete_observations(
        self, items: Iterable[tuple[str, Sequence[str]]]
    ) -> list[tuple[str, list[str]]]:
        """Remove every occurrence of the listed strings from each named entity. Missing
        entities and strings are ignored. Returns ``(name, strings removed)`` per change.
        """
        removed: list[tuple[str, list[str]]] = []
        for name, observations in items:
            entity = self._entities.get(name)
            if entity is None:
                continue
            drop = set(observations)
            gone = [o for o in dict.fromkeys(entity.observations) if o in drop]
            if gone:
                entity.observations = [o for o in entity.observations if o not in drop]
                removed.append((name, gone))
        if removed:
            self.version += 1
        return removed

    def delete_relations(self, items: Iterable[Relation]) -> list[Relation]:
        """Remove the listed relations; missing ones are ignored. Returns those removed."""
        removed: list[Relation] = []
        for rel in items:
            if rel in self._relations:
                self._remove_relation(rel)
                removed.append(rel)
        if removed:
            self.version += 1
        return removed

    # -- loading (used by the file reader) ---------------------------------------------------

    def load_entity(self, name: str, entity_type: str, observations: list[str]) -> bool:
        """Add an entity read from a file; a second entity of the same name is merged into
        the first (its observations appended, duplicates dropped). Returns True if merged.
        """
        existing = self._entities.get(name)
        if existing is None:
            # inlined _insert_entity: this runs once per line of a 100k-line file
            self._seq += 1
            self._entities[name] = Entity(name, entity_type, observations)
            self._order[name] = self._seq
            return False
        have = set(existing.observations)
        merged = list(dict.fromkeys(existing.observations))
        for o in observations:
            if o not in have:
                have.add(o)
                merged.append(o)
        existing.observations = merged
        return True

    def load_relation(self, rel: Relation) -> bool:
        """Add a relation read from a file. Returns True if it was a duplicate (dropped)."""
        if rel in self._relations:
            return True
        self._add_relation(rel)
        return False

    # -- integrity ---------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise :class:`MemoryInconsistent` if the indexes disagree with the data.

        O(size of the graph); run after loading and in tests.
        """
        for name, entity in self._entities.items():
            if entity.name != name or not isinstance(entity.observations, list):
                raise MemoryInconsistent(f"entity index broken at {name!r}")
        if self._order.keys() != self._entities.keys():
            raise MemoryInconsistent("entity order index does not match the entities")
        touching: dict[str, set[Relation]] = {}
        for rel in self._relations:
            touching.setdefault(rel.source, set()).add(rel)
            touching.setdefault(rel.target, set()).add(rel)
        live = {k: v for k, v in self._touching.items() if v}
        if touching != live:
            raise MemoryInconsistent("relation index does not match the relations")

    # -- internals ---------------------------------------------------------------------------

    def _insert_entity(self, entity: Entity) -> None:
        self._seq += 1
        self._entities[entity.name] = entity
        self._order[entity.name] = self._seq

    def _add_relation(self, rel: Relation) -> None:
        self._seq += 1
        self._relations[rel] = self._seq
        self._touching.setdefault(rel.source, set()).add(rel)
        self._touching.setdefault(rel.target, set()).add(rel)

    def _remove_relation(self, rel: Relation) -> None:
        del self._relations[rel]
        for end in (rel.source, rel.target):
            bucket = self._touching.get(end)
            if bucket is not None:
                bucket.discard(rel)
                if not bucket:
                    del self._touching[end]
