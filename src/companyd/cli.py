"""The ``companyd`` command line.

This module owns the top-level parser, exit codes and error presentation. Each area adds
its own subcommands through a ``register(subparsers)`` function in its ``cli`` module
(``companyd.memory.cli``, ``companyd.spend.cli``, …); handlers take the parsed arguments
and return an exit code.

Error presentation is one rule: the operator never sees a traceback. A
:class:`~companyd.errors.ConfigError` prints one line per problem on stderr; any other
:class:`~companyd.errors.CompanydError` prints its message; anything unexpected prints one
line naming the bug and how to get the traceback (``--debug``).

Exit codes: 0 success, 1 the command's answer is "no" (invalid config, check found
problems), 2 usage error, 78 invalid config for a command that needed one (``run``),
69 daemon not running, 70 internal error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from companyd import __version__
from companyd.errors import (
    EX_SOFTWARE,
    EX_UNAVAILABLE,
    CompanydError,
    ConfigError,
    DaemonNotRunning,
)

__all__ = ["default_config_path", "main", "print_json"]

Handler = Callable[[argparse.Namespace], int]

#: Modules whose ``register(subparsers)`` adds subcommands, in help order.
_AREAS = (
    "companyd.daemon.cli",
    "companyd.roles.cli",
    "companyd.scheduler.cli",
    "companyd.spend.cli",
    "companyd.memory.cli",
    "companyd.alerts",
)


def default_config_path() -> Path:
    """company.yaml to use when none is given: ``$COMPANYD_CONFIG``, then
    ``$CONFIGURATION_DIRECTORY/company.yaml`` (systemd), then ``./company.yaml``."""
    env = os.environ.get("COMPANYD_CONFIG")
    if env:
        return Path(env)
    conf_dir = os.environ.get("CONFIGURATION_DIRECTORY")
    if conf_dir:
        return Path(conf_dir.split(":")[0]) / "company.yaml"
    return Path("company.yaml")


def print_json(obj: Any) -> None:
    """Write ``obj`` as indented JSON on stdout."""
    json.dump(obj, sys.stdout, indent=2, ensure_ascii=False, default=str)
    sys.stdout.write("\n")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="companyd",
        description="Run a supervised company of Claude-powered role agents from company.yaml.",
    )
    parser.add_argument("--version", action="version", version=f"companyd {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for internal errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _register_config_commands(sub)
    for name in _AREAS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # area not built yet
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``companyd`` console script."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return func(args)
    except ConfigError as exc:
        for issue in exc.issues:
            print(issue, file=sys.stderr)
        return exc.exit_code if getattr(args, "config_exit_78", False) else 1
    except DaemonNotRunning as exc:
        print(f"companyd: {exc}", file=sys.stderr)
        return EX_UNAVAILABLE
    except CompanydError as exc:
        print(f"companyd: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if args.debug:
            raise
        print(
            f"companyd: internal error: {type(exc).__name__}: {exc} — this is a bug; "
            "run again with --debug for the traceback and report it",
            file=sys.stderr,
        )
        return EX_SOFTWARE


# ---------------------------------------------------------------------------------------
# validate / init / show-config


def _register_config_commands(sub: Any) -> None:
    p = sub.add_parser("validate", help="check company.yaml and report every problem")
    p.add_argument("path", nargs="?", type=Path, help="company.yaml (default: ./company.yaml)")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.set_defaults(func=_validate)

    p = sub.add_parser("init", help="write a commented starter company.yaml")
    p.add_argument("dir", nargs="?", type=Path, default=Path("."), help="target directory")
    p.add_argument("--force", action="store_true", help="overwrite an existing company.yaml")
    p.set_defaults(func=_init)

    p = sub.add_parser("show-config", help="print company.yaml with every default filled in")
    p.add_argument("path", nargs="?", type=Path)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_show_config)


def _validate(args: argparse.Namespace) -> int:
    from companyd.config import load_config

    path = args.path or default_config_path()
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        if args.json:
            print_json({"valid": False, "errors": [_issue_dict(i) for i in exc.issues]})
        else:
            for issue in exc.issues:
                print(issue, file=sys.stderr)
        return 1
    for w in cfg.warnings:
        print(w, file=sys.stderr)
    summary = {
        "valid": True,
        "file": str(path),
        "agents": len(cfg.agents),
        "routines": len(cfg.routines),
        "departments": len(cfg.departments),
        "tree_depth": cfg.tree_depth(),
        "warnings": [_issue_dict(w) for w in cfg.warnings],
    }
    if args.json:
        print_json(summary)
    else:
        print(
            f"{path}: ok — {summary['agents']} agents, {summary['routines']} routines, "
            f"{summary['departments']} departments, org chart depth {summary['tree_depth']}"
        )
    return 0


def _issue_dict(issue: Any) -> dict[str, Any]:
    return {
        "file": issue.file,
        "line": issue.line,
        "column": issue.column,
        "path": issue.path,
        "message": issue.message,
        "severity": issue.severity,
    }


def _init(args: argparse.Namespace) -> int:
    from importlib.resources import files

    target = Path(args.dir) / "company.yaml"
    if target.exists() and not args.force:
        print(
            f"companyd: {target} already exists; use --force to overwrite it",
            file=sys.stderr,
        )
        return 1
    text = files("companyd").joinpath("starter.yaml").read_text(encoding="utf-8")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)
    print(f"wrote {target}; check it with `companyd validate {target}`")
    return 0


def _show_config(args: argparse.Namespace) -> int:
    from companyd.config import load_config

    cfg = load_config(args.path or default_config_path())
    data = cfg.spec.model_dump(mode="json", by_alias=True)
    if args.json:
        print_json(data)
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return 0
