"""Package layout: the wheel installs exactly one top-level import name, ``companyd``, and
the repository's example company.yaml and ``companyd init``'s starter both validate.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from companyd.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Build from a copy: an in-tree build would leave build/ and *.egg-info behind, and
    # --no-build-isolation with --no-index keeps pip off the network (tests are loopback
    # only); setuptools>=77 comes with the test extras.
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", str(src), "--no-deps"),
            *("--no-build-isolation", "--no-index", "--disable-pip-version-check"),
            *("-q", "-w", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (whl,) = out.glob("companyd-*.whl")
    return whl


def test_wheel_installs_only_the_companyd_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert z.read(top_level).decode().split() == ["companyd"]
    roots = {n.split("/", 1)[0] for n in names}
    dist_info = {r for r in roots if r.endswith(".dist-info")}
    assert roots - dist_info == {"companyd"}
    # the data files the package needs at run time travel with it
    assert "companyd/starter.yaml" in names
    assert "companyd/py.typed" in names
    # the dashboard's templates and vendored assets, with their licences (no CDN)
    for name in ("templates/base.html", "templates/fragments/tree.html", "static/dashboard.js",
                 "static/vendor/htmx.min.js", "static/vendor/htmx.LICENSE",
                 "static/vendor/htmx-ext-sse.js", "static/vendor/htmx-ext-sse.LICENSE",
                 "static/vendor/uPlot.iife.min.js", "static/vendor/uPlot.LICENSE"):  # fmt: skip
        assert f"companyd/dashboard/{name}" in names, name


def shipped_symlinks() -> list[str]:
    """Symlinks that are (or would be) committed: from git in a checkout; in a copy without
    .git (what .ci/run tests), every symlink in the tree, since the copy holds only tracked
    and unignored files. Real directories that tools create (.venv, caches) are not entered.
    """
    if (ROOT / ".git").exists() and shutil.which("git"):
        proc = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-s", "-z"],
            capture_output=True,
            timeout=60,
            check=True,
        )
        return [
            entry.split(b"\t", 1)[1].decode()
            for entry in proc.stdout.split(b"\0")
            if entry.startswith(b"120000 ")
        ]
    found = []
    for here, dirs, files in os.walk(ROOT):
        for name in [*dirs, *files]:
            if (Path(here) / name).is_symlink():
                found.append(str((Path(here) / name).relative_to(ROOT)))
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
    return found


def test_no_shipped_symlink_leaves_the_repository() -> None:
    # A committed `.venv -> /work/venv` made `python3 -m venv .venv` fail on a fresh machine
    # ("File exists") and point CI at someone else's environment.
    outside = [
        link
        for link in shipped_symlinks()
        if link in (".venv", "venv") or not (ROOT / link).resolve().is_relative_to(ROOT)
    ]
    assert outside == [], f"symlinks leaving the repository: {outside}; git rm --cached them"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_example_company_yaml_validates() -> None:
    rc, out, err = run("validate", str(ROOT / "company.yaml"))
    assert (rc, err) == (0, "")
    assert out == (
        f"{ROOT / 'company.yaml'}: ok — 8 agents, 4 routines, 4 departments, org chart depth 3\n"
    )


def test_init_output_validates(tmp_path: Path) -> None:
    assert run("init", str(tmp_path))[0] == 0
    rc, out, err = run("validate", str(tmp_path / "company.yaml"))
    assert (rc, err) == (0, "")
    assert "ok — 2 agents, 2 routines" in out
