"""The APScheduler internals that ``companyd.scheduler._aps`` overrides or reads.

``ClockedScheduler``, ``ClockedExecutor`` and ``BatchMemoryJobStore`` subclass APScheduler
3.11 and override private methods (``_process_jobs``, ``_start_timer``, ``_do_submit_job``,
…) and read private attributes (``_jobstores``, ``_pending_futures``, ``_instances``, …).
pyproject.toml pins ``apscheduler>=3.11.3,<3.12``; this test fails when an installed release
changes any of those methods (its source, not only its signature), so a version bump is a
decision taken by reading the new code, not a surprise at 3 a.m.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import subprocess
import sys
from importlib.metadata import version

import pytest
from apscheduler.executors.asyncio import AsyncIOExecutor
from apscheduler.executors.base import BaseExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.schedulers.base import BaseScheduler

from companyd.scheduler._aps import BatchMemoryJobStore, ClockedExecutor, ClockedScheduler

#: (class, method) → SHA-256 of the upstream source that the override was written against
#: (APScheduler 3.11.3). After reading a change, recompute with :func:`source_digest`.
UPSTREAM = {
    (AsyncIOScheduler, "_start_timer"): "f5d020be902e2d94",
    (AsyncIOScheduler, "_stop_timer"): "f579977c9a92f7c3",
    (AsyncIOScheduler, "wakeup"): "c12cdb42df5fc387",
    (AsyncIOScheduler, "_create_default_executor"): "45ccbe282049e736",
    (BaseScheduler, "_create_default_jobstore"): "d2a4b937a815313b",
    (BaseScheduler, "_process_jobs"): "efd3944de4e2c69e",
    (BaseScheduler, "_dispatch_event"): "7531aec39aecb774",
    (BaseScheduler, "_lookup_executor"): "be08b6c6b3f54ebc",
    (AsyncIOExecutor, "start"): "7f21effd0136f1b9",  # creates _pending_futures
    (AsyncIOExecutor, "_do_submit_job"): "ebbba1ebb65dddd2",
    (BaseExecutor, "_run_job_success"): "2c96368a7e57ca52",
    (BaseExecutor, "_run_job_error"): "c2c17406b8954444",
    (MemoryJobStore, "update_job"): "55349bdd73a4d221",
}


def source_digest(cls: type, name: str) -> str:
    return hashlib.sha256(inspect.getsource(getattr(cls, name)).encode()).hexdigest()[:16]


def test_the_pinned_release_is_installed() -> None:
    major, minor, *_ = version("apscheduler").split(".")
    assert (major, minor) == ("3", "11")


@pytest.mark.parametrize(("cls", "name"), list(UPSTREAM), ids=lambda v: getattr(v, "__name__", v))
def test_overridden_upstream_methods_are_unchanged(cls: type, name: str) -> None:
    assert source_digest(cls, name) == UPSTREAM[(cls, name)], (
        f"APScheduler's {cls.__name__}.{name} changed in {version('apscheduler')}: read the "
        "new code against companyd/scheduler/_aps.py, then update UPSTREAM"
    )


def test_private_attributes_read_by_the_subclasses_exist() -> None:
    sched = ClockedScheduler.__mro__[1]()
    for attr in ("_jobstores", "_jobstores_lock", "_listeners", "_executors", "_eventloop"):
        assert hasattr(sched, attr), attr
    executor = ClockedExecutor.__mro__[1]()
    for attr in ("_instances", "_lock"):
        assert hasattr(executor, attr), attr
    store = BatchMemoryJobStore.__mro__[1]()
    for attr in ("_jobs", "_jobs_index"):
        assert hasattr(store, attr), attr


#: Imports companyd's scheduler counting the scans of every installed distribution, then
#: prints the count, APScheduler's plugin tables, and the tables of fresh scans.
SCAN_PROBE = """
import importlib.metadata as md, json
scans = []
real = md.distributions
md.distributions = lambda **kw: (scans.append(1), real(**kw))[1]
import companyd.scheduler._aps
from apscheduler.schedulers.base import BaseScheduler as B
during = len(scans)
tables = [sorted(t) for t in (B._trigger_plugins, B._executor_plugins, B._jobstore_plugins)]
fresh = [sorted(e.name for e in md.entry_points(group="apscheduler." + g))
         for g in ("triggers", "executors", "jobstores")]
print(json.dumps([during, tables, fresh, md.entry_points is md.entry_points]))
"""


def test_apschedulers_plugin_tables_come_from_one_scan_of_the_distributions() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCAN_PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    during, tables, fresh, _ = json.loads(out.stdout.strip().splitlines()[-1])
    assert during == 1  # not one per table (three): ~6 ms of every daemon's start
    assert tables == fresh and "cron" in tables[0]  # the same tables as APScheduler's own
    from companyd.scheduler._plugins import one_entry_point_scan

    real = importlib.metadata.entry_points
    with one_entry_point_scan():
        inside = importlib.metadata.entry_points
        assert inside is not real
        assert (
            inside(group="apscheduler.triggers").names == real(group="apscheduler.triggers").names
        )
    assert importlib.metadata.entry_points is real  # restored on exit
