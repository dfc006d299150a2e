"""The alerts area's commands (``notify-failure``, ``telegram setup``) run by the CLI's entry
point in this process, as a process of their own would run them: with the environment it
would be given, and with what its standard error would show of log records.

A ``companyd`` process configures no logging for these commands, so a record of WARNING or
worse reaches its stderr through Python's last-resort handler (the message, and a
traceback if there is one). In the test process pytest's handlers sit on the root logger
and the last resort never speaks, so :func:`cli_here` puts an equivalent handler there for
the command's run and adds what it wrote to the command's stderr: an assertion that a
token or a traceback is not on stderr sees what the process's stderr would have held.

One thing a fresh process has that this one has not: an empty redactor. A secret an earlier
test registered (``companyd._secrets.protect``) stays masked in this worker's log records,
so a test whose claim is that a token is never printed uses a token no earlier test used
(``telegram setup``'s wrong token) or keeps a process of its own (``notify-failure``'s
rejected token: the module's one token, in every test).
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Mapping, Sequence

from companyd.testing.daemon_process import CliResult
from companyd.testing.inprocess import cli_in_thread


def cli_here(argv: Sequence[str], env: Mapping[str, str]) -> CliResult:
    """``companyd ARGV`` by the CLI's entry point in the calling thread (not the event
    loop's: the command runs its own loop), with ``os.environ`` replaced by ``env`` for its
    run; its exit code, stdout, and stderr followed by the log records a process's last-
    resort handler would have printed.
    """
    saved = dict(os.environ)
    logged = io.StringIO()
    last_resort = logging.StreamHandler(logged)
    last_resort.setLevel(logging.WARNING)  # logging.lastResort's level
    root = logging.getLogger()
    os.environ.clear()
    os.environ.update(env)
    root.addHandler(last_resort)
    try:
        got = cli_in_thread(list(argv))
    finally:
        root.removeHandler(last_resort)
        os.environ.clear()
        os.environ.update(saved)
    return CliResult(got.rc, got.out, got.err + logged.getvalue())
