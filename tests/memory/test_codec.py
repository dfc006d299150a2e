"""The MCP JSONL format: exact writer, tolerant reader, repair report, .corrupt format."""

from __future__ import annotations

import json

from companyd.memory._codec import (
    QuarantinedLine,
    encode_entity,
    encode_relation,
    format_quarantine,
    parse_graph,
    read_quarantine,
    serialize,
)
from companyd.memory._graph import Entity, KnowledgeGraph, Relation


def test_entity_and_relation_lines_have_the_official_key_order_and_compact_form() -> None:
    assert encode_entity(Entity("Alice", "person", ["works at Acme"])) == (
        b'{"type":"entity","name":"Alice","entityType":"person","observations":["works at Acme"]}'
    )
    assert (
        encode_relation(Relation("Alice", "Acme", "works_at"))
        == b'{"type":"relation","from":"Alice","to":"Acme","relationType":"works_at"}'
    )


def test_strings_are_escaped_as_json_stringify_does() -> None:
    # raw UTF-8 for non-ASCII (including U+2028), "/" unescaped, short escapes for
    # \b \f \n \r \t, lower-case \u00xx for other controls, \udxxx for lone surrogates
    e = Entity("Zoë/東京\u2028", "t", ["a\nb\tc\rd\be\ff\x01g\x7fh", "\ud800x", 'q"\\'])
    line = encode_entity(e)
    assert (
        line
        == (
            '{"type":"entity","name":"Zoë/東京\u2028","entityType":"t","observations":'
            '["a\\nb\\tc\\rd\\be\\ff\\u0001g\x7fh","\\ud800x","q\\"\\\\"]}'
        ).encode()
    )
    # and it reads back to the same strings
    graph, report = parse_graph(line)
    assert not report.needs_repair
    got = graph.entity("Zoë/東京\u2028")
    assert got is not None and got.observations == e.observations


def test_serialize_writes_entities_then_relations_with_a_final_newline() -> None:
    g = KnowledgeGraph()
    g.create_relations([Relation("a", "b", "knows")])  # relations may come first in time
    g.create_entities([("a", "p", []), ("b", "p", ["x"])])
    assert serialize(g) == (
        b'{"type":"entity","name":"a","entityType":"p","observations":[]}\n'
        b'{"type":"entity","name":"b","entityType":"p","observations":["x"]}\n'
        b'{"type":"relation","from":"a","to":"b","relationType":"knows"}\n'
    )


def test_an_empty_graph_is_an_empty_file() -> None:
    assert serialize(KnowledgeGraph()) == b""
    graph, report = parse_graph(b"")
    assert len(graph) == 0 and report.lines == 0 and not report.needs_repair


OFFICIAL = (
    b'{"type":"entity","name":"Alice","entityType":"person","observations":["works at Acme"]}\n'
    b'{"type":"entity","name":"Acme","entityType":"company","observations":[]}\n'
    b'{"type":"relation","from":"Alice","to":"Acme","relationType":"works_at"}'
)


def test_reads_files_with_and_without_a_final_newline_and_crlf() -> None:
    for data in (OFFICIAL, OFFICIAL + b"\n", OFFICIAL.replace(b"\n", b"\r\n") + b"\r\n"):
        graph, report = parse_graph(data)
        assert not report.needs_repair, report.summary()
        assert graph.read_graph() == {
            "entities": [
                {"name": "Alice", "entityType": "person", "observations": ["works at Acme"]},
                {"name": "Acme", "entityType": "company", "observations": []},
            ],
            "relations": [{"from": "Alice", "to": "Acme", "relationType": "works_at"}],
        }
    # a file we write from that graph is byte-identical except for the final newline
    graph, _ = parse_graph(OFFICIAL)
    assert serialize(graph) == OFFICIAL + b"\n"


def test_blank_lines_are_skipped_silently() -> None:
    graph, report = parse_graph(b"\n\n" + OFFICIAL.replace(b"\n", b"\n   \n") + b"\n\n")
    assert len(graph) == 2 and graph.relation_count == 1
    assert not report.needs_repair and report.lines == 3
    # "blank" as JavaScript's trim() sees it: no-break spaces and a BOM are blank too
    graph, report = parse_graph(OFFICIAL + "\n\u00a0\ufeff\u2028\n".encode())
    assert len(graph) == 2 and not report.needs_repair and report.lines == 3


def test_unparseable_lines_are_quarantined_with_their_line_numbers_and_bytes() -> None:
    bad = b'{"type":"entity","name":"Bob","entityType":"person","observations":["x"]}{"type"'
    data = OFFICIAL.replace(b"\n", b"\n" + bad + b"\n", 1) + b"\nnull\n[1,2]\n\xff\xfe\n"
    data += b'{"type":"x","v":NaN}\n'  # Python's json takes NaN; JSON.parse does not
    graph, report = parse_graph(data)
    assert [e.name for e in graph.entities()] == ["Alice", "Acme"]
    assert report.needs_repair
    got = [(q.lineno, q.raw, q.dropped) for q in report.quarantined]
    assert got == [
        (2, bad, True),
        (5, b"null", True),
        (6, b"[1,2]", True),
        (7, b"\xff\xfe", True),
        (8, b'{"type":"x","v":NaN}', True),
    ]
    assert "unparseable JSON" in report.quarantined[0].reason
    assert "not a JSON object (a null)" in report.quarantined[1].reason
    assert "not UTF-8" in report.quarantined[3].reason
    assert not report.torn_tail


def test_a_line_nested_too_deeply_for_python_is_quarantined_not_raised() -> None:
    # JSON.parse takes any depth (the official server ignores such an unknown-type line);
    # Python's json raises RecursionError, which used to escape the reader and crash-loop
    # the owner (serve-mcp exited with "internal error").
    deep = b'{"type":"x","v":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    for data in (OFFICIAL + b"\n" + deep + b"\n", deep + b"\n" + OFFICIAL):
        graph, report = parse_graph(data)
        assert [e.name for e in graph.entities()] == ["Alice", "Acme"]
        assert report.needs_repair and not report.torn_tail
        assert [q.raw for q in report.quarantined] == [deep]
        assert "nested too deeply" in report.quarantined[0].reason


def test_a_torn_last_line_is_quarantined_and_reported() -> None:
    data = OFFICIAL + b'\n{"type":"entity","name":"Half","entityTy'
    graph, report = parse_graph(data)
    assert report.torn_tail and report.needs_repair
    assert len(graph) == 2
    assert report.quarantined[-1].raw == b'{"type":"entity","name":"Half","entityTy'
    assert report.quarantined[-1].reason.startswith("torn last line")
    # a complete last line without a newline is not torn
    _, clean = parse_graph(OFFICIAL)
    assert not clean.torn_tail


def test_a_complete_but_invalid_last_line_is_not_called_torn() -> None:
    # The official writer never ends the file with a newline, so its last line is always
    # "unterminated"; a line that parses as JSON was written whole, whatever is wrong with it.
    data = OFFICIAL + b'\n{"type":"entity","name":null,"entityType":"t","observations":[]}'
    graph, report = parse_graph(data)
    assert len(graph) == 2 and report.needs_repair and not report.torn_tail
    assert report.quarantined[-1].reason == "entity without a string name"


def test_a_utf8_byte_order_mark_is_removed_not_the_first_line() -> None:
    # A BOM (Notepad and friends add one) makes JSON.parse refuse line 1, and the official
    # server then fails every call; we read the line and rewrite the file without the BOM.
    bom = b"\xef\xbb\xbf"
    graph, report = parse_graph(bom + OFFICIAL)
    expected, _ = parse_graph(OFFICIAL)
    assert graph.read_graph() == expected.read_graph()
    assert report.needs_repair and report.dropped_lines == 0
    first = report.quarantined[0]
    assert (first.lineno, first.dropped) == (1, False)
    assert first.raw == bom + OFFICIAL.split(b"\n")[0]  # the original bytes, BOM included
    assert "byte order mark" in first.reason and "byte order mark" in report.summary()
    assert serialize(graph).startswith(b'{"type":"entity"')
    # the same when the file is not all UTF-8, and a bad first line keeps its BOM in .corrupt
    _, report = parse_graph(bom + b"{oops\n\xff\n" + OFFICIAL)
    assert [(q.lineno, q.raw) for q in report.quarantined] == [(1, bom + b"{oops"), (2, b"\xff")]
    # a BOM alone on a line is blank to both readers (JavaScript's trim() removes it)
    _, report = parse_graph(bom + b"\n" + OFFICIAL)
    assert not report.needs_repair


def test_missing_or_invalid_observations_are_repaired() -> None:
    data = (
        b'{"type":"entity","name":"a","entityType":"t"}\n'
        b'{"type":"entity","name":"b","entityType":"t","observations":null}\n'
        b'{"type":"entity","name":"c","entityType":"t","observations":"oops"}\n'
        b'{"type":"entity","name":"d","entityType":"t","observations":["ok",3,null,"fine"]}\n'
    )
    graph, report = parse_graph(data)
    obs = {e.name: e.observations for e in graph.entities()}
    assert obs == {"a": [], "b": [], "c": [], "d": ["ok", "fine"]}
    assert report.observations_fixed == 4 and report.needs_repair
    # lossless fixes (missing, null) keep nothing; lossy ones keep the original line
    assert [(q.lineno, q.dropped) for q in report.quarantined] == [(3, False), (4, False)]


def test_entities_with_the_same_name_are_merged_in_order_without_repeats() -> None:
    data = (
        b'{"type":"entity","name":"a","entityType":"person","observations":["1","2"]}\n'
        b'{"type":"entity","name":"b","entityType":"t","observations":[]}\n'
        b'{"type":"entity","name":"a","entityType":"robot","observations":["2","3","1","4"]}\n'
    )
    graph, report = parse_graph(data)
    assert [e.to_dict() for e in graph.entities()] == [
        {"name": "a", "entityType": "person", "observations": ["1", "2", "3", "4"]},
        {"name": "b", "entityType": "t", "observations": []},
    ]
    assert report.merged_entities == 1 and report.needs_repair


def test_duplicate_relations_are_dropped() -> None:
    r = b'{"type":"relation","from":"a","to":"b","relationType":"knows"}\n'
    other = b'{"type":"relation","from":"b","to":"a","relationType":"knows"}\n'
    graph, report = parse_graph(r + other + r + r)
    assert [x.to_dict() for x in graph.relations()] == [
        {"from": "a", "to": "b", "relationType": "knows"},
        {"from": "b", "to": "a", "relationType": "knows"},
    ]
    assert report.duplicate_relations == 2


def test_unknown_type_lines_are_preserved_verbatim_and_written_first() -> None:
    aim = b'{"type":"_aim","source":"mcp-knowledge-graph"}'
    untyped = b'{"hello":  "world"}'
    data = OFFICIAL.replace(b"\n", b"\n" + untyped + b"\n", 1) + b"\n" + aim
    graph, report = parse_graph(data)
    assert report.preserved == 2 and not report.needs_repair
    assert graph.preserved_lines == [untyped, aim]
    out = serialize(graph)
    assert out.split(b"\n")[:2] == [untyped, aim]
    # and the rewritten file reads back to the same graph
    again, _ = parse_graph(out)
    assert again.read_graph() == graph.read_graph()
    assert again.preserved_lines == graph.preserved_lines


def test_extra_fields_are_dropped_but_kept_in_quarantine() -> None:
    line = b'{"type":"entity","name":"a","entityType":"t","observations":[],"createdAt":"2025"}'
    rel = b'{"type":"relation","from":"a","to":"b","relationType":"r","weight":2}'
    graph, report = parse_graph(line + b"\n" + rel)
    assert graph.read_graph()["entities"] == [{"name": "a", "entityType": "t", "observations": []}]
    assert report.extra_fields_dropped == 2
    assert [(q.raw, q.dropped) for q in report.quarantined] == [(line, False), (rel, False)]
    assert "createdAt" in report.quarantined[0].reason


def test_entities_and_relations_without_string_fields_are_quarantined() -> None:
    data = (
        b'{"type":"entity","entityType":"t","observations":[]}\n'
        b'{"type":"entity","name":5,"entityType":"t","observations":[]}\n'
        b'{"type":"entity","name":"x","observations":[]}\n'
        b'{"type":"relation","from":"a","relationType":"r"}\n'
    )
    graph, report = parse_graph(data)
    assert len(graph) == 0 and graph.relation_count == 0
    reasons = [q.reason for q in report.quarantined]
    assert reasons == [
        "entity without a string name",
        "entity without a string name",
        "entity without a string entityType",
        "relation without a string to",
    ]


def test_check_format_counts_lines_not_in_canonical_form_or_order() -> None:
    spaced = b'{"type": "entity", "name": "a", "entityType": "t", "observations": []}\n'
    rel = b'{"type":"relation","from":"a","to":"b","relationType":"r"}\n'
    late = b'{"type":"entity","name":"b","entityType":"t","observations":[]}\n'
    _, report = parse_graph(spaced + rel + late, check_format=True)
    assert report.noncanonical == 2  # the spaced line, and an entity after a relation
    assert not report.needs_repair
    _, clean = parse_graph(OFFICIAL, check_format=True)
    assert clean.noncanonical == 0


def test_quarantine_file_round_trips_arbitrary_bytes() -> None:
    lines = [
        QuarantinedLine(lineno=3, raw=b'{"broken\r', reason="unparseable\nJSON"),
        QuarantinedLine(lineno=9, raw=b"\x00\xff# line 1 (2 bytes): fake", reason="x"),
        QuarantinedLine(lineno=10, raw=b"", reason="empty", dropped=False),
    ]
    data = format_quarantine(lines, source="/m.jsonl", when="2026-01-01T00:00:00Z")
    data += format_quarantine(lines[:1], source="/m.jsonl", when="2026-01-02T00:00:00Z")
    back = list(read_quarantine(data))
    assert [(q.lineno, q.raw, q.dropped) for q in back] == [
        (3, b'{"broken\r', True),
        (9, b"\x00\xff# line 1 (2 bytes): fake", True),
        (10, b"", False),
        (3, b'{"broken\r', True),
    ]
    assert back[0].reason == "unparseable JSON"


def test_report_summary_and_dict_are_json_serialisable() -> None:
    _, report = parse_graph(OFFICIAL + b"\n{oops")
    d = report.to_dict()
    json.dumps(d)
    assert d["needs_repair"] is True and d["torn_tail"] is True
    assert "1 unusable line quarantined" in report.summary()
