"""The ``companyd`` command line: the argparse entry (``main``) and one module per command
group. Layer 7, the top: nothing in the package imports it (``companyd.__main__`` and the
console script enter here).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.cli._entry import main


__all__ = [
    "main",
]


_HOMES: dict[str, str] = {
    "main": "companyd.cli._entry",
}


def __getattr__(name: str) -> Any:
    """Import a face name from its module on first use (keeps start-up imports cheap)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
