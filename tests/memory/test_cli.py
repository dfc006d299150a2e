"""``companyd memory …`` commands (in-process through the real parser, plus a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from companyd.cli import main
from companyd.memory._codec import not_a_graph, parse_graph, read_quarantine

GOOD = (
    b'{"type":"entity","name":"Acme","entityType":"client","observations":["pays late"]}\n'
    b'{"type":"entity","name":"Ann","entityType":"person","observations":["founder"]}\n'
    b'{"type":"relation","from":"Ann","to":"Acme","relationType":"sells_to"}'
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_read_search_open_neighbours(memfile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    memfile.write_bytes(GOOD)
    f = str(memfile)
    code, out, _ = run(capsys, "memory", "read-graph", "--file", f, "--json")
    assert code == 0 and len(json.loads(out)["entities"]) == 2
    code, out, _ = run(capsys, "memory", "read-graph", "--file", f)
    assert out.splitlines()[0] == "2 entities, 1 relation"
    assert "  Ann --sells_to--> Acme" in out
    code, out, _ = run(capsys, "memory", "search", "LATE", "--file", f, "--json")
    assert [e["name"] for e in json.loads(out)["entities"]] == ["Acme"]
    code, out, _ = run(capsys, "memory", "open", "Ann", "Nobody", "--file", f, "--json")
    assert json.loads(out)["relations"] == [
        {"from": "Ann", "to": "Acme", "relationType": "sells_to"}
    ]
    code, out, _ = run(capsys, "memory", "neighbours", "Acme", "--depth", "1", "--file", f)
    assert code == 0 and "- Ann --sells_to--> Acme" in out
    code, out, _ = run(capsys, "memory", "neighbours", "Nobody", "--file", f)
    assert code == 1 and "nothing about 'Nobody'" in out
    assert memfile.read_bytes() == GOOD  # read commands never write


def test_check_then_repair(memfile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    memfile.write_bytes(GOOD)
    code, out, _ = run(capsys, "memory", "check", "--file", str(memfile))
    assert code == 0 and "clean — 2 entities, 1 relation" in out
    damaged = GOOD.replace(b"\n", b'\n{"type":"entity","name":\n', 1) + b"\n" + GOOD[:40]
    memfile.write_bytes(damaged)
    code, out, _ = run(capsys, "memory", "check", "--file", str(memfile))
    assert code == 1
    assert "needs repair — 2 unusable lines quarantined; torn last line" in out
    assert "line 2: unparseable JSON" in out and "line 5: torn last line" in out
    assert "companyd memory repair --file" in out
    code, out, _ = run(capsys, "memory", "check", "--file", str(memfile), "--json")
    assert code == 1 and json.loads(out)["needs_repair"] is True
    assert memfile.read_bytes() == damaged  # check never writes
    code, out, _ = run(capsys, "memory", "repair", "--file", str(memfile))
    assert code == 0 and "repaired" in out and ".corrupt" in out
    graph, report = parse_graph(memfile.read_bytes())
    assert not report.needs_repair and len(graph) == 2
    kept = list(read_quarantine(memfile.with_name("memory.jsonl.corrupt").read_bytes()))
    assert [q.lineno for q in kept] == [2, 5]
    code, out, _ = run(capsys, "memory", "check", "--file", str(memfile))
    assert code == 0


@pytest.mark.parametrize(
    ("data", "clean"),
    [
        (b"", True),
        (b"\n\n", True),
        (GOOD.replace(b"\n", b"\r\n") + b"\r\n", True),
        (GOOD.split(b"\n", 2)[2], True),  # only a relation
        (b'{"type":"_aim","source":"mcp-knowledge-graph"}\n' + GOOD, True),
        (b"\xef\xbb\xbf" + GOOD, False),
        (GOOD + b'\n{"type":"entity","name":null,"entityType":"t","observations":[]}', False),
        (b"\x00\xff\xfe", False),
        (
            b'[1]\nnull\n"s"\n{"type":"entity","name":"a","entityType":"t","observations":"x"}',
            False,
        ),
    ],
)
def test_check_repair_and_import_on_odd_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, clean: bool
) -> None:
    memfile = tmp_path / "memory.jsonl"
    memfile.write_bytes(data)
    f = str(memfile)
    code, out, err = run(capsys, "memory", "check", "--file", f)
    assert code == (0 if clean else 1), out + err
    for argv in (
        ["read-graph"],
        ["search", "a"],
        ["neighbours", "Ann"],
        ["export", "--format", "graphml"],
    ):
        code, out, err = run(capsys, "memory", *argv, "--file", f)
        assert code in (0, 1) and "Traceback" not in out + err
    code, out, err = run(capsys, "memory", "import", f, "--file", str(tmp_path / "other.jsonl"))
    assert code == 0 and "imported" in out, out + err
    code, out, err = run(capsys, "memory", "repair", "--file", f)
    if not_a_graph(data):  # nothing to repair from: refused, the file left as it is
        assert code == 1 and "not a memory graph" in err and "Traceback" not in err, out + err
        assert memfile.read_bytes() == data
        return
    assert code == 0, out + err
    code, out, err = run(capsys, "memory", "check", "--file", f)
    assert code == 0 and "clean" in out, out + err
    assert not memfile.read_bytes().startswith(b"\xef\xbb\xbf")


def test_export_and_import_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src.jsonl"
    src.write_bytes(GOOD)
    out_json = tmp_path / "g.json"
    code, _, _ = run(
        capsys, "memory", "export", "--format", "json", "--file", str(src), "-o", str(out_json)
    )
    assert code == 0 and json.loads(out_json.read_bytes())["multigraph"] is True
    code, out, _ = run(capsys, "memory", "export", "--format", "graphml", "--file", str(src))
    assert code == 0 and out.startswith("<?xml") and "sells_to" in out

    dest = tmp_path / "dest.jsonl"
    dest.write_bytes(
        b'{"type":"entity","name":"Acme","entityType":"client","observations":["new"]}'
    )
    code, out, _ = run(capsys, "memory", "import", str(out_json), "--file", str(dest), "--json")
    assert code == 0
    assert json.loads(out) == {
        "file": str(dest),
        "source": str(out_json),
        "entities_added": 1,
        "observations_added": 1,
        "relations_added": 1,
    }
    graph, _ = parse_graph(dest.read_bytes())
    assert graph.read_graph()["entities"] == [
        {"name": "Acme", "entityType": "client", "observations": ["new", "pays late"]},
        {"name": "Ann", "entityType": "person", "observations": ["founder"]},
    ]
    # importing a JSONL file (the official server's) works the same, and again is a no-op
    code, out, _ = run(capsys, "memory", "import", str(src), "--file", str(dest))
    assert code == 0 and "0 entities, 0 observations, 0 relations added" in out


def test_path_comes_from_env_then_company_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "memory", "read-graph")
    assert code == 1 and "pass --file FILE, set MEMORY_FILE_PATH" in err
    (tmp_path / "company.yaml").write_text(
        (Path(__file__).resolve().parents[2] / "company.yaml").read_text()
    )
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "memory.jsonl").write_bytes(GOOD)
    code, out, err = run(capsys, "memory", "search", "founder", "--json")
    assert code == 0, err
    assert [e["name"] for e in json.loads(out)["entities"]] == ["Ann"]
    monkeypatch.setenv("MEMORY_FILE_PATH", "other.jsonl")  # relative: from the cwd
    (tmp_path / "other.jsonl").write_bytes(b"")
    code, out, _ = run(capsys, "memory", "read-graph", "--json")
    assert json.loads(out) == {"entities": [], "relations": []}


def test_missing_directory_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "memory", "repair", "--file", str(tmp_path / "no" / "m.jsonl"))
    assert code == 1 and "does not exist; create it or pass another --file" in err


def test_console_script_in_a_subprocess(memfile: Path) -> None:
    memfile.write_bytes(GOOD + b"\n{torn")
    env = dict(os.environ, MEMORY_FILE_PATH=str(memfile))
    done = subprocess.run(
        [sys.executable, "-m", "companyd", "memory", "check", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["file"] == str(memfile) and report["torn_tail"] is True
    assert "Traceback" not in done.stderr


def test_an_unusable_file_is_reported_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "m.jsonl").mkdir()  # a directory where the file should be
    code, _, err = run(capsys, "memory", "read-graph", "--file", str(tmp_path / "m.jsonl"))
    assert code == 1
    assert "cannot use" in err and "Is a directory" in err and "internal error" not in err


def test_import_says_when_a_file_holds_nothing_to_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.json"
    junk.write_text('{"foo": 1}\n')
    dest = tmp_path / "memory.jsonl"
    code, out, err = run(capsys, "memory", "import", str(junk), "--file", str(dest))
    assert code == 0 and "0 entities" in out
    assert "no entities or relations found" in err and "node-link JSON" in err


def test_import_of_broken_node_link_json_names_the_entry_and_imports_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "graph.json"
    bad.write_text(
        json.dumps(
            {
                "nodes": [
                    {"id": "Ann", "entityType": "person", "observations": []},
                    {"id": 3},
                ],
                "links": [],
            }
        )
    )
    dest = tmp_path / "memory.jsonl"
    code, out, err = run(capsys, "memory", "import", str(bad), "--file", str(dest))
    assert code != 0 and "Traceback" not in out + err
    assert "node-link JSON" in err and "{'id': 3}" in err and "Nothing was imported" in err
    assert not dest.exists() or b"Ann" not in dest.read_bytes()


@pytest.mark.parametrize(
    "section",
    [
        "memory:\n  path: data/graph.jsonl   # beside company.yaml\n",  # read line by line
        "memory: {path: data/graph.jsonl}\n",  # a flow mapping: read by the loader
    ],
)
def test_memory_path_of_company_yaml_is_relative_to_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    section: str,
) -> None:
    # company.yaml's memory.path, from another working directory: the file beside it, as the
    # daemon opens it, whether company.yaml is read line by line or by the loader
    company = tmp_path / "co"
    (company / "data").mkdir(parents=True)
    (company / "company.yaml").write_text(
        (Path(__file__).resolve().parents[2] / "company.yaml").read_text() + section
    )
    (company / "data" / "graph.jsonl").write_bytes(GOOD)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("COMPANYD_CONFIG", str(company / "company.yaml"))
    code, out, err = run(capsys, "memory", "search", "founder", "--json")
    assert code == 0, err
    assert [e["name"] for e in json.loads(out)["entities"]] == ["Ann"]


def test_serve_mcp_refuses_a_file_that_is_not_a_graph_at_once(tmp_path: Path) -> None:
    # no restart can make it a graph: one message, not five "crashed; restarting" first
    other = tmp_path / "hostname"
    other.write_text("myhost\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "companyd", "memory", "serve-mcp", "--file", str(other)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "restarting" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"companyd: memory file '{other}' is not a memory graph")
    assert other.read_text(encoding="utf-8") == "myhost\n"


def test_state_dir_names_the_companys_memory_as_for_every_other_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `memory search x --state-dir D` was a usage error; every other command takes it
    monkeypatch.delenv("MEMORY_FILE_PATH", raising=False)
    monkeypatch.chdir(tmp_path)  # no company.yaml here: <state-dir>/memory.jsonl
    state = tmp_path / "state"
    state.mkdir()
    (state / "memory.jsonl").write_bytes(GOOD)
    code, out, err = run(capsys, "memory", "search", "late", "--state-dir", str(state), "--json")
    assert code == 0, err
    assert [e["name"] for e in json.loads(out)["entities"]] == ["Acme"]
    # a company.yaml here naming memory.path elsewhere (maybe another company's): the
    # state directory's own graph still wins
    (tmp_path / "graph.jsonl").write_bytes(GOOD.replace(b"pays late", b"pays early"))
    (tmp_path / "company.yaml").write_text("memory:\n  path: graph.jsonl\n", encoding="utf-8")
    code, out, err = run(capsys, "memory", "search", "late", "--state-dir", str(state), "--json")
    assert code == 0, err
    assert [e["name"] for e in json.loads(out)["entities"]] == ["Acme"]
    # with no graph of its own there, company.yaml's memory.path (relative to it)
    (state / "memory.jsonl").unlink()
    code, out, err = run(capsys, "memory", "search", "early", "--state-dir", str(state), "--json")
    assert code == 0, err
    assert [e["name"] for e in json.loads(out)["entities"]] == ["Acme"]


def test_reading_a_memory_file_that_does_not_exist_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "0 entities, 0 relations" and exit 0 alone: a mistyped --file went unnoticed
    missing = tmp_path / "nope.jsonl"
    code, out, err = run(capsys, "memory", "read-graph", "--file", str(missing))
    assert code == 0 and out.startswith("0 entities, 0 relations")
    assert err.startswith(f"warning: no memory file at {str(missing)!r} yet")
    assert not missing.exists()  # a read never creates the graph
