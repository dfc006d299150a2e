"""company.yaml: the schema ``companyd/v1``, its loader and its resolved view.

The whole company is one YAML file kept in git. This package turns that file into a
:class:`CompanyConfig` or raises :class:`~companyd.errors.ConfigError` listing **every**
problem at once, each with ``file:line:column``, the dotted path, what was expected and
what was found. It never lets a traceback or a half-applied config reach the operator.

Modules, each importing only those listed before it:

* :mod:`.scalars` — durations, amounts, rates, model ids, names (validated scalar types);
* :mod:`.schema` — the ``*Spec`` pydantic models, one-to-one with the file;
* :mod:`.report` — positions of values and the report that collects issues;
* :mod:`.model` — the resolved view (:class:`CompanyConfig`) and how a spec resolves;
* :mod:`.yaml` — YAML → plain data with positions; duplicate keys are errors;
* :mod:`.tree` — the schema as a navigable tree; accepted alternative spellings;
* :mod:`.wording` — schema errors in the operator's words;
* :mod:`.secrets` — secrets named by reference (and registered with the redactor), never
  written into the file;
* :mod:`.cron` — cron expressions and time zones;
* :mod:`.checks` — cross-checks spanning several values;
* :mod:`.load` — the entry points :func:`load_config`, :func:`load_config_text`,
  :func:`default_config_path` (at home in :mod:`.default_path`, standard library only,
  which every CLI command imports);
* :mod:`.view` — :func:`resolved_view`, the resolved file as plain data (``show-config``,
  the dashboard's config view);
* :mod:`.migrate` — ``companyd migrate``: an older company.yaml in the current format,
  comments kept (docs/upgrade.md).

Loading is synchronous file work (one small file plus instruction files); async callers
run it in a thread (``await asyncio.to_thread(load_config, path)``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.config._default_path import DEFAULT_STATE_DIR, default_config_path
    from companyd.config._load import load_config, load_config_text
    from companyd.config._migrate import (
        ConfigMigration,
        MigrationRefused,
        migration_problems,
        plan_migration,
        write_migration,
    )
    from companyd.config._model import (
        BACKUP_ASSIGNEE,
        AgentConfig,
        BackupConfig,
        CompanyConfig,
        DepartmentConfig,
        RoutineConfig,
    )
    from companyd.config._peek import UNUSUAL, peek_nested, peek_or_load, peek_top_level
    from companyd.config._scalars import is_loopback, listen_address, parse_duration
    from companyd.config._schema import (
        SCHEMA,
        AgentSpec,
        AlertsSpec,
        AnthropicSpec,
        BackoffSpec,
        BackupSpec,
        BudgetSpec,
        CatchUpSpec,
        ChannelSpec,
        CompanyFile,
        CompanySpec,
        DashboardSpec,
        DefaultsSpec,
        DepartmentSpec,
        LimitsSpec,
        McpServerSpec,
        MemorySpec,
        MetricsSpec,
        ModelSpec,
        OutboundWebhookSpec,
        PriceSpec,
        QuietHoursSpec,
        RetentionSpec,
        RoutineSpec,
        SandboxSpec,
        SpendSpec,
        SupervisorSpec,
        TelegramSpec,
        ToolServerLimitsSpec,
        ToolsSpec,
        TriggerSpec,
    )
    from companyd.config._schema import WEBHOOK_EVENT_TYPES as WEBHOOK_EVENT_TYPES
    from companyd.config._secrets import (
        SecretReference,
        company_schema,
        secret_references,
        secret_values,
        state_backend,
    )
    from companyd.config._view import SECTIONS, resolved_view

__all__ = [
    "BACKUP_ASSIGNEE",
    "DEFAULT_STATE_DIR",
    "SCHEMA",
    "SECTIONS",
    "UNUSUAL",
    "WEBHOOK_EVENT_TYPES",
    "AgentConfig",
    "AgentSpec",
    "AlertsSpec",
    "AnthropicSpec",
    "BackoffSpec",
    "BackupConfig",
    "BackupSpec",
    "BudgetSpec",
    "CatchUpSpec",
    "ChannelSpec",
    "CompanyConfig",
    "CompanyFile",
    "CompanySpec",
    "ConfigMigration",
    "DashboardSpec",
    "DefaultsSpec",
    "DepartmentConfig",
    "DepartmentSpec",
    "LimitsSpec",
    "McpServerSpec",
    "MemorySpec",
    "MetricsSpec",
    "MigrationRefused",
    "ModelSpec",
    "OutboundWebhookSpec",
    "PriceSpec",
    "QuietHoursSpec",
    "RetentionSpec",
    "RoutineConfig",
    "RoutineSpec",
    "SandboxSpec",
    "SecretReference",
    "SpendSpec",
    "SupervisorSpec",
    "TelegramSpec",
    "ToolServerLimitsSpec",
    "ToolsSpec",
    "TriggerSpec",
    "company_schema",
    "default_config_path",
    "is_loopback",
    "listen_address",
    "load_config",
    "load_config_text",
    "migration_problems",
    "parse_duration",
    "peek_nested",
    "peek_or_load",
    "peek_top_level",
    "plan_migration",
    "resolved_view",
    "secret_references",
    "secret_values",
    "state_backend",
    "write_migration",
]


_HOMES: dict[str, str] = {
    "AgentConfig": "companyd.config._model",
    "AgentSpec": "companyd.config._schema",
    "AlertsSpec": "companyd.config._schema",
    "AnthropicSpec": "companyd.config._schema",
    "BACKUP_ASSIGNEE": "companyd.config._model",
    "BackoffSpec": "companyd.config._schema",
    "BackupConfig": "companyd.config._model",
    "BackupSpec": "companyd.config._schema",
    "BudgetSpec": "companyd.config._schema",
    "CatchUpSpec": "companyd.config._schema",
    "ChannelSpec": "companyd.config._schema",
    "CompanyConfig": "companyd.config._model",
    "CompanyFile": "companyd.config._schema",
    "CompanySpec": "companyd.config._schema",
    "ConfigMigration": "companyd.config._migrate",
    "DEFAULT_STATE_DIR": "companyd.config._default_path",
    "DashboardSpec": "companyd.config._schema",
    "DefaultsSpec": "companyd.config._schema",
    "DepartmentConfig": "companyd.config._model",
    "DepartmentSpec": "companyd.config._schema",
    "LimitsSpec": "companyd.config._schema",
    "McpServerSpec": "companyd.config._schema",
    "MemorySpec": "companyd.config._schema",
    "MetricsSpec": "companyd.config._schema",
    "MigrationRefused": "companyd.config._migrate",
    "ModelSpec": "companyd.config._schema",
    "OutboundWebhookSpec": "companyd.config._schema",
    "PriceSpec": "companyd.config._schema",
    "QuietHoursSpec": "companyd.config._schema",
    "RetentionSpec": "companyd.config._schema",
    "RoutineConfig": "companyd.config._model",
    "RoutineSpec": "companyd.config._schema",
    "SCHEMA": "companyd.config._schema",
    "SECTIONS": "companyd.config._view",
    "SandboxSpec": "companyd.config._schema",
    "SecretReference": "companyd.config._secrets",
    "SpendSpec": "companyd.config._schema",
    "SupervisorSpec": "companyd.config._schema",
    "TelegramSpec": "companyd.config._schema",
    "ToolServerLimitsSpec": "companyd.config._schema",
    "ToolsSpec": "companyd.config._schema",
    "TriggerSpec": "companyd.config._schema",
    "WEBHOOK_EVENT_TYPES": "companyd.config._schema",
    "company_schema": "companyd.config._secrets",
    "default_config_path": "companyd.config._default_path",
    "is_loopback": "companyd.config._scalars",
    "listen_address": "companyd.config._scalars",
    "load_config": "companyd.config._load",
    "load_config_text": "companyd.config._load",
    "parse_duration": "companyd.config._scalars",
    "migration_problems": "companyd.config._migrate",
    "plan_migration": "companyd.config._migrate",
    "resolved_view": "companyd.config._view",
    "secret_references": "companyd.config._secrets",
    "secret_values": "companyd.config._secrets",
    "state_backend": "companyd.config._secrets",
    "write_migration": "companyd.config._migrate",
    "UNUSUAL": "companyd.config._peek",
    "peek_nested": "companyd.config._peek",
    "peek_or_load": "companyd.config._peek",
    "peek_top_level": "companyd.config._peek",
}


def __getattr__(name: str) -> Any:
    """Import a face name from its module on first use: ``default_config_path`` (every CLI
    command) must not pay for pydantic and the schema (``load_config``).
    """
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
