"""The console script's first step: ``companyd --version`` answered before anything else is
imported; every other command line goes on to :func:`companyd.cli._main.main`.

``--version`` is what scripts and package managers run to see what is installed: it costs
the interpreter's start and this module (issue 31: ≤ 5× a bare ``python -c pass``), not the
argument parser, the redactor and the error types the other commands need. The answer is
byte-for-byte argparse's (``companyd X.Y.Z`` on stdout, exit 0); ``--version`` anywhere
else on a command line (``companyd --debug --version``) is argparse's to handle, as before.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from companyd import __version__

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``companyd`` console script; returns the exit code (see
    :func:`companyd.cli._main.main`).
    """
    args = sys.argv[1:] if argv is None else list(argv)
    if args == ["--version"]:
        try:
            sys.stdout.write(f"companyd {__version__}\n")
            sys.stdout.flush()
        except BrokenPipeError:  # `companyd --version | true`: nothing to say, no traceback
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        return 0
    from companyd._heap import collection_paused

    # no cyclic GC while the command's modules load (and, for `companyd run`, until the
    # company is up): companyd._heap.collection_paused says why
    with collection_paused():
        from companyd.cli._main import main as run

        return run(args)
