"""The suite's own guards work: a non-loopback connection fails the test."""

from __future__ import annotations

import socket

import pytest


def test_non_loopback_connect_is_refused() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(AssertionError, match="loopback only"):
            s.connect(("192.0.2.1", 9))  # TEST-NET-1, never routable
    finally:
        s.close()


def test_resolving_a_public_name_is_refused() -> None:
    with pytest.raises(AssertionError, match="loopback only"):
        socket.getaddrinfo("api.anthropic.com", 443)


def test_loopback_is_allowed() -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    c = socket.create_connection(srv.getsockname(), timeout=5)
    c.close()
    srv.close()


def test_the_event_loops_connections_are_checked_too() -> None:
    # asyncio (and anyio, httpx and the SDKs above it) connect through the socket class and
    # resolve through socket.getaddrinfo: both are checked, from any thread
    import asyncio

    async def connect(host: str) -> None:
        async with asyncio.timeout(10):
            await asyncio.open_connection(host, 9)

    with pytest.raises(AssertionError, match="loopback only"):
        asyncio.run(connect("192.0.2.1"))
    with pytest.raises(AssertionError, match="loopback only"):
        asyncio.run(connect("api.anthropic.com"))  # resolved in the loop's executor thread


def test_an_http_client_cannot_reach_a_public_name() -> None:
    import httpx

    with pytest.raises(AssertionError, match="loopback only"), httpx.Client(timeout=10) as c:
        c.get("https://api.anthropic.com/v1/models")
