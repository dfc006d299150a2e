"""The ``companyd`` command line.

This module owns the top-level parser, exit codes and error presentation. Each area adds
its own subcommands through a ``register(subparsers)`` function in its ``cli`` module
(``companyd.cli._memory``, ``companyd.cli._spend``, …); handlers take the parsed arguments
and return an exit code.

Error presentation is one rule: the operator never sees a traceback. A
:class:`~companyd.errors.ConfigError` prints one line per problem on stderr; any other
:class:`~companyd.errors.CompanydError` prints its message; anything unexpected prints one
line naming the bug and how to get the traceback (``--debug``).

Exit codes (the same in every command; :mod:`companyd.errors` holds them, docs/daemon.md
lists them): 0 success, 1 the command's answer is "no" (invalid config, unknown agent,
check found problems), 2 usage error, 78 invalid config for a command that needed one
(``run``), 69 daemon not running, 70 internal error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from companyd import __version__
from companyd._heap import resume_collection
from companyd._secrets import SECRETS, redact
from companyd.config import default_config_path
from companyd.errors import (
    EX_REFUSED,
    EX_SOFTWARE,
    EX_UNAVAILABLE,
    EX_USAGE,
    CompanydError,
    ConfigError,
    DaemonNotRunning,
    UsageError,
)

__all__ = ["add_config_argument", "config_path", "main", "print_json"]

Handler = Callable[[argparse.Namespace], int]

#: Modules whose ``register(subparsers)`` adds subcommands, in help order.
_AREAS = (
    "companyd.cli._run",
    "companyd.cli._daemon",
    "companyd.cli._dashboard",
    "companyd.cli._demo",
    "companyd.cli._roles",
    "companyd.cli._desk",
    "companyd.cli._tools",
    "companyd.cli._scheduler",
    "companyd.cli._spend",
    "companyd.cli._memory",
    "companyd.cli._alerts",
    "companyd.cli._doctor",
    "companyd.cli._backup",
    "companyd.cli._upgrade",
)

#: The top-level commands each area registers, with their one-line help, in help order:
#: what ``companyd --help`` lists and argparse's "invalid choice" names, without importing
#: the areas (their handlers import pydantic, the stores, the SDKs). ``main`` imports only
#: the area of the command it runs; tests/test_cli.py checks this table against what the
#: areas register. An area missing here is imported on every command, as all once were.
_COMMANDS: dict[str, tuple[tuple[str, str], ...]] = {
    "companyd.cli._run": (("run", "run the company in the foreground (what systemd starts)"),),
    "companyd.cli._daemon": (
        ("status", "show the running daemon: supervision tree, runs, spend, next routines"),
        ("pause", "stop an agent from starting new runs"),
        ("resume", "let a paused agent (or, with --all, every one) run again"),
        ("reload", "re-read company.yaml in the running daemon and apply the difference"),
        ("raise-budget", "raise today's budget of an agent (or the company) once"),
        (
            "install-service",
            "install the systemd units (companyd.service, companyd-alert@.service)",
        ),
    ),
    "companyd.cli._dashboard": (("dashboard", "print a one-time login URL of the web dashboard"),),
    "companyd.cli._demo": (
        ("demo", "run the company offline with placeholder agents and watch supervision work"),
    ),
    "companyd.cli._roles": (
        ("ask", "give an agent a one-off task and print its answer, model, tokens and cost"),
        (
            "runs",
            "recent runs with outcome, cost and answer; `runs show RUN_ID`, `runs last ROUTINE`",
        ),
        ("tasks", "tasks waiting or running; --quarantined for poison pills"),
        ("retry", "release a quarantined task and run it again"),
        ("proposals", "the improver's proposals and their status"),
        ("approve", "approve a tool call (ap-…) or apply a proposal (and reload)"),
        ("reject", "reject a tool call (ap-…, with a reason) or discard a proposal"),
        ("revert", "undo an applied proposal (and reload)"),
    ),
    "companyd.cli._desk": (
        ("inbox", "what waits for you: approvals, questions, proposals, quarantined tasks"),
        ("answer", "answer an agent's question (an id from `companyd inbox`)"),
    ),
    "companyd.cli._tools": (
        (
            "tools",
            "every tool of every agent: origin, risk, policy, rate limit, quarantine; "
            "`tools approve SERVER` releases held-back tools",
        ),
    ),
    "companyd.cli._scheduler": (
        ("jobs", "routines: schedule, next fire, last outcome, 7-day success rate"),
    ),
    "companyd.cli._spend": (
        ("spend", "LLM spend from the ledger, grouped and totalled"),
        ("budget", "each budget: limit, used, reserved, remaining, reset time"),
    ),
    "companyd.cli._memory": (
        (
            "memory",
            "the company memory (MCP knowledge graph): read, check, repair, export, serve",
        ),
    ),
    "companyd.cli._alerts": (
        (
            "notify-failure",
            "tell the operator on Telegram that a systemd unit failed (for OnFailure=)",
        ),
        ("telegram", "connect Telegram: find your chat id and send a test message"),
    ),
    "companyd.cli._doctor": (
        (
            "doctor",
            "check the set-up: config, secrets, API key, Telegram, state, disk, memory, "
            "clock, systemd",
        ),
    ),
    "companyd.cli._backup": (
        ("backup", "write a verified, consistent backup of the company (also while it runs)"),
        ("restore", "restore a backup into a state directory that `companyd run` starts from"),
    ),
    "companyd.cli._upgrade": (
        ("migrate", "rewrite an older company.yaml in the current format (keeps a .bak)"),
    ),
}


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    """The positional ``path`` (kept: ``companyd validate company.yaml``) and ``--config``,
    as every other command takes it; :func:`config_path` picks one.
    """
    parser.add_argument(
        "path",
        nargs="?",
        type=Path,
        help="company.yaml (default: $COMPANYD_CONFIG, $CONFIGURATION_DIRECTORY/company.yaml, "
        "./company.yaml)",
    )
    parser.add_argument("--config", type=Path, help="company.yaml (the same as PATH)")


def config_path(args: argparse.Namespace) -> Path:
    """The company.yaml a command was given (positional or ``--config``), else the default.

    Raises:
        UsageError: both were given and name different files.
    """
    positional: Path | None = getattr(args, "path", None)
    flag: Path | None = getattr(args, "config", None)
    if positional is not None and flag is not None and positional != flag:
        raise UsageError(
            f"the config is named twice: {str(positional)!r} and --config {str(flag)!r}; "
            "give one of them"
        )
    return positional or flag or default_config_path()


def print_json(obj: Any) -> None:
    """Write ``obj`` as indented JSON on stdout, every secret in it masked."""
    text = json.dumps(obj, indent=2, ensure_ascii=False, default=str)
    if SECRETS.known(text):  # mask string by string, so the JSON stays valid
        text = json.dumps(SECRETS.redact_data(json.loads(text)), indent=2, ensure_ascii=False)
    sys.stdout.write(text)
    sys.stdout.write("\n")


def _build_parser(
    broken: list[str] | None = None, only: Collection[str] | None = None
) -> argparse.ArgumentParser:
    """The parser with every area's commands; an area that fails to load is skipped and
    described in ``broken`` (when given) instead of failing the whole command line.

    With ``only`` (the command names a command line can run), an area listed in
    :data:`_COMMANDS` none of whose commands is in ``only`` is not imported: its commands
    get placeholder parsers with the same names and help, so the top-level help, the
    choices and the errors read the same, and the start-up pays for one area's imports.
    """
    parser = argparse.ArgumentParser(
        prog="companyd",
        description="Run a supervised company of Claude-powered role agents from company.yaml.",
    )
    parser.add_argument("--version", action="version", version=f"companyd {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for internal errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _register_config_commands(sub)
    if broken is None:
        broken = []
    for name in _AREAS:
        listed = _COMMANDS.get(name)
        if only is not None and listed is not None and not any(c in only for c, _ in listed):
            for command, help_text in listed:
                sub.add_parser(command, help=help_text, add_help=False)
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # area not built yet
            broken.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        except Exception as exc:
            # One broken area must not take `validate` (or any other command) down with it.
            broken.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        module.register(sub)
    _register_help(parser, sub)
    _mark_usage(parser)
    return parser


def _mark_usage(parser: argparse.ArgumentParser) -> None:
    """Give each command's parser itself as the ``usage_parser`` default (the innermost
    one parsed wins: a subcommand's defaults are applied after its parent's), so an error
    found after parsing is said with that command's usage line.
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.set_defaults(usage_parser=child)
                _mark_usage(child)


def _register_help(parser: argparse.ArgumentParser, sub: Any) -> None:
    """``companyd help [COMMAND]``: the same text as ``companyd [COMMAND] --help``."""
    p = sub.add_parser(
        "help",
        help="show the help of companyd or of one command",
        description="Show the help of companyd, or of COMMAND (the same as COMMAND --help).",
    )
    p.add_argument("topic", nargs="?", metavar="COMMAND", help="a command, e.g. status")

    def show(args: argparse.Namespace) -> int:
        if args.topic is None:
            parser.print_help()
            return 0
        command = sub.choices.get(args.topic)
        if command is None:
            raise UsageError(
                f"no command {args.topic!r}; commands: "
                + ", ".join(c for c in sub.choices if c != "help")
            )
        command.print_help()
        return 0

    p.set_defaults(func=show)


class _PipeSafe:
    """A text stream that masks secrets and turns into /dev/null once its reader has gone.

    Every text a command prints passes the one redactor (:mod:`companyd._secrets`): what
    company.yaml names and what looks like a key never reaches the terminal, whichever
    printer wrote it.

    ``companyd … | head -1``: head exits after one line and every later write fails. The
    command goes on to its end and exits with its own answer (``validate`` of a bad file
    still exits 1, ``status`` with no daemon 69), printing no "Broken pipe" on the way. The
    stream's descriptor is pointed at /dev/null too, so the interpreter's final flush of
    what is still buffered has nowhere to fail.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                self._stream.write(redact(text))
                return len(text)
            except BrokenPipeError:
                self._reader_left()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_left()

    def _reader_left(self) -> None:
        self._gone = True
        _to_devnull(self._stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _to_devnull(stream: Any) -> None:
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test's StringIO): nothing to flush at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``companyd`` console script; returns the exit code.

    Never lets a traceback reach the operator: configuration errors print one line per
    problem, other expected failures one ``companyd: …`` line, and bugs one line naming
    the bug and ``--debug`` (which re-raises for the traceback). A reader that leaves
    (``| head -1``) changes nothing but where the rest of the output goes.
    """
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _PipeSafe(stdout), _PipeSafe(stderr)
    try:
        return _main(argv)
    except BrokenPipeError:
        # a stream captured before main() (a default argument) met the closed pipe
        _to_devnull(stdout)
        return 0
    finally:
        sys.stdout, sys.stderr = stdout, stderr


def _main(argv: Sequence[str] | None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list
    broken: list[str] = []
    try:
        parser = _build_parser(broken, only=_wanted(args_list))
    except Exception as exc:
        if debug:
            raise
        _internal_error(exc)
        return EX_SOFTWARE
    for problem in broken:
        print(
            f"companyd: internal error: some commands are unavailable ({problem}) — this is "
            "a bug; run again with --debug for details and report it",
            file=sys.stderr,
        )
    if broken and debug:
        raise RuntimeError("; ".join(broken))
    args, extra = parser.parse_known_args(args_list)
    if extra:
        # said by the command's own parser (its usage line), not the top level's
        usage: argparse.ArgumentParser = getattr(args, "usage_parser", None) or parser
        usage.error(f"unrecognized arguments: {' '.join(extra)}")
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    if not getattr(args, "gc_paused_until_up", False):
        resume_collection()  # the modules are loaded: see companyd._heap.collection_paused
    try:
        rc = func(args)
        sys.stdout.flush()  # a closed pipe must fail here, inside the handlers below
        return rc
    except ConfigError as exc:
        for issue in exc.issues:
            print(issue, file=sys.stderr)
        return exc.exit_code if getattr(args, "config_exit_78", False) else 1
    except DaemonNotRunning as exc:
        print(f"companyd: {redact(str(exc))}", file=sys.stderr)
        return EX_UNAVAILABLE
    except UsageError as exc:
        print(f"companyd: {redact(str(exc))}", file=sys.stderr)
        return EX_USAGE
    except CompanydError as exc:
        # the same answer as the daemon's refusals: one line on stderr, and with --json an
        # object on stdout, whether the daemon or the command itself refused
        print(f"companyd: {redact(str(exc))}", file=sys.stderr)
        if getattr(args, "json", False):
            code = getattr(exc, "code", None)
            print_json({"ok": False, "error": str(exc), "code": code or "error"})
        return EX_REFUSED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # a stream the command captured before main() met the closed pipe (the streams
        # main() installed never raise it): its output is over, and so is the command
        _to_devnull(sys.__stdout__)
        return 0
    except Exception as exc:
        if args.debug:
            raise
        _internal_error(exc)
        return EX_SOFTWARE


def _wanted(args_list: Sequence[str]) -> set[str]:
    """The commands a command line may run: its first word that is not an option (the
    top-level options take no value), and with ``help`` the word after it.
    """
    words = [a for a in args_list if not a.startswith("-")]
    return set(words[:2] if words[:1] == ["help"] else words[:1])


def _internal_error(exc: BaseException) -> None:
    print(
        f"companyd: internal error: {type(exc).__name__}: {redact(str(exc))} — this is a bug; "
        "run again with --debug for the traceback and report it",
        file=sys.stderr,
    )


# ---------------------------------------------------------------------------------------
# validate / init / show-config


def _register_config_commands(sub: Any) -> None:
    p = sub.add_parser(
        "validate",
        help="check company.yaml and report every problem at once",
        description=(
            "Check company.yaml. Exit 0 with a one-line summary when it is valid; exit 1 "
            "with every problem on stderr, one per line as file:line:column: path: message."
        ),
    )
    add_config_argument(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=_validate)

    p = sub.add_parser(
        "init",
        help="write a commented starter company.yaml",
        description="Write a commented starter company.yaml that validates as it is.",
    )
    p.add_argument(
        "dir", nargs="?", type=Path, default=Path("."), help="target directory (default: .)"
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing company.yaml")
    p.add_argument("--json", action="store_true", help="print the written path as JSON")
    p.set_defaults(func=_init)

    p = sub.add_parser(
        "show-config",
        help="print the resolved company.yaml: defaults filled in, secrets masked",
        description=(
            "Print company.yaml as companyd will run it: every default filled in, "
            "instruction files loaded, paths made absolute. Secrets are never printed: "
            "only the variables and credentials they are read from, and whether each is set."
        ),
    )
    add_config_argument(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    p.set_defaults(func=_show_config)


def _validate(args: argparse.Namespace) -> int:
    from companyd.config import load_config

    path = config_path(args)
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        if args.json:
            print_json(
                {"valid": False, "file": str(path), "errors": [_issue_dict(i) for i in exc.issues]}
            )
        for issue in exc.issues:
            print(issue, file=sys.stderr)
        return 1
    for w in cfg.warnings:
        print(w, file=sys.stderr)
    summary = {
        "valid": True,
        "file": str(path),
        "company": cfg.name,
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
            f"{path}: ok — {_count(len(cfg.agents), 'agent')}, "
            f"{_count(len(cfg.routines), 'routine')}, "
            f"{_count(len(cfg.departments), 'department')}, org chart depth "
            f"{summary['tree_depth']}"
            + (f", {_count(len(cfg.warnings), 'warning')}" if cfg.warnings else "")
        )
    return 0


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


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
    directory = Path(args.dir)
    target = directory / "company.yaml"
    if directory.exists() and not directory.is_dir():
        raise CompanydError(
            f"{directory} is a file, not a directory; give `companyd init` the directory "
            "to write company.yaml into (e.g. `companyd init .`)"
        )
    if target.is_dir():
        raise CompanydError(f"{target} is a directory; move it away or choose another DIR")
    if target.exists() and not args.force:
        print(
            f"companyd: {target} already exists; edit it, or run `companyd init --force "
            f"{directory}` to replace it with the starter",
            file=sys.stderr,
        )
        return 1
    import tempfile
    from importlib.resources import files

    text = files("companyd").joinpath("starter.yaml").read_text(encoding="utf-8")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # Write a temporary file next to the target and move it into place: a crash or a
        # full disk leaves the old file (or none), never half a company.yaml.
        fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=".company.yaml.", suffix=".tmp")
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            if args.force:
                os.replace(tmp, target)
            else:
                # link() refuses an existing name: no window in which another writer's
                # file could be clobbered between the exists() check and the write.
                try:
                    os.link(tmp, target)
                except FileExistsError:
                    print(f"companyd: {target} already exists; nothing written", file=sys.stderr)
                    return 1
                except OSError:  # a file system without hard links
                    os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise CompanydError(
            f"cannot write {target}: {exc.strerror or exc}; check that the directory is writable"
        ) from None
    if args.json:
        print_json({"written": str(target)})
    else:
        print(f"wrote {target}; edit it, then check it with `companyd validate {target}`")
    return 0


def _show_config(args: argparse.Namespace) -> int:
    from companyd.config import load_config, resolved_view

    cfg = load_config(config_path(args))
    for w in cfg.warnings:
        print(w, file=sys.stderr)
    view = resolved_view(cfg)
    if args.json:
        print_json(view)
    else:
        sys.stdout.write(
            f"# {cfg.path} as companyd runs it: defaults filled in, instruction files "
            "loaded,\n# paths absolute; secrets appear only as the names they are read from.\n"
        )
        sys.stdout.write(_yaml_dump(view))
    return 0


def _yaml_dump(data: Any) -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        # Multi-line instructions read best as literal blocks, as they are written.
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump(
        data,
        Dumper=Dumper,
        sort_keys=False,
        allow_unicode=True,
        width=100,
        default_flow_style=None,  # short lists of scalars inline: warn_at: [0.5, 0.8, 1.0]
    )
