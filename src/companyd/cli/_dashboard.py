"""``companyd dashboard``: a one-time login URL of the running daemon's web dashboard.

The URL comes from the daemon over the control socket (Admin ``dashboard_login``): valid 5
minutes, usable once. ``--open`` also opens it in a browser; ``--json`` prints
``{"url": …, "expires_at": …}``.
"""

from __future__ import annotations

import argparse
import sys
import webbrowser
from typing import Any

from companyd.cli._daemon import add_daemon_arguments, call_daemon
from companyd.cli._main import print_json

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``dashboard`` to the ``companyd`` command line."""
    p = sub.add_parser(
        "dashboard",
        help="print a one-time login URL of the web dashboard",
        description="Ask the running daemon for a login URL of its dashboard: valid 5 "
        "minutes, usable once; it opens a session in the browser that uses it. Over SSH, "
        "forward the port first (docs/dashboard.md).",
    )
    p.add_argument("--open", action="store_true", help="also open the URL in a browser")
    add_daemon_arguments(p)
    p.set_defaults(func=_dashboard)


def _dashboard(args: argparse.Namespace) -> int:
    def show(result: dict[str, Any]) -> int:
        url = str(result.get("url", ""))
        if as_json:
            print_json(result)
        else:
            print(url)
            print("valid 5 minutes, once: it opens a session in the browser", file=sys.stderr)
        if args.open and not webbrowser.open(url):
            print("companyd: no browser could be opened; open the URL yourself", file=sys.stderr)
        return 0

    as_json = bool(args.json)
    if not args.open:
        return call_daemon(args, "dashboard_login", show)
    # --open --json: the result is printed by show() (call_daemon would print it instead
    # of calling show, and the browser would not open)
    return call_daemon(argparse.Namespace(**{**vars(args), "json": False}), "dashboard_login", show)
