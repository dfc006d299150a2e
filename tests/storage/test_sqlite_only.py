"""``companyd.storage.sqlite_only``: a process that declares SQLite stores only reads them
without the PostgreSQL driver, and cannot open a PostgreSQL store by mistake (issue 31).
Process-wide, so each case runs in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_sqlite_only_process_binds_db_errors_without_psycopg() -> None:
    out = _run(
        "import sys, sqlite3\n"
        "import companyd.storage as st\n"
        "assert st.sqlite_only()\n"
        "from companyd.runs import Journal\n"  # a store: binds DB_ERRORS at its import
        "assert st.DB_ERRORS == (sqlite3.Error, OSError), st.DB_ERRORS\n"
        "print('psycopg' in sys.modules)\n"
    )
    assert out == "False"


def test_without_the_declaration_db_errors_catch_psycopg_errors() -> None:
    out = _run(
        "import psycopg\n"
        "from companyd.storage import DB_ERRORS, sqlite_only\n"
        "assert psycopg.Error in DB_ERRORS\n"
        "print(sqlite_only())\n"  # too late: already bound with psycopg's errors
    )
    assert out == "False"


def test_a_sqlite_only_process_refuses_to_open_a_postgresql_store() -> None:
    out = _run(
        "from companyd.storage import Backend, open_database, sqlite_only\n"
        "sqlite_only()\n"
        "try:\n"
        "    open_database(Backend(kind='postgres', dsn='postgresql://x@127.0.0.1:9/x'),\n"
        "                  path=None, store='runs', migrations=(), what='the run journal')\n"
        "except RuntimeError as exc:\n"
        "    print('refused:', exc)\n"
    )
    assert out.startswith("refused:") and "SQLite stores only" in out
