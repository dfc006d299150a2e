"""The host's part of ``companyd doctor``: disk space, the clock, the systemd units, versions.

Each function returns one :class:`~companyd.ops._doctor.Check` (:func:`check_systemd_units`
one per unit: ``companyd.service`` and every ``companyd@NAME`` instance systemd knows). The
clock and the units are asked of systemd (``timedatectl``, ``systemctl``, ``systemd-analyze
security``); where systemd is not running (a container, macOS, a chroot) the check is
``skipped (no systemd)``, never a problem. Every command runs with a deadline and its
failure is words.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from companyd import __version__
from companyd.ops._checks import Check, Status

__all__ = [
    "SYSTEMD_RUNTIME",
    "UNIT",
    "check_clock",
    "check_disk",
    "check_systemd",
    "check_systemd_units",
    "check_versions",
    "unit_forbids_niceness",
    "unit_forbids_sandbox",
    "unit_runs_as_root",
]

#: The directory that exists when systemd is PID 1 (what ``sd_booted()`` tests).
SYSTEMD_RUNTIME = Path("/run/systemd/system")
UNIT = "companyd.service"
#: The instances of the template ``companyd@.service`` (many companies on one host).
INSTANCE_PATTERN = "companyd@*.service"
#: Free space on the state's file system below which it is a problem / a warning.
DISK_PROBLEM_BYTES = 100 * 1024 * 1024
DISK_WARNING_BYTES = 1024 * 1024 * 1024
_LIBRARIES = ("anthropic", "python-telegram-bot", "pydantic", "APScheduler", "mcp", "networkx")


def _gib(n: float) -> str:
    return f"{n / 1024**3:.1f} GiB" if n >= 1024**3 else f"{n / 1024**2:.0f} MiB"


def check_disk(state_dir: Path, *, clock: Callable[[], float] = time.monotonic) -> Check:
    """Free space where the state lives (its nearest existing directory). When it runs
    short, what in the state directory takes the most room is named: a tool server's own
    directory (which nothing bounds) or a store — the place to look at 3 a.m.
    """
    where = state_dir
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        usage = shutil.disk_usage(where)
    except OSError as exc:
        return Check("disk", "problem", f"cannot read the free space of {str(where)!r}: {exc}")
    share = usage.free / usage.total if usage.total else 0.0
    text = f"{_gib(usage.free)} free of {_gib(usage.total)} ({share:.0%}) at {str(where)!r}"
    if usage.free < DISK_PROBLEM_BYTES:
        return Check(
            "disk",
            "problem",
            text,
            "free space: below 100 MiB the run journal and the ledger start refusing writes "
            f"(agents pause); {_largest(state_dir, clock)}delete old backups or logs, or "
            "grow the disk",
        )
    if usage.free < DISK_WARNING_BYTES or share < 0.05:
        return Check(
            "disk",
            "warning",
            text,
            f"free some space before it runs out; {_largest(state_dir, clock)}".rstrip("; "),
        )
    return Check("disk", "ok", text)


#: How long the disk check may spend adding up the state directory (a server may have made
#: millions of files): past it, what was counted so far is shown, marked as partial.
DISK_WALK_SECONDS = 5.0


def _largest(state_dir: Path, clock: Callable[[], float], most: int = 3) -> str:
    """The largest parts of ``state_dir`` — each tool server's directory
    (``tools/AGENT/SERVER``) and each other top-level entry — as a clause ending in "; ",
    or "" when there is nothing to name.
    """
    deadline = clock() + DISK_WALK_SECONDS
    sizes: dict[str, int] = {}
    partial = False

    def size_of(path: str) -> int:
        nonlocal partial
        total, stack = 0, [path]
        while stack:
            if clock() > deadline:
                partial = True
                break
            try:
                entries = os.scandir(stack.pop())
            except OSError:
                continue
            with entries:
                for e in entries:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        else:
                            total += e.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        return total

    try:
        top = list(os.scandir(state_dir))
    except OSError:
        return ""
    for e in top:
        if e.name == "tools" and e.is_dir(follow_symlinks=False):
            for agent in _subdirs(e.path):
                for server in _subdirs(agent.path):
                    what = f"tool server {server.name!r} of {agent.name} ({server.path})"
                    sizes[what] = size_of(server.path)
        elif e.is_dir(follow_symlinks=False):
            sizes[e.path] = size_of(e.path)
        else:
            with contextlib.suppress(OSError):
                sizes[e.path] = e.stat(follow_symlinks=False).st_blocks * 512
    biggest = sorted(sizes.items(), key=lambda item: item[1], reverse=True)
    shown = [f"{what} {_gib(n)}" for what, n in biggest[:most] if n >= 1024**2]
    if not shown:
        return ""
    more = " (counting stopped after 5 s: at least)" if partial else ""
    return f"the largest in the state directory{more}: {', '.join(shown)}; "


def _subdirs(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return [e for e in it if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _run(argv: Sequence[str], timeout: float = 15.0) -> tuple[int, str]:
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, f"{type(exc).__name__}: {exc}"
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def _no_systemd(runtime: Path, tool: str) -> str | None:
    if not runtime.is_dir():
        return "skipped (no systemd): systemd is not running on this machine"
    if shutil.which(tool) is None:
        return f"skipped (no systemd): {tool} is not installed"
    return None


def check_clock(runtime: Path = SYSTEMD_RUNTIME) -> Check:
    """Whether the clock is synchronised (``timedatectl``): routines, budget periods and
    quiet hours follow it.
    """
    why = _no_systemd(runtime, "timedatectl")
    if why:
        return Check("clock", "skipped", why)
    rc, out = _run(["timedatectl", "show", "-p", "NTPSynchronized", "--value"])
    if rc != 0:
        return Check("clock", "warning", f"timedatectl failed: {out or rc}")
    if out.strip() == "yes":
        return Check("clock", "ok", "synchronised (NTP)")
    return Check(
        "clock",
        "warning",
        "not synchronised: routines, budget days and quiet hours follow this clock",
        "sudo timedatectl set-ntp true (and check `timedatectl timesync-status`)",
    )


def check_systemd(unit: str = UNIT, runtime: Path = SYSTEMD_RUNTIME) -> Check:
    """The unit installed, enabled, and its ``systemd-analyze security`` exposure."""
    why = _no_systemd(runtime, "systemctl")
    if why:
        return Check("systemd", "skipped", why)
    return _check_unit(unit, _unit_properties(unit))


def check_systemd_units(runtime: Path = SYSTEMD_RUNTIME) -> list[Check]:
    """:func:`check_systemd` for ``companyd.service`` and for every ``companyd@NAME``
    instance systemd has loaded (enabled ones are, at boot), in name order.

    With instances and no ``companyd.service``, only the instances are reported (the host
    runs many companies; the single unit missing is no problem then). With both, and the
    single unit enabled or running, its check warns: it would share ``/var/lib/companyd``
    and ``/run/companyd`` with every instance.
    """
    why = _no_systemd(runtime, "systemctl")
    if why:
        return [Check("systemd", "skipped", why)]
    instances = _loaded_instances()
    props = _unit_properties(UNIT)
    single = _check_unit(UNIT, props)
    if not instances:
        return [single]
    checks = [_check_unit(name, _unit_properties(name)) for name in instances]
    if props.get("UnitFileState") == "enabled" or props.get("ActiveState") == "active":
        checks.insert(
            0,
            Check(
                "systemd",
                "warning",
                f"{single.summary}; and {len(instances)} companyd@ instance(s) on the same host",
                f"{UNIT} and companyd@NAME share /var/lib/companyd and /run/companyd (the "
                "single unit's directories are the instances' parents): move this company "
                'to an instance (docs/deploy.md, "Many companies on one host"), then '
                f"sudo systemctl disable --now {UNIT}",
            ),
        )
    return checks


#: What a tool server's bubblewrap sandbox needs of the unit that runs the daemon (as its
#: DynamicUser=, not root: through a user namespace), each seen needed under systemd 252
#: (docs/tools.md, "Under systemd"): the namespaces of ``bwrap --unshare-all``, its mount
#: calls and ``capset``, netlink for the loopback of its network namespace, and the
#: ``/proc/sys`` files it reads.
SANDBOX_NAMESPACES = ("user", "mnt", "pid", "ipc", "uts", "net", "cgroup")
SANDBOX_SYSCALLS = ("capset", "mount", "pivot_root", "umount2")
SANDBOX_FAMILIES = ("AF_NETLINK",)


def unit_forbids_sandbox(unit: str, runtime: Path = SYSTEMD_RUNTIME) -> str | None:
    """What of ``unit`` as systemd has loaded it (``systemctl show``: the unit and its
    drop-ins resolved) forbids a tool server's sandbox — e.g. ``RestrictNamespaces=yes;
    ProcSubset=pid`` for a unit shipped before companyd allowed sandboxes; None where it
    allows them, where the unit is not loaded or no systemd runs here.
    """
    if _no_systemd(runtime, "systemctl"):
        return None
    shown = _unit_properties(
        unit, ("RestrictNamespaces", "ProcSubset", "RestrictAddressFamilies", "SystemCallFilter")
    )
    if not shown:
        return None
    found: list[str] = []
    # systemd shows these resolved: "yes", "no" or the namespaces allowed
    namespaces = shown.get("RestrictNamespaces", "no").strip()
    if namespaces == "yes":
        found.append("RestrictNamespaces=yes")
    elif namespaces != "no" and (
        missing := [n for n in SANDBOX_NAMESPACES if n not in namespaces.split()]
    ):
        found.append(f"RestrictNamespaces= without {' '.join(missing)}")
    if shown.get("ProcSubset", "all").strip() == "pid":
        found.append("ProcSubset=pid")
    for key, needed in (
        ("RestrictAddressFamilies", SANDBOX_FAMILIES),
        ("SystemCallFilter", SANDBOX_SYSCALLS),
    ):
        if missing := _refused(shown.get(key, ""), needed):
            found.append(f"{key}= without {' '.join(missing)}")
    return "; ".join(found) or None


def _refused(value: str, names: Sequence[str]) -> list[str]:
    """Which of ``names`` a resolved list property refuses: ``value`` is an allow list, or
    a deny list after "~"; empty, no restriction.
    """
    value = value.strip()
    if not value:
        return []
    listed = set(value.removeprefix("~").split())
    return [n for n in names if (n in listed) == value.startswith("~")]


def unit_forbids_niceness(unit: str, runtime: Path = SYSTEMD_RUNTIME) -> bool:
    """Whether ``unit`` as systemd has loaded it refuses ``setpriority`` — a unit installed
    before companyd started tool servers at niceness 10: they still start, at the daemon's
    own priority. False where it allows it, where the unit is not loaded or no systemd runs.
    """
    if _no_systemd(runtime, "systemctl"):
        return False
    shown = _unit_properties(unit, ("SystemCallFilter",))
    return bool(_refused(shown.get("SystemCallFilter", ""), ("setpriority",)))


def unit_runs_as_root(unit: str, runtime: Path = SYSTEMD_RUNTIME) -> bool | None:
    """Whether ``unit`` as systemd has loaded it runs its process as root (no ``User=`` or
    ``User=root``, and no ``DynamicUser=``); None where the unit is not loaded or no systemd
    runs here. The shipped units do not: their tool servers run as the unit's user, in a
    user namespace, not as ``sandbox.run_as``.
    """
    if _no_systemd(runtime, "systemctl"):
        return None
    shown = _unit_properties(unit, ("User", "DynamicUser"))
    if "DynamicUser" not in shown:
        return None
    return shown["DynamicUser"].strip() != "yes" and shown.get("User", "").strip() in ("", "root")


def _unit_properties(
    unit: str, names: Sequence[str] = ("LoadState", "UnitFileState", "ActiveState")
) -> dict[str, str]:
    """The properties ``names`` of ``unit`` as systemd has it loaded (``systemctl show``:
    the unit and its drop-ins resolved); ``{}`` when systemctl fails.
    """
    rc, out = _run(["systemctl", "show", unit, *(f"--property={n}" for n in names)])
    if rc != 0:
        return {}
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _loaded_instances() -> list[str]:
    """The ``companyd@NAME.service`` units systemd has loaded, sorted (none on failure)."""
    rc, out = _run(
        [
            "systemctl",
            "list-units",
            "--all",
            "--plain",
            "--no-legend",
            "--no-pager",
            INSTANCE_PATTERN,
        ]
    )
    if rc != 0:
        return []
    names = {line.split()[0] for line in out.splitlines() if line.strip()}
    return sorted(n for n in names if n.startswith("companyd@") and n.endswith(".service"))


def _check_unit(unit: str, props: dict[str, str]) -> Check:
    """The verdict on one unit, from its properties and its security exposure."""
    if props.get("LoadState") in (None, "not-found"):
        return Check(
            "systemd",
            "warning",
            f"{unit} is not installed",
            "sudo companyd install-service --config company.yaml (docs/deploy.md)",
        )
    parts = [f"{unit} {props.get('ActiveState', '?')}, {props.get('UnitFileState', '?')}"]
    status: Status = "ok"
    fix: str | None = None
    if props.get("UnitFileState") != "enabled":
        status, fix = "warning", f"sudo systemctl enable {unit} (so it starts at boot)"
    if shutil.which("systemd-analyze") is not None:
        _, out = _run(["systemd-analyze", "security", unit, "--no-pager"], timeout=30.0)
        m = re.search(r"Overall exposure level for \S+:\s*([\d.]+)\s*(\S+)", out)
        if m:
            level = float(m.group(1))
            parts.append(f"exposure {level:.1f} {m.group(2)}")
            if level >= 5.0:
                shipped = "companyd@.service" if unit.startswith("companyd@") else UNIT
                status = "warning"
                fix = (
                    "the unit is less hardened than the shipped one: compare it with "
                    f"systemd/{shipped} and remove the drop-ins that loosen it"
                )
    return Check("systemd", status, "; ".join(parts), fix)


def check_versions() -> Check:
    """Python, SQLite, companyd and the key libraries (always ok: for the record)."""
    parts = [f"companyd {__version__}", f"Python {platform.python_version()}"]
    parts.append(f"SQLite {sqlite3.sqlite_version}")
    for dist in _LIBRARIES:
        try:
            parts.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{dist} missing")
    missing = [p for p in parts if p.endswith(" missing")]
    if missing:
        return Check(
            "versions",
            "problem",
            ", ".join(parts),
            "reinstall companyd in its venv: pip install --force-reinstall companyd",
        )
    return Check("versions", "ok", ", ".join(parts))
