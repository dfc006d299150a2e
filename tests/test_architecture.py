"""The package faces and the contracts' coverage (docs/architecture.md, "Faces").

* Every package of src/companyd (subpackages too) declares ``__all__`` in its ``__init__``.
* A module imports another top-level package only through its face: ``from companyd.runs
  import Journal`` with ``Journal`` in ``companyd.runs.__all__`` — never
  ``companyd.runs._journal``, never a module path below the package, never a name the face
  does not declare. Root modules (``companyd.clock``) are their own face: a name taken from one
  that declares ``__all__`` must be in it. Tests and benchmarks may reach for internals.
* Only ``companyd/llm/_claude.py`` imports ``anthropic`` (import-linter cannot hold the llm
  package's own ``__init__`` to it, since a package contains its modules), by an ``import``
  statement or by name (``importlib.import_module("anthropic")``, which import-linter does
  not see either).
* Every module and package directly under companyd is placed in the layers contract and listed
  in every forbidden contract of pyproject.toml (import-linter's ``exhaustive`` covers the
  first; nothing in import-linter covers the second).

The checker is plain :mod:`ast` over the source tree, so it is shown failing on a temporary
tree with a bad import.
"""

from __future__ import annotations

import ast
import importlib
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "companyd"


def _face(init: Path) -> list[str] | None:
    """The ``__all__`` a module or package ``__init__`` declares (None if it declares none)."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert node.value is not None
                return [str(v) for v in ast.literal_eval(node.value)]
    return None


def missing_faces(src: Path) -> list[str]:
    """Every package ``__init__.py`` under ``src`` that declares no ``__all__``."""
    return sorted(
        str(p.relative_to(src.parent)) for p in src.rglob("__init__.py") if _face(p) is None
    )


# The fields of a statement (or of an ``except`` clause, a ``case``) that hold statements.
_STATEMENT_LISTS = ("body", "handlers", "orelse", "finalbody", "cases")


def import_statements(text: str) -> list[ast.Import | ast.ImportFrom]:
    """Every ``import`` and ``from … import`` statement of a module's source, at any depth
    (in a function, a class, an ``if``, a ``try``…), in the order written.

    An import is a statement and a statement only ever sits in another statement's list of
    statements, so the walk goes down those lists and skips every expression: the same
    statements :func:`ast.walk` finds, for a tenth of the work (the whole tree is walked
    by two checks).
    """
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(body: list[Any]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.append(node)
                continue
            for field in _STATEMENT_LISTS:
                inner = getattr(node, field, None)
                if inner:
                    visit(inner)

    visit(ast.parse(text).body)
    return found


def face_violations(src: Path) -> list[str]:
    """Cross-package imports in ``src`` (the companyd package dir) that pass a package's face."""
    pkg_name = src.name
    faces: dict[str, list[str] | None] = {}

    def face_of(top: str) -> list[str] | None:
        if top not in faces:
            init = src / top / "__init__.py"
            faces[top] = _face(init if init.exists() else src / f"{top}.py")
        return faces[top]

    out: list[str] = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        own = rel.parts[0] if len(rel.parts) > 1 else None
        where = f"{path.relative_to(src.parent)}"
        for node in import_statements(path.read_text()):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    crosses = parts[0] == pkg_name and len(parts) > 2 and parts[1] != own
                    if crosses and (src / parts[1]).is_dir():
                        out.append(f"{where}:{node.lineno}: import {alias.name} (use its face)")
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                parts = node.module.split(".")
                if parts[0] != pkg_name or len(parts) < 2 or parts[1] == own:
                    continue
                top = parts[1]
                is_package = (src / top).is_dir()
                if len(parts) > 2 and is_package:
                    out.append(
                        f"{where}:{node.lineno}: from {node.module} import ... reaches past "
                        f"the face of {pkg_name}.{top}"
                    )
                    continue
                face = face_of(top) if (is_package or (src / f"{top}.py").exists()) else None
                if face is None:
                    continue
                for alias in node.names:
                    if alias.name not in face:
                        out.append(
                            f"{where}:{node.lineno}: {alias.name!r} is not in "
                            f"{pkg_name}.{top}.__all__"
                        )
    return out


def anthropic_importers(src: Path) -> list[str]:
    found = []
    for path in sorted(src.rglob("*.py")):
        text = path.read_text()
        if "anthropic" not in text:
            continue  # no import of it can be written without its name: nothing to parse
        for node in import_statements(text):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if node.level == 0
                else []
            )
            if any(n == "anthropic" or n.startswith("anthropic.") for n in names):
                found.append(str(path.relative_to(src)))
        if loads_by_name(text, "anthropic"):
            found.append(str(path.relative_to(src)))
    return sorted(set(found))


#: the calls that import a module named by a string: import-linter does not see them
_BY_NAME = {"import_module", "__import__"}


def loads_by_name(text: str, package: str) -> bool:
    """Whether the module's source imports ``package`` (or a module of it) by name:
    ``importlib.import_module("anthropic")``, ``import_module("anthropic.types")``,
    ``__import__("anthropic")``, with the name written as a string literal.
    """
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        first = node.args[0]
        if (
            called in _BY_NAME
            and isinstance(first, ast.Constant)
            and isinstance(first.value, str)
            and (first.value == package or first.value.startswith(package + "."))
        ):
            return True
    return False


def top_level_names(src: Path) -> set[str]:
    names = {p.name for p in src.iterdir() if (p / "__init__.py").exists()}
    names |= {p.stem for p in src.glob("*.py") if p.name != "__init__.py"}
    return names


def test_every_package_declares_its_face() -> None:
    assert missing_faces(SRC) == []


def test_no_import_passes_a_face() -> None:
    assert face_violations(SRC) == []


# companyd.testing is a toolkit whose every module is public on purpose: each stand-in is its
# own entry point (``python -m companyd.testing.bot_api``) and test code imports it by path.
PUBLIC_MODULE_PACKAGES = {"testing"}


def public_internal_modules(src: Path) -> list[str]:
    """Modules below a package that are not named ``_x``: everything but the face is internal."""
    found = []
    for pkg in sorted(p for p in src.iterdir() if (p / "__init__.py").exists()):
        if pkg.name in PUBLIC_MODULE_PACKAGES:
            continue
        for child in sorted(pkg.iterdir()):
            is_module = child.suffix == ".py" and child.name not in {"__init__.py", "__main__.py"}
            is_subpackage = (child / "__init__.py").exists()
            if (is_module or is_subpackage) and not child.name.startswith("_"):
                found.append(str(child.relative_to(src)))
    return found


def test_every_module_inside_a_package_is_named_as_internal() -> None:
    assert public_internal_modules(SRC) == []


def test_the_internal_name_check_finds_a_public_module(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    for name in ("__init__.py", "_ok.py", "engine.py", "sub/__init__.py"):
        (tmp_path / "pkg" / name).write_text("")
    (tmp_path / "testing").mkdir()
    (tmp_path / "testing" / "__init__.py").write_text("")
    (tmp_path / "testing" / "stand_in.py").write_text("")
    assert public_internal_modules(tmp_path) == ["pkg/engine.py", "pkg/sub"]


def test_only_the_claude_module_imports_anthropic() -> None:
    assert anthropic_importers(SRC) == ["llm/_claude.py"]


def _contracts() -> list[dict[str, Any]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, Any]] = data["tool"]["importlinter"]["contracts"]
    return contracts


def test_the_layers_contract_places_every_top_level_module() -> None:
    (layers,) = [c for c in _contracts() if c["name"] == "layers (docs/architecture.md)"]
    assert layers["exhaustive"] is True and layers["containers"] == ["companyd"]
    placed = {name.strip() for layer in layers["layers"] for name in str(layer).split("|")}
    assert placed == top_level_names(SRC)


@pytest.mark.parametrize(
    "contract",
    # the contracts that keep something out of the whole package (a library, the stand-ins)
    [
        c["name"]
        for c in _contracts()
        if c["type"] == "forbidden"
        and all(
            not m.startswith("companyd.") or m == "companyd.testing" for m in c["forbidden_modules"]
        )
    ],
)
def test_every_forbidden_contract_lists_every_top_level_module(contract: str) -> None:
    (c,) = [c for c in _contracts() if c["name"] == contract]
    forbidden = {str(m).removeprefix("companyd.") for m in c["forbidden_modules"]}
    listed = {str(m).removeprefix("companyd.").split(".")[0] for m in c["source_modules"]}
    # the package that may import the forbidden module is the one left out, and says so
    # in the contract's name; testing (the stand-ins) may use every SDK
    exempt = {name for name in top_level_names(SRC) if name in str(c["name"])} | {"testing"}
    assert top_level_names(SRC) - listed - exempt - forbidden == set()


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    src = tmp_path / "companyd"
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    return src


GOOD = {
    "__init__.py": '__all__ = ["clock"]\n',
    "clock.py": '__all__ = ["Clock"]\nclass Clock: ...\n',
    "runs/__init__.py": ('from companyd.runs._journal import Journal\n__all__ = ["Journal"]\n'),
    "runs/_journal.py": "class Journal: ...\ndef _row(): ...\n",
    "desk/__init__.py": '__all__ = ["Desk"]\nfrom companyd.desk._store import Desk\n',
    "desk/_store.py": (
        "from companyd.runs import Journal\nfrom companyd.clock import Clock\n"
        "from companyd.desk._x import y\nclass Desk: ...\n"
    ),
    "desk/_x.py": "y = 1\n",
}


def test_the_checker_passes_a_tree_that_keeps_to_the_faces(tmp_path: Path) -> None:
    src = _tree(tmp_path, GOOD)
    assert face_violations(src) == [] and missing_faces(src) == []


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("from companyd.runs._journal import Journal\n", "reaches past the face of companyd.runs"),
        ("from companyd.runs._journal import _row\n", "reaches past the face of companyd.runs"),
        ("from companyd.runs import _row\n", "'_row' is not in companyd.runs.__all__"),
        ("import companyd.runs._journal\n", "import companyd.runs._journal (use its face)"),
        (
            "from companyd.clock import ManualClock\n",
            "'ManualClock' is not in companyd.clock.__all__",
        ),
    ],
)
def test_the_checker_fails_on_an_import_past_a_face(tmp_path: Path, bad: str, says: str) -> None:
    src = _tree(tmp_path, {**GOOD, "desk/_store.py": bad + GOOD["desk/_store.py"]})
    (violation,) = face_violations(src)
    assert violation.startswith("companyd/desk/_store.py:1: ") and says in violation


def test_the_checker_finds_a_package_without_a_face(tmp_path: Path) -> None:
    src = _tree(tmp_path, {**GOOD, "alerts/__init__.py": '"""No face."""\n'})
    assert missing_faces(src) == ["companyd/alerts/__init__.py"]


PACKAGES = sorted(
    "companyd." + ".".join(p.parent.relative_to(SRC).parts)
    for p in SRC.rglob("__init__.py")
    if p.parent != SRC
)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_face_name_resolves(package: str) -> None:
    # A lazy face's map (PEP 562) and its __all__ must agree: every declared name imports.
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []


NESTED = """\
import a
def f():
    import b
    class C:
        from c import x
    if x:
        import d
    else:
        import e
    for _ in x:
        import f1
    else:
        import f2
    while x:
        import g
    with x:
        import h
    try:
        import i
    except E:
        import j
    else:
        import k
    finally:
        import m
    match x:
        case 1:
            import n
async def g():
    async with x:
        import o
    async for _ in x:
        import p
lambda: __import__("not_a_statement")
"""


def test_the_import_walk_finds_what_ast_walk_finds_at_any_depth() -> None:
    def names(nodes: list[Any]) -> list[str]:
        return [
            str(n.module) if isinstance(n, ast.ImportFrom) else n.names[0].name
            for n in nodes
            if isinstance(n, ast.Import | ast.ImportFrom)
        ]

    found = names(import_statements(NESTED))
    assert found == ["a", "b", "c", *"de", "f1", "f2", *"ghijkmnop"]
    assert sorted(found) == sorted(names(list(ast.walk(ast.parse(NESTED)))))


def test_the_anthropic_check_finds_an_import_in_any_module(tmp_path: Path) -> None:
    src = _tree(
        tmp_path,
        {
            **GOOD,
            "llm/__init__.py": "__all__ = []\n",
            "llm/_claude.py": "import anthropic\n",
            "desk/_x.py": "def y():\n    from anthropic.types import Message\n",
            "runs/_journal.py": "import json  # anthropic is named, not imported\n",
            # by name, which import-linter does not see (the fork server did this)
            "testing/forkserver.py": "import importlib\nimportlib.import_module('anthropic')\n",
            "ops/_x.py": "def y():\n    return __import__('anthropic.types')\n",
            "spend/_x.py": "from importlib import import_module\nimport_module(name)\n",
        },
    )
    assert anthropic_importers(src) == [
        "desk/_x.py",
        "llm/_claude.py",
        "ops/_x.py",
        "testing/forkserver.py",
    ]
