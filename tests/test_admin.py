"""The operator contract (companyd.admin): every operation returns a frozen dataclass, and
``wire`` validates arguments and turns results into JSON from the protocol's annotations.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import typing
from typing import Any, cast

import pytest

from companyd._frozen import Frozen
from companyd._secrets import SECRETS
from companyd.admin import Admin
from companyd.admin._results import (
    AgentCounts,
    CompanyInfo,
    DaemonInfo,
    DepartmentChanges,
    Paused,
    ReloadApplied,
    ReloadRejected,
    Resumed,
    SpendLine,
    SpendPeriodLine,
    SpendStatus,
    Status,
)
from companyd.admin._wire import (
    OPERATIONS,
    ArgumentError,
    check_arguments,
    load_result,
    result_data,
)
from companyd.daemon._control import ControlServer
from companyd.daemon._protocol import encode_answer


def _members(hint: object) -> tuple[object, ...]:
    return typing.get_args(hint) if typing.get_origin(hint) is not None else (hint,)


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_every_operation_returns_frozen_dataclasses(op: str) -> None:
    returns = typing.get_type_hints(getattr(Admin, op))["return"]
    for member in _members(returns):
        assert isinstance(member, type) and dataclasses.is_dataclass(member), (op, member)
        # @dataclass(frozen=True), or companyd._frozen.Frozen: frozen by its shared
        # __setattr__ (its __dataclass_params__ say frozen=False; tests/test_frozen.py)
        params = member.__dataclass_params__  # type: ignore[attr-defined]
        frozen = params.frozen or issubclass(member, Frozen)
        assert frozen, f"{op}: {member.__name__} must be frozen"


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_every_operation_builds_its_adapters(op: str) -> None:
    with pytest.raises(ArgumentError, match=f"for {op!r}"):
        check_arguments(op, {"no_such_argument": 1})


def _applied(later: list[str] | None = None) -> ReloadApplied:
    return ReloadApplied(
        applied=True,
        added=["cto"],
        removed=[],
        changed=["cfo"],
        unchanged=2,
        departments=DepartmentChanges(added=[], removed=[], changed=[]),
        routines={"added": ["weekly"]},
        failures=[],
        resumed=[],
        restart_required=later,
    )


def test_a_result_is_its_fields_in_order_and_an_absent_key_stays_absent() -> None:
    data = result_data("reload", _applied())
    assert list(data) == [
        "applied",
        "added",
        "removed",
        "changed",
        "unchanged",
        "departments",
        "routines",
        "failures",
        "resumed",
    ]
    later = result_data("reload", _applied(["anthropic"]))
    assert later["restart_required"] == ["anthropic"] and list(later)[-1] == "restart_required"
    rejected = ReloadRejected(applied=False, errors=["bad"], message="rejected")
    assert result_data("reload", rejected) == {
        "applied": False,
        "errors": ["bad"],
        "message": "rejected",
    }


def test_json_comes_back_as_the_same_dataclass() -> None:
    for op, result in [
        ("reload", _applied(["memory.path"])),
        ("reload", ReloadRejected(applied=False, errors=["x"], message="m")),
        ("resume", Resumed(agent="cfo", resumed=False, message="cfo was not paused")),
        ("status", _status()),
    ]:
        data = json.loads(json.dumps(result_data(op, result)))
        assert load_result(op, data) == result


def _status() -> Status:
    period = SpendPeriodLine(used_usd=1.5, reserved_usd=0.0, limit_usd=None, resets_at=None)
    return Status(
        now=1_800_000_000.0,
        daemon=DaemonInfo(
            pid=1,
            version="0.1.0",
            state="running",
            started_at=1_799_999_000.0,
            uptime_s=1000.0,
            config="/etc/companyd/company.yaml",
            config_loaded_at=1_799_999_000.0,
            reload={"last_at": None, "last_result": None, "rejected": None},
            state_dir="/var/lib/companyd",
            socket="/run/companyd/companyd.sock",
            offline=False,
            loop_lag={"current_ms": 1.0, "max_ms": 2.0, "samples": 10},
        ),
        company=CompanyInfo(name="Northwind", timezone="UTC"),
        agents=AgentCounts(total=2, running=2, paused=0, failed=0, busy=0),
        tree={"id": "companyd", "children": []},
        runs_in_flight=[],
        alerts={
            "telegram": "off",
            "queued": 0,
            "held": 0,
            "failed": 0,
            "reason": "",
            "commands": "off",
            "commands_since": None,
            "commands_error": "",
        },
        spend=SpendStatus(
            currency="USD",
            today=period,
            month=period,
            agents=[
                SpendLine(agent="ceo", today_usd=1.0, month_usd=1.0, paused=False),
                SpendLine(
                    agent="cfo", today_usd=0.5, month_usd=0.5, paused=True, daily_limit_usd=2.0
                ),
            ],
        ),
        routines=[],
    )


def test_status_leaves_out_the_limits_an_agent_does_not_have() -> None:
    spend = result_data("status", _status())["spend"]
    assert "unavailable" not in spend
    assert spend["agents"][0] == {
        "agent": "ceo",
        "today_usd": 1.0,
        "month_usd": 1.0,
        "paused": False,
    }
    assert spend["agents"][1]["daily_limit_usd"] == 2.0
    assert "monthly_limit_usd" not in spend["agents"][1]


def test_a_result_of_another_operation_is_refused_and_plain_data_passes() -> None:
    with pytest.raises(TypeError, match="'pause' returned a Resumed, not its result Paused"):
        result_data("pause", Resumed(agent="cfo", resumed=True, message="resumed cfo"))
    assert result_data("pause", {"agent": "cfo", "paused": True}) == {
        "agent": "cfo",
        "paused": True,
    }


@pytest.mark.parametrize(
    ("op", "args", "message"),
    [
        ("pause", {"agent": 7}, "bad argument agent=7 for 'pause': expected a string"),
        ("raise_budget", {"agent": None, "usd": "5"}, "usd='5' for 'raise_budget': expected a"),
        ("raise_budget", {"agent": "cfo", "usd": float("inf")}, "expected a finite number"),
        ("runs", {"limit": 2.0}, "bad argument limit=2.0 for 'runs': expected an integer"),
        ("tasks", {"quarantined": "yes"}, "expected true or false"),
        ("pause", {}, "missing a required argument: 'agent'"),
    ],
)
def test_bad_arguments_quote_the_argument_and_its_value(
    op: str, args: dict[str, object], message: str
) -> None:
    with pytest.raises(ArgumentError) as info:
        check_arguments(op, args)
    assert message in str(info.value)


def test_arguments_are_converted_only_from_an_integer_to_a_float() -> None:
    assert check_arguments("raise_budget", {"agent": None, "usd": 5}) == {
        "agent": None,
        "usd": 5.0,
    }
    assert check_arguments("runs", {"agent": "ceo"}) == {"agent": "ceo"}


class _Typed:
    """Just enough of an Admin for the control server's request handling."""

    def __init__(self, message: str) -> None:
        self.message = message

    async def pause(self, agent: str, via: str = "cli") -> Paused:
        return Paused(agent=agent, paused=True, message=self.message)

    async def resume(
        self, agent: str, via: str = "cli"
    ) -> Paused:  # the wrong result: a bug in the daemon
        return Paused(agent=agent, paused=False, message=self.message)


async def _answer(admin: _Typed, line: bytes) -> dict[str, Any]:
    server = ControlServer(cast(Admin, admin), "/nonexistent/companyd.sock")
    answer: dict[str, Any] = json.loads(encode_answer(await server.handle_line(line)))
    return answer


@pytest.mark.anyio
async def test_the_control_server_sends_a_result_as_its_json_and_a_wrong_one_is_internal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    admin = _Typed("paused cfo")
    ok = await _answer(admin, b'{"op": "pause", "args": {"agent": "cfo"}, "id": 3}\n')
    assert ok == {
        "ok": True,
        "result": {"agent": "cfo", "paused": True, "message": "paused cfo"},
        "id": 3,
    }
    with caplog.at_level(logging.ERROR, logger="companyd.daemon.control"):
        bad = await _answer(admin, b'{"op": "resume", "args": {"agent": "cfo"}}\n')
    assert bad["code"] == "internal"
    assert "'resume' returned a Paused, not its result Resumed" in bad["error"]


@pytest.mark.anyio
async def test_a_secret_in_a_result_is_masked_at_the_control_socket() -> None:
    secret = "typed-admin-secret-value-0123456789"
    SECRETS.add(secret)
    answer = await _answer(
        _Typed(f"paused cfo with {secret}"), b'{"op": "pause", "args": {"agent": "cfo"}}\n'
    )
    assert answer["ok"] is True and secret not in json.dumps(answer)
    assert answer["result"]["message"].startswith("paused cfo with ")


def test_usd_places_without_decimal_arithmetic_answers_as_with_it() -> None:
    # usd_places skips the decimal module for amounts of at least one unit of the last
    # decimal (issue 31: its import is ~2 ms of `status`); the answer must stay the exact
    # decimal one, for amounts at and around every boundary
    import random
    from decimal import Decimal

    from companyd.admin import usd_places

    def reference(values: list[float | Decimal | None], minimum: int = 2) -> int:
        places = minimum
        for v in values:
            if v is None:
                continue
            d = abs(Decimal(str(v)))
            while d and places < 6 and d.quantize(Decimal(1).scaleb(-places)) == 0:
                places += 1
        return places

    rng = random.Random(31)
    amounts: list[float | Decimal | None] = [None, 0, 0.0, -0.0, 1, 12.5, Decimal("0.004")]
    for exp in range(1, 9):
        unit = 10.0**-exp
        for k in (0.4999, 0.5, 0.5001, 0.9999, 1, 1.0001, 4.5, 5, 5.5):
            amounts += [k * unit, -k * unit, float(f"{k}e-{exp}")]
    amounts += [rng.uniform(0, 0.02) for _ in range(2000)]
    amounts += [10 ** rng.uniform(-8, 2) for _ in range(2000)]
    for a in amounts:
        for minimum in (0, 2, 4, 7):
            assert usd_places([a], minimum=minimum) == reference([a], minimum), (a, minimum)
    for _ in range(200):
        batch = rng.sample(amounts, 5)
        assert usd_places(batch) == reference(batch), batch


def test_one_amount_in_a_sentence_is_exact_to_a_millionth() -> None:
    # a refusal, a raise, an alert's line: never rounded into another figure (a budget of
    # $0.0068 read "$0.01", a raise of $999,999.999 read "$1,000,000.00"), never a false zero
    from companyd.admin import exact_places, one_usd

    cases = [
        (0.0068, 2, "$0.0068"),
        (0.0148, 2, "$0.0148"),
        (999_999.999, 2, "$999,999.999"),
        (1_000_005.0001, 2, "$1,000,005.0001"),
        (5, 2, "$5.00"),
        (0.05, 4, "$0.0500"),
        (0.00006, 4, "$0.00006"),
        (0.0000004, 2, "<$0.000001"),
        (0.0000006, 2, "$0.000001"),
        (0, 2, "$0.00"),
    ]
    for value, minimum, said in cases:
        assert one_usd(value, minimum) == said, value
    assert exact_places(0.707) == 3 and exact_places(0.5) == 2 and exact_places(1.23456789) == 6


def test_status_shows_each_agents_day_and_month() -> None:
    # "by agent today" left out an agent with a monthly budget only that spent this month,
    # and said no month at all
    from companyd.admin import render_status

    status = {
        "spend": {
            "today": {"used_usd": 0.9, "reserved_usd": 0.0, "limit_usd": 10.0},
            "month": {"used_usd": 7.0, "reserved_usd": 0.0, "limit_usd": 200.0},
            "agents": [
                {"agent": "ceo", "today_usd": 0.9, "month_usd": 5.1, "daily_limit_usd": 3.0},
                {"agent": "cfo", "today_usd": 0.0, "month_usd": 1.9, "monthly_limit_usd": 50.0},
                {"agent": "coo", "today_usd": 0.0, "month_usd": 0.0},
            ],
        }
    }
    lines = render_status(status, now=1_800_000_000.0).splitlines()
    start = lines.index("  by agent (today · this month):")
    assert [ln.split() for ln in lines[start + 1 : start + 3]] == [
        ["ceo", "$0.90", "of", "$3.00", "·", "$5.10"],
        ["cfo", "$0.00", "·", "$1.90", "of", "$50.00"],
    ]
    assert not any("coo" in ln for ln in lines)  # nothing spent, not paused: not listed
