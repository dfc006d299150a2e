"""``companyd doctor``'s ``database`` check, against a real PostgreSQL server (a throwaway
cluster on loopback): skipped on SQLite, ok when the server answers (with the company
schema's stores), a problem that names the cause and never the password when it does not.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from companyd.cli import main
from companyd.ops._doctor import run_doctor
from companyd.spend._ledger import Ledger
from companyd.storage import Backend

from .opskit import write_company

pytestmark = pytest.mark.anyio

NO_SYSTEMD = Path("/nonexistent/run/systemd/system")


async def _database_check(config: Path, url: str | None) -> tuple[str, str, str | None]:
    environ = {"COMPANYD_DATABASE_URL": url} if url else {}
    report = await run_doctor(config, offline=True, environ=environ, systemd_runtime=NO_SYSTEMD)
    check = next(c for c in report.checks if c.name == "database")
    return check.status, check.summary, check.fix


async def test_skipped_on_sqlite(tmp_path: Path) -> None:
    status, summary, _ = await _database_check(write_company(tmp_path), None)
    assert status == "skipped" and "state.backend: sqlite" in summary


async def test_ok_with_the_schema_and_its_stores(tmp_path: Path, pg_backend: Backend) -> None:
    config = write_company(tmp_path, state={"backend": "postgres", "schema": pg_backend.schema})
    status, summary, _ = await _database_check(config, pg_backend.dsn)
    assert status == "ok" and f"schema {pg_backend.schema!r} does not exist yet" in summary
    Ledger(tmp_path / "spend.sqlite", backend=pg_backend).close()  # a daemon's first start
    status, summary, _ = await _database_check(config, pg_backend.dsn)
    assert status == "ok"
    assert summary.startswith("PostgreSQL 1") and f"{pg_backend.schema!r}: spend v1" in summary


async def test_an_unreachable_database_is_a_problem_without_its_password(tmp_path: Path) -> None:
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://acme:hunter2-secret@127.0.0.1:{port}/acme"
    config = write_company(tmp_path, state={"backend": "postgres"})
    status, summary, fix = await _database_check(config, url)
    assert status == "problem"
    assert "cannot reach the company's PostgreSQL database" in summary
    assert "hunter2-secret" not in summary + (fix or "")
    assert fix is not None and "$COMPANYD_DATABASE_URL" in fix


async def test_a_missing_url_is_a_problem_that_says_what_to_set(tmp_path: Path) -> None:
    config = write_company(tmp_path, state={"backend": "postgres"})
    status, summary, _ = await _database_check(config, None)
    assert status == "problem" and "$COMPANYD_DATABASE_URL is not set" in summary


#: A database password with characters a URL must percent-encode, written unencoded (and
#: in libpq's key=value form): (how it is written, with {port} and {pw}, the password).
#: Each password is made of words that appear nowhere else, so no piece of it may show.
ODD_SHAPES = [
    ("postgresql://acme:{pw}@127.0.0.1:{port}/acme", "marigold lantern quibble"),
    ("postgresql://acme:{pw}@127.0.0.1:{port}/acme", "saffron@tundra@wobble"),
    ("postgresql://acme:{pw}@127.0.0.1:{port}/acme", "juniper/cobalt/ripple"),
    ("postgresql://acme:{pw}@127.0.0.1:{port}/acme", "hemlock#walrus?zephyr"),
    ("postgresql://acme:{pw}@127.0.0.1:{port}/acme", "cinder@basalt/gossamer"),
    ("host=127.0.0.1 port={port} user=acme password='{pw}' dbname=acme", "tamarind ocelot@plinth"),
    ("host=127.0.0.1 port={port} user=acme password={pw} dbname=acme", "verbena kestrel mosaic"),
]


def _closed_port() -> int:
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pieces(password: str) -> list[str]:
    return [w for w in re.split(r"[^A-Za-z]+", password) if w]


@pytest.mark.parametrize(("shape", "password"), ODD_SHAPES)
def test_a_password_in_an_odd_shape_is_never_printed_by_doctor(
    tmp_path: Path,
    shape: str,
    password: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = shape.format(port=_closed_port(), pw=password)
    monkeypatch.setenv("COMPANYD_DATABASE_URL", url)
    config = write_company(tmp_path, state={"backend": "postgres"})
    (tmp_path / "state").mkdir(mode=0o700)
    for argv in ([], ["--json"]):
        rc = main(["doctor", "--config", str(config), "--offline", *argv])
        out, err = capsys.readouterr()
        assert rc == 1, out + err
        assert "database" in out
        for piece in _pieces(password):  # not the password, nor any piece of it
            assert piece not in out + err, (piece, out)
