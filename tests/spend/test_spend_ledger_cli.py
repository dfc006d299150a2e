"""The ledger file and the ``companyd spend`` / ``companyd budget`` commands."""

from __future__ import annotations

import json
import sqlite3
import time
from decimal import Decimal
from pathlib import Path

import pytest

from companyd.cli import main
from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.llm._model import Usage
from companyd.spend import SpendBook
from companyd.spend._ledger import PUSD, CallRow, Ledger, LedgerError, from_pusd, to_pusd

from .spendkit import make_config, reserve, running, spend


def test_money_is_exact_picodollars_rounded_up() -> None:
    assert to_pusd(Decimal("0.000000000001")) == 1
    assert to_pusd(Decimal("0.0000000000001")) == 1  # finer than a picodollar: rounded up
    assert to_pusd(Decimal("1.23")) == 1_230_000_000_000
    assert from_pusd(to_pusd(Decimal("0.1100007"))) == Decimal("0.1100007")


def row(ts: float, agent: str, cost_pusd: int, day: str = "2026-11-20") -> CallRow:
    return CallRow(
        ts=ts,
        day=day,
        month=day[:7],
        agent=agent,
        routine=None,
        run_id="r",
        model="m",
        usage=Usage(input_tokens=1),
        cost_pusd=cost_pusd,
    )


def test_totals_are_kept_in_step_with_the_rows(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "spend.sqlite")
    try:
        for i in range(300):
            led.record_call(row(float(i), "cfo" if i % 3 else "ceo", 1_000_003 + i))
        led.record_call(row(1000.0, "cfo", 5, day="2026-11-21"))
        rows = led.calls()
        by_agent = {t.key: t.cost_pusd for t in led.totals("agent", ["2026-11-20"])}
        assert sum(by_agent.values()) == sum(r["cost_pusd"] for r in rows[:300])
        assert led.used("2026-11")["company"] == sum(r["cost_pusd"] for r in rows)
        assert led.used("2026-11-21") == {"company": 5, "agent:cfo": 5}
        assert [t.key for t in led.days_between("2026-11-01", "2026-11-30")] == [
            "2026-11-20",
            "2026-11-21",
        ]
    finally:
        led.close()


def test_a_reader_sees_committed_rows_while_the_writer_keeps_its_connection(
    tmp_path: Path,
) -> None:
    writer = Ledger(tmp_path / "spend.sqlite")
    reader = Ledger(tmp_path / "spend.sqlite", readonly=True)
    try:
        writer.record_call(row(1.0, "ceo", PUSD))
        assert reader.used("2026-11-20") == {"company": PUSD, "agent:ceo": PUSD}
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader._db.execute("DELETE FROM calls")
        writer.record_call(row(2.0, "ceo", PUSD))
        assert reader.used("2026-11-20")["company"] == 2 * PUSD
    finally:
        reader.close()
        writer.close()


def test_a_ledger_from_a_newer_companyd_is_refused(tmp_path: Path) -> None:
    Ledger(tmp_path / "spend.sqlite").close()
    db = sqlite3.connect(tmp_path / "spend.sqlite")
    db.execute("UPDATE meta SET value='99' WHERE key='schema'")
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match="schema '99', newer than this companyd"):
        Ledger(tmp_path / "spend.sqlite")


def test_a_damaged_file_is_reported_not_raised_as_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "spend.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(LedgerError, match="cannot open the spend ledger"):
        Ledger(tmp_path / "spend.sqlite")


# -- CLI ----------------------------------------------------------------------------------


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.anyio
async def test_spend_and_budget_read_the_ledger_of_a_running_book(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = make_config(
        tmp_path, agents={"ceo": None, "cfo": "{daily_usd: 0.5}"}, company="{daily_usd: 2}"
    )
    state = tmp_path / "state"
    # The CLI dates "today" by the real clock; so does this book.
    book = SpendBook(cfg, state, bus=EventBus(), clock=ManualClock(start=time.time()))
    common = ("--config", str(cfg.path), "--state-dir", str(state))
    async with running(book):
        await spend(book, "cfo", 250_000, routine="weekly")
        await spend(book, "ceo", 100_000)
        held = await reserve(book, "cfo", 100_000)  # in flight while the CLI reads

        code, out, _ = cli(capsys, "spend", "--json", *common)
        assert code == 0
        report = json.loads(out)
        assert [(r["key"], r["cost_usd_exact"]) for r in report["rows"]] == [
            ("cfo", "0.25"),
            ("ceo", "0.1"),
        ]
        assert report["total"]["cost_usd_exact"] == "0.35"

        code, out, _ = cli(capsys, "spend", "--by", "routine", *common)
        assert code == 0
        assert "spend by routine, today" in out
        assert "weekly" in out and "(none)" in out and "$0.3500" in out

        code, out, _ = cli(capsys, "budget", "--json", *common)
        assert code == 0
        budgets = {(b["agent"], b["period"]): b for b in json.loads(out)["budgets"]}
        cfo = budgets[("cfo", "day")]
        assert (cfo["used_usd"], cfo["reserved_usd"], cfo["remaining_usd"]) == (
            0.25,
            0.1,
            0.15,
        )
        assert budgets[(None, "day")]["used_usd"] == 0.35
        assert budgets[("ceo", None)]["note"].startswith("no budget of its own")

        code, out, _ = cli(capsys, "budget", *common)
        assert code == 0
        assert "cfo" in out and "$0.2500 (50%)" in out and "resets" in out
        await book.release(held)


def test_spend_without_a_ledger_says_nothing_was_spent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = make_config(tmp_path)
    code, out, _ = cli(
        capsys, "spend", "--config", str(cfg.path), "--state-dir", str(tmp_path / "none")
    )
    assert code == 0 and "nothing spent yet" in out
    code, out, _ = cli(
        capsys, "budget", "--config", str(cfg.path), "--state-dir", str(tmp_path / "none")
    )
    assert code == 0 and "$1.00" in out


def test_a_bad_period_is_one_line_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = make_config(tmp_path)
    Ledger(tmp_path / "state" / "spend.sqlite").close()
    code, out, err = cli(
        capsys,
        "spend",
        "--period",
        "last week",
        "--config",
        str(cfg.path),
        "--state-dir",
        str(tmp_path / "state"),
    )
    assert code == 1 and out == ""
    assert err.startswith("companyd: unknown period 'last week'; expected today")
    assert "Traceback" not in err


def test_spend_works_from_the_state_dir_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    led = Ledger(tmp_path / "spend.sqlite")
    led.set_meta({"timezone": "UTC"})
    led.record_call(row(1.0, "ceo", 3 * PUSD, day="2026-11-02"))
    led.close()
    missing = tmp_path / "no-such-company.yaml"
    code, out, _ = cli(
        capsys,
        "spend",
        "--json",
        "--period",
        "2026-11",
        "--config",
        str(missing),
        "--state-dir",
        str(tmp_path),
    )
    assert code == 0
    assert json.loads(out)["total"]["cost_usd"] == 3.0
    # budget needs company.yaml for the limits
    code, _, err = cli(capsys, "budget", "--config", str(missing), "--state-dir", str(tmp_path))
    assert code == 1 and "file not found" in err


def test_the_commands_are_registered(capsys: pytest.CaptureFixture[str]) -> None:
    for cmd in ("spend", "budget"):
        with pytest.raises(SystemExit) as ei:
            main([cmd, "--help"])
        assert ei.value.code == 0
        assert "--state-dir" in capsys.readouterr().out
