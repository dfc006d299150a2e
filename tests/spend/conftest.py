"""Fixtures for the spend tests (helpers live in spendkit.py)."""

from __future__ import annotations

import pytest

from companyd.events import EventBus


@pytest.fixture
def bus() -> EventBus:
    return EventBus()
