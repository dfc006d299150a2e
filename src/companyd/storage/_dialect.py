"""The SQL the stores write, and how it reaches PostgreSQL.

The stores write one dialect: the subset that SQLite and PostgreSQL read the same way —
``?`` placeholders, ``INSERT … ON CONFLICT … DO NOTHING / DO UPDATE``, ``RETURNING``,
``length()``, ``SUM``, ``BETWEEN``. Where the two differ (column types, ``WITHOUT ROWID``,
identity columns) a migration names both texts (:class:`Dialects`).

:func:`to_pyformat` turns the stores' ``?`` placeholders into psycopg's ``%s`` (and a
literal ``%`` into ``%%``), outside quoted strings and identifiers, so one statement text
serves both backends. It is a tokenizer, not a parser: the stores' SQL holds no comments
and no dollar-quoted strings (a migration that needs them names its PostgreSQL text).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any, Protocol

from companyd._frozen import Frozen

__all__ = ["Connection", "Cursor", "Dialects", "to_pyformat"]


class Cursor(Protocol):
    """What the stores read of a statement's result, on either backend."""

    def fetchone(self) -> Any:
        """The next row, or None."""

    def fetchall(self) -> list[Any]:
        """The remaining rows."""

    def __iter__(self) -> Iterator[Any]:
        """The remaining rows, one by one."""

    @property
    def description(self) -> Any:
        """The result's columns (their names first), or None for a statement with none."""

    @property
    def rowcount(self) -> int:
        """The rows the statement changed (-1 when not known)."""


class Connection(Protocol):
    """What the stores use of a connection: ``sqlite3.Connection`` and
    :class:`companyd.storage._postgres.PgConnection` both are one.
    """

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (``BEGIN`` given, no ``COMMIT``/``ROLLBACK`` yet)."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor:
        """Run one statement with ``?`` placeholders."""

    def executemany(self, sql: str, parameters: Any, /) -> Cursor:
        """Run one statement once per parameter row."""


class Dialects(Frozen):
    """One migration step written for each backend: an SQL script (statements separated by
    ``;``) per dialect.
    """

    sqlite: str
    postgres: str


@functools.lru_cache(maxsize=2048)
def to_pyformat(sql: str) -> str:
    """``sql`` with each ``?`` placeholder as ``%s`` and each ``%`` as ``%%``, leaving quoted
    strings (``'…'``) and identifiers (``"…"``) as they are.

    Raises:
        ValueError: a quote is not closed (the statement would fail on either backend).
    """
    out: list[str] = []
    quote: str | None = None
    for ch in sql:
        if quote is not None:
            out.append("%%" if ch == "%" else ch)
            if ch == quote:
                quote = None  # a doubled quote closes and reopens: same result
            continue
        if ch in ("'", '"'):
            quote = ch
            out.append(ch)
        elif ch == "?":
            out.append("%s")
        elif ch == "%":
            out.append("%%")
        else:
            out.append(ch)
    if quote is not None:
        raise ValueError(f"unclosed {quote} in SQL: {sql!r}")
    return "".join(out)
