"""Property: whatever is done to the example company.yaml, ``companyd validate`` answers
0 or 1, and everything it prints on stderr is ``file:line:col: …`` — never a traceback,
never an "internal error".

Mutations come in two families: structural (delete a key, duplicate a key, give a value
another type, nest or flatten) applied to the parsed document and dumped back to YAML,
and textual (truncate, delete or duplicate a line, insert random bytes, tabs, quotes,
brackets) applied to the file's bytes.
"""

from __future__ import annotations

import contextlib
import copy
import io
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from companyd.cli import main
from untraced import drawn_untraced

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLE_BYTES = (ROOT / "company.yaml").read_bytes()
EXAMPLE_DATA = yaml.safe_load(EXAMPLE_BYTES)

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["fifty", "5m", "0 14 * * *", "ceo", "unlimited", "sk-ant-" + "a" * 20]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(paths(v, (*prefix, i)))
    return out


ALL_PATHS = paths(EXAMPLE_DATA)[1:]


def get_parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path[:-1]:
        doc = doc[p]
    return doc


@st.composite
def structural(draw: st.DrawFn) -> bytes:
    doc = copy.deepcopy(EXAMPLE_DATA)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        live = paths(doc)[1:]
        if not live:
            break
        path = draw(st.sampled_from(live))
        parent = get_parent(doc, path)
        key = path[-1]
        action = draw(st.sampled_from(["delete", "retype", "rename", "wrap"]))
        try:
            current = parent[key]
        except (KeyError, IndexError, TypeError):
            continue
        if action == "delete":
            del parent[key]
        elif action == "retype":
            parent[key] = draw(values)
        elif action == "rename" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=12))] = parent.pop(key)
        elif action == "wrap":
            parent[key] = draw(st.sampled_from([[current], {"x": current}]))
    # libyaml's emitter (PyYAML's own, in C): the same YAML for a fifth of the CPU
    text = yaml.dump(doc, Dumper=yaml.CSafeDumper, sort_keys=False, allow_unicode=True)
    if draw(st.booleans()):
        # duplicate one key line: the textual way to get a duplicate key
        lines = text.splitlines(keepends=True)
        i = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        lines.insert(i, lines[i])
        text = "".join(lines)
    return text.encode("utf-8")


@st.composite
def textual(draw: st.DrawFn) -> bytes:
    data = bytearray(EXAMPLE_BYTES)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        action = draw(
            st.sampled_from(["truncate", "delete_line", "dup_line", "insert", "flip", "indent"])
        )
        lines = bytes(data).split(b"\n")
        n = len(lines)
        if action == "truncate":
            data = data[: draw(st.integers(min_value=0, max_value=len(data)))]
        elif action == "delete_line" and n:
            del lines[draw(st.integers(min_value=0, max_value=n - 1))]
            data = bytearray(b"\n".join(lines))
        elif action == "dup_line" and n:
            i = draw(st.integers(min_value=0, max_value=n - 1))
            lines.insert(i, lines[i])
            data = bytearray(b"\n".join(lines))
        elif action == "insert":
            at = draw(st.integers(min_value=0, max_value=len(data)))
            chunk = draw(
                st.one_of(
                    st.binary(max_size=8),
                    st.sampled_from([b"\t", b"'", b'"', b"{", b"[", b": ", b"&a", b"*a", b"<<: "]),
                    st.sampled_from(
                        [b"!!python/object:os.system ", b"\xff\xfe", b"\x00", b"---\n"]
                    ),
                )
            )
            data[at:at] = chunk
        elif action == "flip" and data:
            at = draw(st.integers(min_value=0, max_value=len(data) - 1))
            data[at] = draw(st.integers(min_value=0, max_value=255))
        elif action == "indent" and n:
            i = draw(st.integers(min_value=0, max_value=n - 1))
            lines[i] = draw(st.sampled_from([b" ", b"  ", b"\t"])) + lines[i]
            data = bytearray(b"\n".join(lines))
    return bytes(data)


def check(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "company.yaml"
        f.write_bytes(content)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["validate", str(f)])
        text = err.getvalue()
        assert rc in (0, 1), text
        assert "Traceback" not in text and "internal error" not in text, text
        shape = re.compile(re.escape(str(f)) + r":\d+:\d+: \S")
        for line in text.splitlines():
            assert shape.match(line), f"not file:line:col-shaped: {line!r}"
        if rc == 1:
            assert text, "exit 1 without saying why"


@SETTINGS
@given(drawn_untraced(structural()))
def test_structural_mutations_never_crash(content: bytes) -> None:
    check(content)


@SETTINGS
@given(drawn_untraced(textual()))
def test_textual_mutations_never_crash(content: bytes) -> None:
    check(content)


@settings(max_examples=60, deadline=None)
@given(drawn_untraced(st.binary(max_size=300)))
def test_random_bytes_never_crash(content: bytes) -> None:
    check(content)
