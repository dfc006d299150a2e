"""Many ``companyd`` command lines in one process, each with its stdout and stderr on a pipe
whose reader has gone, for tests/test_cli_conventions.py.

``python tests/cli_pipes_driver.py RESULTS`` reads a JSON list of ``[mode, argv]`` on stdin
and writes one ``{"rc": N, "err": TEXT}`` per command line to the file RESULTS (JSON). Each
command runs through the console script's entry point (:func:`companyd.cli.main`, what
``python -m companyd`` calls), with this process's file descriptors 1 and 2 pointed anew
before it:

- ``closed``: both at one pipe whose read end is already closed — every write fails with
  EPIPE, as in ``companyd … 2>&1 | head -1`` when the reader left first;
- ``head``: stdout into a real ``head -1`` (which exits after one line), stderr into a file
  that is read back as ``err``.

The streams are the process's own ``sys.stdout`` / ``sys.stderr`` (and whatever a module
took from them when it was imported), on those descriptors: what a command does with a
closed pipe is what it does as a process of its own. What only a process's end shows — the
interpreter's last flush at exit, the exit status ``python -m companyd`` hands the shell —
is checked on separate processes by the tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from companyd.cli import main


def _run(argv: Sequence[str]) -> int:
    try:
        return main(list(argv))
    except SystemExit as exc:  # as the interpreter turns it into an exit status
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError, ValueError):
            stream.flush()


def closed(argv: Sequence[str]) -> dict[str, object]:
    read_end, write_end = os.pipe()
    os.close(read_end)
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)
    rc = _run(argv)
    _to_devnull()  # what is still buffered goes nowhere, not into the next command's pipe
    return {"rc": rc, "err": ""}


def _to_devnull() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    _flush()


def head(argv: Sequence[str]) -> dict[str, object]:
    reader = subprocess.Popen(["head", "-1"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert reader.stdin is not None
    os.dup2(reader.stdin.fileno(), 1)
    reader.stdin.close()  # fd 1 is now the pipe's only write end
    with tempfile.TemporaryFile() as err:
        os.dup2(err.fileno(), 2)
        rc = _run(argv)
        _flush()  # stderr's last line into the file
        _to_devnull()  # the pipe's last write end closes: head sees the end
        reader.wait(timeout=30)
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    return {"rc": rc, "err": text}


def drive(commands: list[tuple[str, list[str]]]) -> list[dict[str, object]]:
    return [closed(argv) if mode == "closed" else head(argv) for mode, argv in commands]


if __name__ == "__main__":
    out_path = sys.argv[1]
    commands = json.load(sys.stdin)
    results = drive([(mode, list(argv)) for mode, argv in commands])
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(results, out)
