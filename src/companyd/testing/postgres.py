"""A throwaway PostgreSQL cluster on loopback, for tests and benchmarks.

:class:`ThrowawayCluster` runs Debian's own server binaries (package ``postgresql``):
``initdb`` into a new temporary directory, ``pg_ctl start`` on a free loopback port with
its Unix socket in that directory, and ``pg_ctl stop -m immediate`` plus removal of the
directory at :meth:`ThrowawayCluster.stop`. Nothing outside the directory is touched.

Why not pytest-postgresql: its executor runs ``initdb`` and ``pg_ctl`` as the calling user,
and PostgreSQL refuses to run as root, which is how CI runs. Here, when the caller is root,
the server's commands run as the ``postgres`` system user that the Debian package creates
(``subprocess``'s ``user=``), and the directory is handed to that user.

The cluster trades durability for speed (``fsync=off``, ``synchronous_commit=off``,
``full_page_writes=off``): tests kill *clients* and the *daemon*, never this server, so
nothing they check depends on the server's own crash safety.

Each test takes its own schema (:meth:`ThrowawayCluster.fresh_schema`), as companyd gives
each company its own schema, so tests sharing one cluster never see each other's rows.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

__all__ = ["PostgresUnavailable", "ThrowawayCluster", "find_bindir"]

#: The role the cluster is created with (trust authentication on loopback).
SUPERUSER = "companyd"

#: What to install when no server is found (the tests' skip reason says it).
INSTALL_HINT = (
    "Debian's PostgreSQL server (apt-get install -y postgresql; .ci/run installs it), "
    "or COMPANYD_PG_BINDIR=<directory with initdb and pg_ctl>"
)


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries on this machine (or the cluster would not start)."""


def find_bindir() -> Path:
    """The directory of ``initdb`` and ``pg_ctl``: ``$COMPANYD_PG_BINDIR``, else the newest
    ``/usr/lib/postgresql/<major>/bin`` (Debian's layout), else ``pg_ctl`` on ``PATH``.

    Raises:
        PostgresUnavailable: none of those has both programs.
    """
    candidates: list[Path] = []
    if env := os.environ.get("COMPANYD_PG_BINDIR"):
        candidates.append(Path(env))
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        majors = [p for p in debian.iterdir() if p.name.isdigit()]
        candidates += [p / "bin" for p in sorted(majors, key=lambda p: -int(p.name))]
    if on_path := shutil.which("pg_ctl"):
        candidates.append(Path(on_path).parent)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    raise PostgresUnavailable(f"no PostgreSQL server binaries found; install {INSTALL_HINT}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ThrowawayCluster:
    """One PostgreSQL server in a temporary directory; a context manager.

    Args:
        bindir: where ``initdb`` and ``pg_ctl`` are (default: :func:`find_bindir`).
        timeout: seconds each server command may take (``initdb``, start, stop).
    """

    def __init__(self, bindir: Path | None = None, *, timeout: float = 60.0) -> None:
        self.bindir = bindir or find_bindir()
        self.timeout = timeout
        self.port = 0
        self.root: Path | None = None
        self._user = "postgres" if os.geteuid() == 0 else None
        self._schemas = itertools.count(1)

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> ThrowawayCluster:
        """``initdb`` and start the server; wait until it accepts connections.

        Raises:
            PostgresUnavailable: the server could not be created or started (the message
                carries the end of its log).
        """
        self.root = Path(tempfile.mkdtemp(prefix="companyd-pg-"))
        if self._user is not None:
            pw = pwd.getpwnam(self._user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        data = self.root / "data"
        self._run(
            "initdb",
            "-D",
            str(data),
            "-U",
            SUPERUSER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        )
        for attempt in range(3):  # the free port may be taken between probe and bind
            self.port = _free_port()
            options = (
                f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c max_connections=300 -c log_min_messages=warning"
            )
            try:
                self._run(
                    "pg_ctl",
                    "start",
                    "-D",
                    str(data),
                    "-l",
                    str(self.root / "server.log"),
                    "-w",
                    "-t",
                    str(int(self.timeout)),
                    "-o",
                    options,
                )
                return self
            except PostgresUnavailable:
                if attempt == 2:
                    self.stop()
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self) -> None:
        """Stop the server at once and remove its directory (idempotent)."""
        root, self.root = self.root, None
        if root is None:
            return
        with contextlib.suppress(PostgresUnavailable):
            if (root / "data" / "postmaster.pid").exists():
                self._run("pg_ctl", "stop", "-D", str(root / "data"), "-m", "immediate", "-w")
        shutil.rmtree(root, ignore_errors=True)

    def __enter__(self) -> ThrowawayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests use ---------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """A libpq URL for the cluster's ``postgres`` database as its superuser."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def fresh_schema(self, prefix: str = "t") -> str:
        """A schema name no other caller of this cluster got (not created: companyd creates
        its schema itself, as it does on a real server).
        """
        return f"{prefix}_{os.getpid()}_{next(self._schemas)}"

    # -- internals ----------------------------------------------------------------------

    def _run(self, program: str, *args: str) -> None:
        log = self.root / "server.log" if self.root else None
        try:
            subprocess.run(
                [str(self.bindir / program), *args],
                check=True,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                user=self._user,
                cwd=self.root,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            out = getattr(exc, "stderr", "") or ""
            if log is not None and log.exists():
                out += log.read_text(errors="replace")[-2000:]
            what = f"{program} {args[0] if args else ''}".strip()
            raise PostgresUnavailable(f"{what} failed: {exc}\n{out}") from exc
