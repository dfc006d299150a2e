""":class:`StoreAbsent`, in a module of its own: the stores catch it on every backend, and
importing it must not import the PostgreSQL driver (issue 31: a SQLite company's CLI).
"""

from __future__ import annotations

__all__ = ["StoreAbsent"]


class StoreAbsent(LookupError):
    """A read-only open of a store whose tables do not exist yet (no daemon has written
    to this company's schema): the PostgreSQL twin of a state file that is not there.
    """
