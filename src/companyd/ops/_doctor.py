"""``companyd doctor``: is everything set up right? One verdict per check, and safe fixes.

:func:`run_doctor` runs, in this order (each a :class:`~companyd.ops._checks.Check`):

``config``     company.yaml loads and validates (its warnings are a warning); when a daemon
               runs, the file has not changed since the daemon loaded it
``secrets``    every secret company.yaml names can be found (the API key, the bot token,
               the chat ids, every MCP server's ``env_from``) — never their values
``database``   with ``state.backend: postgres``: the database answers, the company's schema
               and each store's version there (skipped on SQLite)
``anthropic``  the provider accepts the API key: ``GET /v1/models``, which costs nothing
               (through :mod:`companyd.llm._claude`; skipped with ``offline``)
``telegram``   the bot token is valid (``getMe``) and every chat id is reachable
               (``getChat``), through :mod:`companyd.alerts._check` (skipped with ``offline``)
``channel:NAME`` each of ``alerts.channels``: its ``url_env`` is set and holds a URL
               Apprise can use (shown by its service only, never the URL); with
               ``send_test`` a test message goes out and the answer is the verdict
``webhook:NAME`` each of ``alerts.webhooks``: its ``secret_env`` is set and is a Standard
               Webhooks secret; with ``send_test`` a signed ``test`` event is POSTed
               (both tests skipped with ``offline``)
``tool-sandbox`` a tool-server sandbox can be created (bubblewrap, namespaces; the
               ``run_as`` users exist when the daemon runs as root; the installed unit
               that runs this company.yaml does not forbid the namespaces — the shipped
               units' ``RestrictNamespaces=yes`` does); every MCP server with
               ``sandbox: false`` is a warning naming it (docs/tools.md)
``state-dir``  the state directory exists, belongs to this user and is private: 0700, and
               every file in it 0600; before the first start (no directory yet) it is
               fine if this user may create it, a problem with the fix if not
``disk``       free space where the state lives
``memory``     the memory graph loads clean (or what ``companyd memory repair`` would do)
``clock``      synchronised (``timedatectl``), ``systemd``: the unit installed, enabled and
               its ``systemd-analyze security`` exposure — both ``skipped (no systemd)``
               where systemd does not run
``versions``   Python, SQLite, companyd and the key libraries

``fix`` applies only safe, local changes — the state directory's and its files'
permissions, and creating a missing state directory (0700) — then checks again; each
change is listed in the check's ``changed``. Nothing else is ever written: not
company.yaml, not the memory, not a credential. It touches only what is companyd's: no
symlink inside the state directory is followed (each is listed), nothing another user owns
is changed nor a directory of theirs entered, no execute bit is removed and no file with
a second hard link changed (companyd writes no such file into its state), and a dangling
symlink, a path under a file or a file that may not be changed is reported, never raised.
Exit 0 when no check is a ``problem``.

The network checks (``database``, ``anthropic``, ``telegram``) run at the same time, each
within :data:`CHECK_DEADLINE` (its own client gives up after :data:`NETWORK_TIMEOUT`; the
deadline is the backstop for anything that does not): ``doctor`` takes as long as the
slowest of them, not their sum, and the report lists them in the order above.
"""

from __future__ import annotations

import asyncio
import errno
import os
import pwd
import stat
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from companyd._fs import PRIVATE_DIR, PRIVATE_FILE, private_dir
from companyd._secrets import protect, redact
from companyd.alerts import check_telegram, probe_channel, probe_webhook
from companyd.clock import Clock, SystemClock, within
from companyd.config import (
    CompanyConfig,
    MigrationRefused,
    load_config,
    plan_migration,
    secret_references,
    secret_values,
    state_backend,
)
from companyd.errors import CompanydError, ConfigError
from companyd.llm import ModelAuthFailed, ModelError
from companyd.memory import GraphStore
from companyd.ops._checks import Check
from companyd.ops._doctor_host import (
    SYSTEMD_RUNTIME,
    check_clock,
    check_disk,
    check_systemd_units,
    check_versions,
    unit_forbids_niceness,
    unit_forbids_sandbox,
    unit_runs_as_root,
)
from companyd.ops._upgrade import BACKUPS_DIR, UpgradeRefused, inspect_state
from companyd.sandbox import SandboxUnavailable, probe_sandbox
from companyd.storage import probe

__all__ = ["DoctorReport", "RunningDaemon", "check_tool_sandbox", "run_doctor"]

#: How long each network check may take (seconds).
NETWORK_TIMEOUT = 20.0
#: The most a network check may take in all (its connection, its answer, its clean-up),
#: whatever its client does: then it is a problem that says it did not answer.
CHECK_DEADLINE = NETWORK_TIMEOUT + 10.0


@dataclass(frozen=True)
class RunningDaemon:
    """What the running daemon says about itself (``status``), when one runs."""

    config: str
    config_loaded_at: float
    state_dir: str
    #: the settings of the loaded file only a restart applies (status ``restart_required``)
    restart_required: tuple[str, ...] = ()
    #: the SHA-256 of the text it runs (None: a daemon from before status said it)
    config_sha256: str | None = None


@dataclass
class DoctorReport:
    """Every check, in order."""

    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No check is a problem (the exit code is 0)."""
        return not any(c.status == "problem" for c in self.checks)

    @property
    def changed(self) -> list[str]:
        """Every change ``fix`` made, in order."""
        return [change for c in self.checks for change in c.changed]

    def to_dict(self) -> dict[str, Any]:
        """The report as ``--json`` prints it."""
        return {
            "ok": self.ok,
            "checks": [c.to_dict() for c in self.checks],
            "changed": self.changed,
        }


async def run_doctor(
    config_path: Path,
    *,
    state_dir: Path | None = None,
    offline: bool = False,
    fix: bool = False,
    running: RunningDaemon | None = None,
    environ: Mapping[str, str] | None = None,
    systemd_runtime: Path = SYSTEMD_RUNTIME,
    clock: Clock | None = None,
    send_test: bool = False,
    unit_state_dir: Path | None = None,
    unit: str | None = None,
) -> DoctorReport:
    """Run every check (see the module docstring); ``state_dir`` overrides company.yaml's.
    ``clock`` times the network checks' deadline (:data:`CHECK_DEADLINE`); ``send_test``:
    a test message to each channel and webhook.

    ``unit_state_dir``: the state directory systemd gives the unit that runs this
    company.yaml (``StateDirectory=``, e.g. ``/var/lib/companyd``), checked unless
    ``state_dir`` or ``$STATE_DIRECTORY`` names one: the service's ``$STATE_DIRECTORY``
    comes before company.yaml's ``state_dir``, so it is the directory the service uses.
    ``unit``: the systemd unit that runs this company.yaml there (its hardening decides
    whether tool servers can be sandboxed, whatever a probe from this shell finds).
    """
    env = os.environ if environ is None else environ
    clock = clock or SystemClock()
    report = DoctorReport()
    config_check, config = await asyncio.to_thread(_check_config, config_path, running)
    report.checks.append(config_check)
    if config is None:
        why = "skipped: company.yaml does not load (see config)"
        for name in ("secrets", "database", "anthropic", "telegram", "tool-sandbox"):
            report.checks.append(Check(name, "skipped", why))
        where = state_dir
    else:
        # the secrets of the environment checked (not always this process's) are masked in
        # every line the report prints, a database password however its URL is written
        for value in secret_values(config, env):
            protect(value)
        report.checks.append(_check_secrets(config, env, offline=offline))
        network = {"database": _check_database(config, env)}
        if not offline:
            network["anthropic"] = _check_anthropic(config, env)
            network["telegram"] = _check_telegram(config, env)
        # at the same time, each within its deadline (the channels' and webhooks' probes
        # have their own); listed in the usual order
        results, channel_checks = await asyncio.gather(
            asyncio.gather(
                *(_within_deadline(name, check, clock) for name, check in network.items())
            ),
            _check_channels(config, env, send_test=send_test and not offline, offline=offline),
        )
        done = dict(zip(network, results, strict=True))
        report.checks.append(done["database"])
        if offline:
            report.checks.append(
                Check("anthropic", "skipped", "skipped (--offline: the company runs offline)")
            )
            # no network needed to tell that Telegram is not configured at all
            report.checks.append(
                _telegram_missing(config) or Check("telegram", "skipped", "skipped (--offline)")
            )
        else:
            report.checks += [done["anthropic"], done["telegram"]]
        report.checks += channel_checks
        report.checks.append(
            await asyncio.to_thread(
                check_tool_sandbox,
                config,
                environ=env,
                unit=unit,
                systemd_runtime=systemd_runtime,
            )
        )
        where = config.state_dir(state_dir)
        if (
            state_dir is None
            and unit_state_dir is not None
            and not os.environ.get("STATE_DIRECTORY")
        ):
            where = unit_state_dir
    if where is None:
        report.checks.append(
            Check("state-dir", "skipped", "skipped: no company.yaml and no --state-dir")
        )
    else:
        report.checks.append(await asyncio.to_thread(check_state_dir, where, fix=fix))
        report.checks.append(await asyncio.to_thread(check_disk, where))
    report.checks.append(await asyncio.to_thread(check_upgrade, config_path, config, where))
    if config is not None and where is not None:
        report.checks.append(await asyncio.to_thread(_check_memory, config.memory_path(where)))
    else:
        report.checks.append(Check("memory", "skipped", "skipped: company.yaml does not load"))
    report.checks.append(await asyncio.to_thread(check_clock, systemd_runtime))
    report.checks += await asyncio.to_thread(check_systemd_units, runtime=systemd_runtime)
    report.checks.append(await asyncio.to_thread(check_versions))
    return report


# -- upgrades ---------------------------------------------------------------------------------


def check_upgrade(path: Path, config: CompanyConfig | None, state_dir: Path | None) -> Check:
    """Does company.yaml or the state need a migration, or come from a newer companyd?

    company.yaml with an older format or deprecated spellings: a warning (``companyd migrate
    --write``); a store at an older schema step: a warning saying the next start migrates it
    after a verified backup; a store from a newer companyd: a problem with the way back.
    """
    notes: list[str] = []
    fixes: list[str] = []
    try:
        plan = plan_migration(path)
    except MigrationRefused as exc:
        if config is not None:  # it loads, yet cannot be planned: say so
            notes.append(str(exc))
    else:
        if plan.needed:
            notes.append(
                f"company.yaml needs migrating ({len(plan.changes)} change(s): "
                + "; ".join(plan.changes[:3])
                + (" ..." if len(plan.changes) > 3 else "")
                + ")"
            )
            fixes.append(f"run `companyd migrate --write --config {path}` (keeps a .bak)")
    if state_dir is not None and (config is None or config.spec.state.backend == "sqlite"):
        try:
            stores = inspect_state(state_dir)
        except UpgradeRefused as exc:
            return Check("upgrade", "problem", str(exc))
        newer = [s for s in stores if s.too_new]
        if newer:
            return Check(
                "upgrade",
                "problem",
                "; ".join(
                    [
                        "the state was written by a newer companyd: "
                        + "; ".join(s.describe() for s in newer),
                        *notes,
                    ]
                ),
                fix="upgrade companyd to the version that wrote it, or restore the newest "
                f"pre-upgrade backup in {str(state_dir / BACKUPS_DIR)!r} with `companyd "
                "restore FILE --state-dir DIR --force` (docs/upgrade.md)",
            )
        older = [s for s in stores if s.needs_migration]
        if older:
            notes.append(
                "the next start migrates "
                + "; ".join(s.describe() for s in older)
                + f", after writing and verifying a backup to {str(state_dir / BACKUPS_DIR)!r}"
            )
            fixes.append("make sure the state's disk has room for one more backup")
    if not notes:
        return Check("upgrade", "ok", "company.yaml and the state are in the current format")
    return Check("upgrade", "warning", "; ".join(notes), fix="; ".join(fixes) or None)


# -- company.yaml and its secrets ------------------------------------------------------------


def _check_config(path: Path, running: RunningDaemon | None) -> tuple[Check, CompanyConfig | None]:
    try:
        config = load_config(path)
    except ConfigError as exc:
        issues = [str(i) for i in exc.issues]
        shown = "; ".join(issues[:3]) + (f"; … {len(issues) - 3} more" if len(issues) > 3 else "")
        return (
            Check(
                "config",
                "problem",
                f"{str(path)!r} is invalid ({len(issues)} problem(s)): {shown}",
                f"companyd validate {path} lists every problem with its line; fix them",
            ),
            None,
        )
    agents, routines = len(config.agents), len(config.routines)
    summary = (
        f"{str(config.path)!r} valid: {agents} agent{'s' * (agents != 1)}, {routines} "
        f"routine{'s' * (routines != 1)}"
    )
    if running is not None:
        same = os.path.realpath(running.config) == os.path.realpath(config.path)
        if running.config_sha256 is not None:
            # the text, not the time: a file touched, or restored as it was, is not changed
            changed_after = config.text_sha256() != running.config_sha256
        else:
            changed_after = config.path.stat().st_mtime > running.config_loaded_at
        if not same:
            return (
                Check(
                    "config",
                    "warning",
                    f"{summary}; but the running daemon loaded {running.config!r}",
                    "check which company.yaml the unit runs (--config), or pass that one",
                ),
                config,
            )
        if changed_after:
            return (
                Check(
                    "config",
                    "warning",
                    f"{summary}; changed after the running daemon loaded it: the daemon runs "
                    "an older version",
                    "sudo companyd reload (or systemctl reload companyd) applies it",
                ),
                config,
            )
        summary += "; the running daemon loaded this version"
        if running.restart_required:
            names = ", ".join(running.restart_required)
            verb = "waits" if len(running.restart_required) == 1 else "wait"
            return (
                Check(
                    "config",
                    "warning",
                    f"{summary}, but {names} {verb} for a restart: the daemon runs the "
                    "values it started with",
                    "sudo systemctl restart companyd applies them",
                ),
                config,
            )
    if config.warnings:
        return (
            Check(
                "config",
                "warning",
                f"{summary}; {len(config.warnings)} warning(s): {config.warnings[0]}",
                f"companyd validate {path} shows them all",
            ),
            config,
        )
    return Check("config", "ok", summary), config


def _check_secrets(config: CompanyConfig, env: Mapping[str, str], *, offline: bool) -> Check:
    """Whether every secret company.yaml names can be found; ``offline`` (the company runs
    with the offline model) does not need the API key, so its absence is no problem then.
    """
    refs = secret_references(config, env)
    if offline:
        refs = [r for r in refs if not r.path.startswith("anthropic.")]
    groups: dict[str, list[Any]] = {}
    for r in refs:
        # the API key and the bot token each have two sources: one of them is enough
        key = r.path.rsplit("_", 1)[0] if r.path.endswith(("_env", "_credential")) else r.path
        if r.path.endswith("chat_ids_env"):
            key = r.path
        groups.setdefault(key, []).append(r)
    missing = []
    for key, alternatives in groups.items():
        if not any(r.is_set for r in alternatives):
            names = " or ".join(
                f"${r.name}" if r.kind == "env" else f"credential {r.name!r}" for r in alternatives
            )
            missing.append(f"{key}: {names}")
    if missing:
        return Check(
            "secrets",
            "problem",
            f"{len(missing)} of {len(groups)} secret(s) cannot be found: " + "; ".join(missing),
            "set the variables (EnvironmentFile=) or put the credential files in place "
            '(LoadCredential=, docs/deploy.md "Secrets"); run doctor as the service would '
            "(sudo systemd-run -P --wait -p LoadCredential=… or with the same environment)",
        )
    unneeded = " (the API key is not needed offline)" if offline else ""
    return Check(
        "secrets", "ok", f"all {len(groups)} secret(s) company.yaml names can be found{unneeded}"
    )


def _instance_flag(unit: str) -> str:
    """`` --instance NAME`` for ``companyd@NAME.service``, else nothing."""
    if unit.startswith("companyd@") and unit.endswith(".service"):
        return f" --instance {unit[len('companyd@') : -len('.service')]}"
    return ""


def check_tool_sandbox(
    config: CompanyConfig,
    *,
    as_root: bool | None = None,
    environ: Mapping[str, str] | None = None,
    unit: str | None = None,
    systemd_runtime: Path = SYSTEMD_RUNTIME,
) -> Check:
    """Can the MCP servers' sandboxes be created (with ``environ``'s PATH), and which
    servers run without one? ``unit``: the systemd unit that runs this company.yaml, if
    one does — the probe runs as the caller, not under the unit's hardening, so what the
    installed unit forbids is read from it (:func:`unit_forbids_sandbox`), and whether it
    runs as root (else its servers run as its user, whatever ``sandbox.run_as`` says).
    """
    if as_root is None and unit and unit_runs_as_root(unit, systemd_runtime) is False:
        as_root = False  # probed as the daemon makes its sandboxes, in a user namespace
    as_root = os.geteuid() == 0 if as_root is None else as_root
    boxed: list[str] = []
    bare: list[str] = []
    users: set[str] = set()
    for agent in config.agents.values():
        for name, spec in agent.mcp_servers.items():
            where = f"agents.{agent.slug}.mcp_servers.{name}"
            if spec.sandbox is False:
                bare.append(where)
            else:
                boxed.append(where)
                users.add(spec.sandbox.run_as)
    forbids = unit_forbids_sandbox(unit, systemd_runtime) if unit and boxed else None
    if unit and forbids:
        return Check(
            "tool-sandbox",
            "problem",
            f"{len(boxed)} tool server(s) will not start under {unit} ({', '.join(boxed)}): "
            f"its hardening forbids what bubblewrap needs ({forbids}) — a probe run from "
            "this shell would pass, the daemon under the unit cannot make a sandbox",
            "refresh the unit with the one this companyd ships, which allows the sandboxes "
            f"(`sudo companyd install-service{_instance_flag(unit)}`, then `sudo systemctl "
            f"restart {unit}`; units installed before it forbid them), or undo the drop-in that "
            "tightened it; else set `sandbox: false` on those servers (not recommended); "
            'docs/tools.md "Under systemd"',
        )
    try:
        probe_sandbox(as_root=as_root, network=False, environ=environ)
        if as_root:
            for user in sorted(users):
                pwd.getpwnam(user)
    except SandboxUnavailable as exc:
        if not boxed:
            return Check(
                "tool-sandbox",
                "warning",
                f"no tool server is sandboxed now, but a sandbox cannot be created: {exc}",
                "a tool server added later will not start until this is fixed",
            )
        return Check(
            "tool-sandbox",
            "problem",
            f"{len(boxed)} tool server(s) will not start ({', '.join(boxed)}): {exc}",
            "install bubblewrap (`apt-get install bubblewrap`) and allow user namespaces, "
            "or set `sandbox: false` on a server to run it unsandboxed (docs/tools.md)",
        )
    except KeyError as exc:
        return Check(
            "tool-sandbox",
            "problem",
            f"the sandbox user {exc.args[0]!r} (sandbox.run_as) does not exist",
            "create it (`useradd --system --no-create-home NAME`) or name an existing "
            "unprivileged user in sandbox.run_as",
        )
    who = f"as {', '.join(sorted(users)) or 'nobody'}" if as_root else "as the daemon's user"
    if bare:
        return Check(
            "tool-sandbox",
            "warning",
            f"{len(bare)} tool server(s) run unsandboxed (sandbox: false), with the daemon's "
            f"user, files and environment: {', '.join(bare)}",
            "remove `sandbox: false` (declare what the server needs with sandbox.read / "
            "sandbox.write / sandbox.network instead; docs/tools.md)",
        )
    if boxed and unit and unit_forbids_niceness(unit, systemd_runtime):
        return Check(
            "tool-sandbox",
            "warning",
            f"{len(boxed)} tool server(s) run in a sandbox under {unit}, but at the daemon's "
            "own priority: the unit refuses setpriority (`SystemCallFilter=`), so a server "
            "that spins competes with the daemon for the CPU (its log shows 'nice: cannot set "
            "niceness' at each start)",
            "refresh the unit with the one this companyd ships, which allows it "
            f"(`sudo companyd install-service{_instance_flag(unit)}`, then `sudo systemctl "
            f'restart {unit}`); docs/tools.md "Under systemd"',
        )
    return Check(
        "tool-sandbox",
        "ok",
        f"tool-server sandboxes can be created (bubblewrap); {len(boxed)} server(s) run in "
        f"one, {who}",
    )


async def _within_deadline(name: str, check: Coroutine[Any, Any, Check], clock: Clock) -> Check:
    """``check``'s verdict, or a problem when it has not come within :data:`CHECK_DEADLINE`."""
    try:
        return await within(clock, CHECK_DEADLINE, check)
    except TimeoutError:
        return Check(
            name,
            "problem",
            f"no answer within {CHECK_DEADLINE:.0f} s",
            "check the network (a firewall or proxy that swallows connections), then run "
            "`companyd doctor` again",
        )


async def _check_database(config: CompanyConfig, env: Mapping[str, str]) -> Check:
    if config.spec.state.backend == "sqlite":
        return Check("database", "skipped", "skipped (state.backend: sqlite: the stores are files)")
    try:
        backend = state_backend(config, env)
    except ConfigError as exc:
        return Check("database", "problem", str(exc), "set the database URL (see secrets)")
    assert backend.dsn is not None  # a postgres Backend has one
    try:
        found = await probe(backend.dsn, backend.schema, timeout=NETWORK_TIMEOUT)
    except (psycopg.Error, TimeoutError) as exc:
        why = str(exc).strip() or f"no answer in {NETWORK_TIMEOUT:.0f} s"
        return Check(
            "database",
            "problem",
            f"cannot reach the company's PostgreSQL database: {redact(why)}",
            "check the URL in $" + config.spec.state.dsn_env + " (host, port, user, "
            "database, password), that the server runs and accepts this host "
            "(pg_hba.conf), and the network in between (docs/storage.md)",
        )
    if not found.schema_exists:
        return Check(
            "database",
            "ok",
            f"{found.server} reachable; schema {backend.schema!r} does not exist yet (the "
            "daemon creates it on its first start)",
        )
    stores = ", ".join(f"{k} v{v}" for k, v in sorted(found.stores.items())) or "none yet"
    return Check("database", "ok", f"{found.server} reachable; schema {backend.schema!r}: {stores}")


async def _check_anthropic(config: CompanyConfig, env: Mapping[str, str]) -> Check:
    # Imported here: anthropic takes a noticeable part of a second to import, and
    # `companyd --help` loads this module (the same reason as in daemon._launch.make_backend).
    from companyd.llm import ClaudeBackend, resolve_base_url

    url = resolve_base_url(config.spec.anthropic, env) or "https://api.anthropic.com"
    try:
        backend = ClaudeBackend.from_config(config.spec.anthropic, environ=env)
    except ModelError as exc:
        return Check("anthropic", "problem", str(exc), "set the API key (see secrets)")
    try:
        models = await backend.list_models(timeout=NETWORK_TIMEOUT)
    except ModelAuthFailed:
        return Check(
            "anthropic",
            "problem",
            f"the API key was refused by {url!r} (401)",
            "put a valid key in anthropic.api_key_env / api_key_credential (console.anthropic"
            ".com → API keys), then restart companyd",
        )
    except ModelError as exc:
        return Check(
            "anthropic",
            "problem",
            f"cannot check the API key at {url!r}: {exc}",
            "check the network, a proxy, and anthropic.base_url / $ANTHROPIC_BASE_URL",
        )
    finally:
        await backend.aclose()
    return Check("anthropic", "ok", f"API key accepted by {url!r} ({len(models)} models listed)")


def _telegram_missing(config: CompanyConfig) -> Check | None:
    """The warning when company.yaml has no ``alerts.telegram``: failures reach nobody, and
    the results of the routines that deliver to Telegram (named) reach no phone — they
    are kept in the founder's inbox instead. None when Telegram is configured.
    """
    if config.spec.alerts.telegram is not None:
        return None
    lost = telegram_routines(config)
    channels = config.spec.alerts.channels
    if channels:
        # the other channels are told, but cannot be answered: no buttons, no commands
        summary = (
            "no alerts.telegram in company.yaml: alerts reach only alerts.channels ("
            + ", ".join(c.name for c in channels)
            + "), with no buttons or commands"
        )
    else:
        summary = "no alerts.telegram in company.yaml: failures reach nobody"
    if lost:
        names = ", ".join(lost[:5]) + (f" and {len(lost) - 5} more" if len(lost) > 5 else "")
        summary += (
            f", and the results of {len(lost)} routine(s) that deliver to telegram ({names}) "
            "would reach no phone: they are kept in the inbox instead (companyd inbox)"
        )
        told = [c.name for c in channels if c.deliver]
        if told:
            summary += f" and sent to {', '.join(told)} (deliver: true)"
    return Check(
        "telegram",
        "warning",
        summary,
        "add alerts.telegram (docs/alerts.md), or give those routines another deliver: "
        "(file, memory)",
    )


async def _check_channels(
    config: CompanyConfig, env: Mapping[str, str], *, send_test: bool, offline: bool
) -> list[Check]:
    """One check per ``alerts.channels`` and ``alerts.webhooks`` entry (module docstring)."""
    alerts = config.spec.alerts
    company = config.spec.company.name
    channels = [
        probe_channel(c, env, send_test=send_test, company=company, deadline=NETWORK_TIMEOUT)
        for c in alerts.channels
    ]
    hooks = [
        probe_webhook(w, env, send_test=send_test, deadline=NETWORK_TIMEOUT)
        for w in alerts.webhooks
    ]
    probes = await asyncio.gather(*channels, *hooks)
    out: list[Check] = []
    untested = " (--offline: no test sent)" if offline else "; --send-test sends a test message"
    for i, p in enumerate(probes):
        channel = i < len(channels)
        name = f"channel:{p.name}" if channel else f"webhook:{p.name}"
        what = f"a {p.shown}:// URL" if channel else f"signing for {p.shown}"
        if p.problem is not None and not p.tested:
            # not set, or not usable: nothing reaches it (its messages wait in the outbox)
            fix = (
                f'set {p.env} to the channel\'s Apprise URL (docs/alerts.md, "Other channels")'
                if channel
                else f"set {p.env} to the webhook's secret, whsec_… (docs/webhooks.md)"
            )
            out.append(
                Check(
                    name,
                    "problem",
                    f"{p.problem}: its messages wait in the outbox",
                    f"{fix}, then restart companyd",
                )
            )
        elif p.problem is not None:
            out.append(
                Check(
                    name,
                    "problem",
                    f"${p.env} set ({what}), but the test message was not delivered: {p.problem}",
                    "check the URL and that the service answers from this server"
                    if channel
                    else "check that the receiver is up and accepts the signed test event",
                )
            )
        elif p.sent:
            out.append(Check(name, "ok", f"${p.env} set ({what}); the test message was accepted"))
        else:
            out.append(Check(name, "ok", f"${p.env} set ({what}){untested}"))
    return out


def telegram_routines(config: CompanyConfig) -> list[str]:
    """The routines whose resolved ``deliver`` sends their result to Telegram (directly or
    in the digest), in company.yaml's order.
    """
    return [slug for slug, r in config.routines.items() if {"telegram", "digest"} & set(r.deliver)]


async def _check_telegram(config: CompanyConfig, env: Mapping[str, str]) -> Check:
    missing = _telegram_missing(config)
    if missing is not None:
        return missing
    res = await check_telegram(config.spec.alerts, env, timeout=NETWORK_TIMEOUT)
    if not res.configured:
        return Check("telegram", "problem", f"alerts cannot be sent: {res.problem}", "see secrets")
    if res.problem is not None:
        return Check(
            "telegram",
            "problem",
            f"the Bot API refused or did not answer: {res.problem}",
            "check the bot token (@BotFather → /token) and alerts.telegram.api_url",
        )
    bad = {chat: why for chat, why in res.chats.items() if why is not None}
    if bad:
        listed = "; ".join(f"chat {chat}: {why}" for chat, why in bad.items())
        return Check(
            "telegram",
            "problem",
            f"bot {res.bot} is valid, but {len(bad)} of {len(res.chats)} chat(s) cannot be "
            f"reached: {listed}",
            "open the bot in Telegram and send it /start from each chat, and check the chat "
            "ids (alerts.telegram.chat_ids / chat_ids_env)",
        )
    return Check("telegram", "ok", f"bot {res.bot} valid; {len(res.chats)} chat(s) reachable")


# -- the state directory ---------------------------------------------------------------------


@dataclass
class _Scan:
    """What a walk of the state directory found (paths as shown to the operator)."""

    #: open to the group or others and companyd's to tighten: (path, mode, wanted, is_dir)
    loose: list[tuple[Path, int, int, bool]] = field(default_factory=list)
    #: open to the group or others but left alone, each with the reason
    left: list[tuple[Path, int, str]] = field(default_factory=list)
    #: symlinks (never followed): (path, where it points, dangling)
    links: list[tuple[Path, str, bool]] = field(default_factory=list)
    #: what could not be read or changed: (path, why)
    errors: list[tuple[Path, str]] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)


_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _chmod_file(name: str, dir_fd: int, st: os.stat_result, mode: int) -> None:
    """Set ``mode`` on the regular file ``name`` of ``dir_fd`` without following a symlink:
    through an ``O_PATH`` descriptor checked to be the same file ``st`` describes (so a file
    swapped for a symlink or another file between the look and the change is not touched).
    """
    o_path = getattr(os, "O_PATH", None)
    if o_path is None:  # not Linux: fchmodat(AT_SYMLINK_NOFOLLOW) exists there
        os.chmod(name, mode, dir_fd=dir_fd, follow_symlinks=False)
        return
    fd = os.open(name, o_path | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
            raise OSError(errno.ESTALE, "it changed while doctor looked at it")
        os.chmod(f"/proc/self/fd/{fd}", mode)  # the file behind the descriptor, not a link
    finally:
        os.close(fd)


def _scan(top: Path, top_fd: int, owners: frozenset[int], fix: bool) -> _Scan:
    """Walk the directory open as ``top_fd`` (never following a symlink), noting what is
    open to the group or others; with ``fix`` tighten what is companyd's.

    companyd's is a directory or a regular file owned by ``owners`` (this user, the state
    directory's owner). A file with an execute bit or with more than one hard link is never
    companyd's (it writes no such file into its state), nor a FIFO or device; a directory
    owned by another user is not entered.
    Directories are tightened before their contents are read, so nobody else can swap an
    entry meanwhile.
    """
    out = _Scan()
    stack: list[tuple[int, Path]] = [(top_fd, top)]
    try:
        _walk(stack, top_fd, owners, fix, out)
    finally:
        for fd, _ in stack:  # left open only if the walk raised
            if fd != top_fd:
                os.close(fd)
    return out


def _walk(
    stack: list[tuple[int, Path]], top_fd: int, owners: frozenset[int], fix: bool, out: _Scan
) -> None:
    while stack:
        dir_fd, where = stack.pop()
        try:
            names = sorted(os.listdir(dir_fd))
        except OSError as exc:
            out.errors.append((where, f"cannot be read: {_why(exc)}"))
            names = []
        for name in names:
            p = where / name
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed meanwhile (a SQLite journal, a temporary file)
            except OSError as exc:
                out.errors.append((p, f"cannot be read: {_why(exc)}"))
                continue
            mode = stat.S_IMODE(st.st_mode)
            kind = stat.S_IFMT(st.st_mode)
            if kind == stat.S_IFLNK:
                try:
                    target = os.readlink(name, dir_fd=dir_fd)
                except OSError:
                    continue  # gone (or no longer a symlink) meanwhile
                try:
                    os.stat(name, dir_fd=dir_fd)
                    dangling = False
                except OSError:
                    dangling = True
                out.links.append((p, target, dangling))
                continue
            if kind == stat.S_IFSOCK:
                continue  # the control socket's mode is its own (--control-group)
            loose = bool(mode & 0o077)
            if st.st_uid not in owners:
                if loose:
                    out.left.append((p, mode, f"owned by uid {st.st_uid}, not companyd's user"))
                continue  # and a directory of another user's is not entered
            if kind == stat.S_IFDIR:
                try:
                    fd = os.open(name, _NOFOLLOW_DIR, dir_fd=dir_fd)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    out.errors.append((p, f"cannot be opened: {_why(exc)}"))
                    continue
                now = os.fstat(fd)
                if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                    os.close(fd)
                    out.errors.append((p, "changed while doctor looked at it"))
                    continue
                if loose:
                    want = mode & PRIVATE_DIR
                    if fix:
                        try:
                            os.fchmod(fd, want)
                            out.changed.append(f"chmod {want:04o} {str(p)!r} (was {mode:04o})")
                        except OSError as exc:
                            out.errors.append((p, f"{mode:04o} cannot be changed: {_why(exc)}"))
                    else:
                        out.loose.append((p, mode, want, True))
                stack.append((fd, p))
                continue
            if not loose:
                continue
            if kind != stat.S_IFREG:
                out.left.append((p, mode, "not a file companyd writes (a FIFO or a device)"))
            elif mode & 0o111:
                out.left.append((p, mode, "executable: companyd writes no such file"))
            elif st.st_nlink > 1:
                out.left.append((p, mode, f"{st.st_nlink} hard links: it is elsewhere too"))
            elif fix:
                want = mode & PRIVATE_FILE
                try:
                    _chmod_file(name, dir_fd, st, want)
                    out.changed.append(f"chmod {want:04o} {str(p)!r} (was {mode:04o})")
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    out.errors.append((p, f"{mode:04o} cannot be changed: {_why(exc)}"))
            else:
                out.loose.append((p, mode, mode & PRIVATE_FILE, False))
        if dir_fd != top_fd:
            os.close(dir_fd)


def _missing(path: Path) -> str | None:
    """Why ``path`` cannot be created as a directory (a dangling symlink on the way, or a
    file where a directory should be), or None when it can be.
    """
    for d in (path, *path.parents):
        if d.is_symlink() and not d.exists():
            return f"{str(d)!r} is a symlink to {os.readlink(d)!r}, which does not exist"
        if d.exists():
            if not d.is_dir():
                return f"{str(d)!r} is a file, not a directory"
            return None
    return None


def _not_yet(path: Path) -> Check:
    """A state directory that does not exist yet (before the company's first start): fine
    when this user may create it (``companyd run`` does, 0700), a problem with the fix when
    the nearest existing directory above it is not writable.
    """
    above, reachable = Path("/"), True
    for d in path.parents:
        try:
            os.stat(d)
        except FileNotFoundError:
            continue
        except OSError:  # there, but this user may not look: it cannot make anything below
            reachable = False
        above = d
        break
    if reachable and os.access(above, os.W_OK | os.X_OK):
        return Check(
            "state-dir",
            "ok",
            f"state directory {str(path)!r} does not exist yet: it will be created at first "
            "start (`companyd run`, mode 0700)",
        )
    user = _user_name()
    return Check(
        "state-dir",
        "problem",
        f"state directory {str(path)!r} does not exist and cannot be created by {user}: "
        f"{str(above)!r} is not " + ("writable" if reachable else "reachable"),
        f"create it for the daemon's user: `sudo install -d -m 0700 -o {user} {path}` (under "
        "systemd, StateDirectory= creates it), or point state_dir / --state-dir at a "
        "directory you may write",
    )


def _user_name() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # a uid with no passwd entry (a container's)
        return f"uid {os.geteuid()}"


def _listed(items: list[str]) -> str:
    more = f" and {len(items) - 4} more" if len(items) > 4 else ""
    return ", ".join(items[:4]) + more


def check_state_dir(path: Path, *, fix: bool = False) -> Check:
    """The state directory exists, is this user's, is 0700 and its files 0600; with ``fix``
    a missing directory is created and loose modes are tightened (each change listed).

    ``fix`` touches only what is companyd's (see :func:`_scan`): it never follows a symlink
    inside the state directory (a symlink *as* the state directory is followed: systemd's
    ``DynamicUser=`` makes one), never changes what another user owns, never removes an
    execute bit, and never creates the target of a dangling symlink. What it leaves alone,
    and what it cannot read or change, is reported, never raised.
    """
    changed: list[str] = []
    if not path.exists():
        blocked = _missing(path)
        if blocked is not None:
            return Check(
                "state-dir",
                "problem",
                f"state directory {str(path)!r} cannot be created: {blocked}",
                "point state_dir / --state-dir at a directory (or remove what is in the way: "
                "doctor --fix does not)",
            )
        if not fix:
            return _not_yet(path)
        try:
            private_dir(path)
        except OSError as exc:
            return Check(
                "state-dir",
                "problem",
                f"state directory {str(path)!r} cannot be created: {_why(exc)}",
                "create it as the daemon's user (mode 0700), or point state_dir elsewhere",
            )
        changed.append(f"created {str(path)!r} (mode 0700)")
    if not path.is_dir():
        return Check(
            "state-dir",
            "problem",
            f"state directory {str(path)!r} is not a directory",
            "move that file away, or point state_dir / --state-dir elsewhere",
        )
    try:
        top_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        return Check(
            "state-dir",
            "problem",
            f"state directory {str(path)!r} cannot be read: {_why(exc)}",
            "run doctor as the daemon's user (or with sudo)",
            changed,
        )
    try:
        return _check_open_state_dir(path, top_fd, fix, changed)
    finally:
        os.close(top_fd)


def _check_open_state_dir(path: Path, top_fd: int, fix: bool, changed: list[str]) -> Check:
    st = os.fstat(top_fd)
    uid = os.geteuid()
    owner_note = ""
    if st.st_uid != uid:
        if uid != 0:
            return Check(
                "state-dir",
                "warning",
                f"state directory {str(path)!r} belongs to uid {st.st_uid}, not to this user "
                f"(uid {uid})",
                "run doctor as the daemon's user (or with sudo)",
                changed,
            )
        owner_note = f" (owned by uid {st.st_uid}, the service's user)"
    mode = stat.S_IMODE(st.st_mode)
    top_loose = bool(mode & 0o077)
    if top_loose and fix:
        # first, so nobody else can add or swap an entry while the walk runs
        try:
            os.fchmod(top_fd, mode & PRIVATE_DIR)
            changed.append(f"chmod {mode & PRIVATE_DIR:04o} {str(path)!r} (was {mode:04o})")
            top_loose = False
        except OSError as exc:
            return Check(
                "state-dir",
                "problem",
                f"state directory {str(path)!r} is {mode:04o} and cannot be changed: {_why(exc)}",
                f"chmod 0700 {path} as its owner (or root)",
                changed,
            )
    found = _scan(path, top_fd, frozenset({uid, st.st_uid}), fix)
    changed += found.changed
    loose = found.loose
    if top_loose:
        loose.insert(0, (path, mode, mode & PRIVATE_DIR, True))
    notes: list[str] = []
    if found.left:
        notes.append(
            "left alone, not companyd's: "
            + _listed([f"{str(p)!r} {m:04o} ({why})" for p, m, why in found.left])
        )
    if found.errors:
        notes.append(
            "could not check or change: "
            + _listed([f"{str(p)!r} {why}" for p, why in found.errors])
        )
    if found.links:
        notes.append(
            "symlinks, not followed: "
            + _listed(
                [f"{str(p)!r} -> {t!r}" + (" (dangling)" if d else "") for p, t, d in found.links]
            )
        )
    if loose or found.left or found.errors:
        parts = []
        if loose:
            shown = _listed([f"{str(p)!r} {m:04o}" for p, m, _, _ in loose])
            parts.append(
                f"state is readable by others: {shown} (expected 0700 for directories, 0600 "
                "for files)"
            )
        parts += notes
        fixes = []
        if loose:
            fixes.append(f"companyd doctor --fix tightens them (or chmod -R go-rwx {path})")
        if found.left or found.errors:
            fixes.append(
                "look at what doctor left alone: move it out of the state directory, or "
                "chmod go-rwx it yourself if it belongs there"
            )
        return Check("state-dir", "problem", "; ".join(parts), "; ".join(fixes), changed)
    files = len(os.listdir(top_fd))
    summary = f"{str(path)!r} private (0700, files 0600){owner_note}; {files} entries"
    if found.links:
        return Check(
            "state-dir",
            "warning",
            f"{summary}; {notes[-1]}",
            "companyd makes no symlink in its state: remove them unless you put them there",
            changed,
        )
    return Check("state-dir", "ok", summary, None, changed)


def _check_memory(path: Path) -> Check:
    if not path.exists():
        return Check("memory", "ok", f"no memory file yet at {str(path)!r} (an empty graph)")
    try:
        with GraphStore(path, readonly=True) as store:
            rep = store.open()
    except (CompanydError, OSError) as exc:
        return Check("memory", "problem", str(exc), 'see docs/memory.md "Repair"')
    if rep.quarantined or rep.needs_repair:
        return Check(
            "memory",
            "warning",
            f"{str(path)!r} loads with {len(rep.quarantined)} damaged line(s) "
            f"({rep.entities} entities, {rep.relations} relations kept)",
            f"companyd memory repair sets them aside into {path!s}.corrupt (byte for byte) "
            "and rewrites the file; `companyd memory check` shows them",
        )
    return Check(
        "memory",
        "ok",
        f"{str(path)!r} loads clean: {rep.entities} entities, {rep.relations} relations",
    )
