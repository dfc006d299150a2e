"""The suite's own start-up work, done with coverage's tracer paused.

Under ``--cov`` (CI) pytest-cov starts coverage's tracer in the xdist controller and in
every worker before the conftest is read, and the tracer (``sys.settrace`` on Python 3.11)
slows every Python function call of the process, companyd's or not: the controller's
warm-up of the bytecode caches took 7.4 s instead of 4.3 s, and a worker's collection
9.1 s instead of 3.4 s — about half of it importing the SDKs the test modules use
(``anthropic`` alone loads 3,200 modules). None of that is companyd code, so none of it
can count in the report (``source = ["companyd"]``): it runs here with the tracer off.

Property tests draw their examples the same way (:func:`drawn_untraced`): generating a
value is hypothesis's code, never companyd's; the test's body runs traced.

What runs paused must run no companyd line: :func:`tracer_paused` fails if a companyd
module is first imported inside it, since that module's import-time lines would then be
missing from the report.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

T = TypeVar("T")

#: The third-party modules the test modules and companyd import while a worker collects,
#: largest first (``python -X importtime -m pytest --collect-only -s``, cumulative ms
#: without coverage): anthropic 1,400; mcp and its types 500; networkx 230; hypothesis 190;
#: python-telegram-bot 150; selenium 110; httpx 60; psycopg 60; OpenTelemetry 60; the rest under 20
#: each. A module missing here is only imported traced (slower), never wrong.
HEAVY = (
    "anthropic",
    "mcp",
    "mcp.types",
    "mcp.client.session",
    "mcp.client.stdio",
    "mcp.server",
    "mcp.server.stdio",
    "networkx",
    "hypothesis",
    "hypothesis.strategies",
    "selenium.webdriver",
    "selenium.webdriver.support.ui",
    "telegram",
    "telegram.ext",
    "telegram.request",
    "httpx",
    "psycopg",
    "psycopg_pool",
    "opentelemetry.sdk.trace",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "jinja2",
    "starlette.applications",
    "sse_starlette",
    "uvicorn",
    "apscheduler.schedulers.asyncio",
    "pydantic",
    "yaml",
    "prometheus_client",
    "filelock",
    "jsonschema",
    "apprise",
    "standardwebhooks",
    "aiosmtpd.controller",
)


@contextlib.contextmanager
def tracer_paused(package: str = "companyd") -> Iterator[None]:
    """Coverage's tracer off for the block where coverage runs in this process, back on after.

    Only for work that runs none of ``package``'s code. Raises RuntimeError after the
    block if a module of ``package`` was first imported inside it.
    """
    before = set(sys.modules)  # a copy in C: cheap enough to pause once an example
    try:
        import coverage

        cov = coverage.Coverage.current()
    except ImportError:  # coverage is a test extra; without it nothing traces
        cov = None
    if cov is not None:
        cov.stop()
    try:
        yield
    finally:
        if cov is not None:
            cov.start()
    new = sys.modules.keys() - before
    if imported := sorted(n for n in new if n == package or n.startswith(f"{package}.")):
        raise RuntimeError(
            f"{', '.join(imported)} imported with coverage paused: their import-time lines "
            f"are missing from the report; import them outside tracer_paused()"
        )


def preimport(names: Iterable[str] = HEAVY) -> list[str]:
    """Import ``names`` with the tracer paused; the names that are not installed."""
    missing = []
    with tracer_paused():
        for name in names:
            try:
                importlib.import_module(name)
            except ImportError:
                missing.append(name)
    return missing


def drawn_untraced(strategy: SearchStrategy[T]) -> SearchStrategy[T]:
    """``strategy`` (a hypothesis strategy), its values drawn with the tracer paused.

    Drawing an example is hypothesis's own code, called a great many times (a recursive
    JSON value is thousands of calls), and the tracer slows each call about twofold: half of
    a property test's time under ``--cov`` went there. The same strategy draws the values:
    what it can draw, how many examples and how they shrink are unchanged. Only for
    strategies that run no companyd code (plain data, the stdlib, yaml):
    :func:`tracer_paused`'s rule, and a companyd module first imported while drawing is an
    error as there.
    """
    from hypothesis import strategies as st

    @st.composite
    def untraced(draw: st.DrawFn) -> T:
        with tracer_paused():
            return draw(strategy)

    return untraced()
