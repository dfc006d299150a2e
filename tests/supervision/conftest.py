"""Fixtures of the supervision tests: a ManualClock, a bus on it, an event recorder."""

from __future__ import annotations

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus

from .supkit import Events


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def bus(clock: ManualClock) -> EventBus:
    return EventBus(clock)


@pytest.fixture
def events(bus: EventBus) -> Events:
    return Events(bus)


@pytest.fixture
def journal() -> list[str]:
    return []
