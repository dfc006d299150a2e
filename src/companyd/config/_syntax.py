"""PyYAML's syntax errors in the operator's words.

PyYAML names the parser state it was in when a hand-edited file stopped making sense
("expected <block end>, but found '<block mapping start>'"), often lines after the mistake.
:func:`explain` tells the common mistakes by what to change, at the line to change: a key
that lines up with no key around it, a key indented deeper than the one above, a list item
among a mapping's keys, ``name:Acme`` without the space, a quote left open, text after a
closing quote, a character YAML reserves. Anything else keeps PyYAML's words and position.
"""

from __future__ import annotations

import contextlib
import re

import yaml

__all__ = ["explain"]


def explain(exc: yaml.MarkedYAMLError, text: str) -> tuple[str, tuple[int, int]]:
    """The operator's words for PyYAML's syntax error ``exc`` in ``text``, and where to
    point: PyYAML names parser states ("expected <block end>, but found '<scalar>'"), so the
    common mistakes of a hand-edited file — indentation, a quote left open, a character YAML
    reserves — are told by what to change. Anything else keeps PyYAML's words.
    """
    problem = exc.problem or "invalid YAML"
    context = exc.context or ""
    pm = exc.problem_mark or exc.context_mark
    cm = exc.context_mark
    at = (pm.line + 1, pm.column + 1) if pm else (1, 1)
    since = f" (the block from line {cm.line + 1})" if cm else ""
    if "'\\t'" in problem:
        return (
            "found a tab character; YAML indentation must use spaces — replace the tab with spaces",
            at,
        )
    # `name:Acme` is text to YAML (no space after the colon): it runs on into the next line,
    # and the parser fails there, on that line's own ': ' (or the scanner, in the would-be key)
    glued, start = None, None
    if "mapping values are not allowed" in problem and pm is not None:
        start = _plain_start(text, pm.line)
        glued = _glued_key(text, start)
    elif problem == "could not find expected ':'" and cm is not None:
        glued = _glued_key(text, cm.line)
    if glued is not None:
        line, column, key, value = glued
        return (
            f"YAML syntax error: no space after the colon in '{key}:{value}', so YAML reads "
            f"it as text, not as the key {key!r}; write `{key}: {value}`"
        ), (line, column)
    if start is not None and pm is not None:
        # a key indented deeper than the one above it continues that key's value
        lines = text.splitlines()
        here = lines[pm.line] if pm.line < len(lines) else ""
        return (
            f"YAML indentation: this line is indented more than the key on line {start + 1}, "
            "so YAML reads it as more of that key's value, which cannot hold ': '; indent it "
            "like that key (or, if it is text, put the whole value in quotes)"
        ), (pm.line + 1, len(here) - len(here.lstrip(" ")) + 1)
    if "mapping values are not allowed" in problem:
        return (
            "YAML syntax error: a ': ' where a value was expected; put the value in quotes "
            "if it contains ': ', or fix the indentation"
        ), at
    if "expected a single document" in problem + context:
        return (
            "expected one YAML document, got several (a second '---'); company.yaml holds "
            "exactly one document"
        ), at
    if problem.startswith("expected <block end>, but found"):
        found = problem.rsplit("found ", 1)[1]
        if found == "'<scalar>'":
            # the file is scanned again only here: a quote left open runs on to the next one
            quote = _runaway_quote(text, pm.line if pm else 0)
            if quote is not None:
                (ql, qc), end_line = quote
                return (
                    f"YAML syntax error: the quoted value that starts here runs on to line "
                    f"{end_line}, where its quote closes and the text after it is not YAML; "
                    "close the quote on this line (inside '…' a quote is written twice, "
                    'inside "…" as \\")'
                ), (ql, qc)
            return (
                "YAML syntax error: text after a value's closing quote or bracket; put the "
                "whole value in quotes (a quote inside it doubled: 'it''s')"
            ), at
        if found == "'-'":
            return (
                f"YAML syntax error: a list item ('- ') among the keys of a mapping{since}; "
                "put the list under a key of its own (`key:`, then `- item` lines indented "
                "below it), or indent it under the key it belongs to"
            ), at
        if found == "'?'":
            return (
                f"YAML syntax error: a 'key: value' line among the items of a list{since}; "
                "start it with '- ' to make it an item, or indent it less to end the list"
            ), at
        return (
            f"YAML indentation: this line starts at column {at[1]}, which lines up with no "
            f"key of the block it is in{since}; indent it exactly like the other keys of the "
            "mapping it belongs to (YAML nests by indentation)"
        ), at
    if problem == "could not find expected ':'" and cm is not None:
        return (
            "YAML syntax error: no ': ' after this key; write `key: value` with a space after "
            "the colon (a line that continues the value above is indented more)"
        ), (cm.line + 1, cm.column + 1)
    if problem.startswith("found character") and "cannot start any token" in problem:
        char = problem.split("'")[1] if problem.count("'") >= 2 else "this character"
        return (
            f"YAML syntax error: a value cannot start with '{char}' (YAML reserves it); put "
            "the value in quotes"
        ), at
    if "while scanning an alias" in context or "while scanning an anchor" in context:
        return (
            "YAML syntax error: '*' starts an alias (a reference to an '&anchor') and '&' an "
            "anchor; to write text that starts with either, put the value in quotes"
        ), ((cm.line + 1, cm.column + 1) if cm else at)
    if problem.startswith("found undefined alias"):
        name = problem.rsplit(" ", 1)[1].strip("'")
        return (
            f"YAML syntax error: the alias *{name} refers to no '&{name}' above it; define "
            "that anchor first, or put the value in quotes if it is text"
        ), at
    if "while scanning a block scalar" in context:
        return (
            "YAML syntax error: '|' and '>' start a text on the lines below, indented; move "
            "the text there, or put the value in quotes"
        ), ((cm.line + 1, cm.column + 1) if cm else at)
    if problem == "mapping keys are not allowed here":
        return "YAML syntax error: a value cannot start with '? '; put the value in quotes", at
    if "while scanning a quoted scalar" in context and "end of stream" in problem and cm:
        return (
            "YAML syntax error: this quote is never closed; close it at the end of its value"
        ), (cm.line + 1, cm.column + 1)
    message = f"YAML syntax error: {problem}; fix the syntax at this position"
    if context.startswith("while parsing a flow") and cm:
        # "a flow node": the context mark is where the node was expected, not the bracket
        bracket = _unclosed_bracket(text) if context == "while parsing a flow node" else None
        opened_on = cm.line if bracket is None else bracket
        message += f" (is the '{{' or '[' on line {opened_on + 1} left unclosed?)"
    elif context and cm and "single document" not in context:
        message += f" ({context} at line {cm.line + 1})"
    return message, at


def _unclosed_bracket(text: str) -> int | None:
    """The line (0-based) of the innermost ``[`` or ``{`` still open where the scanner
    stops, if any.
    """
    opened: list[int] = []
    with contextlib.suppress(yaml.YAMLError):
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(token, yaml.FlowSequenceStartToken | yaml.FlowMappingStartToken):
                opened.append(token.start_mark.line)
            elif isinstance(token, yaml.FlowSequenceEndToken | yaml.FlowMappingEndToken) and opened:
                opened.pop()
    return opened[-1] if opened else None


def _plain_start(text: str, line: int) -> int | None:
    """The line (0-based) where the unquoted value that ends on line ``line`` starts, if it
    spans lines; None otherwise.
    """
    start = None
    with contextlib.suppress(yaml.YAMLError):
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.start_mark.line > line:
                break
            if isinstance(token, yaml.ScalarToken) and token.plain:
                spans = token.start_mark.line < line == token.end_mark.line
                start = token.start_mark.line if spans else None
    return start


_GLUED = re.compile(r"^(\s*(?:-\s+)?)([A-Za-z_][\w.-]*):([^\s:#].*?)\s*(?:\s#.*)?$")


def _glued_key(text: str, line: int | None) -> tuple[int, int, str, str] | None:
    """``(line, column, key, value)`` (1-based) when line ``line`` (0-based) reads
    ``key:value`` with no space after the colon; None otherwise.
    """
    if line is None:
        return None
    lines = text.splitlines()
    m = _GLUED.match(lines[line]) if line < len(lines) else None
    if m is None:
        return None
    return line + 1, len(m.group(1)) + 1, m.group(2), m.group(3)


def _runaway_quote(text: str, before: int) -> tuple[tuple[int, int], int] | None:
    """The position of the last quoted value that spans lines and ends before line
    ``before`` (0-based), and the line (1-based) its quote closes on: a quote left open runs
    on to the next quote in the file, and the parser fails only after it.
    """
    last = None
    with contextlib.suppress(yaml.YAMLError):
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.start_mark.line > before:
                break
            if (
                isinstance(token, yaml.ScalarToken)
                and token.style in ("'", '"')
                and token.end_mark.line > token.start_mark.line
            ):
                last = token
    if last is None:
        return None
    return (last.start_mark.line + 1, last.start_mark.column + 1), last.end_mark.line + 1
