"""docs/README.md is the index of the documentation: its parts come in the order a user
needs them (Getting started → Your first real company → Operating → Reference →
Internals), it links every page of docs/, and every link it has points at a file that
exists (and an anchor of the README that exists).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
INDEX = (DOCS / "README.md").read_text(encoding="utf-8")


def _anchor(heading: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")


def test_the_parts_come_in_the_users_order() -> None:
    parts = re.findall(r"^## (.+)$", INDEX, re.M)
    assert parts == [
        "Getting started",
        "Your first real company",
        "Operating",
        "Reference",
        "Internals",
    ]


def test_every_page_is_linked_and_every_link_resolves() -> None:
    links = re.findall(r"\]\(([^)]+)\)", INDEX)
    targets = {link.split("#", 1)[0] for link in links}
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert sorted(pages - targets) == [], "pages of docs/ missing from docs/README.md"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", readme, re.M)}
    for link in links:
        path, _, anchor = link.partition("#")
        assert (DOCS / path).resolve().is_file(), link
        if anchor and path == "../README.md":
            assert anchor in anchors, link


def test_first_company_comes_before_operating() -> None:
    assert INDEX.index("first-company.md") < INDEX.index("deploy.md")


# -- docs/deploy.md installs from what exists ---------------------------------------------

DEPLOY = (DOCS / "deploy.md").read_text(encoding="utf-8")


def _install_section() -> str:
    m = re.search(r"^## Install\n(.*?)(?=^## )", DEPLOY, re.M | re.S)
    assert m, "docs/deploy.md has no '## Install' section"
    return m.group(1)


def test_no_page_installs_a_companyd_package_from_the_index() -> None:
    # there is no companyd on PyPI: `pip install companyd` fails for every reader, and so
    # does an upgrade from the index (`pip install --upgrade companyd`, deploy.md's Upgrade)
    for page in [*DOCS.glob("*.md"), ROOT / "README.md"]:
        text = page.read_text(encoding="utf-8")
        found = re.search(r"pip3? install (?:(?:-U|--upgrade) )?companyd\b(?![-\w/.])", text)
        assert not found, (page.name, found.group(0) if found else None)


def test_the_deploy_install_commands_use_a_prefix_the_service_can_see() -> None:
    from companyd.cli._daemon import hidden_by_hardening

    section = _install_section()
    prefixes = set(re.findall(r"(/\S+/venv)/bin/", section))
    assert prefixes == {"/opt/companyd/venv"}
    assert all(hidden_by_hardening(Path(p)) is None for p in prefixes)


def test_the_wheel_command_of_deploy_md_builds_the_wheel(tmp_path: Path) -> None:
    import shlex
    import shutil
    import subprocess
    import sys

    section = _install_section()
    (build,) = [ln for ln in section.splitlines() if "pip wheel" in ln]
    (install,) = [ln for ln in section.splitlines() if "dist/companyd-" in ln]
    words = shlex.split(build)
    assert words[:4] == ["python3", "-m", "pip", "wheel"] and words[-1] == "."
    # in a copy of the checkout (an in-tree build leaves build/ behind), offline (the tests
    # never reach the network: setuptools comes with the test extra)
    src = tmp_path / "checkout"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    proc = subprocess.run(
        [sys.executable, *words[1:], "--no-build-isolation", "--no-index", "-q"],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    pattern = install.split()[-1]  # dist/companyd-*.whl
    assert [p.name for p in src.glob(pattern)] == [p.name for p in (src / "dist").glob("*.whl")]
    assert len(list(src.glob(pattern))) == 1
