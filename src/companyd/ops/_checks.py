"""One line of ``companyd doctor``: a named check, its verdict, what to do, what was fixed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Check", "Status"]

#: ``ok``, ``warning`` (works, but look at it), ``problem`` (will fail; exit 1), ``skipped``
#: (cannot be checked here: no systemd, ``--offline``, company.yaml does not load).
Status = Literal["ok", "warning", "problem", "skipped"]


@dataclass
class Check:
    """One check's outcome.

    Attributes:
        name: short and stable (``state-dir``), for scripts and ``--json``.
        status: the verdict.
        summary: what was found, quoting the values.
        fix: what to do about it (None when nothing is to be done).
        changed: what ``--fix`` changed for this check, one entry per change.
    """

    name: str
    status: Status
    summary: str
    fix: str | None = None
    changed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The check as ``--json`` prints it."""
        return {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "fix": self.fix,
            "changed": self.changed,
        }
