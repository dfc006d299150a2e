"""Operator commands that talk to the running daemon, and ``install-service``.

``companyd status | pause AGENT | resume AGENT | reload | raise-budget [AGENT] USD`` find
the daemon's control socket (:func:`companyd.daemon._control_client.find_daemon`), send one
request and print the answer for a human, or as JSON with ``--json``. The printers accept
any dict: a key the daemon did not send is left out, never a crash.

``companyd install-service`` puts ``companyd.service`` and ``companyd-alert@.service`` in
``/etc/systemd/system`` with the path of this installation, prepares ``/etc/companyd`` and
prints the next commands; ``--dry-run`` only prints. ``--instance NAME`` installs the
template ``companyd@.service`` (and its ``companyd-instance-alert@.service``) instead and
prepares ``/etc/companyd/NAME`` for the company NAME (docs/deploy.md, "Many companies on
one host").

Exit codes: 0 done; 1 the daemon refused (unknown agent, rejected config, …); 2 bad
arguments; 69 no daemon running; 70 internal error in the daemon; 75 the daemon did not
answer in time, was busy, or began to stop while the command waited (``jobs run``, ``ask``:
the work resumes after the restart).

Other areas' commands (ask, runs, spend, jobs) reuse :func:`add_daemon_arguments` and
:func:`daemon_client` / :func:`running_daemon` to talk to the daemon when one runs.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from companyd.cli._main import print_json

if TYPE_CHECKING:
    from companyd.daemon import ControlClient
from companyd.errors import (
    EX_PARTIAL,
    EX_REFUSED,
    EX_SOFTWARE,
    EX_TEMPFAIL,
    EX_UNAVAILABLE,
    CompanydError,
    DaemonNotRunning,
    UsageError,
)

__all__ = [
    "add_daemon_arguments",
    "daemon_client",
    "register",
    "running_daemon",
    "store_location",
]

#: The units of one company per host (``install-service``).
SINGLE_UNITS = ("companyd.service", "companyd-alert@.service")
#: The units of many companies per host (``install-service --instance NAME``).
TEMPLATE_UNITS = ("companyd@.service", "companyd-instance-alert@.service")
UNIT_NAMES = SINGLE_UNITS + TEMPLATE_UNITS
#: The install prefix written in the shipped units; install-service replaces it.
UNIT_PREFIX_PLACEHOLDER = "/opt/companyd/venv"
UNIT_DIR = Path("/etc/systemd/system")
CREDENTIALS = ("anthropic_api_key", "telegram_bot_token")


# ---------------------------------------------------------------------------------------
# shared by every command that talks to the daemon


def add_daemon_arguments(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    """Add ``--config``, ``--state-dir``, ``--socket`` (and ``--json``) to ``parser``."""
    parser.add_argument(
        "--config",
        type=Path,
        help="company.yaml, used to find the state directory (default: $COMPANYD_CONFIG, "
        "$CONFIGURATION_DIRECTORY/company.yaml, ./company.yaml)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="the daemon's state directory (default: $STATE_DIRECTORY, company.yaml's "
        "state_dir, else state next to company.yaml)",
    )
    parser.add_argument(
        "--socket",
        type=Path,
        help="the control socket itself (default: searched; /run/companyd/companyd.sock "
        "under systemd)",
    )
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print the raw JSON result")


def daemon_client(args: argparse.Namespace) -> ControlClient:
    """The running daemon for the parsed ``--config/--state-dir/--socket`` arguments.

    Raises:
        DaemonNotRunning: none answers (the message lists where it looked).
    """
    from companyd.config import default_config_path
    from companyd.daemon import find_daemon

    config = getattr(args, "config", None) or default_config_path()
    return find_daemon(
        socket=getattr(args, "socket", None),
        state_dir=getattr(args, "state_dir", None),
        config=config,
    )


def running_daemon(args: argparse.Namespace) -> ControlClient | None:
    """Like :func:`daemon_client`, but None when no daemon runs (for commands that can
    also work on the files directly).
    """
    try:
        return daemon_client(args)
    except DaemonNotRunning:
        return None


def store_location(args: argparse.Namespace) -> tuple[Any, Path, Any]:
    """(the config, or None; the state directory; the stores' backend) for a command that
    reads the stores without a daemon.

    A company.yaml of the usual shape with no ``state:`` section keeps its stores in SQLite
    files: its top level, read line by line (:func:`companyd.config.peek_top_level`), says
    where — no pydantic, schema or PostgreSQL driver, ~0.4 s of CPU less (issue 31; the
    stores name their errors with :func:`companyd._sqlite.store_errors`, which needs no
    driver that was not loaded). The file is
    then not validated: a reader needs only to find the stores (as ``status`` finds the
    daemon of a file being edited). Anything else loads the config as the daemon does.
    """
    from companyd.config import DEFAULT_STATE_DIR, UNUSUAL, default_config_path, peek_top_level

    path = Path(args.config or default_config_path())
    try:
        from companyd._fs import read_regular_file

        top = peek_top_level(
            read_regular_file(path, 10 * 1024 * 1024).decode("utf-8"), ("state_dir", "state")
        )
    except (OSError, ValueError):
        top = None  # unreadable, not UTF-8: the loader says what is wrong
    value = top.get("state_dir") if top is not None else UNUSUAL
    if top is None or "state" in top or value == UNUSUAL:
        from companyd.config import load_config, state_backend

        cfg = load_config(path)
        return cfg, cfg.state_dir(args.state_dir), state_backend(cfg)
    from companyd.storage import SQLITE

    if args.state_dir is not None:
        return None, Path(args.state_dir).absolute(), SQLITE
    if env := os.environ.get("STATE_DIRECTORY"):
        return None, Path(env.split(":")[0]).absolute(), SQLITE
    base = Path(os.path.realpath(path)).parent  # as CompanyConfig.state_dir
    return None, (base / (value or DEFAULT_STATE_DIR)).absolute(), SQLITE


def company_zone(args: argparse.Namespace) -> str:
    """``company.timezone`` of the company.yaml the command reads: the zone its text shows
    times in (``runs``, ``inbox``), as the daemon's alerts do; ``UTC`` when the file has
    none or cannot be read (``--json`` keeps UTC ISO/epoch times and never asks).

    Read line by line (:func:`companyd.config.peek_nested`, issue 31: no PyYAML for the
    usual file); PyYAML only for a file of another shape.
    """
    from companyd._fs import read_regular_file
    from companyd.config import UNUSUAL, default_config_path, peek_nested

    try:
        path = Path(getattr(args, "config", None) or default_config_path())
        text = read_regular_file(path, 10 * 1024 * 1024).decode("utf-8").removeprefix("\ufeff")
    except (OSError, ValueError):
        return "UTC"  # the command says what is wrong with the file where it matters
    zone: object = peek_nested(text, "company", "timezone")
    if zone == UNUSUAL:
        import yaml

        try:
            doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except Exception:  # YAMLError, or a bad tag's KeyError/ValueError: validate says it
            doc = None
        company = doc.get("company") if isinstance(doc, dict) else None
        zone = company.get("timezone") if isinstance(company, dict) else None
    return zone if isinstance(zone, str) and zone else "UTC"


def call_daemon(
    args: argparse.Namespace,
    op: str,
    printer: Callable[[dict[str, Any]], int],
    *,
    client: ControlClient | None = None,
    otherwise: Callable[[], int] | None = None,
    **op_args: Any,
) -> int:
    """Send one request; print the result (JSON or via ``printer``); map failures to exit
    codes with one line on stderr (and a JSON error object on stdout with ``--json``).
    ``client``: the daemon :func:`running_daemon` just found (not searched for again: each
    search costs the daemon's answers to a claim and a ``ping``, issue 31). ``otherwise``:
    what the command does when no daemon runs (read the files), instead of exit 69 — the
    same choice as ``running_daemon(args) is None`` made first, one ``ping`` cheaper.
    """
    from companyd.daemon import ControlTimeout, RequestFailed

    as_json = bool(getattr(args, "json", False))

    def fail(message: str, code: str, exit_code: int) -> int:
        print(f"companyd: {message}", file=sys.stderr)
        if as_json:
            print_json({"ok": False, "error": message, "code": code})
        return exit_code

    try:
        result = _ask(args, client, op, op_args)
    except DaemonNotRunning as exc:
        if otherwise is not None:
            return otherwise()
        return fail(str(exc), "not_running", EX_UNAVAILABLE)
    except ControlTimeout as exc:
        return fail(str(exc), "timeout", EX_TEMPFAIL)
    except RequestFailed as exc:
        exit_code = {
            "bad_request": 2,
            "internal": EX_SOFTWARE,
            "timeout": EX_TEMPFAIL,
            "busy": EX_TEMPFAIL,  # at a control-socket limit: try again shortly
            # the daemon stopped under a wait (`jobs run`, `ask`): the work resumes after
            # the restart, the message says where to follow it
            "stopping": EX_TEMPFAIL,
        }.get(exc.code, 1)
        return fail(str(exc), exc.code, exit_code)
    except CompanydError as exc:
        return fail(str(exc), "error", 1)
    if as_json:
        print_json(result)
        return _reload_exit(result) if op == "reload" else 0
    return printer(result)


def _ask(
    args: argparse.Namespace, client: ControlClient | None, op: str, op_args: dict[str, Any]
) -> dict[str, Any]:
    """``op`` answered by ``client``, else by the daemon claiming the company.yaml (asked
    straight away, without a ``ping`` first), else by the daemon :func:`daemon_client`
    finds. With ``--socket`` or ``--state-dir`` the search of :func:`daemon_client` decides
    (it checks the state directory the daemon reports).
    """
    if client is not None:
        return client.call(op, **op_args)
    if getattr(args, "socket", None) is None and getattr(args, "state_dir", None) is None:
        from companyd.config import default_config_path
        from companyd.daemon import claimed_daemon

        config = getattr(args, "config", None) or default_config_path()
        quick = claimed_daemon(config)
        if quick is not None:
            try:
                return quick.call(op, **op_args)
            except DaemonNotRunning:
                pass  # its control socket is not up (yet, or any more): search as before
    return daemon_client(args).call(op, **op_args)


# ---------------------------------------------------------------------------------------
# registration


def register(sub: Any) -> None:
    """Add the daemon's operator commands to the top-level ``companyd`` parser."""
    p = sub.add_parser(
        "status",
        help="show the running daemon: supervision tree, runs, spend, next routines",
        description="Ask the running daemon for its status: the supervision tree with "
        "states, restart counts and uptime, runs in flight, spend today and this month "
        "against budget, and the next routines.",
    )
    add_daemon_arguments(p)
    p.set_defaults(func=_status)

    p = sub.add_parser(
        "pause",
        help="stop an agent from starting new runs",
        description="Stop an agent from starting new runs (the run in flight finishes); "
        "`companyd resume AGENT` lets it run again.",
    )
    p.add_argument("agent", help="agent slug, as in company.yaml")
    add_daemon_arguments(p)
    p.set_defaults(func=_pause)

    p = sub.add_parser(
        "resume",
        help="let a paused agent (or, with --all, every one) run again",
        description="Let a paused agent (by `pause`, its budget or a quota wall) start runs "
        "again; --all resumes every paused agent.",
    )
    p.add_argument("agent", nargs="?", help="agent slug, as in company.yaml")
    p.add_argument(
        "--all",
        action="store_true",
        help="resume every paused agent (e.g. after topping up the Anthropic account)",
    )
    add_daemon_arguments(p)
    p.set_defaults(func=_resume)

    p = sub.add_parser(
        "reload",
        help="re-read company.yaml in the running daemon and apply the difference",
        description="Like `systemctl reload companyd`, but waits for the result: what was "
        "added, removed and restarted, or why the file was rejected (the daemon then keeps "
        "the previous version).",
    )
    add_daemon_arguments(p)
    p.set_defaults(func=_reload)

    p = sub.add_parser(
        "raise-budget",
        help="raise today's budget of an agent (or the company) once",
        usage="companyd raise-budget [-h] [AGENT] USD [options]",
        description="Raise today's budget by USD dollars, once: tomorrow the limits of "
        "company.yaml apply again. Without AGENT the company's daily budget is raised.",
    )
    p.add_argument("target", nargs="+", metavar="[AGENT] USD", help="optional agent, then dollars")
    add_daemon_arguments(p)
    p.set_defaults(func=_raise_budget)

    p = sub.add_parser(
        "install-service",
        help="install the systemd units (companyd.service, companyd-alert@.service)",
        description="Write companyd.service and companyd-alert@.service to "
        "/etc/systemd/system for this installation, create /etc/companyd with empty "
        "credential files, and print the commands that start the service. With --instance "
        "NAME: the template companyd@.service for many companies on one host, and "
        "/etc/companyd/NAME for the company NAME. Needs root; --dry-run only prints.",
    )
    p.add_argument(
        "--prefix",
        type=Path,
        default=Path(sys.prefix),
        help="the venv or prefix whose bin/companyd the units run (default: %(default)s)",
    )
    p.add_argument(
        "--root",
        type=Path,
        default=Path("/"),
        help="install below this directory instead of / (for packaging)",
    )
    p.add_argument(
        "--config",
        type=Path,
        help="a company.yaml to copy to /etc/companyd/company.yaml, or "
        "/etc/companyd/NAME/company.yaml with --instance (an existing one is kept)",
    )
    p.add_argument(
        "--instance",
        metavar="NAME",
        help="install the template companyd@.service and prepare /etc/companyd/NAME for "
        "the company NAME (lower-case letters, digits, '-', '_'), run as companyd@NAME",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print what would be done, change nothing"
    )
    p.set_defaults(func=_install_service)


# ---------------------------------------------------------------------------------------
# handlers


def _status(args: argparse.Namespace) -> int:
    from companyd.admin import render_status

    def show(result: dict[str, Any]) -> int:
        sys.stdout.write(render_status(result))
        return 0

    return call_daemon(args, "status", show)


def _pause(args: argparse.Namespace) -> int:
    from companyd.admin import as_text

    def show(result: dict[str, Any]) -> int:
        print(
            as_text(result.get("message"))
            or f"paused {args.agent}: it finishes its current run, then starts no new ones "
            f"until `companyd resume {args.agent}`"
        )
        return 0

    return call_daemon(args, "pause", show, agent=args.agent)


def _resume(args: argparse.Namespace) -> int:
    from companyd.admin import as_text

    def show(result: dict[str, Any]) -> int:
        print(as_text(result.get("message")) or f"resumed {args.agent or 'the agents'}")
        return 0

    if args.all and args.agent:
        raise UsageError(f"give an agent or --all, not both (got {args.agent!r} and --all)")
    if args.all:
        return call_daemon(args, "resume_all", show)
    if not args.agent:
        raise UsageError("name the agent to resume (`companyd resume AGENT`), or --all")
    return call_daemon(args, "resume", show, agent=args.agent)


def _reload(args: argparse.Namespace) -> int:
    from companyd.admin import as_list, as_text

    def show(result: dict[str, Any]) -> int:
        if result.get("applied") is False:
            print(
                "company.yaml was rejected; the daemon keeps running the previous version:",
                file=sys.stderr,
            )
            for err in as_list(result.get("errors")):
                print(f"  {as_text(err) or repr(err)}", file=sys.stderr)
            return _reload_exit(result)
        print(_reload_summary(result))
        for warning in as_list(result.get("warnings")):  # as `validate` shows them
            print(as_text(warning) or repr(warning), file=sys.stderr)
        return _reload_exit(result)

    return call_daemon(args, "reload", show)


def _reload_exit(result: Mapping[str, Any]) -> int:
    """``companyd reload``'s exit code, with or without ``--json``: 1 (:data:`EX_REFUSED`)
    when company.yaml was rejected (nothing changed), 3 (:data:`EX_PARTIAL`) when the tree
    could not apply some of the changes (``failures``: an agent that failed to start), else 0.
    """
    from companyd.admin import as_list

    if result.get("applied") is False:
        return EX_REFUSED
    return EX_PARTIAL if as_list(result.get("failures")) else 0


def _reload_summary(result: Mapping[str, Any]) -> str:
    from companyd.admin import as_list, as_mapping, as_text

    message = as_text(result.get("message"))
    if message:
        return message
    parts = []
    for key, word in (("added", "started"), ("removed", "stopped"), ("changed", "restarted")):
        names = [str(n) for n in as_list(result.get(key))]
        if names:
            parts.append(f"{word} {', '.join(names)}")
    unchanged = result.get("unchanged")
    if isinstance(unchanged, list):
        unchanged = len(unchanged)
    if isinstance(unchanged, int) and not isinstance(unchanged, bool):
        parts.append(f"{unchanged} unchanged")
    # the scheduler's part: {"added": [...], "removed": [...], "changed": [...], ...}
    routines = as_mapping(result.get("routines"))
    moves = []
    for key, word in (("added", "added"), ("removed", "removed"), ("changed", "rescheduled")):
        names = [str(n) for n in as_list(routines.get(key))]
        if names:
            moves.append(f"{word} {', '.join(names)}")
    if moves:
        parts.append("routines " + ", ".join(moves))
    settings = [str(n) for n in as_list(result.get("settings"))]
    if settings:
        parts.append(f"applied {', '.join(settings)}")
    later = [str(n) for n in as_list(result.get("restart_required"))]
    if later:
        parts.append(
            f"{', '.join(later)} changed: takes effect at the next restart "
            "(`systemctl restart companyd`)"
        )
    # what the tree could not apply (an agent that failed to start; "started" above still
    # names it): said here, not only in --json
    failures = [as_text(f) or repr(f) for f in as_list(result.get("failures"))]
    if failures:
        parts.append(
            f"NOT applied: {'; '.join(failures)} (see `journalctl -u companyd`; exit {EX_PARTIAL})"
        )
    return "reloaded company.yaml" + (": " + "; ".join(parts) if parts else ": no changes")


def _raise_budget(args: argparse.Namespace) -> int:
    from companyd.admin import as_number, as_text, one_usd

    target: list[str] = args.target
    if len(target) > 2:
        print(
            f"companyd raise-budget: expected [AGENT] USD, got {' '.join(target)!r}",
            file=sys.stderr,
        )
        return 2
    agent = target[0] if len(target) == 2 else None
    raw = target[-1]
    try:
        usd = float(raw.lstrip("$"))
    except ValueError:
        usd = math.nan
    if not math.isfinite(usd) or usd <= 0:
        print(
            f"companyd raise-budget: USD must be a positive number of dollars such as 5 or "
            f"2.50, got {raw!r}",
            file=sys.stderr,
        )
        return 2

    def show(result: dict[str, Any]) -> int:
        message = as_text(result.get("message"))
        if message:
            print(message)
            return 0
        who = agent if agent else "the company"
        line = f"raised today's budget of {who} by {one_usd(usd)}"
        limit = as_number(result.get("daily_limit_usd"))
        if limit is not None:
            now_at = one_usd(limit)
            line += f" (today's limit is now {now_at}; back to company.yaml tomorrow)"
        print(line)
        return 0

    return call_daemon(args, "raise_budget", show, agent=agent, usd=usd)


# ---------------------------------------------------------------------------------------
# status rendering (pure functions of the status dict; docs/daemon.md documents the shape)


def unit_text(name: str, prefix: Path) -> str:
    """The shipped unit ``name`` with ExecStart pointing into ``prefix``."""
    if name not in UNIT_NAMES:
        raise ValueError(f"unknown unit {name!r}; expected one of: {', '.join(UNIT_NAMES)}")
    from importlib.resources import files  # here: ~15 ms of imports the other commands skip

    text = files("companyd.daemon").joinpath("unit_files", name).read_text(encoding="utf-8")
    return text.replace(UNIT_PREFIX_PLACEHOLDER, str(prefix).rstrip("/"))


#: Where the shipped units' hardening makes files invisible to the service:
#: ``ProtectHome=yes`` (/home, /root, /run/user) and ``PrivateTmp=yes`` (/tmp, /var/tmp).
HIDDEN_ROOTS = (
    (Path("/home"), "under /home"),
    (Path("/root"), "under /root"),
    (Path("/run/user"), "under /run/user"),
    (Path("/tmp"), "under /tmp"),
    (Path("/var/tmp"), "under /var/tmp"),
)


def hidden_by_hardening(prefix: Path) -> str | None:
    """Where ``prefix`` (as written, or with symlinks resolved) or the Python its
    ``bin/companyd`` runs lies under a directory the units hide, described ("under /home",
    "under /tmp (through the symlink …)"), or None when the service can see it.
    """
    candidates = [(Path(os.path.abspath(prefix)), ""), (Path(os.path.realpath(prefix)), "")]
    python = prefix / "bin" / "python"
    with contextlib.suppress(OSError):
        if python.exists():
            candidates.append((Path(os.path.realpath(python)), " (its Python, {})"))
    for path, note in candidates:
        for top, where in HIDDEN_ROOTS:
            if path == top or top in path.parents:
                if note:
                    return where + note.format(path)
                if path != Path(os.path.abspath(prefix)):
                    return f"{where} (through a symlink: {path})"
                return where
    return None


def _install_service(args: argparse.Namespace) -> int:
    from companyd._fs import read_regular_file
    from companyd.daemon import SYSTEMD_LAYOUT, instance_name_problem

    prefix: Path = args.prefix.absolute()
    root: Path = args.root.absolute()
    dry: bool = args.dry_run
    if any(c.isspace() for c in str(prefix)):
        print(
            f"companyd install-service: the prefix {str(prefix)!r} contains whitespace, which "
            "ExecStart= cannot hold; install companyd in a path without spaces",
            file=sys.stderr,
        )
        return 2
    instance: str | None = args.instance
    if instance is not None and (problem := instance_name_problem(instance)) is not None:
        print(f"companyd install-service: --instance: {problem}", file=sys.stderr)
        return 2
    exe = prefix / "bin" / "companyd"
    if (hidden := hidden_by_hardening(prefix)) is not None:
        message = (
            f"the prefix {str(prefix)!r} is {hidden}, which the unit's own hardening hides "
            "from the service (ProtectHome=yes hides /home, /root and /run/user; "
            "PrivateTmp=yes gives it an empty /tmp and /var/tmp), so ExecStart= would not "
            "find companyd; install it where the service can see it — `sudo python3 -m venv "
            "/opt/companyd/venv && sudo /opt/companyd/venv/bin/pip install <your checkout, or "
            "the wheel built from it>` — then run `sudo /opt/companyd/venv/bin/companyd "
            "install-service` (docs/deploy.md)"
        )
        if root == Path("/"):
            print(f"companyd install-service: {message}", file=sys.stderr)
            return 2
        # staging a package (--root): the prefix is where it will be on the target
        print(f"warning: {message}", file=sys.stderr)
    if not _is_file(exe):
        message = (
            f"there is no companyd executable at {str(exe)!r}; pass --prefix with the venv or "
            "prefix where companyd is installed (e.g. --prefix /opt/companyd/venv)"
        )
        if not dry:
            print(f"companyd install-service: {message}", file=sys.stderr)
            return 2
        print(f"warning: {message}", file=sys.stderr)
    if args.config is not None and not _is_file(args.config):
        print(
            f"companyd install-service: --config {str(args.config)!r} is not a file",
            file=sys.stderr,
        )
        return 2

    def at(path: Path) -> Path:
        return root / path.relative_to("/")

    # where the company's files go (as systemd will see them, and below --root)
    config_dir = SYSTEMD_LAYOUT.config_root
    company_dir = config_dir / instance if instance is not None else config_dir
    unit_dir, conf_dir = at(UNIT_DIR), at(company_dir)
    steps: list[tuple[str, Callable[[], None]]] = []
    for name in TEMPLATE_UNITS if instance is not None else SINGLE_UNITS:
        target = unit_dir / name
        text = unit_text(name, prefix)
        steps.append((f"write {target} (mode 0644)", _writer(target, text.encode(), 0o644)))
    if not conf_dir.is_dir():
        steps.append((f"mkdir -m 0755 {conf_dir}", lambda: conf_dir.mkdir(0o755, parents=True)))
    config_target = conf_dir / "company.yaml"
    if args.config is not None:
        if config_target.exists():
            steps.append((f"keep the existing {config_target} (not overwritten)", lambda: None))
        else:
            try:
                # never a plain read: a FIFO or a device given by mistake must not hang
                data = read_regular_file(args.config, 10 * 1024 * 1024)
            except (OSError, ValueError) as exc:
                raise CompanydError(
                    f"cannot copy {str(args.config)!r}: "
                    f"{getattr(exc, 'strerror', None) or exc}; give the path to your "
                    "company.yaml (a regular file)"
                ) from None
            steps.append(
                (
                    f"copy {args.config} to {config_target} (mode 0644)",
                    _writer(config_target, data, 0o644),
                )
            )
    for cred in CREDENTIALS:
        path = conf_dir / cred
        if not path.exists():
            steps.append(
                (
                    f"create empty {path} (mode 0600; LoadCredential= needs the file to exist)",
                    _writer(path, b"", 0o600, exclusive=True),
                )
            )

    print("companyd install-service" + (" --dry-run: would" if dry else ":"))
    for text, action in steps:
        print(f"  {text}")
        if not dry:
            try:
                action()
            except PermissionError as exc:
                print(
                    f"companyd install-service: cannot write {exc.filename!r}: permission "
                    "denied; run it as root (`sudo companyd install-service`) or see "
                    "--dry-run for the steps",
                    file=sys.stderr,
                )
                return 1
            except OSError as exc:
                print(f"companyd install-service: {exc}", file=sys.stderr)
                return 1
    config_hint = config_target if root == Path("/") else company_dir / "company.yaml"
    have_config = args.config is not None or config_target.exists()
    how = (
        f"`companyd validate {config_hint}`"
        if have_config
        else f"`companyd init {company_dir}`, then `companyd validate {config_hint}`"
    )
    unit = f"companyd@{instance}" if instance is not None else "companyd"
    status = "sudo companyd status" + (f" --config {company_dir}/company.yaml" if instance else "")
    print(
        "\nnext:\n"
        f"  1. company.yaml: {'check' if have_config else 'write'} {config_hint} ({how})\n"
        f"  2. secrets (root-only files, never in company.yaml):\n"
        f"       sudo sh -c 'umask 077; printf %s \"$KEY\" > {company_dir}/anthropic_api_key'\n"
        f"       sudo sh -c 'umask 077; printf %s \"$TOKEN\" > {company_dir}/telegram_bot_token'"
    )
    if instance is not None:
        print(
            "     with state: {backend: postgres, dsn_credential: companyd_database_url}:\n"
            f'       sudo sh -c \'umask 077; printf %s "$URL" > '
            f"{company_dir}/companyd_database_url'"
        )
    print(
        f"  3. sudo systemctl daemon-reload && sudo systemctl enable --now {unit}\n"
        f"  4. {status}     journalctl -u {unit} -f\n"
        + (
            '(docs/deploy.md, "Many companies on one host", explains each step)'
            if instance is not None
            else "(docs/deploy.md explains each step)"
        )
    )
    return 0


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # e.g. a directory on the way we may not search
        return False


def _writer(path: Path, data: bytes, mode: int, *, exclusive: bool = False) -> Callable[[], None]:
    def write() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if exclusive:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            os.close(fd)
            return
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            os.write(fd, data)
            os.fchmod(fd, mode)  # the umask may have narrowed it
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    return write
