"""The bytecode caches, warmed once by the xdist controller before its workers start.

On a fresh checkout (CI) nothing is compiled yet, so each of the N workers of ``-n auto``
rewrites the asserts of every test module (pytest's assertion rewriting: ~200 modules,
~6.6 s of CPU) and compiles the companyd modules it imports, all while it collects — the
same work N times at the same moment, on a machine with half as many cores as workers
(~12 s of the suite's first 29 s, docs/testing.md "Scheduling"). Done once here, the
workers find every cached file fresh, as they do on every later run of the same checkout.

pytest has no public API for its rewrite cache; this calls the functions its import hook
calls (``AssertionRewritingHook.exec_module``), in the same order, so the cached files are
the ones the hook itself would write and read (tests/test_bytecode_warm.py holds that).
Where those functions changed, nothing is warmed and the workers compile as before.
"""

from __future__ import annotations

import compileall
import fnmatch
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest


def rewritten_modules(root: Path, patterns: Iterable[str]) -> list[Path]:
    """The files under ``root`` that pytest's assertion rewriting rewrites: test modules
    (``python_files`` patterns) and conftest.py files.
    """
    patterns = list(patterns)
    return sorted(
        path.resolve()
        for path in root.rglob("*.py")
        if path.name == "conftest.py" or any(fnmatch.fnmatch(path.name, p) for p in patterns)
    )


def warm_rewritten(config: pytest.Config, files: Iterable[Path]) -> int:
    """Write pytest's rewritten-module cache for ``files`` where it is missing or stale, as
    ``config``'s import hook would; the number written (0 where asserts are not rewritten
    (``--assert=plain``) or pytest's internals are not the expected ones).
    """
    try:
        from _pytest.assertion import rewrite as rw

        state = config.stash[rw.assertstate_key]
        read_pyc, rewrite, write_pyc = rw._read_pyc, rw._rewrite_test, rw._write_pyc
        cache_dir_of, makedirs, tail = rw.get_cache_dir, rw.try_makedirs, rw.PYC_TAIL
    except (ImportError, AttributeError, KeyError):
        return 0
    written = 0
    for path in files:
        cache_dir = cache_dir_of(path)
        if not makedirs(cache_dir):
            continue  # read-only: the workers will not write one either
        pyc = cache_dir / (path.name[:-3] + tail)
        try:
            if read_pyc(path, pyc, state.trace) is not None:
                continue  # fresh
            source_hash, code = rewrite(path, config)
        except (OSError, SyntaxError):
            continue  # the worker reports it when it collects the module
        written += bool(write_pyc(state, code, source_hash, pyc))
    return written


def warm(config: pytest.Config, test_root: Path, package_dir: Path) -> None:
    """Warm both caches (nothing where bytecode is not written).

    Where there is more than one core, a forked child takes half of the test modules
    (alternating by size): the rewrite is pure Python, ~4 s of one core on a fresh
    checkout, while the workers wait for it. Each cached file is written whole and renamed
    into place, by whichever process rewrote it.
    """
    if sys.dont_write_bytecode or os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return
    files = sorted(
        rewritten_modules(test_root, config.getini("python_files")),
        key=lambda path: path.stat().st_size,
    )
    child = os.fork() if len(os.sched_getaffinity(0)) > 1 and len(files) > 1 else -1
    if child == 0:
        try:
            warm_rewritten(config, files[1::2])
        finally:
            os._exit(0)  # no atexit handlers, no flushing of the parent's buffers
    compileall.compile_dir(package_dir, quiet=1)
    warm_rewritten(config, files if child < 0 else files[::2])
    if child > 0:
        os.waitpid(child, 0)
