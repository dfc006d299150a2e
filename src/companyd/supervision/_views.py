"""What a supervisor tells about its children: the read-only calls (D7) and the status tree.

``which_children`` (start order; D5), ``which_child``, ``count_children`` (OTP's counts),
``restarts_in_window`` and ``snapshot`` (the subtree as the nodes ``companyd status``
renders) are plain synchronous reads of the supervisor's state: they answer at any time,
also in the middle of a restart, and change nothing.
"""

from __future__ import annotations

from typing import Any

from companyd.supervision._errors import SupervisorGaveUp
from companyd.supervision._spec import ChildCounts, ChildInfo
from companyd.supervision._state import Child, SupervisorState


class ViewsMixin(SupervisorState):
    """The read-only calls of a :class:`~companyd.supervision._supervisor.Supervisor`."""

    def which_children(self) -> list[ChildInfo]:
        """Every child in **start order** (OTP lists newest first; D5)."""
        return [self._info(c) for c in self._children.values()]

    def which_child(self, id: str) -> ChildInfo:
        """One child. Raises :class:`ChildNotFound`."""
        child = self._children.get(id)
        if child is None:
            raise self._not_found(id)
        return self._info(child)

    def count_children(self) -> ChildCounts:
        """OTP's counts; a child in its restart loop is counted but not active."""
        active = sup = work = 0
        for c in self._children.values():
            if c.state == "running":
                active += 1
            if c.spec.type == "supervisor":
                sup += 1
            else:
                work += 1
        if self._flags.strategy == "simple_one_for_one":
            return ChildCounts(specs=1, active=active, supervisors=sup, workers=work)
        return ChildCounts(specs=len(self._children), active=active, supervisors=sup, workers=work)

    def snapshot(self) -> dict[str, Any]:
        """The subtree as JSON-serialisable status nodes (the ``tree`` of ``companyd status``).

        Every node has ``id``, ``path``, ``kind`` (``supervisor`` | ``worker``), ``state``
        (``starting`` | ``running`` | ``restarting`` | ``stopping`` | ``stopped`` |
        ``failed``), ``restarts`` (by its supervisor, since the daemon started: a restart of
        that supervisor carries its children's counts over),
        ``started_at`` / ``uptime_s`` (None when not running), ``last_exit`` and
        ``children`` (start order); supervisors add ``strategy``, ``max_restarts``,
        ``max_seconds``, ``auto_shutdown`` and ``restarts_in_window``. A child that is not
        running is ``failed`` when its last exit was abnormal or a give-up, else ``stopped``.
        """
        now = self._clock.time()
        node: dict[str, Any] = {
            "id": self._path.rsplit("/", 1)[-1],
            "path": self._path,
            "kind": "supervisor",
            "state": self._status,
            "restarts": 0,
            "started_at": self._started_at,
            "uptime_s": None if self._started_at is None else now - self._started_at,
            "last_exit": None,
        }
        node.update(self._supervisor_fields())
        node["children"] = [self._child_node(c, now) for c in self._children.values()]
        return node

    def _supervisor_fields(self) -> dict[str, Any]:
        return {
            "strategy": self._flags.strategy,
            "max_restarts": self._flags.max_restarts,
            "max_seconds": self._flags.max_seconds,
            "auto_shutdown": self._flags.auto_shutdown,
            "restarts_in_window": self.restarts_in_window(),
        }

    def _child_node(self, c: Child, now: float) -> dict[str, Any]:
        state: str = c.state
        last = c.last_exit
        if state == "not_running" and last is not None:
            failed = not last.is_normal or isinstance(last.exception, SupervisorGaveUp)
            state = "failed" if failed else "stopped"
        elif state == "not_running":
            state = "stopped"
        node: dict[str, Any] = {
            "id": c.id,
            "path": f"{self._path}/{c.id}",
            "kind": c.spec.type,
            "state": state,
            "restarts": c.restarts,
            "started_at": c.started_at,
            "uptime_s": None if c.started_at is None else now - c.started_at,
            "last_exit": str(last) if last is not None else None,
            "restart": c.spec.restart,
            "significant": c.spec.significant,
        }
        sub = c.info
        if isinstance(sub, ViewsMixin) and c.state == "running":
            node.update(sub._supervisor_fields())
            node["children"] = [sub._child_node(g, now) for g in sub._children.values()]
        else:
            node["children"] = []
        return node

    def restarts_in_window(self) -> int:
        """Restarts counted in the current intensity window (read-only, any time)."""
        threshold = self._clock.monotonic() - self._flags.max_seconds
        return sum(1 for t in self._restarts if t >= threshold)

    def _info(self, c: Child) -> ChildInfo:
        return ChildInfo(
            id=c.id,
            path=f"{self._path}/{c.id}",
            state=c.state,
            type=c.spec.type,
            restart=c.spec.restart,
            significant=c.spec.significant,
            restarts=c.restarts,
            started_at=c.started_at,
            last_exit=str(c.last_exit) if c.last_exit is not None else None,
        )
