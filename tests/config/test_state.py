"""``state:`` — where the stores live: SQLite by default, PostgreSQL named by a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from companyd.config import company_schema, secret_values, state_backend
from companyd.errors import ConfigError
from companyd.storage import Backend

from .configkit import MINIMAL, errors, load

PG = MINIMAL + "state:\n  backend: postgres\n"
URL = "postgresql://acme:s3cret-pw@db.internal:5432/companies"


def test_sqlite_is_the_default_and_needs_no_database() -> None:
    assert state_backend(load(MINIMAL), {}) == Backend()


def test_postgres_reads_its_url_from_the_environment_and_names_a_schema_per_company() -> None:
    backend = state_backend(load(PG), {"COMPANYD_DATABASE_URL": URL})
    assert (backend.kind, backend.dsn, backend.schema) == ("postgres", URL, "acme")
    assert URL not in repr(backend)  # the URL holds a password


def test_postgres_reads_its_url_from_a_systemd_credential(tmp_path: Path) -> None:
    (tmp_path / "db_url").write_text(URL + "\n")
    cfg = load(PG + "  dsn_credential: db_url\n  schema: acme_prod\n")
    backend = state_backend(cfg, {"CREDENTIALS_DIRECTORY": str(tmp_path)})
    assert (backend.dsn, backend.schema) == (URL, "acme_prod")


def test_postgres_without_a_url_says_what_to_set() -> None:
    with pytest.raises(ConfigError) as info:
        state_backend(load(PG), {})
    (issue,) = info.value.issues
    assert issue.path == "state.backend"
    assert "$COMPANYD_DATABASE_URL is not set" in issue.message
    assert "postgresql://companyd@db.example.com:5432/companyd" in issue.message


def test_the_url_and_its_password_are_secrets_for_the_redactor() -> None:
    values = secret_values(load(PG), {"COMPANYD_DATABASE_URL": URL})
    assert URL in values and "s3cret-pw" in values


@pytest.mark.parametrize(
    ("name", "schema"),
    [
        ("Acme", "acme"),
        ("Acme Corp. (EU)", "acme_corp_eu"),
        ("42 Labs", "co_42_labs"),
        ("—", "company"),
    ],
)
def test_the_default_schema_is_the_company_name_as_an_identifier(name: str, schema: str) -> None:
    assert company_schema(load(MINIMAL.replace("name: Acme", f"name: '{name}'"))) == schema


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("state:\n  backend: mysql\n", "state.backend"),
        ("state:\n  schema: Acme-Prod\n", "state.schema"),
        ("state:\n  dsn: postgresql://x\n", "state.dsn"),
    ],
)
def test_a_wrong_state_block_is_a_config_error_naming_the_field(text: str, expected: str) -> None:
    (message,) = errors(MINIMAL + text)
    assert f": {expected}" in message
