r"""The MCP memory file format: writing it exactly, reading it tolerantly, repairing it.

The format is the official MCP memory server's JSONL (docs/memory.md "File format"):

* one compact JSON object per line, keys in this order::

      {"type":"entity","name":…,"entityType":…,"observations":[…]}
      {"type":"relation","from":…,"to":…,"relationType":…}

* all entity lines first, then all relation lines, each group in insertion order;
* non-ASCII written raw as UTF-8, control characters escaped as JavaScript's
  ``JSON.stringify`` does, lone surrogates as ``\udxxx`` escapes.

Our writer ends a non-empty file with ``\n`` (the official reader skips blank lines) and
writes an empty graph as an empty file; lines of unknown ``type`` are written back
verbatim, first. The reader accepts files with or without a final newline, ``\r\n``
endings and blank lines, and repairs instead of failing (see :func:`parse_graph`).

``<file>.corrupt`` keeps, byte for byte, every line the reader could not use or had to
change, each under a header naming its line number and the reason (:func:`format_quarantine`,
:func:`read_quarantine`).
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from companyd._frozen import Frozen
from companyd.memory._graph import Entity, KnowledgeGraph, Relation

__all__ = [
    "LoadReport",
    "QuarantinedLine",
    "encode_entity",
    "encode_relation",
    "format_quarantine",
    "not_a_graph",
    "parse_graph",
    "read_quarantine",
    "serialize",
]

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 line"``, ``"2 lines"``: a count with its noun in the right number."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON.parse (the official server) does not, so a
    # line holding them would break every official reader if we kept it.
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_DECODE = _DECODER.decode
# The C scanner without decode()'s whitespace regexes: most lines are compact JSON.
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
# What JavaScript's String.prototype.trim() removes (the official reader skips lines that
# trim to nothing).
_UTF8_BOM = b"\xef\xbb\xbf"
_JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_ENTITY_KEYS = frozenset(("type", "name", "entityType", "observations"))
_RELATION_KEYS = frozenset(("type", "from", "to", "relationType"))


def _to_bytes(text: str) -> bytes:
    # Python's json leaves a lone surrogate raw in the str (not encodable as UTF-8);
    # JavaScript's JSON.stringify writes it as a \udxxx escape, which backslashreplace
    # produces byte for byte. Every other character is valid UTF-8.
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace")


def encode_entity(entity: Entity) -> bytes:
    """The entity's line, exactly as the official server writes it (no newline)."""
    return _to_bytes(
        _ENCODER.encode(
            {
                "type": "entity",
                "name": entity.name,
                "entityType": entity.entity_type,
                "observations": entity.observations,
            }
        )
    )


def encode_relation(rel: Relation) -> bytes:
    """The relation's line, exactly as the official server writes it (no newline)."""
    return _to_bytes(
        _ENCODER.encode(
            {
                "type": "relation",
                "from": rel.source,
                "to": rel.target,
                "relationType": rel.relation_type,
            }
        )
    )


def serialize(graph: KnowledgeGraph) -> bytes:
    r"""The whole file: preserved unknown-type lines, entities, relations; ``\n`` after
    every line; an empty graph is an empty file.
    """
    lines = list(graph.preserved_lines)
    lines.extend(encode_entity(e) for e in graph.entities())
    lines.extend(encode_relation(r) for r in graph.relations())
    if not lines:
        return b""
    lines.append(b"")
    return b"\n".join(lines)


class QuarantinedLine(Frozen):
    """A line the reader dropped or changed, with its exact bytes (no newline).

    Attributes:
        lineno: 1-based line number in the file it came from (0 for journal records,
            whose byte offset is in ``reason``).
        raw: the line's bytes as they were.
        reason: why it was quarantined; ``dropped`` says whether it is gone from the graph
            (True) or was loaded in a repaired form (False).
    """

    lineno: int
    raw: bytes
    reason: str
    dropped: bool = True


@dataclass(kw_only=True)
class LoadReport:
    """What reading a graph file found and repaired.

    ``needs_repair`` is true when the file on disk differs from what the graph now holds in
    a way that matters (a line dropped or changed, duplicates merged); rewriting it fixes
    that. ``preserved`` unknown-type lines and a missing final newline are not problems.
    """

    lines: int = 0
    entities: int = 0
    relations: int = 0
    quarantined: list[QuarantinedLine] = field(default_factory=list)
    torn_tail: bool = False
    bom_removed: bool = False
    merged_entities: int = 0
    duplicate_relations: int = 0
    observations_fixed: int = 0
    extra_fields_dropped: int = 0
    preserved: int = 0
    noncanonical: int = 0
    journal_records: int = 0
    journal_torn: bool = False
    foreign_rewrite: bool = False

    @property
    def dropped_lines(self) -> int:
        """How many quarantined lines are gone from the graph (rather than loaded repaired)."""
        return sum(1 for q in self.quarantined if q.dropped)

    @property
    def needs_repair(self) -> bool:
        """Whether rewriting the file would change something that matters: a line dropped or
        repaired, duplicates merged, observations fixed, a torn journal or a foreign rewrite.
        """
        return bool(
            self.quarantined
            or self.merged_entities
            or self.duplicate_relations
            or self.observations_fixed
            or self.journal_torn
            or self.foreign_rewrite
        )

    def summary(self) -> str:
        """One line for logs and alerts, e.g. ``2 unparseable lines quarantined; 3 duplicate
        entities merged``; ``clean`` when there is nothing to say.
        """
        parts = []
        if self.dropped_lines:
            n = self.dropped_lines
            parts.append(f"{counted(n, 'unusable line')} quarantined")
        if self.torn_tail:
            parts.append("torn last line")
        if self.bom_removed:
            parts.append("UTF-8 byte order mark removed")
        if self.merged_entities:
            parts.append(f"{counted(self.merged_entities, 'duplicate entity line')} merged")
        if self.duplicate_relations:
            parts.append(f"{counted(self.duplicate_relations, 'duplicate relation')} dropped")
        if self.observations_fixed:
            parts.append(
                f"{counted(self.observations_fixed, 'entity', 'entities')} with missing/invalid "
                "observations"
            )
        if self.extra_fields_dropped:
            parts.append(f"{counted(self.extra_fields_dropped, 'line')} with extra fields trimmed")
        if self.journal_torn:
            parts.append("journal ended in a torn record (an unacknowledged write cut short)")
        if self.foreign_rewrite:
            parts.append(
                f"file rewritten by another program; {self.journal_records} journal "
                "records merged back"
            )
        return "; ".join(parts) if parts else "clean"

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-serialisable dict (quarantined lines without their bytes)."""
        return {
            "lines": self.lines,
            "entities": self.entities,
            "relations": self.relations,
            "needs_repair": self.needs_repair,
            "quarantined": [
                {"line": q.lineno, "reason": q.reason, "dropped": q.dropped}
                for q in self.quarantined
            ],
            "torn_tail": self.torn_tail,
            "bom_removed": self.bom_removed,
            "merged_entities": self.merged_entities,
            "duplicate_relations": self.duplicate_relations,
            "observations_fixed": self.observations_fixed,
            "extra_fields_dropped": self.extra_fields_dropped,
            "preserved_unknown_lines": self.preserved,
            "noncanonical_lines": self.noncanonical,
            "journal_records": self.journal_records,
            "journal_torn": self.journal_torn,
            "foreign_rewrite": self.foreign_rewrite,
            "summary": self.summary(),
        }


def parse_graph(data: bytes, *, check_format: bool = False) -> tuple[KnowledgeGraph, LoadReport]:
    """Read a graph file's bytes; never raises on bad content.

    Repairs, each recorded in the report:

    * a line that is not UTF-8, not JSON, not an object, or an entity/relation without its
      string fields is dropped and quarantined (a torn last line is one of these);
    * an entity whose ``observations`` is missing gets ``[]``; one whose ``observations`` is
      not a list of strings keeps its strings (the original line is quarantined);
    * extra fields on entity/relation lines are dropped, as the official server does on its
      next save (the original line is quarantined);
    * entities with the same name are merged into the first (observations in order,
      without repeats); relations repeated by ``(from, to, relationType)`` are dropped;
    * lines with another ``type`` (or none) are kept verbatim in ``preserved_lines``;
    * a UTF-8 byte order mark before the first line is removed (``JSON.parse`` refuses it,
      so the official server fails every call on such a file); that line is read, and its
      original bytes are quarantined as repaired.

    With ``check_format`` the report also counts lines not written in the exact canonical
    form or order (``noncanonical``; costs one encode per line).
    """
    graph = KnowledgeGraph()
    report = LoadReport()
    # Decode once when the whole file is UTF-8 (the usual case); else line by line, so one
    # bad byte costs one line. A "\n" byte never occurs inside a UTF-8 sequence, so both
    # split at the same places.
    try:
        lines: list[str] | list[bytes] = data.decode("utf-8").split("\n")
        textual = True
    except UnicodeDecodeError:
        lines = data.split(b"\n")
        textual = False
    bom_line: bytes | None = None
    if data.startswith(_UTF8_BOM):
        bom_line = data.split(b"\n", 1)[0]
        if textual:
            assert isinstance(lines[0], str)
            lines[0] = lines[0][1:]
        else:
            assert isinstance(lines[0], bytes)
            lines[0] = lines[0][len(_UTF8_BOM) :]
    last = len(lines) - 1
    unterminated = not data.endswith(b"\n")
    seen_relation = False
    scan = _SCAN
    load_entity = graph.load_entity
    # Loading builds many small containers; the cyclic collector would rescan them all
    # repeatedly (measured: ~2x slower at 100k entities). Nothing here creates cycles.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for index, line in enumerate(lines):
            if textual:
                text = line
                assert isinstance(text, str)
            else:
                assert isinstance(line, bytes)
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    report.lines += 1
                    why = f"not UTF-8 ({exc.reason} at byte {exc.start})"
                    _quarantine(report, index + 1, line, why, unterminated and index == last)
                    continue
            if not text.strip(_JS_WHITESPACE):
                continue  # blank, as JavaScript's trim() sees it
            report.lines += 1
            # Fast path: a line as the official server writes it.
            try:
                obj, end = scan(text, 0)
            except (StopIteration, ValueError, RecursionError):
                obj, end = None, -1
            if end != len(text) or type(obj) is not dict:
                try:
                    obj = _DECODE(text)  # whitespace around, or the error message
                except (ValueError, RecursionError) as exc:
                    # RecursionError: nested deeper than Python's json can go (JSON.parse
                    # has no such limit); the line cannot be read here, so it is kept
                    # in .corrupt like any other line we cannot read.
                    raw = text.encode("utf-8") if textual else line
                    assert isinstance(raw, bytes)
                    why = (
                        "unparseable JSON (nested too deeply for Python's json)"
                        if isinstance(exc, RecursionError)
                        else f"unparseable JSON ({exc})"
                    )
                    _quarantine(report, index + 1, raw, why, unterminated and index == last)
                    continue
            if type(obj) is dict and len(obj) == 4 and obj.get("type") == "entity":
                name = obj.get("name")
                entity_type = obj.get("entityType")
                observations = obj.get("observations")
                if (
                    type(name) is str
                    and type(entity_type) is str
                    and type(observations) is list
                    and _all_str(observations)
                ):
                    if load_entity(name, entity_type, observations):
                        report.merged_entities += 1
                    if check_format:
                        raw = text.encode("utf-8") if textual else line
                        assert isinstance(raw, bytes)
                        canonical = encode_entity(Entity(name, entity_type, observations))
                        if seen_relation or raw.rstrip(b"\r") != canonical:
                            report.noncanonical += 1
                    continue
            raw = text.encode("utf-8") if textual else line
            assert isinstance(raw, bytes)
            # It parsed, so it was written whole: whatever is wrong with it, it is not torn
            # (the official writer never ends the file with a newline).
            seen_relation = _load_other(
                graph, report, obj, raw, index + 1, False, seen_relation, check_format
            )
    finally:
        if gc_was_enabled:
            gc.enable()
    if bom_line is not None and bom_line.decode("utf-8", "replace").strip(_JS_WHITESPACE):
        _note_bom(report, bom_line)
    report.entities = len(graph)
    report.relations = graph.relation_count
    return graph, report


def not_a_graph(data: bytes) -> bool:
    """Whether ``data`` has lines but none that :func:`parse_graph` keeps (an entity, a
    relation or another JSON object, kept verbatim). Such a file is not a memory graph at
    all (e.g. a path pointing at some other text file): repairing it would empty it. Stops at
    the first kept line, so a real graph costs one line; blank lines do not count.
    """
    seen = False
    for line in data.split(b"\n"):
        _, report = parse_graph(line)
        if report.lines:
            if not report.dropped_lines:
                return False
            seen = True
    return seen


def _note_bom(report: LoadReport, raw: bytes) -> None:
    # Line 1 was read without its BOM; .corrupt keeps it as it was.
    report.bom_removed = True
    for i, q in enumerate(report.quarantined):
        if q.lineno == 1:
            report.quarantined[i] = QuarantinedLine(
                lineno=1, raw=raw, reason=q.reason, dropped=q.dropped
            )
            return
    report.quarantined.insert(
        0,
        QuarantinedLine(lineno=1, raw=raw, reason="UTF-8 byte order mark removed", dropped=False),
    )


def _all_str(items: list[Any]) -> bool:
    # a plain loop: ~3x cheaper than all() over a generator for the usual 1-3 items
    for item in items:  # noqa: SIM110
        if type(item) is not str:
            return False
    return True


def _load_other(
    graph: KnowledgeGraph,
    report: LoadReport,
    obj: Any,
    raw: bytes,
    lineno: int,
    torn: bool,
    seen_relation: bool,
    check_format: bool,
) -> bool:
    """Everything but a canonical entity line (the fast path). Returns ``seen_relation``."""
    if type(obj) is not dict:
        _quarantine(report, lineno, raw, f"not a JSON object (a {_js_type(obj)})", torn)
        return seen_relation
    kind = obj.get("type")
    if kind == "entity":
        name = obj.get("name")
        entity_type = obj.get("entityType")
        if type(name) is not str or type(entity_type) is not str:
            what = "name" if type(name) is not str else "entityType"
            _quarantine(report, lineno, raw, f"entity without a string {what}", torn)
            return seen_relation
        observations = obj.get("observations")
        altered: list[str] = []
        if observations is None:
            # missing or null: lossless to fix (the official reader chokes on it)
            report.observations_fixed += 1
            observations = []
        elif type(observations) is not list:
            report.observations_fixed += 1
            altered.append(f"observations was a {_js_type(observations)}, replaced by []")
            observations = []
        elif not _all_str(observations):
            report.observations_fixed += 1
            altered.append("non-string observations dropped")
            observations = [o for o in observations if type(o) is str]
        if not obj.keys() <= _ENTITY_KEYS:
            report.extra_fields_dropped += 1
            extra = sorted(obj.keys() - _ENTITY_KEYS)
            altered.append(f"extra fields dropped: {', '.join(extra)}")
        if altered:
            report.quarantined.append(
                QuarantinedLine(lineno=lineno, raw=raw, reason="; ".join(altered), dropped=False)
            )
        if graph.load_entity(name, entity_type, observations):
            report.merged_entities += 1
        if check_format and (
            seen_relation
            or raw.rstrip(b"\r") != encode_entity(Entity(name, entity_type, observations))
        ):
            report.noncanonical += 1
        return seen_relation
    if kind == "relation":
        source, target, rtype = obj.get("from"), obj.get("to"), obj.get("relationType")
        if type(source) is not str or type(target) is not str or type(rtype) is not str:
            missing = next(
                k
                for k, v in (("from", source), ("to", target), ("relationType", rtype))
                if type(v) is not str
            )
            _quarantine(report, lineno, raw, f"relation without a string {missing}", torn)
            return seen_relation
        if not obj.keys() <= _RELATION_KEYS:
            report.extra_fields_dropped += 1
            extra = sorted(obj.keys() - _RELATION_KEYS)
            report.quarantined.append(
                QuarantinedLine(
                    lineno=lineno,
                    raw=raw,
                    reason=f"extra fields dropped: {', '.join(extra)}",
                    dropped=False,
                )
            )
        rel = Relation(source, target, rtype)
        if graph.load_relation(rel):
            report.duplicate_relations += 1
        if check_format and raw.rstrip(b"\r") != encode_relation(rel):
            report.noncanonical += 1
        return True
    graph.preserved_lines.append(raw)
    report.preserved += 1
    return seen_relation


def _quarantine(report: LoadReport, lineno: int, raw: bytes, reason: str, torn: bool) -> None:
    if torn:
        report.torn_tail = True
        reason = f"torn last line (no final newline): {reason}"
    report.quarantined.append(QuarantinedLine(lineno=lineno, raw=raw, reason=reason))


def _js_type(value: object) -> str:
    # The type names JavaScript/zod use, so messages read the same as the official ones.
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


# -- <file>.corrupt ---------------------------------------------------------------------------

_HEADER_RE = re.compile(rb"^# line (\d+) \((\d+) bytes\)(?: \[(\w+)\])?: (.*)$")


def format_quarantine(lines: list[QuarantinedLine], *, source: str, when: str) -> bytes:
    """One section of ``<file>.corrupt``: a heading, then each line as a header
    ``# line N (B bytes) [dropped|repaired]: reason`` followed by exactly B raw bytes and a
    newline. The byte count makes the raw bytes recoverable whatever they contain.
    """
    out = [f"# companyd memory repair at {when} of {source}\n".encode()]
    for q in lines:
        reason = q.reason.replace("\n", " ").replace("\r", " ")
        tag = "dropped" if q.dropped else "repaired"
        out.append(f"# line {q.lineno} ({len(q.raw)} bytes) [{tag}]: {reason}\n".encode())
        out.append(q.raw)
        out.append(b"\n")
    return b"".join(out)


def read_quarantine(data: bytes) -> Iterator[QuarantinedLine]:
    """The entries of a ``<file>.corrupt`` file, in order (inverse of
    :func:`format_quarantine`); stops at the first malformed header.
    """
    pos = 0
    n = len(data)
    while pos < n:
        end = data.find(b"\n", pos)
        if end < 0:
            return
        header = data[pos:end]
        pos = end + 1
        if header.startswith(b"# companyd memory repair"):
            continue
        m = _HEADER_RE.match(header)
        if m is None:
            return
        size = int(m.group(2))
        raw = data[pos : pos + size]
        pos += size + 1
        yield QuarantinedLine(
            lineno=int(m.group(1)),
            raw=raw,
            reason=m.group(4).decode("utf-8", "replace"),
            dropped=m.group(3) != b"repaired",
        )
