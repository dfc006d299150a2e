"""One statement text for both backends: ``?`` placeholders as psycopg's ``%s``."""

from __future__ import annotations

import pytest

from companyd.storage._dialect import to_pyformat


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT a FROM t WHERE k=?", "SELECT a FROM t WHERE k=%s"),
        ("INSERT INTO t VALUES (?, ?, ?)", "INSERT INTO t VALUES (%s, %s, %s)"),
        # a literal ? or % in a string stays a character; % is doubled for psycopg
        ("SELECT '?' , ? FROM t", "SELECT '?' , %s FROM t"),
        (
            "SELECT a FROM t WHERE b LIKE '50%' AND c=?",
            "SELECT a FROM t WHERE b LIKE '50%%' AND c=%s",
        ),
        ("SELECT a % 2 FROM t", "SELECT a %% 2 FROM t"),
        ('SELECT "odd?name" FROM t WHERE x=?', 'SELECT "odd?name" FROM t WHERE x=%s'),
        ("SELECT 'it''s ?' , ?", "SELECT 'it''s ?' , %s"),
        ("SELECT 1", "SELECT 1"),
    ],
)
def test_placeholders_become_pyformat_outside_quotes(sql: str, expected: str) -> None:
    assert to_pyformat(sql) == expected


def test_an_unclosed_quote_is_refused_with_the_statement() -> None:
    with pytest.raises(ValueError, match=r"unclosed ' in SQL: \"SELECT 'a\""):
        to_pyformat("SELECT 'a")
