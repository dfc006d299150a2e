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
    from companyd.config.default_path import DEFAULT_STATE_DIR, default_config_path
    from companyd.config.load import load_config, load_config_text
    from companyd.config.migrate import (
        ConfigMigration,
        MigrationRefused,
        plan_migration,
        write_migration,
    )
    from companyd.config.model import (
        BACKUP_ASSIGNEE,
        AgentConfig,
        BackupConfig,
        CompanyConfig,
        DepartmentConfig,
        RoutineConfig,
    )
    from companyd.config.scalars import is_loopback, listen_address, parse_duration
    from companyd.config.schema import (
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
    from companyd.config.schema import WEBHOOK_EVENT_TYPES as WEBHOOK_EVENT_TYPES
    from companyd.config.secrets import (
        SecretReference,
        company_schema,
        secret_references,
        secret_values,
        state_backend,
    )
    from companyd.config.view import SECTIONS, resolved_view

__all__ = [
    "BACKUP_ASSIGNEE",
    "DEFAULT_STATE_DIR",
    "SCHEMA",
    "SECTIONS",
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
    "parse_duration",
    "plan_migration",
    "resolved_view",
    "secret_references",
    "secret_values",
    "state_backend",
    "write_migration",
]


_HOMES: dict[str, str] = {
    "AgentConfig": "companyd.config.model",
    "AgentSpec": "companyd.config.schema",
    "AlertsSpec": "companyd.config.schema",
    "AnthropicSpec": "companyd.config.schema",
    "BACKUP_ASSIGNEE": "companyd.config.model",
    "BackoffSpec": "companyd.config.schema",
    "BackupConfig": "companyd.config.model",
    "BackupSpec": "companyd.config.schema",
    "BudgetSpec": "companyd.config.schema",
    "CatchUpSpec": "companyd.config.schema",
    "ChannelSpec": "companyd.config.schema",
    "CompanyConfig": "companyd.config.model",
    "CompanyFile": "companyd.config.schema",
    "CompanySpec": "companyd.config.schema",
    "ConfigMigration": "companyd.config.migrate",
    "DEFAULT_STATE_DIR": "companyd.config.default_path",
    "DashboardSpec": "companyd.config.schema",
    "DefaultsSpec": "companyd.config.schema",
    "DepartmentConfig": "companyd.config.model",
    "DepartmentSpec": "companyd.config.schema",
    "LimitsSpec": "companyd.config.schema",
    "McpServerSpec": "companyd.config.schema",
    "MemorySpec": "companyd.config.schema",
    "MetricsSpec": "companyd.config.schema",
    "MigrationRefused": "companyd.config.migrate",
    "ModelSpec": "companyd.config.schema",
    "OutboundWebhookSpec": "companyd.config.schema",
    "PriceSpec": "companyd.config.schema",
    "QuietHoursSpec": "companyd.config.schema",
    "RetentionSpec": "companyd.config.schema",
    "RoutineConfig": "companyd.config.model",
    "RoutineSpec": "companyd.config.schema",
    "SCHEMA": "companyd.config.schema",
    "SECTIONS": "companyd.config.view",
    "SandboxSpec": "companyd.config.schema",
    "SecretReference": "companyd.config.secrets",
    "SpendSpec": "companyd.config.schema",
    "SupervisorSpec": "companyd.config.schema",
    "TelegramSpec": "companyd.config.schema",
    "ToolServerLimitsSpec": "companyd.config.schema",
    "ToolsSpec": "companyd.config.schema",
    "TriggerSpec": "companyd.config.schema",
    "WEBHOOK_EVENT_TYPES": "companyd.config.schema",
    "company_schema": "companyd.config.secrets",
    "default_config_path": "companyd.config.default_path",
    "is_loopback": "companyd.config.scalars",
    "listen_address": "companyd.config.scalars",
    "load_config": "companyd.config.load",
    "load_config_text": "companyd.config.load",
    "parse_duration": "companyd.config.scalars",
    "plan_migration": "companyd.config.migrate",
    "resolved_view": "companyd.config.view",
    "secret_references": "companyd.config.secrets",
    "secret_values": "companyd.config.secrets",
    "state_backend": "companyd.config.secrets",
    "write_migration": "companyd.config.migrate",
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
