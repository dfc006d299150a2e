"""Loopback stand-ins for the daemon's operational parts (systemd, control, metrics).

* :class:`Ctx` / :func:`running`: a minimal :class:`~companyd.supervision._child.ChildContext`,
  so one child's ``run(ctx)`` can be driven without a supervisor;
* :class:`Receiver` / :func:`receiver`: a datagram socket standing in for systemd's notify
  socket (path or abstract), for sd_notify tests and start-to-READY benchmarks;
* :func:`short_dir`: a directory with a short path (``sun_path`` holds 107 bytes and
  pytest's ``tmp_path`` is often longer);
* :func:`as_unprivileged`: run a function as ``nobody`` in a forked child, so permission
  checks can be tested when the suite runs as root.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

# The short name the tests use for a child run on its own.
from companyd._aio import race
from companyd.supervision import StandaloneContext as Ctx

__all__ = ["Ctx", "Receiver", "as_unprivileged", "receiver", "running", "short_dir"]


@contextlib.asynccontextmanager
async def running(
    run: Callable[[Ctx], Awaitable[None]], ctx: Ctx | None = None, *, timeout: float = 10.0
) -> AsyncIterator[Ctx]:
    """Start ``run(ctx)`` as a task, wait until it reports started, stop it on exit."""
    ctx = ctx or Ctx()
    task = asyncio.ensure_future(run(ctx))
    async with asyncio.timeout(timeout):
        ready = asyncio.ensure_future(ctx.ready.wait())
        await race(task, ready)
        if task.done():
            ready.cancel()
            task.result()  # raises the child's start error
            raise AssertionError("child returned before reporting started")
    try:
        yield ctx
    finally:
        ctx.stopping.set()
        async with asyncio.timeout(timeout):
            await task


@contextlib.contextmanager
def short_dir() -> Iterator[Path]:
    """A fresh directory with a short path under /tmp, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="cd-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Receiver:
    """A datagram socket standing in for systemd's notify socket."""

    def __init__(self, address: str) -> None:
        self.address = address  # as it goes in $NOTIFY_SOCKET
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if address.startswith("@"):
            self.sock.bind(b"\0" + address[1:].encode())
        else:
            self.sock.bind(address)
        self.sock.settimeout(10.0)

    def get(self) -> str:
        """The next datagram (waits up to 10 s, then raises TimeoutError)."""
        return self.sock.recv(65536).decode("utf-8")

    def drain(self) -> list[str]:
        """Every datagram already received, without waiting."""
        out = []
        self.sock.setblocking(False)
        try:
            while True:
                out.append(self.sock.recv(65536).decode("utf-8"))
        except BlockingIOError:
            pass
        finally:
            self.sock.settimeout(10.0)
        return out

    def close(self) -> None:
        """Close the socket and remove its file (an abstract ``@`` address has none)."""
        self.sock.close()
        if not self.address.startswith("@"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.address)


@contextlib.contextmanager
def receiver(kind: str = "path") -> Iterator[Receiver]:
    """A :class:`Receiver` on a fresh path (``kind="path"``) or abstract name
    (``kind="abstract"``), closed afterwards.
    """
    if kind == "abstract":
        r = Receiver(f"@companyd-test-{uuid.uuid4().hex[:12]}")
        try:
            yield r
        finally:
            r.close()
        return
    with short_dir() as d:
        r = Receiver(str(d / "notify"))
        try:
            yield r
        finally:
            r.close()


def as_unprivileged(fn: Callable[[], str]) -> str:
    """Run ``fn`` in a forked child that became ``nobody`` (uid/gid 65534) and return what
    it returned (or the exception it raised, as text). Only for tests running as root,
    where permission checks cannot be provoked otherwise.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                text = fn()
            except BaseException as exc:
                text = f"{type(exc).__name__}: {exc}"
            os.write(w, text.encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as pipe:
        text = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert status == 0, f"child exited with status {status}"
    return text
