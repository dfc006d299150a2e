"""The operator's view of routines: ``companyd jobs`` and ``companyd jobs history``.

Built from the same inputs whether a daemon runs (next fire times from the live scheduler)
or not (next fire times computed from company.yaml and the persisted cursors), so the CLI,
the control socket and Telegram show one format. Every function here is pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from companyd.admin import RUN_COST_PLACES, format_usd, usd_places
from companyd.scheduler._jobs_text import ago as _ago
from companyd.scheduler._jobs_text import format_jobs_result, format_rows, utc_from_ts
from companyd.scheduler._jobs_text import local_time as _local
from companyd.scheduler._jobs_text import table as _table
from companyd.scheduler._records import FireRecord, RoutineState, RoutineStats

if TYPE_CHECKING:
    from companyd.admin import HistoryData, RoutineRow
    from companyd.config import CompanyConfig, RoutineConfig

__all__ = [
    "SUCCESS_WINDOW",
    "JobView",
    "format_history",
    "format_history_result",
    "format_jobs",
    "format_jobs_result",
    "history_data",
    "job_views",
    "offline_next_fires",
]


#: The window of ``companyd jobs``' success rate.
SUCCESS_WINDOW = 7 * 86400.0


@dataclass(frozen=True, kw_only=True)
class JobView:
    """One line of ``companyd jobs``."""

    routine: str
    agent: str
    schedule: str
    timezone: str
    enabled: bool
    concurrency: str
    catch_up: str
    precondition: str
    next_fire: float | None
    catch_up_pending: float | None
    last: FireRecord | None
    in_progress: int
    stats: RoutineStats
    #: why ``pause_after_failures`` paused the routine (live view only), None if it is not
    paused: str | None = None

    def to_dict(self) -> RoutineRow:
        """The line as the ``jobs`` result carries it over the control socket: times as ISO 8601
        strings (None when absent), the 7-day figures under ``success_7d``; :meth:`from_dict` reads
        it back.
        """
        rate = self.stats.success_rate
        row: RoutineRow = {
            "routine": self.routine,
            "agent": self.agent,
            "schedule": self.schedule,
            "timezone": self.timezone,
            "enabled": self.enabled,
            "concurrency": self.concurrency,
            "catch_up": self.catch_up,
            "precondition": self.precondition,
            "next_fire": _iso(self.next_fire),
            "catch_up_pending": _iso(self.catch_up_pending),
            "last": self.last.to_dict() if self.last else None,
            "in_progress": self.in_progress,
            "success_7d": {
                "due": self.stats.due,
                "ok": self.stats.ok,
                "rate": rate,
                "unverified": self.stats.unverified,
            },
        }
        if self.paused:
            row["paused"] = self.paused
        return row

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobView:
        """The inverse of :meth:`to_dict` (for front ends that received it as JSON)."""
        return cls(
            routine=d["routine"],
            agent=d["agent"],
            schedule=d["schedule"],
            timezone=d["timezone"],
            enabled=d["enabled"],
            concurrency=d["concurrency"],
            catch_up=d["catch_up"],
            precondition=d["precondition"],
            next_fire=_ts(d.get("next_fire")),
            catch_up_pending=_ts(d.get("catch_up_pending")),
            last=FireRecord.from_dict(d["last"]) if d.get("last") else None,
            in_progress=int(d.get("in_progress", 0)),
            stats=RoutineStats(
                routine=d["routine"],
                due=d["success_7d"]["due"],
                ok=d["success_7d"]["ok"],
                unverified=int(d["success_7d"].get("unverified") or 0),
            ),
            paused=d.get("paused") or None,
        )


def _ts(text: str | None) -> float | None:
    return None if text is None else datetime.fromisoformat(text).timestamp()


def _iso(ts: float | None) -> str | None:
    return None if ts is None else utc_from_ts(ts).isoformat()


def job_views(
    config: CompanyConfig,
    *,
    stats: Mapping[str, RoutineStats],
    latest: Mapping[str, FireRecord],
    open_fires: Sequence[FireRecord],
    next_fires: Mapping[str, float | None],
    catch_up_pending: Mapping[str, float] | None = None,
    paused: Mapping[str, str] | None = None,
) -> list[JobView]:
    """Rows for every routine in company.yaml, in file order."""
    from companyd.scheduler._triggers import describe_schedule

    busy: dict[str, int] = {}
    for rec in open_fires:
        busy[rec.routine] = busy.get(rec.routine, 0) + 1
    pending = catch_up_pending or {}
    views = []
    for slug, r in config.routines.items():
        views.append(
            JobView(
                routine=slug,
                agent=r.assignee,
                schedule=describe_schedule(r),
                timezone=r.timezone,
                enabled=r.enabled,
                concurrency=r.concurrency,
                catch_up=_catch_up_text(r),
                precondition=r.precondition,
                next_fire=next_fires.get(slug) if r.enabled else None,
                catch_up_pending=pending.get(slug),
                last=latest.get(slug),
                in_progress=busy.get(slug, 0),
                stats=stats.get(slug) or RoutineStats(routine=slug, due=0, ok=0),
                paused=(paused or {}).get(slug),
            )
        )
    return views


def _catch_up_text(r: RoutineConfig) -> str:
    from companyd.scheduler._triggers import format_seconds

    if r.catch_up.policy == "skip":
        return "skip"
    return f"run_once within {format_seconds(r.catch_up.grace)}"


def offline_next_fires(
    config: CompanyConfig, states: Mapping[str, RoutineState], now: float
) -> tuple[dict[str, float | None], dict[str, float]]:
    """Next fire times as a daemon started at ``now`` would see them.

    Returns ``(next_fires, catch_up_pending)``: the next regular fire time of each enabled
    routine, and — for ``run_once`` routines whose latest fire time since their cursor is
    still within grace — that fire time, which would run as soon as the daemon starts.
    """
    from companyd.scheduler._triggers import build_trigger, fire_times, next_after, trigger_identity

    now_dt = utc_from_ts(now)
    nexts: dict[str, float | None] = {}
    pending: dict[str, float] = {}
    for slug, r in config.routines.items():
        if not r.enabled:
            continue
        trigger = build_trigger(r)
        nxt = next_after(trigger, now_dt)
        nexts[slug] = nxt.timestamp() if nxt else None
        st = states.get(slug)
        if st is None or st.trigger != trigger_identity(trigger) or r.catch_up.policy == "skip":
            continue
        # Only the latest missed time matters; start the walk close to now (bounded work).
        since = max(st.cursor, now - max(r.catch_up.grace, 1.0))
        missed = fire_times(trigger, utc_from_ts(since), now_dt)
        if missed and now - missed[-1].timestamp() <= r.catch_up.grace:
            pending[slug] = missed[-1].timestamp()
    return nexts, pending


# ---------------------------------------------------------------------------------------
# Text


def format_jobs(
    views: Sequence[JobView], now: float, *, daemon: bool, tz: str | None = None
) -> str:
    """The ``companyd jobs`` table (plain text, one routine per line): the rows a daemon would
    send for ``views``, printed by the one printer (:mod:`companyd.scheduler._jobs_text`),
    times in ``tz`` (the company's zone; None: each routine's own).
    """
    return format_rows([v.to_dict() for v in views], now, daemon=daemon, tz=tz)


def format_history(
    routine: RoutineConfig | None,
    slug: str,
    records: Sequence[FireRecord],
    tz: str | None = None,
) -> str:
    """The ``companyd jobs history ROUTINE`` table, newest first, times in ``tz`` (the
    company's zone; None: the routine's own, else UTC).
    """
    from companyd.scheduler._triggers import describe_schedule

    tz = tz or (routine.timezone if routine else "UTC")
    if routine is None:
        return _history_text(slug, None, None, records, tz)
    return _history_text(slug, routine.assignee, describe_schedule(routine), records, tz)


def history_data(
    routines: Mapping[str, RoutineConfig], slug: str, records: Sequence[FireRecord]
) -> HistoryData:
    """The ``job_history`` answer: routine ``slug`` as ``routines`` (the running
    company.yaml's) has it — its agent and schedule, None for one no longer there — and its
    fires as JSON.
    """
    from companyd.scheduler._triggers import describe_schedule

    spec = routines.get(slug)
    return {
        "routine": slug,
        "agent": spec.assignee if spec is not None else None,
        "schedule": describe_schedule(spec) if spec is not None else None,
        "fires": [r.to_dict() for r in records],
    }


def format_history_result(result: Mapping[str, Any], tz: str) -> str:
    """:func:`format_history` for a ``history()`` result received as JSON (the daemon's
    ``job_history``): its heading is the routine as the daemon runs it, its times are in
    ``tz`` (the company's zone, as the offline command prints them — not the routine's own,
    which only its schedule keeps).
    """
    records = [FireRecord.from_dict(f) for f in result["fires"]]
    return _history_text(result["routine"], result["agent"], result["schedule"], records, tz)


def _history_text(
    slug: str, agent: str | None, schedule: str | None, records: Sequence[FireRecord], tz: str
) -> str:
    head = f"{slug}"
    if agent is not None and schedule is not None:
        head += f" ({agent}) — {schedule}"
    else:
        head += " (no longer in company.yaml)"
    if not records:
        return head + "\nno fires recorded yet"
    rows = []
    # money as `companyd runs` prints it: one precision for the column, four decimals at least
    places = usd_places((r.cost_usd for r in records), minimum=RUN_COST_PLACES)
    for r in records:
        duration = "—"
        if r.started is not None and r.ended is not None:
            duration = _ago(r.ended - r.started) if r.ended - r.started >= 1 else "<1s"
        what = r.outcome or ("running" if r.started is not None else "waiting")
        if r.fires > 1:
            what += f" ×{r.fires}"
        rows.append(
            (
                _local(r.scheduled, tz),
                r.kind,
                what,
                _local(r.started, tz, seconds=True)[11:19] if r.started is not None else "—",
                duration,
                format_usd(r.cost_usd, places),
                r.run_id or "—",
                r.reason or "",
            )
        )
    return (
        head
        + "\n"
        + _table(("SCHEDULED", "KIND", "OUTCOME", "STARTED", "TOOK", "COST", "RUN", "REASON"), rows)
        + "\n"
        + _tally(records)
    )


def _tally(records: Sequence[FireRecord]) -> str:
    """One line under the history: its due runs by outcome — ``ok`` and ``unverified``
    always (the runs whose work did not demonstrably happen, apart from both), then each
    other outcome the history holds, by its own name (a cancelled run is not "failed").
    """
    from companyd.scheduler._outcomes import Outcome

    due = [r for r in records if r.outcome and r.outcome not in (Outcome.IDLE, Outcome.STOPPED)]
    counts: dict[str, int] = {}
    for r in due:
        counts[str(r.outcome)] = counts.get(str(r.outcome), 0) + r.fires
    shown = [Outcome.OK, Outcome.UNVERIFIED]
    shown += [o for o in Outcome if o not in shown and counts.get(str(o))]
    parts = " · ".join(f"{counts.get(str(o), 0)} {o}" for o in shown)
    return f"shown: {sum(counts.values())} due run(s): {parts}"
