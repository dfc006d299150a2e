"""Scalar types of company.yaml (config/_scalars.py): durations."""

from __future__ import annotations

import math

import pytest

from companyd.config import parse_duration

# -- durations -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (90, 90.0),
        (1.5, 1.5),
        ("90", 90.0),
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("2d", 172800.0),
        (" 1h 30m ", 5400.0),
        ("0.5h", 1800.0),
    ],
)
def test_parse_duration_accepts_the_documented_forms(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", [True, "soon", "5 minutes", "5ms", "", "m5", math.inf, None])
def test_parse_duration_refuses_anything_else_and_names_the_forms(value: object) -> None:
    with pytest.raises(ValueError, match=r"30s, 5m, 1h30m or 1d.*got"):
        parse_duration(value)
