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
  :func:`default_config_path`;
* :mod:`.view` — :func:`resolved_view`, the resolved file as plain data (``show-config``,
  the dashboard's config view);
* :mod:`.migrate` — ``companyd migrate``: an older company.yaml in the current format,
  comments kept (docs/upgrade.md).

Loading is synchronous file work (one small file plus instruction files); async callers
run it in a thread (``await asyncio.to_thread(load_config, path)``).
"""

from __future__ import annotations

from companyd.config.load import default_config_path, load_config, load_config_text
from companyd.config.migrate import (
    ConfigMigration,
    MigrationRefused,
    plan_migration,
    write_migration,
)
from companyd.config.model import (
    BACKUP_ASSIGNEE,
    DEFAULT_STATE_DIR,
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
    "AgentConfig",
    "AgentSpec",
    "AlertsSpec",
    "AnthropicSpec",
    "BackoffSpec",
    "BackupConfig",
    "BackupSpec",
    "BudgetSpec",
    "CatchUpSpec",
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
