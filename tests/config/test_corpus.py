"""The broken-config corpus: every file in tests/config/broken/ must fail validation with
exactly the messages it declares, at the declared line:column, and never a traceback.

Each file starts with a comment saying what is wrong, then one ``# expect:`` line per
message ``companyd validate`` must print, written as ``LINE:COL: path: message`` (the
expected text is a prefix of the printed line after ``FILE:``). Lines and expectations
match one to one: a missing message fails, and so does an extra one (a cascade of derived
errors is a defect too).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from companyd.cli import main

CORPUS = Path(__file__).parent / "broken"
FILES = sorted(CORPUS.glob("*.yaml"))


def expectations(path: Path) -> list[str]:
    # The files are read as bytes: one of them is deliberately not UTF-8.
    out = []
    for raw in path.read_bytes().splitlines():
        line = raw.decode("utf-8", errors="replace")
        if line.startswith("# expect: "):
            out.append(line.removeprefix("# expect: "))
    return out


def run_validate(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["validate", *args])
    return rc, out.getvalue(), err.getvalue()


def match_one_to_one(path: Path, lines: list[str], expected: list[str]) -> None:
    prefix = f"{path}:"
    for line in lines:
        assert line.startswith(prefix), f"{line!r} does not start with the file name"
    rest = [line[len(prefix) :] for line in lines]
    unmatched = list(rest)
    missing = []
    for want in expected:
        hit = next((r for r in unmatched if r.startswith(want)), None)
        if hit is None:
            missing.append(want)
        else:
            unmatched.remove(hit)
    assert not missing and not unmatched, (
        f"{path.name}:\n  expected but not printed: {missing}\n  printed but not expected: "
        f"{unmatched}"
    )


def test_the_corpus_is_large_enough() -> None:
    assert len(FILES) >= 30
    for f in FILES:
        assert expectations(f), f"{f.name} declares no '# expect:' line"


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_broken_config_is_reported_at_the_right_place(path: Path) -> None:
    rc, out, err = run_validate(str(path))
    assert rc == 1
    assert out == ""
    assert "Traceback" not in err and "internal error" not in err
    match_one_to_one(path, err.splitlines(), expectations(path))


@pytest.mark.parametrize("name", ["many_errors_at_once", "not_utf8", "empty"])
def test_json_output_carries_the_same_errors(name: str) -> None:
    path = CORPUS / f"{name}.yaml"
    rc, out, err = run_validate("--json", str(path))
    assert rc == 1
    result = json.loads(out)
    assert result["valid"] is False
    printed = [f"{e['line']}:{e['column']}: " for e in result["errors"]]
    wanted = [e.split(" ", 1)[0] + " " for e in expectations(path)]
    assert printed == wanted
    assert len(err.splitlines()) == len(result["errors"])


def _console_script() -> list[str]:
    script = Path(sys.executable).parent / "companyd"
    return [str(script)] if script.exists() else [sys.executable, "-m", "companyd"]


@pytest.mark.parametrize(
    ("command", "name"),
    [
        ("script", "many_errors_at_once"),
        ("script", "not_utf8"),
        ("module", "control_character"),
    ],
)
def test_real_companyd_process(command: str, name: str, tmp_path: Path) -> None:
    path = CORPUS / f"{name}.yaml"
    argv = _console_script() if command == "script" else [sys.executable, "-m", "companyd"]
    proc = subprocess.run(
        [*argv, "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    match_one_to_one(path, proc.stderr.splitlines(), expectations(path))
