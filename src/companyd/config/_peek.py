"""A glance at company.yaml's top level without the YAML library or the schema (issue 31).

The CLI's everyday commands need one or two top-level values of company.yaml — where the
state directory is (``state_dir``), whether the stores are elsewhere (``state``) — to
find the daemon's socket or the stores. Importing PyYAML and parsing the whole file costs
more than the rest of such a command (~15–25 ms of CPU for the import alone, ~3× a bare
interpreter start), so :func:`peek_top_level` reads the file line by line instead: it
knows the shape every company.yaml written by hand or by ``companyd init`` has — a block
mapping whose keys start at column 0 — and answers only when the file is in that shape.
Anything it does not recognise (a tab in an indentation, a flow mapping, an anchor, a
directive, a second document, a quoted scalar or a flow collection that goes on over a
line, a duplicated key, a value that is not a plain or one-line quoted string) makes it
answer None, and the caller reads the file with the YAML library as before
(:func:`peek_or_load`). It never decides that a file is invalid: that is the loader's job.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["UNUSUAL", "peek_nested", "peek_or_load", "peek_top_level"]

#: A top-level key as company.yaml spells them, then ``:`` and a space or the line's end.
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)[ ]*:(?:[ ]+|$)")
#: A mapping key inside a nested line (``  cfo:``, ``- name: x``): anything up to ``: ``.
_NESTED_KEY = re.compile(r"""[^\s"'#{}\[\]&*!|>%@`,?:-][^#]*?:(?:[ ]+|$)""")
#: Plain scalars YAML (1.1, PyYAML) reads as something other than a string: numbers,
#: dates, booleans, null. Such a value of a wanted key is left to the real loader.
_NOT_A_STRING = re.compile(
    r"[-+]?[0-9][0-9_:.eExXoObB+-]*|[-+]?\.(?:inf|Inf|INF|nan|NaN|NAN)"
    r"|y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE"
    r"|on|On|ON|off|Off|OFF|~|null|Null|NULL|="
)

#: What :func:`peek_top_level` returns for a key whose value is not a one-line scalar
#: (a nested mapping or list, a block scalar).
UNUSUAL = "\x00nested"


def _content_lines(text: str) -> Iterator[tuple[int, str, str]]:
    """(indent, line, body) of each line of ``text`` that is not blank or a comment line:
    ``line`` without its trailing blanks, ``body`` without its indent.
    """
    for raw in text.split("\n"):
        line = raw.rstrip()
        body = line.lstrip(" ")
        if body and not body.startswith("#"):
            yield len(line) - len(body), line, body


def peek_top_level(text: str, wanted: tuple[str, ...]) -> dict[str, str | None] | None:
    """The top-level keys of the YAML document ``text`` mapped to their values: for each key
    in ``wanted`` its one-line string value (None for null or empty), :data:`UNUSUAL` when
    its value is nested; every other key maps to None. None when ``text`` is not in the
    plain shape described in the module docstring (the caller must use a YAML loader).
    """
    found: dict[str, str | None] = {}
    block_indent = -1  # inside a block scalar (| or >) of a line indented this much
    started = False
    pending = False  # the previous line held a wanted key's plain value
    opened = ""  # the previous line was a wanted key with nothing after it
    if any(ch in text for ch in "\x85\u2028\u2029"):
        return None  # line breaks to YAML, not to a reader of lines
    for indent, line, body in _content_lines(text):
        if pending and indent > 0:
            return None  # a wanted plain scalar going on over the next line
        pending = False
        if opened and indent > 0:
            found[opened] = UNUSUAL  # a wanted key with a block below it
        opened = ""
        if block_indent >= 0:
            if indent > block_indent:
                continue  # the block scalar's text: anything goes
            block_indent = -1
        if body[0] == "\t":
            return None
        if indent == 0:
            if line == "---" and not started:
                started = True
                continue
            started = True
            m = _KEY.match(line)
            if m is None:
                return None  # a directive, a flow mapping, a list, a merge key, "...": ask YAML
            key, value = m.group(1), line[m.end() :]
            if key in found:
                return None  # a duplicate: which one counts is the loader's to say
            kind = _value_kind(value)
            if kind is None:
                return None
            if kind == "block":
                block_indent = 0
            if key not in wanted:
                found[key] = None
            elif kind in ("plain", "quoted"):
                scalar = _scalar(value)
                if scalar is False:
                    return None
                found[key] = scalar  # type: ignore[assignment]
                pending = kind == "plain"
            elif kind == "block":
                found[key] = UNUSUAL
            elif kind == "nested":
                found[key] = None  # null, unless indented lines follow (below)
                opened = key
            else:
                return None  # a flow collection as a wanted key's value
            continue
        # a nested line: only what could hide a column-0 line from us matters
        while body.startswith("- ") or body == "-":
            body = body[2:].lstrip(" ")
        if not body:
            continue
        m = _NESTED_KEY.match(body)
        value = body[m.end() :] if m is not None else body
        kind = _value_kind(value)
        if kind is None:
            return None
        if kind == "block":
            block_indent = indent
    if not started:
        return None  # empty: the loader has something to say about it
    return found


def peek_nested(text: str, section: str, key: str) -> str | None:
    """``section.key`` of the YAML document ``text`` (a one-line string under a top-level
    mapping: ``company.timezone``), read as :func:`peek_top_level` reads the top level: its
    value, None when the section or the key is absent or null, :data:`UNUSUAL` when the
    file is not in the plain shape or the value is not a one-line string (the caller must
    use a YAML loader).
    """
    top = peek_top_level(text, (section,))
    if top is None:
        return UNUSUAL
    if top.get(section) != UNUSUAL:
        return None if top.get(section) is None else UNUSUAL  # absent/null, or a scalar
    value: str | None = None
    inside, child, seen, after_key = False, -1, False, False
    block_indent = -1
    for indent, line, body in _content_lines(text):
        if indent == 0:
            after_key = False
            if inside:
                break  # the next top-level key: the section is over
            inside = line.split(":", 1)[0].rstrip() == section
            continue
        if not inside:
            continue
        if block_indent >= 0:
            if indent > block_indent:
                continue  # a block scalar's text
            block_indent = -1
        if child < 0:
            child = indent
        if indent != child:
            if after_key:
                return UNUSUAL  # the key's value goes on below it: a block or a long scalar
            continue  # deeper: another key's block
        after_key = False
        m = _KEY.match(body)
        if m is None:
            return UNUSUAL  # a list, a complex key: ask YAML
        kind = _value_kind(body[m.end() :])
        if kind == "block":
            block_indent = indent
        if m.group(1) != key:
            continue
        if seen or kind not in ("plain", "quoted", "nested"):
            return UNUSUAL  # a duplicate, a block or a flow value
        seen = after_key = True
        if kind == "nested":
            value = None  # empty: null, unless a block follows (then UNUSUAL below)
            continue
        scalar = _scalar(body[m.end() :])
        if not isinstance(scalar, str | None):
            return UNUSUAL  # not a plain string (a number, a boolean, an escape)
        value = scalar
    return value


def _value_kind(value: str) -> str | None:
    """How the value part of a line goes on: ``plain`` (one line, or continued on more
    indented lines), ``nested`` (nothing after the key: a block below), ``block`` (``|`` or
    ``>``), ``flow`` (a one-line ``[...]``/``{...}``), ``quoted`` (closed on this line);
    None for a quoted scalar or a flow collection left open, an anchor, alias or tag.
    """
    if not value or value.startswith("#"):
        return "nested"
    first = value[0]
    if first in "|>":
        return "block"
    if first == '"':
        i = 1
        while i < len(value):
            if value[i] == "\\":
                i += 2
                continue
            if value[i] == '"':
                return "quoted" if _rest_is_comment(value[i + 1 :]) else None
            i += 1
        return None
    if first == "'":
        i = 1
        while i < len(value):
            if value[i] == "'":
                if value[i + 1 : i + 2] == "'":
                    i += 2
                    continue
                return "quoted" if _rest_is_comment(value[i + 1 :]) else None
            i += 1
        return None
    if first in "[{":
        depth = 0
        quote = ""
        for ch in value:
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "\"'":
                quote = ch
            elif ch in "[{":
                depth += 1
            elif ch in "]}":
                depth -= 1
        return "flow" if depth == 0 and not quote else None
    if first in "&*!%@`":
        return None
    return "plain"


def _rest_is_comment(rest: str) -> bool:
    rest = rest.strip()
    return not rest or rest.startswith("#")


def _scalar(value: str) -> str | bool | None:
    """The string a one-line plain or quoted scalar holds; None for null or empty; False
    when it is not a plain string (a number, a boolean, an escape).
    """
    if value.startswith('"'):
        inner = value[1 : value.rindex('"')]
        return False if "\\" in inner else inner
    if value.startswith("'"):
        return value[1 : value.rindex("'")].replace("''", "'")
    text = value.split(" #", 1)[0].strip()
    if not text or text in ("~", "null", "Null", "NULL"):
        return None
    if _NOT_A_STRING.fullmatch(text) or ": " in text or text.endswith(":"):
        return False
    if text in ("-", "?") or text[:2] in ("- ", "? "):
        return False  # an indicator, not a scalar: YAML refuses it here
    return text


def peek_or_load(data: bytes, wanted: tuple[str, ...]) -> dict[str, object] | None:
    """The top-level mapping of company.yaml's bytes ``data`` as far as ``wanted`` goes:
    :func:`peek_top_level`'s answer when the file has the plain shape, else the YAML
    library's reading (its C loader when PyYAML has one) reduced to the same keys (a
    nested value as :data:`UNUSUAL`); empty for a document that is not a mapping. None when
    the bytes are not UTF-8 or YAML refuses them.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text.startswith("\ufeff"):
        text = text[1:]
    peeked = peek_top_level(text, wanted)
    if peeked is not None:
        return dict(peeked)
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        doc = yaml.load(text, Loader=loader)
    except Exception:  # YAMLError, and the KeyError/ValueError of a bad tag or date
        return None
    if not isinstance(doc, dict):
        return {}  # YAML, but not a mapping: none of the keys is there
    out: dict[str, object] = {}
    for key, value in doc.items():
        if not isinstance(key, str):
            continue
        if key in wanted and isinstance(value, dict | list):
            out[key] = UNUSUAL
        else:
            out[key] = value if key in wanted else None
    return out
