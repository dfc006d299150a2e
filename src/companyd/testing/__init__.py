"""Loopback stand-ins for tests and benchmarks: the Messages API, the Bot API, a manual clock.

Tests use the real anthropic SDK, python-telegram-bot and mcp SDK pointed at these servers;
nothing here is a mock of an SDK object.
"""

from companyd.clock import ManualClock

__all__ = ["ManualClock"]
