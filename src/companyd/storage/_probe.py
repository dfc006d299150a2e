"""The company's database: does it answer, and what does its schema hold (``companyd doctor``).

:func:`probe` opens one connection (async psycopg, with a deadline), reads the server's
version, whether the company's schema exists, and each store's migration version there.
It writes nothing: a probe before the first daemon start finds no schema, which is not a
problem.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

__all__ = ["Probe", "probe"]


@dataclass(frozen=True)
class Probe:
    """What :func:`probe` found.

    Attributes:
        server: the server's version (``PostgreSQL 15.18``).
        schema_exists: whether the company's schema exists yet.
        stores: store name → its schema version (stores with tables in the schema).
    """

    server: str
    schema_exists: bool
    stores: dict[str, int] = field(default_factory=dict)


async def probe(dsn: str, schema: str, *, timeout: float = 10.0) -> Probe:
    """Connect to ``dsn`` and look at ``schema``, within ``timeout`` seconds in all.

    Raises:
        psycopg.Error: the server cannot be reached or refuses the connection (its message
            says why; it never contains the password).
        TimeoutError: no answer within ``timeout``.
    """
    async with asyncio.timeout(timeout):
        conn = await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, connect_timeout=max(1, int(timeout))
        )
        async with conn:
            cur = await conn.execute("SHOW server_version")
            row = await cur.fetchone()
            server = f"PostgreSQL {row[0] if row else '?'}"
            cur = await conn.execute(
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
            )
            if await cur.fetchone() is None:
                return Probe(server=server, schema_exists=False)
            try:
                cur = await conn.execute(
                    sql.SQL("SELECT store, version FROM {}.companyd_migrations").format(
                        sql.Identifier(schema)
                    )
                )
                stores = {str(s): int(v) for s, v in await cur.fetchall()}
            except psycopg.errors.UndefinedTable:
                stores = {}
            return Probe(server=server, schema_exists=True, stores=stores)
