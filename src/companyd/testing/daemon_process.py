"""The real ``companyd run`` as a subprocess, driven from asyncio tests and benchmarks.

* :class:`DaemonProcess` starts ``python -m companyd run`` on a company.yaml and a state
  directory, waits until its control socket answers, calls control operations, runs other
  ``companyd`` commands against it, sends signals and reads the events it logged;
* :class:`NotifyListener` stands in for systemd's notify socket without blocking the event
  loop, and records every sd_notify datagram with the moment it was read.

Both are loopback only (a Unix datagram socket, the daemon's Unix control socket) and every
wait has a deadline.

The daemon's stderr goes to a file, never to a pipe: a pipe nobody drains fills up, the
daemon's logging handler then blocks in ``write()`` on the event loop's thread, and the
watchdog pings stop because of the test harness instead of the daemon. The daemon logs in
JSON (``--log-format json``) at ``debug`` level, so every event on its bus (``child_started``
included) can be read back from that file with :meth:`DaemonProcess.events`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from companyd.testing import forkserver
from companyd.testing.forkserver import ForkedProcess

__all__ = ["CliResult", "DaemonProcess", "Notification", "NotifyListener", "run_cli"]


@dataclass(frozen=True)
class Notification:
    """One sd_notify datagram.

    Attributes:
        at: ``time.monotonic()`` in the receiving process when it was read.
        fields: its ``KEY=VALUE`` lines as a dict.
        raw: the datagram as text.
    """

    at: float
    fields: Mapping[str, str]
    raw: str

    def has(self, key: str, value: str = "1") -> bool:
        """Whether the datagram holds ``KEY=value``."""
        return self.fields.get(key) == value


class NotifyListener:
    """An asyncio stand-in for systemd's notify socket (``$NOTIFY_SOCKET``).

    Binds a datagram socket at ``path`` (keep it short: ``sun_path`` holds 107 bytes) and,
    once :meth:`start` ran, reads every datagram as soon as the event loop sees it, into
    :attr:`messages`.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.address = str(path)  # as it goes in $NOTIFY_SOCKET
        self.messages: list[Notification] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(self.address)
        self._sock.setblocking(False)
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Start reading datagrams on the running event loop."""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._sock.fileno(), self._read)

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            now = time.monotonic()
            raw = data.decode("utf-8")
            fields = dict(line.split("=", 1) for line in raw.split("\n") if "=" in line)
            self.messages.append(Notification(now, fields, raw))
            self._changed.set()

    def with_key(self, key: str, value: str = "1", since: int = 0) -> list[Notification]:
        """The datagrams from index ``since`` on holding ``KEY=value``."""
        return [m for m in self.messages[since:] if m.has(key, value)]

    async def wait_until(
        self, predicate: Callable[[Notification], bool], *, since: int = 0, timeout: float = 20.0
    ) -> Notification:
        """Wait for the first datagram from index ``since`` on for which ``predicate`` holds.

        Raises:
            TimeoutError: none within ``timeout`` seconds.
        """
        try:
            async with asyncio.timeout(timeout):
                while not (found := [m for m in self.messages[since:] if predicate(m)]):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            got = [m.raw for m in self.messages[since:]][-10:]
            raise TimeoutError(
                f"no matching datagram within {timeout:g} s; latest datagrams: {got!r}"
            ) from None
        return found[0]

    async def wait_for(
        self,
        key: str,
        value: str = "1",
        *,
        since: int = 0,
        count: int = 1,
        timeout: float = 20.0,
    ) -> list[Notification]:
        """Wait until ``count`` datagrams from index ``since`` on hold ``KEY=value``;
        returns them all.

        Raises:
            TimeoutError: fewer arrived within ``timeout`` seconds (the message says what
                did arrive).
        """
        try:
            async with asyncio.timeout(timeout):
                while len(found := self.with_key(key, value, since)) < count:
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            got = [m.raw for m in self.messages[since:]][-10:]
            raise TimeoutError(
                f"expected {count} × {key}={value} within {timeout:g} s, got "
                f"{len(self.with_key(key, value, since))}; latest datagrams: {got!r}"
            ) from None
        return found

    def close(self) -> None:
        """Stop reading, close the socket and remove its file."""
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.address)


@dataclass(frozen=True)
class CliResult:
    """A finished ``companyd`` command: exit code, stdout, stderr."""

    rc: int
    out: str
    err: str


async def run_cli(
    config: Path,
    state_dir: Path,
    argv: Sequence[str],
    env: Mapping[str, str],
    timeout: float = 60.0,
) -> CliResult:
    """Run ``companyd ARGV --config CONFIG --state-dir STATE_DIR`` as another process with
    ``env`` (less ``NOTIFY_SOCKET``); its exit code and output.

    Raises:
        AssertionError: it did not finish within ``timeout`` seconds (it is killed).
    """
    cmd = [
        sys.executable,
        "-m",
        "companyd",
        *argv,
        "--config",
        str(config),
        "--state-dir",
        str(state_dir),
    ]
    child_env = {k: v for k, v in env.items() if k != "NOTIFY_SOCKET"}
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        env=child_env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"{cmd!r} did not finish within {timeout:g} s") from None
    assert proc.returncode is not None
    return CliResult(proc.returncode, out.decode(), err.decode())


class DaemonProcess:
    """``companyd run`` as a real subprocess.

    Args:
        config: the company.yaml to run.
        state_dir: its state directory (the control socket is created in it: keep the
            path short).
        log: file receiving the daemon's stderr (JSON log lines) and stdout.
        offline: start with ``--offline`` (the built-in model, no API key needed).
        env: the daemon's whole environment (default: this process's).
        args: more ``companyd run`` arguments.
        log_level: the daemon's ``--log-level``; ``debug`` (the default) logs every event.
        forked: fork the process from :mod:`companyd.testing.forkserver` (which imported
            the daemon and the anthropic SDK once) instead of starting an interpreter —
            for tests whose point is what the process does when signalled, killed or
            stopped, not its start-up (~1.8 s of CPU less per daemon with Claude).
    """

    def __init__(
        self,
        config: Path,
        state_dir: Path,
        *,
        log: Path,
        offline: bool = True,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        log_level: str = "debug",
        forked: bool = False,
    ) -> None:
        self.config = config
        self.state_dir = state_dir
        self.log = log
        self.offline = offline
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.args = list(args)
        self.log_level = log_level
        self.forked = forked
        self.proc: asyncio.subprocess.Process | ForkedProcess | None = None
        self._read_offset = 0
        self._partial = b""
        self._records: list[dict[str, Any]] = []

    @property
    def socket(self) -> Path:
        """The control socket: in ``$RUNTIME_DIRECTORY`` when ``env`` sets it (as systemd
        does), else in the state directory.
        """
        runtime = self.env.get("RUNTIME_DIRECTORY")
        if runtime:
            return Path(runtime.split(":")[0]) / "companyd.sock"
        return self.state_dir / "companyd.sock"

    @property
    def pid(self) -> int:
        """The daemon's process id.

        Raises:
            RuntimeError: the daemon was not started.
        """
        return self._proc().pid

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has exited and been waited for; None before (or if
        never started).
        """
        return None if self.proc is None else self.proc.returncode

    def command(self) -> list[str]:
        """The ``companyd run`` command line."""
        cmd = [
            sys.executable,
            "-m",
            "companyd",
            "run",
            "--config",
            str(self.config),
            "--state-dir",
            str(self.state_dir),
            "--log-format",
            "json",
            "--log-level",
            self.log_level,
        ]
        if self.offline:
            cmd.append("--offline")
        return cmd + self.args

    async def spawn(self) -> None:
        """Start the process without waiting for it to be ready."""
        if self.forked:
            argv = self.command()[3:]  # after `python -m companyd`
            self.proc = forkserver.spawn(argv, self.env, Path.cwd(), log=self.log)
            return
        # opening a local log file is quick and happens once per daemon
        with open(self.log, "ab") as out:  # noqa: ASYNC230
            self.proc = await asyncio.create_subprocess_exec(
                *self.command(),
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )

    async def start(self, timeout: float = 30.0) -> None:
        """Start the daemon and wait (≤ ``timeout`` s) until its control socket answers.

        Raises:
            AssertionError: it exited first, or did not answer in time (with its log).
        """
        await self.spawn()
        await self.wait_ready(timeout)

    async def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until the control socket answers ``ping``."""
        from companyd.daemon import ControlClient

        proc = self._proc()
        deadline = time.monotonic() + timeout
        client = ControlClient(self.socket, timeout=5.0)
        while True:
            if proc.returncode is not None:
                raise AssertionError(
                    f"the daemon exited with {proc.returncode} before it was ready:\n"
                    + self.log_text()[-4000:]
                )
            try:
                await client.acall("ping")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"the daemon did not answer on {str(self.socket)!r} within "
                        f"{timeout:g} s:\n" + self.log_text()[-4000:]
                    ) from None
                await asyncio.sleep(0.05)

    async def call(self, op: str, /, **args: Any) -> dict[str, Any]:
        """Run a control operation; returns its result (raises the client's errors)."""
        from companyd.daemon import ControlClient

        return await ControlClient(self.socket, timeout=10.0).acall(op, **args)

    async def cli(self, *argv: str, timeout: float = 60.0) -> CliResult:
        """Run ``companyd ARGV --config C --state-dir S`` as another process."""
        return await run_cli(self.config, self.state_dir, argv, self.env, timeout)

    def send_signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the daemon process.

        Raises:
            RuntimeError: the daemon was not started.
        """
        self._proc().send_signal(sig)

    async def wait(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit; its exit code (negative: killed by a signal)."""
        proc = self._proc()
        try:
            async with asyncio.timeout(timeout):
                return await _wait(proc)
        except TimeoutError:
            raise AssertionError(
                f"the daemon (pid {proc.pid}) did not exit within {timeout:g} s:\n"
                + self.log_text()[-4000:]
            ) from None

    async def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait (a still-running daemon is killed after ``timeout``)."""
        proc = self._proc()
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return await self.wait(timeout)
        finally:
            if proc.returncode is None:
                proc.kill()
                await _wait(proc)

    async def __aenter__(self) -> DaemonProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            await self.stop()

    # -- the log --------------------------------------------------------------------------

    def log_text(self) -> str:
        """Everything the daemon wrote so far."""
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def records(self) -> list[dict[str, Any]]:
        """Every JSON log record written so far (lines that are not JSON are skipped)."""
        # the log is a local file read incrementally: a few kilobytes per call
        try:
            with open(self.log, "rb") as f:
                f.seek(self._read_offset)
                data = f.read()
        except FileNotFoundError:
            return self._records
        self._read_offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    self._records.append(record)
        return self._records

    def events(
        self, kind: str | None = None, where: Callable[[dict[str, Any]], bool] | None = None
    ) -> list[dict[str, Any]]:
        """The events the daemon logged (``Event.to_dict()``: kind, ts, source, severity,
        data), oldest first, optionally only of ``kind`` and matching ``where(event)``.
        """
        out = []
        for record in self.records():
            event = record.get("event")
            if not isinstance(event, dict):
                continue
            if kind is not None and event.get("kind") != kind:
                continue
            if where is not None and not where(event):
                continue
            out.append(event)
        return out

    async def wait_event(
        self,
        kind: str,
        where: Callable[[dict[str, Any]], bool] | None = None,
        *,
        since: int = 0,
        timeout: float = 20.0,
    ) -> dict[str, Any]:
        """Wait for an event of ``kind`` (matching ``where``) among the events from index
        ``since`` of :meth:`events` on; returns the first one.

        Raises:
            AssertionError: none within ``timeout`` s, or the daemon exited.
        """
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.events()[since:] if e.get("kind") == kind]
            found = [e for e in found if where is None or where(e)]
            if found:
                return found[0]
            if self.returncode is not None or time.monotonic() > deadline:
                why = (
                    f"the daemon exited with {self.returncode}"
                    if self.returncode is not None
                    else f"none within {timeout:g} s"
                )
                raise AssertionError(
                    f"no {kind!r} event ({why}); log tail:\n" + self.log_text()[-3000:]
                )
            await asyncio.sleep(0.05)

    def _proc(self) -> asyncio.subprocess.Process | ForkedProcess:
        if self.proc is None:
            raise RuntimeError("the daemon was not started; call start() first")
        return self.proc


async def _wait(proc: asyncio.subprocess.Process | ForkedProcess) -> int:
    """Its exit status, once it has exited (a forked one: reaped by the fork server)."""
    if isinstance(proc, ForkedProcess):
        return await proc.wait_async()
    return await proc.wait()
