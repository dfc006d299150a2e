"""Test conventions shared by the whole suite.

* No test touches the network: connecting a socket to a non-loopback address, or resolving
  a name that is not loopback, fails the test, in this process and in any thread
  (subprocesses inherit ``COMPANYD_TEST_NO_NET`` and companyd checks it the same way); see
  :func:`_loopback_only` for why this is not an audit hook.
* Environment variables that would point companyd or the SDKs at real services are cleared.
* Async tests use anyio's pytest plugin on asyncio only: mark them ``@pytest.mark.anyio``.
* Every wait has a deadline: use ``asyncio.timeout`` / ``anyio.fail_after`` in tests.
* Bytecode caching is on (Python's default) even where the environment turns it off: see
  :func:`_cache_bytecode`.
"""

from __future__ import annotations

import gc
import ipaddress
import os
import re
import resource
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import chaos_ahead


# -- bytecode: cached even where PYTHONDONTWRITEBYTECODE is set ------------------------------
def _cache_bytecode() -> None:
    """Let Python cache compiled bytecode (``__pycache__``, ignored by git) for the suite.

    With ``PYTHONDONTWRITEBYTECODE`` set (some shells and containers set it), nothing of
    the source tree is ever cached: every xdist worker rewrites and compiles every test
    module again (about 11 s of CPU each under coverage: ``pytest --collect-only`` 23.7 s
    → 12.8 s), and every ``companyd`` process a test starts compiles every module it
    imports (``import companyd.daemon._main``: 0.9 s of CPU → 0.5 s). Python's default is
    restored for this process, the xdist workers and every process the suite starts; it
    checks each cached file against its source's time and size as always. Where
    ``PYTHONPYCACHEPREFIX`` chooses another place for the cache, that choice is kept.
    """
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        sys.dont_write_bytecode = False


_cache_bytecode()

from companyd.storage import Backend  # noqa: E402  (after the bytecode cache is set)
from companyd.testing.postgres import (  # noqa: E402
    PostgresUnavailable,
    ThrowawayCluster,
    find_bindir,
)

_SCRUB = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_CONFIG_DIR",
    "ANTHROPIC_CUSTOM_HEADERS",
    "TELEGRAM_BOT_TOKEN",
    "TELEGRAM_CHAT_ID",
    "STATE_DIRECTORY",
    "RUNTIME_DIRECTORY",
    "CONFIGURATION_DIRECTORY",
    "CREDENTIALS_DIRECTORY",
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "MEMORY_FILE_PATH",
    "COMPANYD_CONFIG",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)
for _name in _SCRUB:
    os.environ.pop(_name, None)
os.environ["COMPANYD_TEST_NO_NET"] = "1"
os.environ["NO_PROXY"] = "*"


class NonLoopbackConnection(AssertionError):
    """A test tried to reach the outside world."""


def _is_loopback(address: Any) -> bool:
    if not isinstance(address, tuple) or not address:
        return True  # AF_UNIX paths, abstract sockets
    host = address[0]
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False  # an unresolved host name: not loopback


def _check_connect(sock: socket.socket, address: Any) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address):
        raise NonLoopbackConnection(
            f"test tried to connect to {address!r}: tests are loopback only"
        )


def _check_resolve(host: Any) -> None:
    if host is not None and not _is_loopback((host if isinstance(host, str) else host.decode(),)):
        raise NonLoopbackConnection(f"test tried to resolve {host!r}: tests are loopback only")


def _loopback_only() -> None:
    """Wrap the socket class's ``connect``/``connect_ex`` and ``socket.getaddrinfo`` (what
    asyncio, anyio, httpx and the stdlib connect and resolve through) with the loopback check.

    Not an audit hook, which would see C-level calls too: on CPython 3.11, ``sys.settrace``
    runs the audit hooks inside a process-wide guard, so a Python audit hook can hand the GIL
    to another thread there — and a thread starting meanwhile under coverage (whose
    ``threading.settrace`` hook makes every new thread call ``sys.settrace``) dies before
    its target runs with "Cannot install a trace function while another trace function is
    being installed" (python/cpython#98257; one CI run in many failed on it, round 14).
    """
    connect, connect_ex, getaddrinfo = (
        socket.socket.connect,
        socket.socket.connect_ex,
        socket.getaddrinfo,
    )

    def checked_connect(self: socket.socket, address: Any) -> None:
        _check_connect(self, address)
        connect(self, address)

    def checked_connect_ex(self: socket.socket, address: Any) -> int:
        _check_connect(self, address)
        return connect_ex(self, address)

    def checked_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        _check_resolve(host)
        return getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = checked_connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = checked_connect_ex  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = checked_getaddrinfo


_loopback_only()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _secrets_of_this_test_only() -> Iterator[None]:
    """The process's one redactor (``companyd._secrets.SECRETS``) forgets, after each test,
    the secrets the test registered: tests share a worker process, and a daemon started
    in-process registers its keys for good — a test that set ANTHROPIC_API_KEY to "the
    daemon's" then masked "the daemon's" in a later test's expected `validate` message.
    """
    from companyd._secrets import SECRETS

    with SECRETS._lock:
        saved = dict(SECRETS._secrets), list(SECRETS._order)
    yield
    with SECRETS._lock:
        SECRETS._secrets, SECRETS._order = saved


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in _SCRUB:
        monkeypatch.delenv(name, raising=False)
    yield


def pytest_configure(config: pytest.Config) -> None:
    """In the xdist controller, before the workers start: warm the bytecode caches once
    (tests/bytecode_warm.py) instead of letting every worker compile the same files. In a
    worker, before it collects: import the SDKs the test modules use. Both with coverage's
    tracer paused (tests/untraced.py): neither runs companyd code, and traced they took
    about twice as long.
    """
    from untraced import preimport, tracer_paused

    if hasattr(config, "workerinput"):
        preimport()
    elif getattr(config.option, "numprocesses", None):
        import companyd
        from bytecode_warm import warm

        with tracer_paused():
            warm(config, Path(__file__).parent, Path(companyd.__file__).parent)
        chaos_ahead.plan(config)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: `-p no:xdist` must still work
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """In the xdist controller, as the first worker has collected: the short chaos run
    starts here (tests/chaos_ahead.py) instead of holding a worker for its minute.
    """
    chaos_ahead.start()


def pytest_collection_finish(session: pytest.Session) -> None:
    """An xdist worker has imported every test module: what it holds now (the modules, the
    SDKs, the collected items, ~400,000 objects) lives until it exits, so it is frozen out
    of the cyclic collector (``gc.freeze``, as a pre-fork server does): the 15–18 full
    collections of a worker's run (3.5–4.4 s of its CPU) stop walking it. Objects the tests
    make are collected as always. Not in the controller or a single process.
    """
    if hasattr(session.config, "workerinput"):
        gc.freeze()


@pytest.hookimpl(specname="pytest_collection_modifyitems", trylast=True)
def pytest_collection_modifyitems_keep_xdist_groups(items: list[pytest.Item]) -> None:
    """``--dist loadgroup`` groups by a ``@group`` suffix that xdist (3.8) appends to each
    grouped item's id by assigning ``item._nodeid``; pytest 9.2 keeps the id in ``_id``, so
    the assignment changed nothing and every ``xdist_group`` was silently spread over the
    workers (pytest-xdist issue 1386): a module-shared server or daemon started once per
    worker that ran one of its tests. Here, after xdist's hook, the suffixed id becomes the
    item's id, as it was before pytest 9.2. A no-op where xdist's assignment works.
    """
    for item in items:
        wanted = vars(item).get("_nodeid")
        if isinstance(wanted, str) and wanted != item.nodeid and hasattr(item, "_id"):
            from _pytest.nodeid import coerce_node_id  # no public way to set a node's id

            item._id = coerce_node_id(wanted)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """An xdist worker has reported everything and its coverage is saved: it only waits to
    exit. Its heap is frozen out of the cyclic collector first (``gc.freeze``), so the
    interpreter's exit does not walk a million objects in its final collections: 1.5 s →
    0.06 s for a process that only collected the suite, ~3.4 s of the whole run's end
    waiting for the four workers (docs/testing.md). Nothing changes for the tests: they
    have all run. Not in the controller or a single process, which may be embedded.
    """
    if hasattr(config, "workerinput"):
        gc.freeze()
    else:
        chaos_ahead.stop()


# -- PostgreSQL: a throwaway cluster per test session (and xdist worker) ---------------------

try:
    find_bindir()
    POSTGRES_MISSING = ""
except PostgresUnavailable as _exc:
    POSTGRES_MISSING = str(_exc)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[ThrowawayCluster]:
    """Debian's PostgreSQL server in a temporary directory, started on first use; skipped,
    saying what to install, only where no server is installed (.ci/run installs it).
    """
    if POSTGRES_MISSING:
        pytest.skip(POSTGRES_MISSING)
    with ThrowawayCluster() as cluster:
        yield cluster


@pytest.fixture
def pg_backend(pg_cluster: ThrowawayCluster) -> Backend:
    """A company's PostgreSQL backend on the cluster, in a schema no other test uses."""
    return Backend(kind="postgres", dsn=pg_cluster.dsn, schema=pg_cluster.fresh_schema())


@pytest.fixture(params=["sqlite", "postgres"])
def state_backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn: a store's tests that take this fixture run on both."""
    if request.param == "sqlite":
        return Backend()
    backend: Backend = request.getfixturevalue("pg_backend")
    return backend


# -- tiers (docs/testing.md): a marker per tier, so `-m TIER` runs one ----------------------

#: module-level names that put a module's tests in a tier (first match wins)
_BY_MODULE = (
    ("browser", ("chromium", "webdriver")),
    (
        "process",
        (
            "DaemonProcess",
            "subprocess",
            "create_subprocess_exec",
            "fork",
            "ServeMcpForks",
            "chaos_ahead",
        ),
    ),
    ("inprocess", ("InProcessDaemon", "cli_in_thread")),
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its tier: ``postgres`` (it runs on the throwaway PostgreSQL
    cluster), ``browser`` (headless chromium), ``process`` (it or its module starts companyd
    or another program as a process), ``inprocess`` (the whole daemon in this process, on a
    manual clock), else ``unit``. A test naming ``DaemonProcess`` or ``InProcessDaemon`` in
    its own body is in that tier whatever else its module holds. ``node`` (interop with the
    official MCP server) and ``slow`` are set by hand.
    """
    for item in items:
        names = vars(getattr(item, "module", None) or object()).keys()
        params = getattr(getattr(item, "callspec", None), "params", {})
        fixtures = set(getattr(item, "fixturenames", ()))
        # the test's own body first (a module may hold tests of two tiers), then its module
        used = set(
            getattr(getattr(getattr(item, "function", None), "__code__", None), "co_names", ())
        )
        if {"pg_cluster", "pg_backend"} & fixtures or params.get("state_backend") == "postgres":
            tier = "postgres"
        elif "DaemonProcess" in used:
            tier = "process"
        elif "InProcessDaemon" in used:
            tier = "inprocess"
        else:
            tier = next((t for t, marks in _BY_MODULE if any(n in names for n in marks)), "unit")
        item.add_marker(tier)
    _longest_first(items)


#: the order in which the tiers start (docs/testing.md, "Scheduling"): the tests that wait
#: longest first, so that no worker is left alone with a long one at the end of the run
_START_ORDER = ("slow", "browser", "process", "inprocess", "postgres", "unit")


def _longest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` so that each module starts with the slowest tier among its tests.

    xdist's ``loadgroup`` hands the tests out in this order (an ``xdist_group`` first), one
    unit at a time to whichever worker is free: the few tests that wait for tens of seconds
    (``slow``, then the browser and process tiers) start first and the many short unit
    tests fill the workers at the end. A module's tests stay together and in their order,
    so a module-scoped fixture is set up once per worker that runs the module. The order is
    the same on every worker (xdist checks it).
    """
    rank: dict[str, int] = {}
    process = _START_ORDER.index("process")
    for item in items:
        names = {m.name for m in item.iter_markers()}
        mine = min((i for i, t in enumerate(_START_ORDER) if t in names), default=len(_START_ORDER))
        module = item.nodeid.split("::", 1)[0]
        if item.path == chaos_ahead.TEST_FILE and chaos_ahead.ahead():
            # the controller started its run at the start: read among the last, when done
            rank[module] = _START_ORDER.index("unit")
            continue
        if module not in rank and mine > process and _starts_processes(item.path):
            mine = process  # through a helper its tier marker does not see
        rank[module] = min(rank.get(module, mine), mine)
    order = {id(item): n for n, item in enumerate(items)}
    items.sort(key=lambda item: (rank[item.nodeid.split("::", 1)[0]], order[id(item)]))


#: words in a test module's text that mean it starts processes (e.g. through a helper:
#: ``daemon_process(...)``, ``asyncio.create_subprocess_exec``), for the order only
_PROCESS_WORDS = re.compile(
    r"subprocess|DaemonProcess|daemon_process|Popen|sys\.executable|serve_mcp_forks"
)


def _starts_processes(path: Path) -> bool:
    try:
        return bool(_PROCESS_WORDS.search(path.read_text(encoding="utf-8")))
    except OSError:
        return False


@pytest.hookimpl(optionalhook=True)  # an xdist hook: `-p no:xdist` must still work
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (the README's command): two workers per core, not one.

    Most of the suite's wall time is waiting, not computing: real daemons start, signals
    are delivered, scaled clocks run, chromium draws. With one worker per core the cores
    were idle 45 % of the run (docs/benchmarks.md, "Test suite time"); a second worker per
    core overlaps one worker's waits with another's work. ``PYTEST_XDIST_AUTO_NUM_WORKERS``
    still decides where it is set.
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return 2 * len(os.sched_getaffinity(0))


_CPU_AT_SETUP = pytest.StashKey[tuple[float, float]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    if item.config.option.xmlpath:
        item.stash[_CPU_AT_SETUP] = _cpu()
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """With ``--junitxml``: each test's tier and CPU seconds (its worker's, and those of the
    processes it started and reaped) as properties of its ``testcase``, for the per-tier
    split of docs/benchmarks.md ("Test suite time"). Its wall time is already there.
    """
    try:
        return (yield)
    finally:
        if _CPU_AT_SETUP in item.stash:
            was = item.stash[_CPU_AT_SETUP]
            me, children = (now - then for now, then in zip(_cpu(), was, strict=True))
            tier = next((t for t in _START_ORDER[1:] if item.get_closest_marker(t)), "unit")
            item.user_properties += [
                ("tier", tier),
                ("cpu_worker", f"{me:.3f}"),
                ("cpu_children", f"{children:.3f}"),
            ]


def _cpu() -> tuple[float, float]:
    """CPU seconds (user + system) of this process and of its reaped descendants — those
    reaped by its fork server (``DaemonProcess(forked=True)``) included, which
    ``RUSAGE_CHILDREN`` counts only once the server itself is reaped, at the end.
    """
    me, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    # looked up, not imported: the fork server's module is loaded only by a test using it
    forks = sys.modules.get("companyd.testing.forkserver")
    forked = float(forks.forked_children_cpu()) if forks is not None else 0.0
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime + forked
