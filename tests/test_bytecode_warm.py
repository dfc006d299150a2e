"""tests/bytecode_warm.py: what the xdist controller caches is what pytest's import hook
reads — a worker collecting a warmed module uses the cached file instead of rewriting it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bytecode_warm import rewritten_modules, warm_rewritten

MODULE = "def test_adds() -> None:\n    assert 1 + 1 == 2\n"


def _cached(path: Path) -> list[Path]:
    return sorted((path.parent / "__pycache__").glob(f"{path.stem}.*-pytest-*.pyc"))


def test_a_warmed_module_is_collected_from_the_cache_not_rewritten_again(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    module = tmp_path / "test_sample.py"
    module.write_text(MODULE, encoding="utf-8")
    (tmp_path / "helper.py").write_text("X = 1\n", encoding="utf-8")
    files = rewritten_modules(tmp_path, pytestconfig.getini("python_files"))
    assert files == [module.resolve()]  # test modules only: helpers are not rewritten
    assert warm_rewritten(pytestconfig, files) == 1
    assert warm_rewritten(pytestconfig, files) == 0  # fresh: nothing to do
    [pyc] = _cached(module)
    before = pyc.stat()
    drop = {"PYTHONDONTWRITEBYTECODE", "PYTEST_ADDOPTS"}  # e.g. CI's --cov
    env = {k: v for k, v in os.environ.items() if k not in drop}
    got = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(module)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert got.returncode == 0, got.stdout + got.stderr
    assert "1 passed" in got.stdout
    after = pyc.stat()
    # pytest writes a fresh rewrite to a new file renamed over the old one: same inode
    # and time mean it read ours
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert _cached(module) == [pyc]
