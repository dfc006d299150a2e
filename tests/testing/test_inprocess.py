"""The in-process harness's CLI (:func:`companyd.testing.inprocess.cli_in_thread`)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

import pytest

import companyd.cli
from companyd.testing.inprocess import cli_in_thread


def test_a_cli_in_a_thread_captures_its_own_output_and_no_other_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The daemon runs in the same process as the CLI: while a command runs, a daemon thread
    that starts an MCP server takes ``sys.stderr.fileno()`` (a captured ``StringIO`` has
    none: the server failed to start) and its writes are not the command's output.
    """
    seen: dict[str, object] = {}

    def elsewhere() -> None:
        try:
            seen["fileno"] = sys.stderr.fileno()
        except Exception as exc:
            seen["fileno"] = exc
        print("a daemon thread's line", file=sys.stderr)

    def command(argv: Sequence[str] | None = None) -> int:
        print("the command's answer")
        print("the command's warning", file=sys.stderr)
        other = threading.Thread(target=elsewhere)
        other.start()
        other.join(10)
        return 3

    monkeypatch.setattr(companyd.cli, "main", command)
    got = cli_in_thread(["anything"])
    assert isinstance(seen["fileno"], int), seen["fileno"]
    assert (got.rc, got.out, got.err) == (
        3,
        "the command's answer\n",
        "the command's warning\n",
    )
