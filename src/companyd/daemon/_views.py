"""The read-only Admin operations that browse company memory and the running
configuration: ``memory_search``, ``memory_entity``, ``memory_changes`` and ``config_view``
(what the dashboard's Memory and Config pages show; the control socket offers them too).

:class:`Views` is a mixin of :class:`~companyd.daemon._main.Daemon` beside
:class:`~companyd.daemon._operator.Operator`; it owns no state. Memory reads run on the
memory owner's thread (:meth:`~companyd.memory._service.MemoryService.query`, in order with
writes) with a short deadline, so a restarting owner answers "unavailable" instead of
holding a page; file reads (the config file's time, credentials) run in a thread.
Everything shown passes the one redactor (:mod:`companyd._secrets`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from companyd._fs import FileTooLarge, NotRegularFile, read_regular_file
from companyd._secrets import SECRETS
from companyd.admin import AdminError, ConfigView, MemoryChanges, MemoryEntity, MemorySearch
from companyd.alerts import AlertService
from companyd.config import CompanyConfig, secret_references
from companyd.daemon._reload import ReloadRecord, waiting_for_restart
from companyd.memory import KnowledgeGraph, MemoryService, MemoryUnavailable

__all__ = ["MEMORY_READ_TIMEOUT", "Views"]

T = TypeVar("T")

#: Seconds a memory read may wait for the owner (a restart, a long batch) before the
#: operation answers that memory is unavailable.
MEMORY_READ_TIMEOUT = 5.0
#: Upper bounds of the ``limit`` arguments (a page, not an export).
_MAX_LIMIT = 500
#: company.yaml is refused above this size at load (companyd.config._load).
_MAX_CONFIG_BYTES = 10 * 1024 * 1024


class Views:
    """The browsing operations over the daemon's services.

    The attributes below are the daemon's; :class:`~companyd.daemon._main.Daemon` sets them.
    """

    config: CompanyConfig
    started_config: CompanyConfig
    state_dir: Path
    config_loaded_at: float
    reloads: ReloadRecord
    memory: MemoryService
    alerts: AlertService

    async def memory_search(self, query: str, limit: int = 50) -> MemorySearch:
        """:meth:`Admin.memory_search`.

        Raises:
            AdminError: ``limit`` outside 1..500, or memory did not answer in time.
        """
        from companyd.memory import search_entities  # here: a memory search needs it (issue 31)

        _check_limit(limit)
        found = await self._memory_read(lambda g: search_entities(g, query, limit))
        return MemorySearch(**SECRETS.redact_data(found))

    async def memory_entity(self, name: str, depth: int = 1) -> MemoryEntity:
        """:meth:`Admin.memory_entity`.

        Raises:
            AdminError: ``depth`` outside 1..3, no such entity (nor relation end), or
                memory did not answer in time.
        """
        from companyd.memory import entity_view  # here: an entity's page needs it (issue 31)

        if not 1 <= depth <= 3:
            raise AdminError(f"depth must be 1, 2 or 3 hops, got {depth!r}")
        view = await self._memory_read(lambda g: entity_view(g, name, depth))
        if view is None:
            raise AdminError(
                f"no entity {name!r} in company memory; search for it with "
                "`companyd memory search TEXT` (names are case-sensitive)"
            )
        return MemoryEntity(**SECRETS.redact_data(view))

    async def memory_changes(self, limit: int = 50) -> MemoryChanges:
        """:meth:`Admin.memory_changes`: from the memory owner's change log (kept in memory:
        writes since the daemon started, through the daemon).

        Raises:
            AdminError: ``limit`` outside 1..500.
        """
        _check_limit(limit)
        changes = [c.to_dict() for c in self.memory.changes.recent(limit)]
        return MemoryChanges(since=self.memory.changes_since, changes=SECRETS.redact_data(changes))

    async def _memory_read(self, fn: Callable[[KnowledgeGraph], T]) -> T:
        """``fn(graph)`` on the memory owner's thread, within :data:`MEMORY_READ_TIMEOUT`."""
        try:
            return await self.memory.query(fn, timeout=MEMORY_READ_TIMEOUT)
        except MemoryUnavailable as exc:
            raise AdminError(
                f"company memory did not answer within {MEMORY_READ_TIMEOUT:g} s ({exc}); "
                "try again in a moment, and see `companyd status` for the memory owner"
            ) from None

    async def config_view(self) -> ConfigView:
        """:meth:`Admin.config_view`: the validated file with defaults filled in, redacted,
        and the file's time now (read in a thread: a stat, and the credential look-ups of
        the secret references).
        """
        from companyd.config import resolved_view  # here: the config page needs it (issue 31)

        config = self.config
        mtime, changed, refs = await asyncio.to_thread(_file_facts, config)
        # the same resolved view as `show-config`: every section, every effective default
        # (a routine's deliver as it runs, not the null the file leaves it at)
        document = await asyncio.to_thread(resolved_view, config)  # looks up credentials
        return ConfigView(
            path=str(config.path),
            loaded_at=self.config_loaded_at,
            file_mtime=mtime,
            changed_on_disk=changed,
            document=SECRETS.redact_data(document),
            secrets=refs,
            warnings=[SECRETS.redact(str(w)) for w in config.warnings],
            reload=self.reloads.to_dict(),
            reload_errors=list(self.reloads.last_errors),
            restart_required=(
                waiting_for_restart(self.started_config, config, self.state_dir, self.alerts)
                or None
            ),
        )


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= _MAX_LIMIT:
        raise AdminError(f"limit must be from 1 to {_MAX_LIMIT}, got {limit!r}")


def _file_facts(config: CompanyConfig) -> tuple[float | None, bool, list[dict[str, Any]]]:
    """The config file's modification time (None: it cannot be read), whether its text
    differs from the running version's, and its secret references (name and whether set,
    never the value). Blocking: run in a thread.
    """
    path = Path(config.path)
    try:
        mtime: float | None = os.stat(path).st_mtime
        text = read_regular_file(path, _MAX_CONFIG_BYTES).decode("utf-8", errors="replace")
    except (OSError, FileTooLarge, NotRegularFile):
        mtime, text = None, None
    refs = [
        {"path": r.path, "kind": r.kind, "name": r.name, "is_set": r.is_set}
        for r in secret_references(config)
    ]
    return mtime, text is not None and text != config.text, refs
