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
