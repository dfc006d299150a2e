"""Dynamic children: the admin calls that change a running supervisor's children.

``start_child`` adds a child after the existing ones, ``terminate_child`` stops one and keeps
its spec, ``kill_child`` kills one (OTP's ``exit(Pid, kill)``: an abnormal exit the restart
rules then handle), ``restart_child`` starts a stopped one again, ``delete_child`` forgets a
stopped one; a ``simple_one_for_one`` supervisor instead runs instances of its template,
started with ``start_instance`` and addressed by fresh ids ``<template id>-<n>``. Each call
goes through the supervisor's command queue and runs in its task, between restarts and child
exits; none is counted in the restart intensity. Errors are
:class:`~companyd.supervision._errors.SupervisorError` subclasses carrying OTP's atom.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, cast

from companyd.supervision._child import ChildFn, ExitReason
from companyd.supervision._errors import (
    AlreadyPresent,
    AlreadyStarted,
    ChildNotFound,
    ChildRestarting,
    ChildRunning,
    InvalidSpec,
    NotSupported,
    StartFailed,
    SupervisorNotRunning,
)
from companyd.supervision._spec import ChildSpec, Started, check_specs
from companyd.supervision._state import (
    FAILED,
    IGNORED,
    KILLED,
    OK,
    Child,
    SupervisorState,
)
from companyd.supervision._text import clip


class DynamicMixin(SupervisorState):
    """The admin calls of a :class:`~companyd.supervision._supervisor.Supervisor`."""

    # -- the admin API (serialised through the command queue) ----------------------------

    async def start_child(self, spec: ChildSpec) -> Started:
        """Add a child after the existing ones (last in start order) and start it.

        Not counted in intensity. A sub-supervisor restarted by its parent re-runs init and
        does not restore children added this way (OTP).

        Raises:
            AlreadyStarted: the id is running. AlreadyPresent: the id exists, not running.
            StartFailed: it failed to start (nothing is kept). InvalidSpec: bad spec.
            NotSupported: simple_one_for_one (use :meth:`start_instance`).
        """
        if not isinstance(spec, ChildSpec):
            raise InvalidSpec(f"start_child expects a ChildSpec, got {spec!r}")
        return await self._call(functools.partial(self._do_start_child, spec))

    async def start_instance(self, start: ChildFn | None = None) -> Started:
        """simple_one_for_one: start one more instance of the template.

        ``start`` (default: the template's) is the instance's body — bind per-instance
        arguments with :func:`functools.partial` (OTP's extra args). The instance gets a
        fresh id ``<template id>-<n>``, never reused, which :meth:`terminate_child` takes.

        Raises:
            StartFailed: it failed to start (nothing is kept). NotSupported: not a
            simple_one_for_one supervisor.
        """
        return await self._call(functools.partial(self._do_start_instance, start))

    async def terminate_child(self, id: str) -> None:
        """Stop a child by its shutdown spec and keep its spec (a temporary one is dropped).

        Idempotent: a child not running is fine; a child in its restart loop leaves the loop.
        Not counted, never restarted, never triggers an automatic shutdown.

        Raises:
            ChildNotFound: no such id. NotSupported: the template id of a
            simple_one_for_one supervisor (terminate an instance by its id).
        """
        await self._call(functools.partial(self._do_terminate_child, id))

    async def kill_child(self, id: str) -> None:
        """Kill a running child at once: OTP's ``exit(Pid, kill)``.

        The child's task is cancelled with no stop request and no shutdown time (it gets
        ``kill_grace`` to unwind, then it is abandoned, as for ``brutal_kill``). It exits
        with reason ``killed`` — an abnormal exit — and the normal rules apply: a permanent
        or transient child is restarted and the restart is counted in intensity, a
        temporary one is dropped; ``one_for_all`` / ``rest_for_one`` restart their group.
        A child that is not running (stopped, or in its restart loop) is left as it is, as
        OTP's kill of a dead pid does nothing.

        Raises:
            ChildNotFound: no such id. NotSupported: the template id of a
            simple_one_for_one supervisor (kill an instance by its id).
        """
        await self._call(functools.partial(self._do_kill_child, id))

    async def restart_child(self, id: str) -> Started:
        """Start a stopped child again (not counted; a failure starts no restart loop).

        Raises:
            ChildNotFound, ChildRunning, ChildRestarting, StartFailed, NotSupported.
        """
        return await self._call(functools.partial(self._do_restart_child, id))

    async def delete_child(self, id: str) -> None:
        """Forget a stopped child's spec.

        Raises:
            ChildNotFound, ChildRunning, ChildRestarting, NotSupported.
        """
        await self._call(functools.partial(self._do_delete_child, id))

    # -- admin operations, run inside the supervisor task --------------------------------

    def _not_found(self, id: str) -> ChildNotFound:
        known = ", ".join(self._children) or "(none)"
        return ChildNotFound(
            f"supervisor {self._path!r} has no child {id!r}; its children: {clip(known)}"
        )

    def _no_dynamic(self, what: str) -> NotSupported:
        return NotSupported(
            f"{what} does not apply to the simple_one_for_one supervisor {self._path!r}; use "
            "start_instance() and terminate_child(instance_id)"
        )

    async def _do_start_child(self, spec: ChildSpec) -> Started:
        if self._flags.strategy == "simple_one_for_one":
            raise self._no_dynamic("start_child(spec)")
        check_specs(self.name, self._flags, (spec,))
        existing = self._children.get(spec.id)
        if existing is not None:
            if existing.state == "running":
                raise AlreadyStarted(f"child {spec.id!r} is already running under {self._path!r}")
            raise AlreadyPresent(
                f"child {spec.id!r} already exists under {self._path!r} (not running); use "
                "restart_child, or delete_child first"
            )
        child = Child(spec)
        result, payload = await self._start(child, phase="start_child")
        return self._added(child, result, payload)

    async def _do_start_instance(self, start: ChildFn | None) -> Started:
        template = self._template
        if template is None:
            raise NotSupported(
                f"start_instance is for simple_one_for_one supervisors; {self._path!r} is "
                f"{self._flags.strategy} — use start_child(spec)"
            )
        n = next(self._seq)
        self._issued = n
        spec = dataclasses.replace(
            template, id=f"{template.id}-{n}", start=start if start is not None else template.start
        )
        child = Child(spec)
        result, payload = await self._start(child, phase="start_instance")
        return self._added(child, result, payload)

    def _added(self, child: Child, result: str, payload: Any) -> Started:
        if result == OK:
            self._children[child.id] = child
            return Started(id=child.id, info=payload)
        if result == IGNORED:
            if child.spec.restart != "temporary" and self._template is None:
                self._children[child.id] = child
            return Started(id=child.id, info=None, running=False)
        if result == FAILED:
            reason = cast(ExitReason, payload)
            raise StartFailed(
                f"child {child.id!r} failed to start under {self._path!r}: {reason}",
                child=child.id,
                reason=reason,
            )
        raise SupervisorNotRunning(
            f"supervisor {self._path!r} was asked to stop while {child.id!r} was starting"
        )

    async def _do_terminate_child(self, id: str) -> None:
        self._refuse_template_id(id, "terminate_child")
        child = self._children.get(id)
        if child is None:
            if self._template is not None and self._ended_instance(id):
                return  # an instance that already ended: OTP answers ok for a dead pid
            raise self._not_found(id)
        if child.state == "restarting":
            self._cancel_retry(child)  # leaves the restart loop (§1.6)
        await self._terminate(child, cause="terminate_child")
        child.state = "not_running"
        if child.spec.restart == "temporary" or self._template is not None:
            del self._children[id]

    async def _do_kill_child(self, id: str) -> None:
        self._refuse_template_id(id, "kill_child")
        child = self._children.get(id)
        if child is None:
            if self._template is not None and self._ended_instance(id):
                return  # an instance that already ended: killing a dead pid does nothing
            raise self._not_found(id)
        task = child.task
        if task is None or task.done():
            return  # not running, or its own exit is already queued and will be handled
        child.task = None  # its done callback's exit is stale now: the kill is handled here
        child.cancel_requested = True
        task.cancel()
        if not await self._wait_task(task, self._kill_grace, recancel=True):
            self._abandon(child, task)
        await self._handle_exit(child, KILLED)

    def _refuse_template_id(self, id: str, what: str) -> None:
        if self._template is not None and id == self._template.id:
            raise NotSupported(
                f"{what}({id!r}): {id!r} is the template of the simple_one_for_one "
                f"supervisor {self._path!r}, not a child; give an instance id such as "
                f"{f'{id}-1'!r} (see which_children())"
            )

    def _ended_instance(self, id: str) -> bool:
        assert self._template is not None
        prefix = f"{self._template.id}-"
        number = id[len(prefix) :]
        return id.startswith(prefix) and number.isdigit() and 0 < int(number) <= self._issued

    async def _do_restart_child(self, id: str) -> Started:
        if self._template is not None:
            raise self._no_dynamic("restart_child")
        child = self._children.get(id)
        if child is None:
            raise self._not_found(id)
        if child.state == "running":
            raise ChildRunning(f"child {id!r} under {self._path!r} is running; nothing to restart")
        if child.state == "restarting":
            raise ChildRestarting(
                f"child {id!r} under {self._path!r} is in its restart loop; terminate_child "
                "it first"
            )
        result, payload = await self._start(child, phase="restart_child")
        if result == OK:
            return Started(id=id, info=payload)
        if result == IGNORED:
            return Started(id=id, info=None, running=False)
        if result == FAILED:
            reason = cast(ExitReason, payload)
            raise StartFailed(
                f"child {id!r} failed to restart under {self._path!r}: {reason}",
                child=id,
                reason=reason,
            )
        raise SupervisorNotRunning(
            f"supervisor {self._path!r} was asked to stop while {id!r} was starting"
        )

    async def _do_delete_child(self, id: str) -> None:
        if self._template is not None:
            raise self._no_dynamic("delete_child")
        child = self._children.get(id)
        if child is None:
            raise self._not_found(id)
        if child.state == "running":
            raise ChildRunning(
                f"child {id!r} under {self._path!r} is running; terminate_child it first"
            )
        if child.state == "restarting":
            raise ChildRestarting(
                f"child {id!r} under {self._path!r} is in its restart loop; terminate_child "
                "it first"
            )
        del self._children[id]
