"""tests/untraced.py: the suite's start-up work runs with coverage's tracer off, and never
hides a companyd line from the report.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from untraced import HEAVY, tracer_paused

TESTS = Path(__file__).resolve().parent


def test_every_module_it_imports_ahead_is_installed() -> None:
    # a misspelt or renamed name would silently be imported traced again
    assert [name for name in HEAVY if importlib.util.find_spec(name) is None] == []


def test_the_tracer_is_off_inside_and_on_again_after(tmp_path: Path) -> None:
    probe = f"""
import json, sys
sys.path.insert(0, {str(TESTS)!r})
import coverage
from untraced import tracer_paused
cov = coverage.Coverage(data_file=None)
cov.start()
seen = [sys.gettrace() is not None]
with tracer_paused():
    seen.append(sys.gettrace() is not None)
seen.append(sys.gettrace() is not None)
cov.stop()
print(json.dumps(seen))
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [True, False, True]


def test_a_module_of_the_package_first_imported_inside_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "untraced_probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "late.py").write_text("X = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with tracer_paused("untraced_probe_pkg"):
        pass  # nothing imported: fine
    with (
        pytest.raises(RuntimeError, match=r"untraced_probe_pkg\.late imported with coverage"),
        tracer_paused("untraced_probe_pkg"),
    ):
        importlib.import_module("untraced_probe_pkg.late")
    for name in ("untraced_probe_pkg", "untraced_probe_pkg.late"):
        monkeypatch.delitem(sys.modules, name)


def test_hypothesis_draws_untraced_and_runs_the_test_traced(tmp_path: Path) -> None:
    probe = f"""
import json, sys
sys.path.insert(0, {str(TESTS)!r})
import coverage
from hypothesis import given, settings, strategies as st
from untraced import drawn_untraced
cov = coverage.Coverage(data_file=None)
cov.start()
drawn, ran = [], []
values = st.lists(st.integers()).map(lambda xs: drawn.append(sys.gettrace() is None) or xs)
@settings(max_examples=20, database=None)
@given(drawn_untraced(values))
def test(xs):
    ran.append(sys.gettrace() is not None)
test()
after = sys.gettrace() is not None
cov.stop()
print(json.dumps([len(drawn), all(drawn), len(ran), all(ran), after]))
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    n_drawn, untraced_draws, n_ran, traced_runs, traced_after = json.loads(out.stdout)
    assert n_drawn >= 20 and untraced_draws  # every draw with the tracer off
    assert n_ran >= 20 and traced_runs  # every run of the test's body with it on
    assert traced_after
