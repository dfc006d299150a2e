"""bench/failover.py's invariant checks, on small recorded shapes (the run itself needs a
PostgreSQL cluster and two daemons: ``python bench/failover.py``, docs/benchmarks.md).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[1] / "bench" / "failover.py"


def _failover() -> Any:
    """bench/failover.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("failover_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("failover_bench", module)
    spec.loader.exec_module(module)
    return module


def _answered(request_id: str, agent: str = "coo") -> dict[str, Any]:
    return {"request_id": request_id, "agent": agent, "model": "claude-sonnet-5-5",
            "input_tokens": 900, "output_tokens": 120, "cost_pusd": 4_500_000_000}  # fmt: skip


def _forfeit(agent: str = "intern") -> dict[str, Any]:
    """A call cancelled in flight (``SpendBook.forfeit``): no request id, no tokens, its
    reserved worst case as cost.
    """
    return {"request_id": None, "agent": agent, "model": "claude-sonnet-5-5",
            "input_tokens": 0, "output_tokens": 0, "cost_pusd": 30_924_000_000}  # fmt: skip


def test_a_call_forfeited_at_the_last_stop_is_not_a_settled_answer() -> None:
    """bench/failover.py --kills 3 on 468e506, 2026-11-28 11:04 UTC: "71 served by the
    stand-in, 72 settled in the shared ledger: -1 in flight" — the final graceful stop
    cancelled the intern's call in flight and the ledger kept it at its worst case
    (``spend_unanswered``, docs/spend.md "Timeouts"), which the check counted as a settled
    answer. A forfeit row has no request id: it is not an answer, and two of them are not
    one request settled twice.
    """
    failover = _failover()
    rows = [_answered(f"req_{i}") for i in range(71)] + [_forfeit(), _forfeit("coo")]
    ok, line = failover.calls_line(rows, served=71, most_in_flight=27)
    assert ok, line
    assert "71 settled" in line and "2 forfeited" in line and "0 request ids settled twice" in line


def test_a_request_settled_twice_or_more_answers_than_served_still_fail() -> None:
    failover = _failover()
    rows = [_answered(f"req_{i}") for i in range(5)]
    assert failover.calls_line(rows, served=5, most_in_flight=3)[0]
    assert failover.calls_line(rows, served=8, most_in_flight=3)[0]  # 3 in flight at kills
    assert not failover.calls_line(rows, served=9, most_in_flight=3)[0]  # 4 > 3
    assert not failover.calls_line(rows, served=4, most_in_flight=3)[0]  # an answer not served
    twice = [*rows, _answered("req_0")]
    ok, line = failover.calls_line(twice, served=6, most_in_flight=3)
    assert not ok and "1 request ids settled twice" in line, line
