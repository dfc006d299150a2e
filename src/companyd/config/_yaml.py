"""YAML → plain data, with the position of every value.

:func:`compose` reads company.yaml with PyYAML's safe loader but builds the data itself,
recording positions in the report's :class:`~companyd.config._report.Positions`. It differs
from ``yaml.safe_load`` on purpose: a duplicate key is an error, keys are the text as
written, merge keys are honoured, and recursive aliases, absurd nesting and alias bombs are
errors rather than hangs. Every syntax error becomes one issue in the operator's words
(:mod:`companyd.config._syntax`); an anchor nothing refers to is a warning.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from companyd.config._report import Path_, Report
from companyd.config._syntax import explain

__all__ = ["Empty", "Failed", "compose"]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_NULL_TAG = "tag:yaml.org,2002:null"
_MAX_DEPTH = 40
_MAX_NODES = 100_000
#: A comment that starts right after a plain value and reads like text (``#42``,
#: ``#launch``): the rest of the line, from the ``#``.
_CUT_BY_COMMENT = re.compile(r"[ \t]+(#[^\W_][^\n\r\x85\u2028\u2029\0]*)")


class _TooLarge(Exception):
    pass


class Failed:
    """Marker: the document could not be turned into data (the reason is reported)."""


class Empty:
    """Marker: the document holds no value at all (empty or only comments)."""


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _is_empty(node: yaml.Node) -> bool:
    return (
        isinstance(node, yaml.ScalarNode)
        and node.tag == _NULL_TAG
        and node.value == ""
        and not node.style
    )


class _Builder:
    """Turns a composed YAML node tree into plain Python, recording positions.

    Differences from ``yaml.safe_load``, each on purpose: a duplicate key is an error (PyYAML
    keeps the last one silently); every mapping key is the text as written (so ``on:`` and
    ``1:`` are the keys "on" and "1", not True and 1); merge keys (``<<: *base``) are
    honoured; recursive aliases, absurd nesting and alias bombs are errors, not hangs.
    """

    def __init__(self, loader: yaml.SafeLoader, rep: Report) -> None:
        self.loader = loader
        self.rep = rep
        self.nodes = 0
        self.active: set[int] = set()

    def build(self, node: yaml.Node, path: Path_, depth: int) -> Any:
        self.nodes += 1
        if self.nodes > _MAX_NODES:
            raise _TooLarge
        pos = self.rep.pos
        pos.value.setdefault(path, _mark(node))
        if isinstance(node, yaml.ScalarNode):
            pos.scalar[path] = (str(node.value), node.style)
            value = self._scalar(node, path)
            if isinstance(value, str) and not node.style:
                self._warn_cut_by_comment(node, path, value)
            return value
        if id(node) in self.active:
            self.rep.add(
                path,
                "this alias refers to a node that contains it (a recursive YAML alias); "
                "company.yaml values must be finite — copy the values instead",
                at=_mark(node),
            )
            self.rep.settle(path)
            return None
        if depth > _MAX_DEPTH:
            self.rep.add(
                path,
                f"expected at most {_MAX_DEPTH} levels of nesting, got more; check the "
                "indentation or the brackets",
                at=_mark(node),
            )
            self.rep.settle(path)
            return None
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.build(v, (*path, i), depth + 1) for i, v in enumerate(node.value)]
            assert isinstance(node, yaml.MappingNode)
            return self._mapping(node, path, depth)
        finally:
            self.active.discard(id(node))

    def _warn_cut_by_comment(self, node: yaml.ScalarNode, path: Path_, value: str) -> None:
        """Warn when a comment YAML found right after a plain text value looks like part of
        the text: ``description: Fix issue #42`` is "Fix issue" — a ``#`` after a space
        starts a comment, and YAML drops the rest of the line without a word. A comment
        written as one (``# keep it short``, a space after the ``#``) is left alone.
        """
        end = node.end_mark
        rest = _CUT_BY_COMMENT.match(end.buffer, end.pointer) if end.buffer else None
        if rest is None:
            return
        shown = rest.group(1) if len(rest.group(1)) <= 30 else rest.group(1)[:29] + "…"
        self.rep.add(
            path,
            f"YAML reads {shown!r} as a comment, so this value is {value!r} without it; if "
            "the '#…' is part of the text, put the whole value in quotes; if it is a "
            "comment, write '# ' with a space after the '#'",
            at=(end.line + 1, end.column + 1 + rest.start(1) - end.pointer),
            severity="warning",
        )

    def _mapping(self, node: yaml.MappingNode, path: Path_, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        merges: list[yaml.Node] = []
        for knode, vnode in node.value:
            if isinstance(knode, yaml.ScalarNode) and knode.tag == _MERGE_TAG:
                merges.append(vnode)
                continue
            if not isinstance(knode, yaml.ScalarNode):
                what = "list" if isinstance(knode, yaml.SequenceNode) else "mapping"
                self.rep.add(
                    path,
                    f"expected a plain key such as 'name:', got a {what} used as a key",
                    at=_mark(knode),
                )
                continue
            key = str(knode.value)
            kpath = (*path, key)
            line, col = _mark(knode)
            if key in first_line:
                self.rep.add(
                    kpath,
                    f"duplicate key {key!r} (first at line {first_line[key]}); YAML would "
                    "silently keep only the last one — merge them into one entry",
                    at=(line, col),
                )
                continue
            first_line[key] = line
            self.rep.pos.key[kpath] = (line, col)
            if _is_empty(vnode):
                self.rep.pos.value[kpath] = (line, col)
            out[key] = self.build(vnode, kpath, depth + 1)
        for vnode in merges:
            sources = vnode.value if isinstance(vnode, yaml.SequenceNode) else [vnode]
            for src in sources:
                if not isinstance(src, yaml.MappingNode):
                    self.rep.add(
                        path,
                        "expected '<<:' to merge a mapping (e.g. `<<: *defaults`), got "
                        f"{_node_word(src)}",
                        at=_mark(src),
                    )
                    continue
                merged = self.build(src, path, depth)
                if isinstance(merged, dict):
                    for k, v in merged.items():
                        out.setdefault(k, v)  # explicit keys win over merged ones
        return out

    def _scalar(self, node: yaml.ScalarNode, path: Path_) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            self.rep.add(
                path,
                f"expected a plain YAML value, got the tag {node.tag!r} ({exc.problem}); "
                "remove the tag",
                at=_mark(node),
            )
        except (ValueError, OverflowError, TypeError) as exc:
            # e.g. 2025-02-30 matches YAML's timestamp pattern but is no date.
            self.rep.add(
                path,
                f"expected a valid value, got {node.value!r} ({exc}); put it in quotes if "
                "it is meant as text",
                at=_mark(node),
            )
        except (KeyError, AttributeError):
            # an explicit tag the text does not fit: PyYAML fails on `!!bool ten` or
            # `!!timestamp soon` without a message of its own
            self.rep.add(
                path,
                f"expected a value the tag {node.tag!r} accepts, got {node.value!r}; remove "
                "the tag or fix the value",
                at=_mark(node),
            )
        self.rep.settle(path)
        return str(node.value)


def _node_word(node: yaml.Node) -> str:
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    return f"{node.value!r}"


def compose(text: str, rep: Report) -> Any:
    """Parse ``text`` into plain data, or return ``Failed``/``Empty`` markers."""
    try:
        # The reader checks the whole text for forbidden characters right here.
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:
        _reader_error(text, exc, rep)
        return Failed
    anchors = _AnchorUse(loader)
    try:
        try:
            node = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            message, at = explain(exc, text)
            rep.add((), message, at=at)
            return Failed
        except yaml.reader.ReaderError as exc:
            _reader_error(text, exc, rep)
            return Failed
        except yaml.YAMLError as exc:
            rep.add((), f"YAML error: {exc}", at=(1, 1))
            return Failed
        except RecursionError:
            rep.add(
                (),
                f"expected at most {_MAX_DEPTH} levels of nesting, got far more; check the "
                "brackets",
                at=(1, 1),
            )
            return Failed
        if node is None:
            return Empty
        anchors.warn_unused(rep)
        try:
            return _Builder(loader, rep).build(node, (), 0)
        except _TooLarge:
            rep.add(
                (),
                f"expected at most {_MAX_NODES} values, got more (YAML aliases expanding "
                "into each other?); company.yaml is never this large",
                at=(1, 1),
            )
            return Failed
    finally:
        loader.dispose()


class _AnchorUse:
    """Which ``&anchors`` the document defines and which ``*aliases`` it uses, recorded as
    ``loader`` composes it.

    An anchor nothing refers to is almost always text the founder meant: ``name: &Co
    Northwind`` is the name "Northwind" with an anchor called ``Co`` — YAML drops the
    word without a word. So each unused anchor is a warning.
    """

    def __init__(self, loader: yaml.SafeLoader) -> None:
        self.defined: dict[str, yaml.Mark] = {}
        self.used: set[str] = set()
        compose_node = loader.compose_node

        def recording(parent: Any, index: Any) -> Any:
            event = loader.peek_event()  # type: ignore[no-untyped-call]
            if isinstance(event, yaml.AliasEvent):
                if event.anchor is not None:
                    self.used.add(event.anchor)
            elif event.anchor is not None and event.start_mark is not None:
                self.defined.setdefault(event.anchor, event.start_mark)
            return compose_node(parent, index)

        # the composer calls self.compose_node for every node, nested ones too
        loader.compose_node = recording  # type: ignore[method-assign]

    def warn_unused(self, rep: Report) -> None:
        for name, mark in self.defined.items():
            if name not in self.used:
                rep.add(
                    (),
                    f"the anchor &{name} is never used (no *{name} refers to it), so YAML "
                    f"drops '&{name}' from the value; if it is part of the text, put the whole "
                    "value in quotes, or else remove it",
                    at=(mark.line + 1, mark.column + 1),
                    severity="warning",
                )


def _reader_error(text: str, exc: yaml.reader.ReaderError, rep: Report) -> None:
    char = exc.character
    shown = repr(chr(char)) if isinstance(char, int) else repr(char)
    rep.add(
        (),
        f"expected printable text, got the control character {shown} ({exc.reason}); remove it",
        at=_offset_position(text, exc.position),
    )


def _offset_position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col
