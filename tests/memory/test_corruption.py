"""Corruption (property-based): byte flips, truncations, duplicated and interleaved lines.

Load never raises; every intact line survives; every corrupt line lands in ``.corrupt`` with
its line number and exact bytes; the rewritten file is clean.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from companyd.memory._codec import encode_entity, encode_relation, parse_graph, read_quarantine
from companyd.memory._errors import MemoryNotAGraph
from companyd.memory._graph import Entity, Relation
from companyd.memory._store import GraphStore

_text = st.text(st.sampled_from('abcxyz éü東\n"\\/{}[]:,\u00a0\ufeff'), max_size=8)


@st.composite
def graph_lines(draw: st.DrawFn) -> list[bytes]:
    """The lines of a valid MCP memory file (unique names), maybe with an unknown-type line."""
    names = draw(st.lists(_text, min_size=1, max_size=8, unique=True))
    lines = [
        encode_entity(Entity(n, draw(_text), draw(st.lists(_text, max_size=3)))) for n in names
    ]
    for _ in range(draw(st.integers(0, 5))):
        a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        line = encode_relation(Relation(a, b, draw(_text)))
        if line not in lines:
            lines.append(line)
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), b'{"type":"_aim","source":"x"}')
    return lines


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    lines = draw(graph_lines())
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["duplicate", "interleave", "glue"]))
        i = draw(st.integers(0, len(lines) - 1))
        j = draw(st.integers(0, len(lines) - 1))
        if op == "duplicate":
            lines.insert(j, lines[i])
        elif op == "interleave":  # a half-written line from another writer, then the rest
            cut = draw(st.integers(0, len(lines[i])))
            lines[i : i + 1] = [lines[i][:cut], lines[j], lines[i][cut:]]
        else:  # two writers' lines glued together (no newline between)
            lines[i] = lines[i] + lines[j]
    data = b"\n".join(lines) + draw(st.sampled_from([b"", b"\n"]))
    buf = bytearray(data)
    for _ in range(draw(st.integers(0, 3))):
        if buf:
            k = draw(st.integers(0, len(buf) - 1))
            buf[k] ^= draw(st.integers(1, 255))
    if buf and draw(st.booleans()):
        buf = buf[: draw(st.integers(0, len(buf)))]
    return bytes(buf)


_JS_BLANK = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def _blank(raw: bytes) -> bool:
    """What the official reader skips: lines that JavaScript's trim() empties."""
    try:
        return not raw.decode("utf-8").strip(_JS_BLANK)
    except UnicodeDecodeError:
        return False


def _js_rejects(name: str) -> Any:
    raise ValueError(f"JSON.parse rejects {name}")


def _usable(raw: bytes) -> Any:
    """The parsed line if the reader must keep it, else None (independent of the codec)."""
    try:
        obj = json.loads(raw.decode("utf-8"), parse_constant=_js_rejects)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    if obj.get("type") == "entity":
        ok = isinstance(obj.get("name"), str) and isinstance(obj.get("entityType"), str)
        return obj if ok else None
    if obj.get("type") == "relation":
        ok = all(isinstance(obj.get(k), str) for k in ("from", "to", "relationType"))
        return obj if ok else None
    return obj


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400) | damaged())
def test_parse_never_raises_and_accounts_for_every_line(data: bytes) -> None:
    graph, report = parse_graph(data)
    graph.check_invariants()
    quarantined = {(q.lineno, q.raw) for q in report.quarantined if q.dropped}
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        if _blank(raw):
            continue
        obj = _usable(raw)
        if obj is None:
            assert (lineno, raw) in quarantined
        else:
            assert (lineno, raw) not in quarantined


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(damaged())
def test_repair_keeps_intact_lines_and_quarantines_corrupt_ones(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "memory.jsonl"
        path.write_bytes(data)
        lines = [raw for raw in data.split(b"\n") if not _blank(raw)]
        if lines and all(_usable(raw) is None for raw in lines):
            # nothing in it is a graph line: not a memory graph, left as it is (issue 15)
            with pytest.raises(MemoryNotAGraph):
                GraphStore(path).open()
            assert path.read_bytes() == data and os.listdir(d) == ["memory.jsonl"]
            return
        with GraphStore(path) as store:
            store.open()  # load + repair: must not raise
            graph = store.call("read_graph", {})
        entities = {e["name"]: e for e in graph["entities"]}
        relations = {(r["from"], r["to"], r["relationType"]) for r in graph["relations"]}
        corrupt = Path(d) / "memory.jsonl.corrupt"
        kept = list(read_quarantine(corrupt.read_bytes())) if corrupt.exists() else []
        dropped = {(q.lineno, q.raw) for q in kept if q.dropped}
        rewritten, report = parse_graph(path.read_bytes())
        assert not report.needs_repair  # the file left behind is clean
        for lineno, raw in enumerate(data.split(b"\n"), start=1):
            if _blank(raw):
                continue
            obj = _usable(raw)
            if obj is None:  # every corrupt line is in .corrupt, byte for byte
                assert (lineno, raw) in dropped
                continue
            if obj.get("type") == "entity":  # every intact line survives
                e = entities[obj["name"]]
                obs = obj.get("observations")
                if isinstance(obs, list):
                    assert {o for o in obs if isinstance(o, str)} <= set(e["observations"])
            elif obj.get("type") == "relation":
                assert (obj["from"], obj["to"], obj["relationType"]) in relations
            else:
                assert raw in rewritten.preserved_lines
