"""Where each value of company.yaml was written, and the report of issues by position.

Every pass over the file (schema, secret scan, cross-checks) adds its findings to one
:class:`Report`, which places each at ``line:column`` through the :class:`Positions` the
YAML reader recorded, keeps one line per issue, and remembers which paths are already
explained so a later pass does not pile a derived complaint onto the same value.
"""

from __future__ import annotations

import re

from companyd.errors import ConfigIssue

__all__ = ["Path_", "Positions", "Report", "dotted"]

#: A path in the document: mapping keys and list indices from the top.
Path_ = tuple[str | int, ...]


class Positions:
    """Line/column of every node by its path in the document, from the YAML compose tree.

    ``value`` holds where each value starts (an empty value points at its key), ``key``
    where each mapping key starts, ``scalar`` the source text and style of each scalar (to
    explain what YAML made of an unquoted ``23:00`` or ``yes``).
    """

    def __init__(self) -> None:
        self.value: dict[Path_, tuple[int, int]] = {}
        self.key: dict[Path_, tuple[int, int]] = {}
        self.scalar: dict[Path_, tuple[str, str | None]] = {}

    def of(self, path: Path_, *, key: bool = False) -> tuple[int, int]:
        """Position of the deepest known node on ``path`` (its key when ``key``)."""
        p = path
        while p:
            if key and p in self.key:
                return self.key[p]
            if p in self.value:
                return self.value[p]
            p = p[:-1]
        return self.value.get((), (1, 1))

    def move(self, old: Path_, new: Path_) -> None:
        """Re-file every position under ``old`` as under ``new`` (a key was renamed)."""
        n = len(old)
        for p in [p for p in self.value if p[:n] == old]:
            self.value[(*new, *p[n:])] = self.value.pop(p)
        for p in [p for p in self.key if p[:n] == old]:
            self.key[(*new, *p[n:])] = self.key.pop(p)
        for p in [p for p in self.scalar if p[:n] == old]:
            self.scalar[(*new, *p[n:])] = self.scalar.pop(p)


def dotted(path: Path_) -> str:
    """``path`` as the operator reads it: ``agents.ceo.model``, on one line."""
    # A key may be any quoted text, line breaks included; the path must stay on one line,
    # and a key with white space at either end (``" "``, ``" 0"``) is quoted, so the
    # operator sees where it begins and ends.
    return ".".join(_part(p) for p in path)


def _part(p: object) -> str:
    text = p if isinstance(p, str) and p.isprintable() else _one_line(str(p))
    return repr(text) if isinstance(p, str) and (not text or text != text.strip()) else text


_LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _one_line(text: str) -> str:
    r"""``text`` with every character that would break the line escaped (``\n``)."""
    return _LINE_BREAKS.sub(lambda m: repr(m.group())[1:-1], text)


class Report:
    """Collects issues with positions; knows which paths already have an error so later
    passes do not pile a second, derived complaint onto the same value.
    """

    def __init__(self, file: str, pos: Positions) -> None:
        self.file = file
        self.pos = pos
        self.issues: list[ConfigIssue] = []
        self.settled: set[Path_] = set()

    def add(
        self,
        path: Path_,
        message: str,
        *,
        key: bool = False,
        at: tuple[int, int] | None = None,
        severity: str = "error",
    ) -> None:
        """Record an issue at ``path`` (its value, or its key with ``key=True``), at the position
        in the file that ``at`` gives or, by default, :class:`Positions` finds for it. Does not
        check :meth:`is_settled`: callers that may repeat a complaint ask first.
        """
        line, col = at if at is not None else self.pos.of(path, key=key)
        self.issues.append(
            ConfigIssue(
                file=self.file,
                line=line,
                column=col,
                path=dotted(path),
                message=_one_line(message),  # one issue, one line: always
                severity=severity,
            )
        )

    def warn(self, path: Path_, message: str, *, key: bool = False) -> None:
        """:meth:`add` with severity ``warning``: reported, but the file still loads."""
        self.add(path, message, key=key, severity="warning")

    def settle(self, path: Path_) -> None:
        """Mark ``path`` as explained: later errors at or below it are dropped."""
        self.settled.add(path)

    def is_settled(self, path: Path_) -> bool:
        """Whether ``path`` is at or below a path already given to :meth:`settle`, so a further
        error there would only repeat the first.
        """
        return any(path[: len(s)] == s for s in self.settled)

    def _sorted(self, severity: str) -> list[ConfigIssue]:
        seen: set[tuple[int, int, str]] = set()
        out: list[ConfigIssue] = []
        for i in sorted(self.issues, key=lambda i: (i.line, i.column)):
            # The same YAML anchor merged in two places reports its own problems twice.
            k = (i.line, i.column, i.message)
            if i.severity == severity and k not in seen:
                seen.add(k)
                out.append(i)
        return out

    def errors(self) -> list[ConfigIssue]:
        """The errors, in file order, each (line, column, message) once."""
        return self._sorted("error")

    def warnings(self) -> list[ConfigIssue]:
        """The warnings, in file order, each (line, column, message) once."""
        return self._sorted("warning")
