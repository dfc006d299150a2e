"""The fencing token a leader's writes carry, and the error a fenced write raises.

Several daemons of one company share one PostgreSQL schema; exactly one is leader
(:class:`companyd.storage._leadership.Leadership`), and each time leadership changes hands
the new leader bumps the ``epoch`` of the one row of ``companyd_leader``. A :class:`Fence`
is the epoch this daemon won. :class:`companyd.storage._postgres.PgConnection` checks it at
the start of every write transaction (``BEGIN``) of every store: ``SELECT 1 FROM
companyd_leader WHERE epoch = <ours> FOR SHARE``. No row means another daemon has led
since, and the write is refused with :class:`Fenced` before it touches a table. The
``FOR SHARE`` row lock is held until the write commits, and the new leader's epoch bump
must wait for it: a deposed leader can never commit a write once the next epoch exists.

Ownership: a Fence is written only by the :class:`Leadership` that made it (on the event
loop); the stores' worker threads only read it (two attribute reads per write
transaction). A daemon that never led has ``epoch=None``: its writes are not checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from companyd.errors import CompanydError

__all__ = ["Fence", "Fenced"]


@dataclass(eq=False)
class Fence:
    """The leadership epoch this daemon's writes belong to.

    Attributes:
        epoch: the epoch this daemon won (its writes need this epoch to be current), or
            None: it never led, writes are not checked.
        deposed: this daemon knows it is no longer leader (its lock connection broke, it
            could not renew within the lease, or it resigned): writes are refused at once,
            without asking the database.
    """

    epoch: int | None = None
    deposed: bool = False


class Fenced(CompanydError):
    """A write by a daemon that is no longer the leader; nothing of it was written.

    Attributes:
        epoch: the epoch the writer led as.
        current: the epoch that leads now (None when not known: the writer deposed itself).
        node: the node that leads now, when known.
    """

    def __init__(self, epoch: int, current: int | None = None, node: str | None = None) -> None:
        self.epoch = epoch
        self.current = current
        self.node = node
        if current is None:
            now = "it lost leadership (its lock connection broke or its lease ran out)"
        else:
            by = f" (node {node!r})" if node else ""
            now = f"epoch {current}{by} has taken over"
        super().__init__(
            f"write refused: this daemon led as epoch {epoch}, but {now}; it must stop "
            "writing and campaign again as a standby"
        )
