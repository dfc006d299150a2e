"""The import budget of each everyday CLI command (issue 31): what a fresh ``companyd``
process has loaded when the command is done, as the console script runs it.

A command's cost is its start-up, and its start-up is its imports: ``--version``,
``status``, ``runs``, ``inbox`` and ``jobs`` must stay within 5× a bare ``python -c pass``
and ``validate`` within 10× (bench/cli.py measures the ratios; docs/benchmarks.md "cli" has
the figures). Wall-clock assertions would be flaky on a loaded machine, so the budget is
held here as what each command must not import: the heavy libraries (the SDKs, the web
stack, pydantic, the PostgreSQL driver on a SQLite company) and the standard modules that
the thin path was made to do without (PyYAML: the socket is found without parsing
company.yaml; ``logging`` and ``dataclasses``: ~8–9 ms each, more than half a bare start).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from companyd.testing.daemon_process import DaemonProcess

EXAMPLE = Path(__file__).resolve().parents[1] / "company.yaml"

#: No everyday command needs these (each tens to hundreds of ms of imports).
HEAVY = (
    "pydantic",
    "pydantic_core",
    "psycopg",
    "psycopg_pool",
    "mcp",
    "networkx",
    "starlette",
    "uvicorn",
    "telegram",
    "anthropic",
    "httpx",
    "apscheduler",
    "jinja2",
    "prometheus_client",
    "opentelemetry",
    # the anthropic SDK's HTTP stack (its own fork of httpx) and what it loads where it is
    # installed (selenium brings trio into the test venv); mcp's types package
    "httpx2",
    "httpcore2",
    "trio",
    "mcp_types",
)

#: What the commands a daemon answers do without: the event loop, PyYAML (the daemon's
#: socket is found through its company.yaml claim, or company.yaml's top level read line by
#: line), logging and dataclasses (neither is used to ask and print), hashlib.
NOT_FOR_READS: tuple[str, ...] = (
    *HEAVY,
    "asyncio",
    "yaml",
    "logging",
    "dataclasses",
    "hashlib",  # the claim's name is hashed by CPython's own SHA-256: no OpenSSL start-up
)

#: ``--version`` answers before the parser, the redactor or the error types are imported.
NOT_FOR_VERSION = (*NOT_FOR_READS, "argparse", "json", "companyd.errors", "companyd._secrets")

#: ``validate`` needs pydantic, PyYAML and the cron library, but not the stores' driver on a
#: SQLite company, nor anything of a running company: not the event catalog (its kind names
#: are needed only to check ``alerts.routes``, which the example has none of) and not the
#: stores' face or the SQLite layer (the backend and a database URL are not checked by
#: reading a SQLite company's file).
NOT_FOR_VALIDATE = (
    "companyd.events",
    "companyd.storage",
    "companyd._sqlite",
    "psycopg",
    "psycopg_pool",
    "mcp",
    "networkx",
    "starlette",
    "uvicorn",
    "telegram",
    "anthropic",
    "httpx",
    "jinja2",
    "prometheus_client",
    "opentelemetry",
)

#: The console script's own lines (pip's generated ``bin/companyd``), then what is loaded
#: and how many ``ping`` requests the command sent (each search for the daemon ends with one:
#: a command that searched twice paid the daemon's answers twice). The pings are counted by
#: wrapping ``ControlClient.ping`` when the command itself loads the control client (an
#: import hook that imports nothing): the modules reported are the command's own.
PROBE = """
import atexit, os, sys
pings = [0]
class CountPings:
    def find_spec(self, name, path=None, target=None):
        if name != "companyd.daemon._control_client":
            return None
        for finder in sys.meta_path:
            find = None if finder is self else getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        load = spec.loader.exec_module
        def exec_module(module):
            load(module)
            real = module.ControlClient.ping
            def ping(client):
                pings[0] += 1
                return real(client)
            module.ControlClient.ping = ping
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, CountPings())
def report():
    names = set(sys.modules)
    names |= {n.split(".")[0] for n in names}
    os.write(int(os.environ["PROBE_FD"]), f"{pings[0]} {' '.join(sorted(names))}".encode())
atexit.register(report)
sys.argv = ["companyd", *sys.argv[1:]]
from companyd.cli import main
sys.exit(main())
"""


def probed(
    *argv: str, cwd: Path, env: dict[str, str], rc: int = 0, stdin: str | None = None
) -> tuple[set[str], int]:
    """Run :data:`PROBE` as ``companyd ARGV``: the modules (dotted names and their top-level
    packages) it loaded and the pings it sent; ``stdin``: what its standard input reads
    before its end (None: the test's own).
    """
    read, write = os.pipe()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", PROBE, *argv],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=cwd,
            env={**env, "PROBE_FD": str(write)},
            pass_fds=(write,),
        )
        os.close(write)
        write = -1
        with os.fdopen(read, "rb") as f:
            read = -1
            report = f.read().decode()
    finally:
        for fd in (read, write):
            if fd >= 0:
                os.close(fd)
    assert proc.returncode == rc, (argv, proc.returncode, proc.stderr)
    pings, *names = report.split()
    return set(names), int(pings)


def loaded_by(
    *argv: str, cwd: Path, env: dict[str, str], rc: int = 0, stdin: str | None = None
) -> set[str]:
    """The modules ``companyd ARGV`` loaded (:func:`probed`)."""
    return probed(*argv, cwd=cwd, env=env, rc=rc, stdin=stdin)[0]


def test_a_claim_without_its_control_socket_is_searched_past(tmp_path: Path) -> None:
    # a daemon claims company.yaml (the claim names its socket) but does not listen there
    # (yet): status, which asks the claimed socket without a ping first, searches every
    # place as before and says where it looked
    from companyd.daemon import CompanyLock

    config = tmp_path / "company.yaml"
    shutil.copy(EXAMPLE, config)
    env = {**os.environ, "COMPANYD_CONFIG": str(config)}
    claim = CompanyLock.acquire(config, control_socket=tmp_path / "not-yet.sock")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "companyd", "status"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=env,
        )
        # runs: no daemon found after all, so the journal is read, as without a claim
        runs = subprocess.run(
            [sys.executable, "-m", "companyd", "runs"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=env,
        )
    finally:
        claim.release()
    assert proc.returncode == 69, proc.stderr
    assert "no companyd daemon is running (tried" in proc.stderr
    assert str(tmp_path / "not-yet.sock") in proc.stderr
    assert runs.returncode == 0, runs.stderr
    assert runs.stdout.strip() == "no runs yet"


def test_version_imports_nothing_but_the_version() -> None:
    with tempfile.TemporaryDirectory() as d:
        loaded = loaded_by("--version", cwd=Path(d), env=dict(os.environ))
    assert sorted(loaded.intersection(NOT_FOR_VERSION)) == []


def test_validate_of_a_sqlite_company_does_not_import_the_postgresql_driver() -> None:
    with tempfile.TemporaryDirectory() as d:
        loaded = loaded_by("validate", str(EXAMPLE), cwd=Path(d), env=dict(os.environ))
    assert sorted(loaded.intersection(NOT_FOR_VALIDATE)) == []
    assert "pydantic" in loaded  # the probe sees what validate does load: it can fail


#: ``memory serve-mcp --file F`` (the daemon and every MCP client start one): the mcp SDK and
#: the memory store, but not the config machinery that only finds the file when no --file
#: is given (pydantic's schema, the cross-checks, PyYAML, the cron library: ~0.1 s of CPU
#: at each start), nor the stores' drivers or anything of the daemon's other parts.
NOT_FOR_SERVE_MCP = (
    "companyd.config._load",
    "companyd.config._checks",
    "companyd.config._schema",
    "yaml",
    "apscheduler",
    "jsonschema",
    "psycopg",
    "psycopg_pool",
    "networkx",
    "telegram",
    "anthropic",
    "jinja2",
    "prometheus_client",
)


def test_serve_mcp_of_a_file_loads_no_config_machinery(tmp_path: Path) -> None:
    # its standard input ends at once: the server starts, reads the end and exits 0
    loaded = loaded_by(
        "memory",
        "serve-mcp",
        "--file",
        str(tmp_path / "memory.jsonl"),
        cwd=tmp_path,
        env=dict(os.environ),
        stdin="",
    )
    assert sorted(loaded.intersection(NOT_FOR_SERVE_MCP)) == []
    assert "companyd.memory._mcp_server" in loaded  # it did start the server


#: Reading the run journal without a daemon, on a SQLite company: the stores, no config
#: machinery (pydantic, the schema, the cron library) and no PostgreSQL driver.
NOT_FOR_OFFLINE_READS = (*HEAVY, "yaml")


def test_offline_reads_of_a_sqlite_company_load_no_config_machinery(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "company.yaml")
    env = {**os.environ, "COMPANYD_CONFIG": str(tmp_path / "company.yaml")}
    for argv in (("runs",), ("tasks",)):
        loaded = loaded_by(*argv, cwd=tmp_path, env=env)
        assert sorted(loaded.intersection(NOT_FOR_OFFLINE_READS)) == [], argv
        assert "companyd.runs._journal" in loaded, argv  # it did read (or look for) the journal
    # spend: the ledger found the same way, today in company.yaml's zone read off its text
    loaded = loaded_by("spend", cwd=tmp_path, env=env)
    assert sorted(loaded.intersection(NOT_FOR_OFFLINE_READS)) == []
    assert "companyd.spend._reports" in loaded  # it did build the (empty) report
    # the memory file too (memory.path, else the state directory's)
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / "memory.jsonl").write_bytes(b"")
    loaded = loaded_by("memory", "search", "ceo", cwd=tmp_path, env=env)
    assert sorted(loaded.intersection(NOT_FOR_OFFLINE_READS)) == []
    assert "companyd.memory._store" in loaded  # it did read the graph


def test_runs_show_without_a_daemon_loads_no_config_machinery(tmp_path: Path) -> None:
    # a run in the journal and the desk, as a daemon that stopped left them: `runs show`
    # reads both (the founder's decisions on its result come from the desk) without the
    # config schema the desk's proposals module needs
    from companyd.clock import SystemClock
    from companyd.desk import Desk
    from companyd.events import EventBus
    from companyd.runs import Journal, Task

    shutil.copy(EXAMPLE, tmp_path / "company.yaml")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)

    async def a_run() -> None:
        journal = Journal(state / "runs.sqlite")
        desk = Desk(state / "desk.sqlite", bus=EventBus(), clock=SystemClock())
        await journal.open()
        try:
            assert await desk.pending() == []  # the desk file, created by its first read
            task = Task(
                id="task-1", agent="ceo", prompt="the weekly plan", source="operator", created=1.0
            )
            await journal.add_task(task, 1.0)
            await journal.start_run(task, "run-0123456789ab", 1, 1.0)
        finally:
            await journal.close()
            await desk.close()

    asyncio.run(a_run())
    env = {**os.environ, "COMPANYD_CONFIG": str(tmp_path / "company.yaml")}
    loaded = loaded_by("runs", "show", "run-0123456789ab", cwd=tmp_path, env=env)
    assert sorted(loaded.intersection(NOT_FOR_OFFLINE_READS)) == []
    assert "companyd.desk._store" in loaded  # it did read the desk


def test_the_commands_a_daemon_answers_stay_within_their_budget() -> None:
    # status, runs, inbox, jobs, spend, budget, tools and proposals of the running example
    # company, found as a founder's shell finds it: $COMPANYD_CONFIG only (the daemon's
    # claim on its company.yaml), and with --state-dir; then `status` once no daemon runs,
    # which reads company.yaml's state_dir to name the socket it tried
    async def scenario(work: Path) -> None:
        shutil.copy(EXAMPLE, work / "company.yaml")
        env = {**os.environ, "COMPANYD_CONFIG": str(work / "company.yaml")}
        state = work / "state"
        async with DaemonProcess(work / "company.yaml", state, log=work / "d.log"):
            commands: list[tuple[str, ...]] = [
                ("status",),
                ("runs",),
                ("inbox",),
                ("jobs",),
                ("status", "--state-dir", str(state)),
                ("runs", "--state-dir", str(state)),
                ("inbox", "--state-dir", str(state)),
                ("jobs", "--state-dir", str(state)),
                ("spend",),
                ("budget",),
                ("tools",),
                ("proposals",),
            ]
            # a name with runs is known from the journal: company.yaml is not loaded for it
            ask = [sys.executable, "-m", "companyd", "ask", "ceo", "the weekly plan"]
            done = await asyncio.to_thread(
                subprocess.run, ask, capture_output=True, text=True, timeout=120, cwd=work, env=env
            )
            assert done.returncode == 0, done.stderr
            commands.append(("runs", "--agent", "ceo"))
            # the routine's heading is in the daemon's answer: company.yaml is not loaded
            # (its fires are records: dataclasses, the one import beyond the reads' budget)
            history = ("jobs", "history", "heartbeat")
            loaded, _ = await asyncio.to_thread(probed, *history, cwd=work, env=env)
            within = tuple(m for m in NOT_FOR_READS if m != "dataclasses")
            assert sorted(loaded.intersection(within)) == []
            # the memory file is the one the daemon claiming company.yaml names: the file's
            # schema is not loaded to find it (the graph store is: asyncio and all)
            search = ("memory", "search", "ceo")
            loaded, _ = await asyncio.to_thread(probed, *search, cwd=work, env=env)
            assert sorted(loaded.intersection(NOT_FOR_OFFLINE_READS)) == []
            assert "companyd.memory._store" in loaded  # it did read the graph
            for argv in commands:
                loaded, pings = await asyncio.to_thread(probed, *argv, cwd=work, env=env)
                # jobs included: its answer is printed from the rows as received, not
                # through the routines' record dataclasses
                assert sorted(loaded.intersection(NOT_FOR_READS)) == [], argv
                if argv[0] == "jobs":
                    assert "companyd.scheduler._jobs_text" in loaded  # it did print the table
                if len(argv) == 1:
                    # each asks the daemon claiming company.yaml straight away: no ping first
                    assert pings == 0, argv
        # no daemon: every place its socket may be is tried, the state directory's read off
        # company.yaml's top level (not by PyYAML) and /run/companyd's from the systemd
        # layout (a dataclass: this path may import dataclasses)
        loaded = await asyncio.to_thread(loaded_by, "status", cwd=work, env=env, rc=69)
        budget = tuple(m for m in NOT_FOR_READS if m != "dataclasses")
        assert sorted(loaded.intersection(budget)) == []

    with tempfile.TemporaryDirectory(dir="/tmp", prefix="cliimp") as d:
        asyncio.run(scenario(Path(d)))


#: ``companyd run`` that refuses to start (78: company.yaml is invalid; 75: another daemon
#: runs this company) needs the config, the logging set-up and the locks — not the daemon
#: it will not start: not its composition root nor any service of the tree, nor their SDKs
#: (~0.1 s of CPU more at each refusal, and systemd may retry a 75 every few seconds).
NOT_FOR_A_REFUSED_RUN = (
    "companyd.daemon._main",
    "companyd.daemon._control",
    "companyd.supervision",
    "companyd.agents",
    "companyd.alerts",
    "companyd.memory",
    "companyd.spend",
    "companyd.scheduler",
    "companyd.desk",
    "companyd.dashboard",
    "companyd.runs",
    "companyd.ops",
    "companyd.telemetry",
    "companyd.storage",
    "psycopg",
    "mcp",
    "networkx",
    "starlette",
    "telegram",
    "anthropic",
    "httpx",
    "prometheus_client",
    "opentelemetry",
)


def test_a_refused_run_does_not_import_the_daemon(tmp_path: Path) -> None:
    from companyd.daemon import CompanyLock

    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: companyd/v1\ncompany: {name: X\n")
    loaded = loaded_by("run", "--config", str(bad), cwd=tmp_path, env=dict(os.environ), rc=78)
    assert sorted(loaded.intersection(NOT_FOR_A_REFUSED_RUN)) == []
    assert "companyd.config" in loaded  # the probe sees what the refusal loads: it can fail

    config = tmp_path / "company.yaml"
    shutil.copy(EXAMPLE, config)
    claim = CompanyLock.acquire(config, control_socket=tmp_path / "other.sock")
    try:  # another daemon runs this company.yaml: 75, systemd retries later
        argv = ("run", "--config", str(config), "--state-dir", str(tmp_path / "s"), "--offline")
        loaded = loaded_by(*argv, cwd=tmp_path, env=dict(os.environ), rc=75)
    finally:
        claim.release()
    assert sorted(loaded.intersection(NOT_FOR_A_REFUSED_RUN)) == []
    assert "companyd.daemon._lock" in loaded
