"""company.yaml: the schema ``companyd/v1``, its loader and its resolved view.

The whole company is one YAML file kept in git. This module turns that file into a
:class:`CompanyConfig` or raises :class:`~companyd.errors.ConfigError` listing **every**
problem at once, each with ``file:line:column``, the dotted path, what was expected and
what was found. It never lets a traceback or a half-applied config reach the operator.

Layers:

* ``*Spec`` pydantic models mirror the file one-to-one (``extra="forbid"``); they are the
  schema. The README's configuration reference is kept in step with them by a test
  (tests/test_readme.py); docs/configuration.md records why the schema looks as it does.
* :func:`load_config` reads and parses the file (rejecting duplicate keys, which PyYAML
  would silently merge), then runs three independent passes over whatever parsed — the
  pydantic schema, the secret scan and the cross-checks (unknown agents, cycles, roots,
  cron, time zones, departments, instruction files) — so one run reports every problem,
  and returns the resolved :class:`CompanyConfig`.
* :class:`CompanyConfig` is what the rest of companyd reads: agents and routines with
  defaults filled in, instruction files loaded, paths made absolute.

Loading is synchronous file work (one small file plus instruction files); async callers
run it in a thread (``await asyncio.to_thread(load_config, path)``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from companyd._fs import FileTooLarge, NotRegularFile, read_regular_file
from companyd._secrets import SECRET_PATTERNS, protect
from companyd.errors import ConfigError, ConfigIssue
from companyd.events import KINDS
from companyd.llm.prices import is_known_model

__all__ = [
    "DEFAULT_STATE_DIR",
    "SCHEMA",
    "AgentConfig",
    "AgentSpec",
    "BackoffSpec",
    "BudgetSpec",
    "CompanyConfig",
    "CompanyFile",
    "DepartmentConfig",
    "FileTooLarge",
    "LimitsSpec",
    "ModelSpec",
    "NotRegularFile",
    "RoutineConfig",
    "SecretReference",
    "SupervisorSpec",
    "load_config",
    "load_config_text",
    "parse_duration",
    "read_regular_file",
    "secret_references",
    "secret_values",
]

SCHEMA = "companyd/v1"
#: The state directory when nothing else names one: ``state`` next to company.yaml.
DEFAULT_STATE_DIR = "state"

SLUG_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


# ---------------------------------------------------------------------------------------
# Scalar helpers


_DURATION_RE = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*([smhd])\s*)+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_FORMS = "a duration such as 30s, 5m, 1h30m or 1d (or a number of seconds)"
_MAX_DURATION = 366 * 86400.0


def parse_duration(value: Any) -> float:
    """Seconds from ``90``, ``"90"``, ``"90s"``, ``"5m"``, ``"1h30m"`` or ``"2d"``.

    Units: ``s`` seconds, ``m`` minutes, ``h`` hours, ``d`` days; parts add up. Booleans,
    infinities and NaN are refused (YAML reads ``yes`` and ``.inf`` as values).

    Raises:
        ValueError: with a message naming the accepted forms and quoting the value.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected {_DURATION_FORMS}, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"expected a finite {_DURATION_FORMS[2:]}, got {value!r}")
        seconds = float(value)
    elif isinstance(value, str) and re.fullmatch(r"\d+(?:\.\d+)?", value.strip()):
        seconds = float(value.strip())
    elif isinstance(value, str) and _DURATION_RE.match(value):
        seconds = sum(float(n) * _UNIT[u] for n, u in _DURATION_PART.findall(value))
    else:
        raise ValueError(f"expected {_DURATION_FORMS}, got {value!r}")
    if seconds > _MAX_DURATION:
        # Far beyond any sensible interval; larger values overflow the scheduler's dates.
        raise ValueError(f"expected a duration of at most 366d, got {value!r}")
    return seconds


def _number(value: Any) -> Any:
    # YAML 1.1 reads yes/no/on/off as booleans and Python counts True as 1: refuse them so
    # `daily_usd: yes` is an error rather than a one-dollar budget.
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    return value


def _whole(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"expected a whole number, got {value!r}")
    return value


Duration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]
PositiveUSD = Annotated[float, BeforeValidator(_number), Field(gt=0, allow_inf_nan=False)]
Rate = Annotated[float, BeforeValidator(_number), Field(ge=0, allow_inf_nan=False)]
PositiveInt = Annotated[int, BeforeValidator(_whole), Field(gt=0)]
Text = Annotated[str, Field(min_length=1)]


def _model_id(value: Any) -> Any:
    # "anthropic/claude-x" is the provider/model spelling peers use; only Anthropic is served.
    if isinstance(value, str) and value.startswith("anthropic/"):
        return value.removeprefix("anthropic/")
    return value


ModelId = Annotated[str, BeforeValidator(_model_id), Field(min_length=1)]


def _http_url(value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"https?://[^\s/?#]+(?:[/?#]\S*)?", value):
        raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
    return value


def _env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError(
            "expected the name of an environment variable (letters, digits and '_', not "
            f"starting with a digit), got {value!r}; the value itself goes in that variable"
        )
    return value


def _credential_name(value: str) -> str:
    if not value or "/" in value or value in (".", "..") or not value.isprintable():
        raise ValueError(
            "expected the name of a systemd credential (a file name in "
            f"$CREDENTIALS_DIRECTORY, without '/'), got {value!r}"
        )
    return value


EnvName = Annotated[str, AfterValidator(_env_name)]
CredentialName = Annotated[str, AfterValidator(_credential_name)]


class Spec(BaseModel):
    """Base of every schema node: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# ---------------------------------------------------------------------------------------
# Schema


class BudgetSpec(Spec):
    """A spending ceiling. At least one of daily_usd / monthly_usd, or ``unlimited``."""

    daily_usd: PositiveUSD | None = None
    monthly_usd: PositiveUSD | None = None
    warn_at: tuple[
        Annotated[float, BeforeValidator(_number), Field(gt=0, le=1, allow_inf_nan=False)], ...
    ] = (0.5, 0.8, 1.0)
    unlimited: bool = False

    @model_validator(mode="before")
    @classmethod
    def _unlimited_word(cls, value: Any) -> Any:
        if value == "unlimited":
            return {"unlimited": True}
        return value

    @field_validator("warn_at")
    @classmethod
    def _sorted_levels(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(sorted(set(v)))

    @model_validator(mode="after")
    def _some_ceiling(self) -> BudgetSpec:
        if self.unlimited and (self.daily_usd or self.monthly_usd):
            raise ValueError(
                "expected either `unlimited: true` or daily_usd/monthly_usd, got both; remove one"
            )
        if not self.unlimited and self.daily_usd is None and self.monthly_usd is None:
            raise ValueError(
                "expected daily_usd and/or monthly_usd, got neither; set at least one "
                "(or write `budget: unlimited` to opt out explicitly)"
            )
        return self


class ModelSpec(Spec):
    """Which Claude model serves an agent, and what to fall back to."""

    primary: ModelId
    fallbacks: tuple[ModelId, ...] = ()
    max_output_tokens: Annotated[int, BeforeValidator(_whole), Field(gt=0, le=64_000)] = 4096

    @model_validator(mode="before")
    @classmethod
    def _bare_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"primary": value}
        return value

    @property
    def chain(self) -> tuple[str, ...]:
        """Primary first, then each fallback, without repeats."""
        return tuple(dict.fromkeys((self.primary, *self.fallbacks)))


class LimitsSpec(Spec):
    """Per-run circuit-breaker limits; ``None`` means no limit of that kind."""

    max_cost_usd: PositiveUSD | None = None
    max_tokens: PositiveInt | None = None
    max_seconds: Duration | None = None
    max_steps: PositiveInt | None = None
    loop_threshold: Annotated[int, BeforeValidator(_whole), Field(ge=2)] = 3


class BackoffSpec(Spec):
    """Opt-in restart backoff (an extension beyond OTP; docs/supervision.md)."""

    min: Duration = 1.0
    max: Duration = 60.0
    factor: Annotated[float, BeforeValidator(_number), Field(ge=1, allow_inf_nan=False)] = 2.0
    jitter: Annotated[float, BeforeValidator(_number), Field(ge=0, le=1)] = 0.2
    reset_after: Duration = 60.0


Strategy = Literal["one_for_one", "one_for_all", "rest_for_one"]
RestartType = Literal["permanent", "transient", "temporary"]


class SupervisorSpec(Spec):
    """How a supervisor reacts to its children's exits."""

    strategy: Strategy = "one_for_one"
    max_restarts: Annotated[int, BeforeValidator(_whole), Field(ge=0)] = 3
    max_seconds: Duration = Field(default=60.0, alias="within_seconds")
    backoff: BackoffSpec | None = None


class DepartmentSpec(Spec):
    """A group of agents (and sub-departments): one supervisor in the tree."""

    title: str | None = None
    description: str | None = None
    supervisor: SupervisorSpec = SupervisorSpec()
    departments: dict[str, DepartmentSpec] = {}


class ToolsSpec(Spec):
    """Which tools an agent may use. ``allow`` absent = every tool it is given."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()


class McpServerSpec(Spec):
    """An external tool server an agent talks to over MCP stdio.

    ``env`` sets literal (non-secret) variables for the server; ``env_from`` maps a
    variable of the server to a variable of the daemon's own environment, which is how
    tokens reach it. ``timeout_seconds`` bounds one tool call; ``handshake_timeout_seconds``
    bounds starting the server (process start, MCP ``initialize``, ``tools/list``): a server
    that misses it is left out and retried, the agent runs without its tools."""

    command: Text
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    env_from: dict[str, EnvName] = {}
    idempotent_tools: tuple[str, ...] = ()
    timeout_seconds: Duration = 60.0
    handshake_timeout_seconds: Duration = 30.0


class AgentSpec(Spec):
    """One role agent. Unset fields take their value from ``defaults``."""

    title: Text
    reports_to: str | None = Field(default=None, alias="reportsTo")
    department: str | None = None
    instructions: str | None = None
    instructions_file: str | None = None
    role: str | None = None
    goal: str | None = None
    backstory: str | None = None
    model: ModelSpec | None = None
    budget: BudgetSpec | None = None
    limits: LimitsSpec | None = None
    restart: RestartType | None = None
    tools: ToolsSpec = ToolsSpec()
    consult: tuple[str, ...] = ()
    max_consult_depth: Annotated[int, BeforeValidator(_whole), Field(ge=1, le=5)] = 2
    colleague_timeout_seconds: Duration = 300.0
    mcp_servers: dict[str, McpServerSpec] = {}
    heartbeat_seconds: Duration | None = None
    can_modify: tuple[str, ...] = ()
    enabled: bool = True


class TriggerSpec(Spec):
    """When a routine fires: a 5-field ``cron`` (with ``timezone``) or ``every``."""

    cron: str | None = None
    every: Duration | None = None
    timezone: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> TriggerSpec:
        if self.cron is not None and self.every is not None:
            raise ValueError("expected exactly one of 'cron' or 'every', got both; remove one")
        if self.cron is None and self.every is None:
            raise ValueError(
                "expected exactly one of 'cron' (e.g. \"0 14 * * *\") or 'every' (e.g. 5m), "
                "got neither"
            )
        if self.every is not None and self.timezone is not None:
            raise ValueError("'timezone' applies to 'cron' only; remove it or use cron")
        return self


class CatchUpSpec(Spec):
    """What to do on start about fire times missed while the daemon was down."""

    policy: Literal["skip", "run_once"] = "skip"
    grace: Duration = 3600.0

    @model_validator(mode="before")
    @classmethod
    def _bare_word(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"policy": value}
        return value


class RoutineSpec(Spec):
    """A recurring task for one agent."""

    assignee: str
    description: Text
    expected_output: str | None = None
    trigger: TriggerSpec
    concurrency: Literal["skip_if_active", "queue"] = "skip_if_active"
    catch_up: CatchUpSpec = CatchUpSpec()
    precondition: Literal["always", "memory_changed", "inbox_nonempty"] = "always"
    reviewer: str | None = None
    enabled: bool = True


class CompanySpec(Spec):
    """The company itself."""

    name: Text
    timezone: str = "UTC"
    context: str | None = None
    budget: BudgetSpec


class DefaultsSpec(Spec):
    """Values every agent inherits unless it sets its own."""

    model: ModelSpec = ModelSpec(primary="claude-sonnet-5-5", fallbacks=("claude-haiku-5-5",))
    budget: BudgetSpec | None = None
    restart: RestartType = "permanent"
    limits: LimitsSpec = LimitsSpec(max_cost_usd=1.0, max_steps=20, max_seconds=600.0)
    heartbeat_seconds: Duration = 300.0


Severity = Literal["critical", "warning", "info", "off"]


class QuietHoursSpec(Spec):
    """A daily window in which non-critical alerts are held back."""

    start: str
    end: str
    timezone: str | None = None

    @field_validator("start", "end", mode="before")
    @classmethod
    def _bare_hour(cls, v: object) -> object:
        # `end: 7` is an hour, not text: suggest the time it means. (An unquoted 23:00 is
        # the base-60 number 1380 to YAML; the generic type error already explains that.)
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 23:
            raise ValueError(f'expected a time as "HH:MM", got the number {v}; write "{v:02d}:00"')
        return v

    @field_validator("start", "end")
    @classmethod
    def _hhmm(cls, v: str) -> str:
        if not re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", v):
            raise ValueError(f"expected a time as HH:MM (24-hour), got {v!r}")
        return v


class TelegramSpec(Spec):
    """Where alerts go. Secrets are referenced, never written here."""

    bot_token_env: EnvName | None = "TELEGRAM_BOT_TOKEN"
    bot_token_credential: CredentialName | None = "telegram_bot_token"
    chat_ids: tuple[Annotated[int, BeforeValidator(_whole)], ...] = ()
    chat_ids_env: EnvName | None = None
    api_url: str | None = None

    _url = field_validator("api_url")(_http_url)


class AlertsSpec(Spec):
    """Alert routing and noise control."""

    telegram: TelegramSpec | None = None
    min_severity: Literal["critical", "warning", "info"] = "warning"
    routes: dict[str, Severity] = {}
    quiet_hours: QuietHoursSpec | None = None
    coalesce_seconds: Duration = 600.0


class MemorySpec(Spec):
    """The shared knowledge graph file (MCP memory server JSONL format)."""

    path: str | None = None


class PriceSpec(Spec):
    """USD per million tokens for one model."""

    input: Rate
    output: Rate
    cache_write_5m: Rate | None = None
    cache_write_1h: Rate | None = None
    cache_read: Rate | None = None
    effective_from: date | None = None


class SpendSpec(Spec):
    """Runaway detection: spend rate above ``runaway_factor`` × an agent's usual rate."""

    runaway_factor: Annotated[float, BeforeValidator(_number), Field(gt=1, allow_inf_nan=False)] = (
        5.0
    )
    runaway_window: Duration = 600.0


class AnthropicSpec(Spec):
    """How to reach the Messages API. The key is referenced, never written here."""

    api_key_env: EnvName = "ANTHROPIC_API_KEY"
    api_key_credential: CredentialName = "anthropic_api_key"
    base_url: str | None = None
    timeout_seconds: Duration = 120.0
    max_retries: Annotated[int, BeforeValidator(_whole), Field(ge=0, le=10)] = 2

    _url = field_validator("base_url")(_http_url)


class MetricsSpec(Spec):
    """Optional Prometheus endpoint, loopback only."""

    listen: str | None = None

    @field_validator("listen")
    @classmethod
    def _loopback(cls, v: str | None) -> str | None:
        if v is None:
            return v
        m = re.fullmatch(r"(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:\[\]]+)):(?P<port>\d{1,5})", v)
        host = m and (m.group("v6") or m.group("host"))
        if not m or not host or not 0 <= int(m.group("port")) < 65536:  # 0: any free port
            raise ValueError(f"expected host:port such as 127.0.0.1:9464 or [::1]:9464, got {v!r}")
        import ipaddress

        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(
                f"expected a loopback address (127.0.0.1, ::1 or localhost), got {v!r}: the "
                "metrics endpoint has no authentication; put a reverse proxy in front to "
                "expose it"
            )
        return v


class CompanyFile(Spec):
    """The top level of company.yaml."""

    schema_: Literal["companyd/v1"] = Field(default="companyd/v1", alias="schema")
    company: CompanySpec
    defaults: DefaultsSpec = DefaultsSpec()
    supervisor: SupervisorSpec = SupervisorSpec()
    departments: dict[str, DepartmentSpec] = {}
    agents: dict[str, AgentSpec]
    routines: dict[str, RoutineSpec] = {}
    alerts: AlertsSpec = AlertsSpec()
    memory: MemorySpec = MemorySpec()
    state_dir: str | None = None
    pricing: dict[str, PriceSpec] = {}
    spend: SpendSpec = SpendSpec()
    anthropic: AnthropicSpec = AnthropicSpec()
    metrics: MetricsSpec = MetricsSpec()


# ---------------------------------------------------------------------------------------
# Resolved view


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """An agent with every default applied; what the runtime reads."""

    slug: str
    title: str
    reports_to: str | None
    department: str | None
    instructions: str
    model: ModelSpec
    budget: BudgetSpec | None
    limits: LimitsSpec
    restart: RestartType
    tools: ToolsSpec
    consult: tuple[str, ...]
    max_consult_depth: int
    colleague_timeout_seconds: float = 300.0
    mcp_servers: Mapping[str, McpServerSpec]
    heartbeat_seconds: float
    can_modify: tuple[str, ...]
    enabled: bool


@dataclass(frozen=True, kw_only=True)
class RoutineConfig:
    """A routine with its trigger time zone resolved."""

    slug: str
    assignee: str
    description: str
    expected_output: str | None
    cron: str | None
    every: float | None
    timezone: str
    concurrency: Literal["skip_if_active", "queue"]
    catch_up: CatchUpSpec
    precondition: Literal["always", "memory_changed", "inbox_nonempty"]
    reviewer: str | None
    enabled: bool


@dataclass(frozen=True, kw_only=True)
class DepartmentConfig:
    """A department as a node of the supervision tree."""

    slug: str
    title: str | None
    supervisor: SupervisorSpec
    parent: str | None
    departments: tuple[str, ...]
    agents: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class CompanyConfig:
    """A validated company.yaml, resolved.

    Attributes:
        path: the file it was read from (absolute).
        spec: the file as validated, unresolved.
        agents: slug → resolved agent, in file order.
        routines: slug → resolved routine, in file order.
        departments: slug → department, depth-first in file order.
        warnings: non-fatal findings (unknown model ids, …).
        text: the exact file contents (for reload diffs and the improver).
    """

    path: Path
    spec: CompanyFile
    agents: Mapping[str, AgentConfig]
    routines: Mapping[str, RoutineConfig]
    departments: Mapping[str, DepartmentConfig]
    warnings: tuple[ConfigIssue, ...] = ()
    text: str = field(default="", repr=False)

    @property
    def name(self) -> str:
        return self.spec.company.name

    @property
    def timezone(self) -> str:
        return self.spec.company.timezone

    @property
    def base_dir(self) -> Path:
        """The directory that holds company.yaml, symlinks resolved: relative paths in the
        file (``state_dir``, ``memory.path``, ``instructions_file``) resolve against it."""
        return Path(os.path.realpath(self.path)).parent

    def state_dir(self, override: str | os.PathLike[str] | None = None) -> Path:
        """State directory: ``override`` (CLI), then ``$STATE_DIRECTORY``, then company.yaml's
        ``state_dir``, then ``state``; the last two relative to :attr:`base_dir`, never to
        the working directory, so one company.yaml always means one state directory."""
        if override is not None:
            return Path(override).absolute()
        env = os.environ.get("STATE_DIRECTORY")
        if env:
            return Path(env.split(":")[0]).absolute()
        if self.spec.state_dir:
            return (self.base_dir / self.spec.state_dir).absolute()
        return self.base_dir / DEFAULT_STATE_DIR

    def memory_path(self, state_dir: Path) -> Path:
        """The knowledge-graph file: ``memory.path`` relative to company.yaml, else
        ``<state_dir>/memory.jsonl``."""
        if self.spec.memory.path:
            return (self.base_dir / self.spec.memory.path).absolute()
        return state_dir / "memory.jsonl"

    def root_agent(self) -> str:
        """The one agent that reports to nobody."""
        return next(a.slug for a in self.agents.values() if a.reports_to is None)

    def tree_depth(self) -> int:
        """Depth of the org chart (reports_to), the root agent being depth 1."""

        def depth(slug: str) -> int:
            d = 1
            while (boss := self.agents[slug].reports_to) is not None:
                d += 1
                slug = boss
            return d

        return max((depth(s) for s in self.agents), default=0)


@dataclass(frozen=True, kw_only=True)
class SecretReference:
    """A secret company.yaml refers to by name, and whether it is available right now.

    Attributes:
        path: dotted path of the referring key, e.g. ``anthropic.api_key_env``.
        kind: ``"env"`` (an environment variable) or ``"credential"`` (a systemd
            credential, read from ``$CREDENTIALS_DIRECTORY/<name>``).
        name: the variable or credential name.
        is_set: whether the variable is set and non-empty / the credential file exists.
    """

    path: str
    kind: Literal["env", "credential"]
    name: str
    is_set: bool


def secret_references(
    config: CompanyConfig, environ: Mapping[str, str] | None = None
) -> list[SecretReference]:
    """Every secret ``config`` refers to, with whether it can be found — never its value.

    ``environ`` defaults to ``os.environ``; credentials are looked up in
    ``$CREDENTIALS_DIRECTORY`` (set by systemd's ``LoadCredential=``).
    """
    env = os.environ if environ is None else environ
    cred_dir = env.get("CREDENTIALS_DIRECTORY")

    def ref(path: str, kind: Literal["env", "credential"], name: str) -> SecretReference:
        if kind == "env":
            present = bool(env.get(name))
        else:
            # A stat of one file in a tmpfs systemd prepared: tiny, fine on the loop.
            present = bool(cred_dir) and (Path(str(cred_dir)) / name).is_file()
        return SecretReference(path=path, kind=kind, name=name, is_set=present)

    spec = config.spec
    refs = [
        ref("anthropic.api_key_env", "env", spec.anthropic.api_key_env),
        ref("anthropic.api_key_credential", "credential", spec.anthropic.api_key_credential),
    ]
    tg = spec.alerts.telegram
    if tg is not None:
        if tg.bot_token_env:
            refs.append(ref("alerts.telegram.bot_token_env", "env", tg.bot_token_env))
        if tg.bot_token_credential:
            refs.append(
                ref("alerts.telegram.bot_token_credential", "credential", tg.bot_token_credential)
            )
        if tg.chat_ids_env:
            refs.append(ref("alerts.telegram.chat_ids_env", "env", tg.chat_ids_env))
    for slug, agent in config.agents.items():
        for server, mcp in agent.mcp_servers.items():
            for var, source in mcp.env_from.items():
                refs.append(
                    ref(f"agents.{slug}.mcp_servers.{server}.env_from.{var}", "env", source)
                )
    return refs


#: Variables whose values are secrets even before company.yaml names them (the defaults of
#: ``anthropic.api_key_env`` and ``alerts.telegram.bot_token_env``): an error in a file
#: that does not load must not echo them either.
_DEFAULT_SECRET_ENV = ("ANTHROPIC_API_KEY", "TELEGRAM_BOT_TOKEN")


def secret_values(config: CompanyConfig, environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of every secret ``config`` names that can be found right now: the API
    key, the bot token, every credential and every ``env_from`` variable (not the chat ids,
    which are not secret). For registering with the redactor; never print them."""
    env = os.environ if environ is None else environ
    cred_dir = env.get("CREDENTIALS_DIRECTORY", "").split(":")[0]
    values: list[str] = []
    for ref in secret_references(config, env):
        if ref.path == "alerts.telegram.chat_ids_env" or not ref.is_set:
            continue
        if ref.kind == "env":
            values.append(env.get(ref.name, ""))
        elif cred_dir:
            try:
                raw = _read_at_most(Path(cred_dir) / ref.name, _MAX_SECRET_BYTES)
            except (OSError, FileTooLarge, ValueError):
                continue  # the consumer of this credential reports what is wrong with it
            values.append(raw.decode("utf-8", errors="replace"))
    return [v.strip() for v in values if v.strip()]


def _register_secrets(config: CompanyConfig | None) -> None:
    """Register the secrets ``config`` names (or, without one, those of the default
    variables) with the process's redactor."""
    values = (
        [os.environ.get(name, "") for name in _DEFAULT_SECRET_ENV]
        if config is None
        else secret_values(config)
    )
    for value in values:
        protect(value)


# ---------------------------------------------------------------------------------------
# Loading: positions

Path_ = tuple[str | int, ...]


class _Positions:
    """Line/column of every node by its path in the document, from the YAML compose tree.

    ``value`` holds where each value starts (an empty value points at its key), ``key``
    where each mapping key starts, ``scalar`` the source text and style of each scalar (to
    explain what YAML made of an unquoted ``23:00`` or ``yes``).
    """

    def __init__(self) -> None:
        self.value: dict[Path_, tuple[int, int]] = {}
        self.key: dict[Path_, tuple[int, int]] = {}
        self.scalar: dict[Path_, tuple[str, str | None]] = {}

    def of(self, path: Path_, *, key: bool = False) -> tuple[int, int]:
        """Position of the deepest known node on ``path`` (its key when ``key``)."""
        p = path
        while p:
            if key and p in self.key:
                return self.key[p]
            if p in self.value:
                return self.value[p]
            p = p[:-1]
        return self.value.get((), (1, 1))

    def move(self, old: Path_, new: Path_) -> None:
        """Re-file every position under ``old`` as under ``new`` (a key was renamed)."""
        n = len(old)
        for p in [p for p in self.value if p[:n] == old]:
            self.value[(*new, *p[n:])] = self.value.pop(p)
        for p in [p for p in self.key if p[:n] == old]:
            self.key[(*new, *p[n:])] = self.key.pop(p)
        for p in [p for p in self.scalar if p[:n] == old]:
            self.scalar[(*new, *p[n:])] = self.scalar.pop(p)


def _dotted(path: Path_) -> str:
    # A key may be any quoted text, line breaks included; the path must stay on one line.
    return ".".join(
        p if isinstance(p, str) and p.isprintable() else _one_line(str(p)) for p in path
    )


_LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _one_line(text: str) -> str:
    """``text`` with every character that would break the line escaped (``\\n``)."""
    return _LINE_BREAKS.sub(lambda m: repr(m.group())[1:-1], text)


class _Report:
    """Collects issues with positions; knows which paths already have an error so later
    passes do not pile a second, derived complaint onto the same value."""

    def __init__(self, file: str, pos: _Positions) -> None:
        self.file = file
        self.pos = pos
        self.issues: list[ConfigIssue] = []
        self.settled: set[Path_] = set()

    def add(
        self,
        path: Path_,
        message: str,
        *,
        key: bool = False,
        at: tuple[int, int] | None = None,
        severity: str = "error",
    ) -> None:
        line, col = at if at is not None else self.pos.of(path, key=key)
        self.issues.append(
            ConfigIssue(
                file=self.file,
                line=line,
                column=col,
                path=_dotted(path),
                message=_one_line(message),  # one issue, one line: always
                severity=severity,
            )
        )

    def warn(self, path: Path_, message: str, *, key: bool = False) -> None:
        self.add(path, message, key=key, severity="warning")

    def settle(self, path: Path_) -> None:
        """Mark ``path`` as explained: later errors at or below it are dropped."""
        self.settled.add(path)

    def is_settled(self, path: Path_) -> bool:
        return any(path[: len(s)] == s for s in self.settled)

    def _sorted(self, severity: str) -> list[ConfigIssue]:
        seen: set[tuple[int, int, str]] = set()
        out: list[ConfigIssue] = []
        for i in sorted(self.issues, key=lambda i: (i.line, i.column)):
            # The same YAML anchor merged in two places reports its own problems twice.
            k = (i.line, i.column, i.message)
            if i.severity == severity and k not in seen:
                seen.add(k)
                out.append(i)
        return out

    def errors(self) -> list[ConfigIssue]:
        return self._sorted("error")

    def warnings(self) -> list[ConfigIssue]:
        return self._sorted("warning")


# ---------------------------------------------------------------------------------------
# Loading: YAML → plain data with positions

_MERGE_TAG = "tag:yaml.org,2002:merge"
_NULL_TAG = "tag:yaml.org,2002:null"
_MAX_DEPTH = 40
_MAX_NODES = 100_000


class _TooLarge(Exception):
    pass


class _Failed:
    """Marker: the document could not be turned into data (the reason is reported)."""


class _Empty:
    """Marker: the document holds no value at all (empty or only comments)."""


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _is_empty(node: yaml.Node) -> bool:
    return (
        isinstance(node, yaml.ScalarNode)
        and node.tag == _NULL_TAG
        and node.value == ""
        and not node.style
    )


class _Builder:
    """Turns a composed YAML node tree into plain Python, recording positions.

    Differences from ``yaml.safe_load``, each on purpose: a duplicate key is an error (PyYAML
    keeps the last one silently); every mapping key is the text as written (so ``on:`` and
    ``1:`` are the keys "on" and "1", not True and 1); merge keys (``<<: *base``) are
    honoured; recursive aliases, absurd nesting and alias bombs are errors, not hangs.
    """

    def __init__(self, loader: yaml.SafeLoader, rep: _Report) -> None:
        self.loader = loader
        self.rep = rep
        self.nodes = 0
        self.active: set[int] = set()

    def build(self, node: yaml.Node, path: Path_, depth: int) -> Any:
        self.nodes += 1
        if self.nodes > _MAX_NODES:
            raise _TooLarge
        pos = self.rep.pos
        pos.value.setdefault(path, _mark(node))
        if isinstance(node, yaml.ScalarNode):
            pos.scalar[path] = (str(node.value), node.style)
            return self._scalar(node, path)
        if id(node) in self.active:
            self.rep.add(
                path,
                "this alias refers to a node that contains it (a recursive YAML alias); "
                "company.yaml values must be finite — copy the values instead",
                at=_mark(node),
            )
            self.rep.settle(path)
            return None
        if depth > _MAX_DEPTH:
            self.rep.add(
                path,
                f"expected at most {_MAX_DEPTH} levels of nesting, got more; check the "
                "indentation or the brackets",
                at=_mark(node),
            )
            self.rep.settle(path)
            return None
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.build(v, (*path, i), depth + 1) for i, v in enumerate(node.value)]
            assert isinstance(node, yaml.MappingNode)
            return self._mapping(node, path, depth)
        finally:
            self.active.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, path: Path_, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        merges: list[yaml.Node] = []
        for knode, vnode in node.value:
            if isinstance(knode, yaml.ScalarNode) and knode.tag == _MERGE_TAG:
                merges.append(vnode)
                continue
            if not isinstance(knode, yaml.ScalarNode):
                what = "list" if isinstance(knode, yaml.SequenceNode) else "mapping"
                self.rep.add(
                    path,
                    f"expected a plain key such as 'name:', got a {what} used as a key",
                    at=_mark(knode),
                )
                continue
            key = str(knode.value)
            kpath = (*path, key)
            line, col = _mark(knode)
            if key in first_line:
                self.rep.add(
                    kpath,
                    f"duplicate key {key!r} (first at line {first_line[key]}); YAML would "
                    "silently keep only the last one — merge them into one entry",
                    at=(line, col),
                )
                continue
            first_line[key] = line
            self.rep.pos.key[kpath] = (line, col)
            if _is_empty(vnode):
                self.rep.pos.value[kpath] = (line, col)
            out[key] = self.build(vnode, kpath, depth + 1)
        for vnode in merges:
            sources = vnode.value if isinstance(vnode, yaml.SequenceNode) else [vnode]
            for src in sources:
                if not isinstance(src, yaml.MappingNode):
                    self.rep.add(
                        path,
                        "expected '<<:' to merge a mapping (e.g. `<<: *defaults`), got "
                        f"{_node_word(src)}",
                        at=_mark(src),
                    )
                    continue
                merged = self.build(src, path, depth)
                if isinstance(merged, dict):
                    for k, v in merged.items():
                        out.setdefault(k, v)  # explicit keys win over merged ones
        return out

    def _scalar(self, node: yaml.ScalarNode, path: Path_) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            self.rep.add(
                path,
                f"expected a plain YAML value, got the tag {node.tag!r} ({exc.problem}); "
                "remove the tag",
                at=_mark(node),
            )
        except (ValueError, OverflowError, TypeError) as exc:
            # e.g. 2025-02-30 matches YAML's timestamp pattern but is no date.
            self.rep.add(
                path,
                f"expected a valid value, got {node.value!r} ({exc}); put it in quotes if "
                "it is meant as text",
                at=_mark(node),
            )
        except (KeyError, AttributeError):
            # an explicit tag the text does not fit: PyYAML fails on `!!bool ten` or
            # `!!timestamp soon` without a message of its own
            self.rep.add(
                path,
                f"expected a value the tag {node.tag!r} accepts, got {node.value!r}; remove "
                "the tag or fix the value",
                at=_mark(node),
            )
        self.rep.settle(path)
        return str(node.value)


def _node_word(node: yaml.Node) -> str:
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    return f"{node.value!r}"


def _yaml_hint(problem: str, context: str) -> str:
    if "'\\t'" in problem:
        return (
            "found a tab character; YAML indentation must use spaces — replace the tab with spaces"
        )
    if "mapping values are not allowed" in problem:
        return (
            "YAML syntax error: a ': ' where a value was expected; put the value in quotes "
            "if it contains ': ', or fix the indentation"
        )
    if "expected a single document" in problem + context:
        return (
            "expected one YAML document, got several (a second '---'); company.yaml holds "
            "exactly one document"
        )
    return f"YAML syntax error: {problem}; fix the syntax at this position"


def _compose(text: str, rep: _Report) -> Any:
    """Parse ``text`` into plain data, or return ``_Failed``/``_Empty`` markers."""
    try:
        # The reader checks the whole text for forbidden characters right here.
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:
        _reader_error(text, exc, rep)
        return _Failed
    try:
        try:
            node = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            at = (mark.line + 1, mark.column + 1) if mark else (1, 1)
            context = exc.context or ""
            message = _yaml_hint(exc.problem or "invalid YAML", context)
            if context.startswith("while parsing a flow") and exc.context_mark:
                message += (
                    f" (is the '{{' or '[' on line {exc.context_mark.line + 1} left unclosed?)"
                )
            elif context and exc.context_mark and "single document" not in context:
                message += f" ({context} at line {exc.context_mark.line + 1})"
            rep.add((), message, at=at)
            return _Failed
        except yaml.reader.ReaderError as exc:
            _reader_error(text, exc, rep)
            return _Failed
        except yaml.YAMLError as exc:
            rep.add((), f"YAML error: {exc}", at=(1, 1))
            return _Failed
        except RecursionError:
            rep.add(
                (),
                f"expected at most {_MAX_DEPTH} levels of nesting, got far more; check the "
                "brackets",
                at=(1, 1),
            )
            return _Failed
        if node is None:
            return _Empty
        try:
            return _Builder(loader, rep).build(node, (), 0)
        except _TooLarge:
            rep.add(
                (),
                f"expected at most {_MAX_NODES} values, got more (YAML aliases expanding "
                "into each other?); company.yaml is never this large",
                at=(1, 1),
            )
            return _Failed
    finally:
        loader.dispose()


def _reader_error(text: str, exc: yaml.reader.ReaderError, rep: _Report) -> None:
    char = exc.character
    shown = repr(chr(char)) if isinstance(char, int) else repr(char)
    rep.add(
        (),
        f"expected printable text, got the control character {shown} ({exc.reason}); remove it",
        at=_offset_position(text, exc.position),
    )


def _offset_position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col


# ---------------------------------------------------------------------------------------
# Loading: the schema as a navigable tree


class _MapOf:
    """A schema node that is a mapping from free-form names to ``inner``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner


_Node = type[BaseModel] | _MapOf | None


def _schema_of(annotation: Any) -> _Node:
    """The model (or mapping of models) inside an annotation such as ``X | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is dict and len(args) == 2:
        return _MapOf(args[1])
    if origin is tuple:
        return None
    for a in args:
        found = _schema_of(a)
        if found is not None:
            return found
    return None


def _file_key(name: str, info: FieldInfo) -> str:
    """How a field is spelled in company.yaml (``schema_`` is ``schema``)."""
    return info.alias if name.endswith("_") and info.alias else name


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(p.title() for p in rest)


#: Spellings from peer tools (Paperclip, OpenClaw, CrewAI; docs/configuration.md) that are
#: accepted, with a deprecation warning, besides each field's camelCase form.
_PEER_SPELLINGS: dict[str, dict[str, str]] = {
    "TriggerSpec": {"cronExpression": "cron", "intervalSec": "every", "tz": "timezone"},
    "TelegramSpec": {"chat_id_env": "chat_ids_env"},
    "AgentSpec": {"llm": "model"},
    "RoutineSpec": {"agent": "assignee"},
}


@functools.cache
def _keys(model: type[BaseModel]) -> tuple[dict[str, str], dict[str, str]]:
    """(canonical file key → field name, other accepted spelling → canonical file key)."""
    canonical = {_file_key(n, f): n for n, f in model.model_fields.items()}
    other: dict[str, str] = dict(_PEER_SPELLINGS.get(model.__name__, {}))
    for n, f in model.model_fields.items():
        key = _file_key(n, f)
        for spelling in (f.alias, _camel(key)):
            if spelling and spelling != key and spelling not in canonical:
                other[spelling] = key
    return canonical, other


def _child(schema: _Node, key: str | int) -> _Node:
    if isinstance(schema, _MapOf):
        return _schema_of(schema.inner)
    if isinstance(schema, type) and isinstance(key, str):
        canonical, other = _keys(schema)
        name = canonical.get(key) or canonical.get(other.get(key, ""))
        if name is None and key in schema.model_fields:
            name = key
        if name is not None:
            return _schema_of(schema.model_fields[name].annotation)
    return None


def _schema_at(path: Path_) -> _Node:
    schema: _Node = CompanyFile
    for part in path:
        schema = _child(schema, part)
        if schema is None:
            return None
    return schema


def _canonical(node: Any, schema: _Node, path: Path_, rep: _Report) -> Any:
    """Rename accepted alternative spellings (``reportsTo``) to the canonical snake_case key,
    warning once for each; both spellings at once is an error."""
    if not isinstance(node, dict):
        return node
    if isinstance(schema, _MapOf):
        inner = _schema_of(schema.inner)
        return {k: _canonical(v, inner, (*path, k), rep) for k, v in node.items()}
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return node
    _, other = _keys(schema)
    out: dict[str, Any] = {}
    for k, v in node.items():
        key = k
        if k in other:
            key = other[k]
            if key in node:
                rep.add(
                    (*path, k),
                    f"{k!r} and {key!r} are the same setting, given twice; keep only {key!r}",
                    key=True,
                )
                rep.settle((*path, k))
                continue
            rep.warn(
                (*path, k),
                f"{k!r} is a deprecated spelling of {key!r}; it works for now — write "
                f"{key!r} instead",
                key=True,
            )
            rep.pos.move((*path, k), (*path, key))
        out[key] = _canonical(v, _child(schema, key), (*path, key), rep)
    return out


# ---------------------------------------------------------------------------------------
# Loading: entry points


def load_config(path: str | os.PathLike[str]) -> CompanyConfig:
    """Read, validate and resolve a company.yaml.

    Blocking file I/O: async callers use ``await asyncio.to_thread(load_config, path)``.

    Returns:
        the resolved config; its ``warnings`` hold non-fatal findings (deprecated
        spellings, unknown model ids).

    Raises:
        ConfigError: listing every error found, sorted by position. Problems inside the
            file carry a line and column; an unreadable file has line 0.
    """
    p = Path(path)
    file = str(path)
    _register_secrets(None)

    def fail(message: str, line: int = 0, column: int = 0) -> ConfigError:
        return ConfigError(
            [ConfigIssue(file=file, line=line, column=column, path="", message=message)]
        )

    try:
        raw = _read_at_most(p, _MAX_FILE_BYTES)
    except FileTooLarge:
        raise fail(
            f"expected a company.yaml of at most {_MAX_FILE_BYTES // _MB} MB, got a larger "
            "file; check that the path names your company.yaml"
        ) from None
    except FileNotFoundError:
        raise fail(
            "file not found; create one with `companyd init` or give the path to your company.yaml"
        ) from None
    except IsADirectoryError:
        raise fail(
            "expected a file, got a directory; give the path to company.yaml inside it"
        ) from None
    except NotRegularFile as exc:
        raise fail(
            f"expected a regular file, got {exc.kind}; give the path to your company.yaml "
            "(companyd never reads a pipe or a device as its configuration)"
        ) from None
    except OSError as exc:
        raise fail(f"cannot read the file: {exc.strerror or exc}; check its permissions") from None
    except ValueError as exc:  # e.g. a NUL byte in the path
        raise fail(f"cannot use this path: {exc}") from None
    # Relative paths resolve against the directory that really holds the file: a symlinked
    # company.yaml (or a symlinked directory) names the same company, state and prompts as
    # the file itself. ``path`` stays the path given (a reload reads it again).
    real_dir = Path(os.path.realpath(p)).parent
    loaded = load_config_text(_decode(raw, file), file=file, base_dir=real_dir)
    config = dataclasses.replace(loaded, path=p.absolute())
    # Every secret the file names is known to the redactor from here on, whichever command
    # loaded it (the daemon at start and on reload, the CLI, notify-failure).
    _register_secrets(config)
    return config


_MB = 1024 * 1024
#: Far above any real company.yaml (the example is 8 kB); refuses /dev/zero or a log file
#: given by mistake before it is read into memory.
_MAX_FILE_BYTES = 10 * _MB
#: An agent's instructions travel in every request: far beyond any context window.
_MAX_INSTRUCTIONS_BYTES = 1 * _MB
#: A credential is a key or a token: far below this.
_MAX_SECRET_BYTES = 64 * 1024


_read_at_most = read_regular_file


def _decode(raw: bytes, file: str) -> str:
    """UTF-8 text of ``raw`` (a leading BOM is dropped), or ConfigError naming every line
    that holds a byte that is not UTF-8, at the column of its first bad byte."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    issues: list[ConfigIssue] = []
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            col = len(line[: exc.start].decode("utf-8", errors="replace")) + 1
            issues.append(
                ConfigIssue(
                    file=file,
                    line=lineno,
                    column=col,
                    path="",
                    message=(
                        f"expected UTF-8 text, got the byte {line[exc.start]:#04x}; save the "
                        "file as UTF-8 (in most editors: 'Save with encoding')"
                    ),
                )
            )
            if len(issues) == 20:
                break
    if not issues and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        issues.append(
            ConfigIssue(
                file=file,
                line=1,
                column=1,
                path="",
                message="expected UTF-8 text, got UTF-16; save the file as UTF-8",
            )
        )
    raise ConfigError(issues)


def load_config_text(
    text: str, *, file: str = "company.yaml", base_dir: Path | None = None
) -> CompanyConfig:
    """Validate and resolve company.yaml contents given as text.

    Args:
        text: the YAML document.
        file: the name to use in messages.
        base_dir: directory relative paths (instructions_file, memory.path) resolve against;
            the current directory when None.

    Raises:
        ConfigError: listing every error found, sorted by position.
    """
    base = (base_dir or Path.cwd()).absolute()
    pos = _Positions()
    rep = _Report(file, pos)
    data = _compose(text, rep)
    if data is _Empty:
        rep.add(
            (),
            "expected a mapping with at least 'company' and 'agents', got an empty file; run "
            "`companyd init` for a commented starter",
            at=(1, 1),
        )
    elif data is not _Failed and not isinstance(data, dict):
        rep.add(
            (),
            f"expected a mapping (key: value) at the top level, got {_found(data, (), pos)}; "
            "company.yaml starts with keys such as 'company:' and 'agents:'",
            at=pos.of(()),
        )
    if not isinstance(data, dict):
        raise ConfigError(rep.errors())

    data = _canonical(data, CompanyFile, (), rep)
    _check_secrets(data, rep)
    spec: CompanyFile | None = None
    try:
        spec = CompanyFile.model_validate(data)
    except ValidationError as exc:
        _pydantic_issues(exc, data, rep)
    instructions = _cross_check(data, rep, base)
    errors = rep.errors()
    if errors or spec is None:
        if not errors:  # every schema error sat under a path already explained
            rep.add((), "the file is invalid; fix the errors above")
        raise ConfigError(rep.errors())
    return _resolve(spec, base / Path(file).name, text, tuple(rep.warnings()), instructions)


# ---------------------------------------------------------------------------------------
# Loading: schema errors in the operator's words


_TYPE_WORDS = {
    "string": "text",
    "int": "a whole number",
    "float": "a number",
    "finite": "a finite number",
    "bool": "true or false",
    "dict": "a mapping (key: value)",
    "model": "a mapping (key: value)",
    "mapping": "a mapping (key: value)",
    "list": "a list",
    "tuple": "a list",
    "iterable": "a list",
    "date": "a date (YYYY-MM-DD)",
}

_MODEL_WORDS = {
    "BudgetSpec": "a budget such as {daily_usd: 2, monthly_usd: 40}, or the word 'unlimited'",
    "ModelSpec": "a model id such as claude-sonnet-5-5, or {primary: ..., fallbacks: [...]}",
    "CatchUpSpec": "skip, run_once, or {policy: run_once, grace: 2h}",
    "TriggerSpec": 'a trigger such as {cron: "0 14 * * *"} or {every: 5m}',
    "AgentSpec": "an agent: a mapping with at least 'title' and 'instructions'",
    "RoutineSpec": "a routine: a mapping with 'assignee', 'description' and 'trigger'",
    "DepartmentSpec": "a department: a mapping such as {title: Finance}",
}

_MISSING_HINTS: dict[Path_, str] = {
    ("company", "budget"): (
        " — a company-wide ceiling is required (e.g. `budget: {daily_usd: 10, "
        "monthly_usd: 200}`), or write `budget: unlimited` to opt out explicitly"
    ),
    ("company",): " — it holds the company's name and budget",
    ("agents",): " — at least one agent, keyed by slug",
}


def _found(value: Any, path: Path_, pos: _Positions, *, want_text: bool = False) -> str:
    """How to show a found value: text quoted, anything else as written in the file, with
    what YAML made of it when that is a surprise (``yes`` is true, ``23:00`` is 1380)."""
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    if isinstance(value, list):
        return f"a list {_short(value)}" if value else "an empty list"
    raw = pos.scalar.get(path)
    if raw is None or isinstance(value, str) or raw[1] is not None:
        return _short(value)
    source = raw[0]
    if isinstance(value, bool):
        as_yaml = "true" if value else "false"
    elif isinstance(value, int | float):
        as_yaml = f"the number {value!r}"
    elif isinstance(value, date):
        as_yaml = f"the date {value.isoformat()}"
    else:
        as_yaml = _short(value)
    if want_text:
        if source == str(value):
            return f"{source} (write {source!r} in quotes for text)"
        return f"{source} (YAML reads it as {as_yaml}; write {source!r} in quotes for text)"
    if isinstance(value, bool) and source.lower() not in ("true", "false"):
        return f"{source} (YAML reads it as {as_yaml})"
    return source


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


def _num(bound: Any) -> str:
    if isinstance(bound, float) and bound.is_integer():
        return str(int(bound))
    return str(bound)


def _pydantic_issues(exc: ValidationError, data: dict[str, Any], rep: _Report) -> None:
    pos = rep.pos
    for err in exc.errors(include_url=False):
        path, value = _document_path(tuple(err["loc"]), data)
        if rep.is_settled(path):
            continue
        kind = err["type"]
        ctx = err.get("ctx") or {}
        found = _found(value, path, pos, want_text=kind == "string_type")
        key = False
        if kind == "extra_forbidden":
            key = True
            msg = f"unknown key {path[-1]!r}" + _did_you_mean(str(path[-1]), path[:-1])
        elif kind == "missing":
            key = True
            hint = _MISSING_HINTS.get(path, "")
            msg = f"required key {str(path[-1])!r} is missing; add it{hint}"
            # point at the parent's key, where the missing entry belongs
            rep.add(path, msg, at=pos.of(path[:-1], key=True))
            continue
        elif kind == "literal_error":
            choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
            close = (
                difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
                if isinstance(value, str)
                else []
            )
            hint = f"; did you mean {close[0]!r}?" if close else ""
            msg = f"expected one of {', '.join(choices)}, got {found}{hint}"
        elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
            bound = _num(next(iter(ctx.values()), "?"))
            words = {
                "greater_than": f"greater than {bound}",
                "greater_than_equal": f"at least {bound}",
                "less_than": f"less than {bound}",
                "less_than_equal": f"at most {bound}",
            }[kind]
            what = "a duration" if _is_duration(path) else "a number"
            msg = f"expected {what} {words}, got {found}"
        elif kind == "string_too_short" or (kind == "too_short" and isinstance(value, str)):
            msg = f"expected non-empty text, got {found}"
        elif kind == "int_from_float":
            msg = f"expected a whole number, got {found}"
        elif kind == "model_type":
            want = _MODEL_WORDS.get(str(ctx.get("class_name")), "a mapping (key: value)")
            msg = f"expected {want}, got {found}"
        elif kind.endswith(("_type", "_parsing")) or kind == "finite_number":
            word = _TYPE_WORDS.get(kind.split("_")[0], kind.split("_")[0])
            msg = f"expected {word}, got {found}"
            if word == "a list" and isinstance(value, str):
                msg += f"; write a one-item list as [{value}]"
        elif kind == "value_error":
            msg = str(ctx.get("error", err["msg"]))
            # validators quote the Python value (True); show it as written (yes) instead
            if msg.endswith(f"got {value!r}"):
                msg = msg[: -len(repr(value))] + found
        else:
            text = str(err["msg"])
            msg = f"{text[:1].lower()}{text[1:]}, got {found}"
        rep.add(path, msg, key=key)


def _is_duration(path: Path_) -> bool:
    return bool(path) and str(path[-1]) in (
        "max_seconds",
        "heartbeat_seconds",
        "colleague_timeout_seconds",
        "every",
        "grace",
        "min",
        "max",
        "reset_after",
        "timeout_seconds",
        "coalesce_seconds",
        "runaway_window",
    )


def _document_path(loc: tuple[Any, ...], data: Any) -> tuple[Path_, Any]:
    """The document path (canonical keys, list indices) of a pydantic error location, and
    the value found there. Pydantic adds tags such as ``function-before[...]``; they are not
    keys of the document and are dropped."""
    path: list[str | int] = []
    node: Any = data
    schema: _Node = CompanyFile
    for part in loc:
        if isinstance(part, int):
            if isinstance(node, list) and 0 <= part < len(node):
                path.append(part)
                node = node[part]
                schema = None
            continue
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            canonical, other = _keys(schema)
            name_to_key = {n: k for k, n in canonical.items()}
            key = name_to_key.get(part) or other.get(part) or (part if part in canonical else None)
            if key is None and isinstance(node, dict) and part in node:
                key = part  # an unknown key
            if key is None or not isinstance(node, dict):
                # not a key, or a value a validator expanded (`catch_up: run_once` becomes
                # {policy: run_once}): the error belongs to the value as written
                continue
            path.append(key)
            schema = _child(schema, key)
            node = node.get(key)
        elif isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
            schema = _child(schema, part)
    return tuple(path), node


def _did_you_mean(key: str, parent_path: Path_) -> str:
    schema = _schema_at(parent_path)
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return ""
    keys = sorted(_keys(schema)[0])
    close = _closest(key.lower().replace("-", "_"), keys, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ";"
    return f"{hint} valid keys here: {', '.join(keys)}"


# ---------------------------------------------------------------------------------------
# Loading: secrets written into the file

#: The values the scan refuses are the ones every redactor masks (companyd._secrets); none
#: is anchored, so a token inside longer text (instructions, context) is found too.
_SECRET_VALUE_RES = tuple((rx, what) for rx, what, _ in SECRET_PATTERNS)
_SECRET_KEY_RE = re.compile(
    r"(^|_)(token|api_?key|apikey|secret|secret_key|password|passwd|pwd|private_key|access_key"
    r"|auth|bearer)$"
    r"|pass(word|wd)$"  # glued on, as in PGPASSWORD
)


def _secret_key(key: str) -> bool:
    k = key.lower().replace("-", "_")
    return bool(_SECRET_KEY_RE.search(k)) and not k.endswith(("_env", "_credential"))


def _check_secrets(data: Any, rep: _Report) -> None:
    """A secret written into company.yaml is one error (not also an 'unknown key'): the
    file is kept in git, so the value must move out and be rotated."""

    def advice(path: Path_, key: str) -> str:
        if len(path) >= 2 and path[-2] == "env" and "mcp_servers" in path:
            return (
                f"pass it from the daemon's environment instead: `env_from: {{{key}: "
                f"{key}}}` (server variable: daemon variable), and remove it from 'env'"
            )
        schema = _schema_at(path[:-1])
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            canonical = _keys(schema)[0]
            refs = [k for k in (f"{key}_env", f"{key}_credential") if k in canonical]
            if refs:
                return "reference it by name with " + " or ".join(f"'{r}: NAME'" for r in refs)
        return "reference it by environment variable or systemd credential name"

    def walk(node: Any, path: Path_) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                kp = (*path, k)
                if isinstance(k, str) and looks_secret(kp, k, key=True):
                    continue
                # env_from maps variable names to variable names: references, not values
                literal = not (path and path[-1] == "env_from")
                # a number is a secret too (a PIN, a numeric password)
                number = isinstance(v, int | float) and not isinstance(v, bool)
                if literal and _secret_key(k) and (number or (isinstance(v, str) and v.strip())):
                    rep.add(
                        kp,
                        "expected a reference to a secret, got the secret itself; secrets "
                        "are never written in company.yaml — put the value in an "
                        "environment variable or a systemd credential (LoadCredential=) and "
                        f"{advice(kp, k)}; rotate it if the file was ever committed",
                    )
                    rep.settle(kp)
                    continue
                walk(v, kp)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))
        elif isinstance(node, str):
            looks_secret(path, node)

    def looks_secret(path: Path_, text: str, *, key: bool = False) -> bool:
        for rx, what in _SECRET_VALUE_RES:
            if rx.search(text):
                rep.add(
                    path,
                    f"expected no secrets in company.yaml, got what looks like {what}"
                    + (" as a key" if key else "")
                    + "; move it to an environment variable or a systemd credential "
                    "(LoadCredential=) and reference it by name, then rotate it — it "
                    "may already be in git history",
                    key=key,
                )
                rep.settle(path)
                return True
        return False

    walk(data, ())


# ---------------------------------------------------------------------------------------
# Loading: cross-checks, run on whatever parsed (valid or not)


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _cross_check(data: dict[str, Any], rep: _Report, base: Path) -> dict[str, str]:
    """Checks that span more than one value. They read the raw data defensively (any part
    may be malformed; the schema pass reports that) and skip what is already explained,
    so each mistake is reported once. Returns the loaded instruction files by agent."""
    agents = _as_dict(data.get("agents"))
    routines = _as_dict(data.get("routines"))
    names = list(agents)
    # References are checked only against a well-formed list of names: with `agents:`
    # missing or malformed, every assignee would look unknown (one mistake, many lines).
    names_known = isinstance(data.get("agents"), dict)
    depts = _departments(data.get("departments"), ("departments",), rep)
    depts_known = "departments" not in data or isinstance(data.get("departments"), dict)

    def unknown_agent(path: Path_, name: str, what: str) -> None:
        if not names_known:
            return
        close = _closest(name, names)
        hint = f"did you mean {close[0]!r}? " if close else ""
        rep.add(
            path,
            f"expected the name of an agent for {what}, got {name!r}; {hint}agents: "
            f"{', '.join(names) or '(none)'}",
        )

    if isinstance(data.get("agents"), dict) and not agents:
        rep.add(("agents",), "expected at least one agent, got none; add the CEO first")
    for slug in agents:
        if not SLUG_RE.match(slug):
            rep.add(
                ("agents", slug),
                f"expected an agent name made of lower-case letters, digits, '-' and '_', "
                f"starting with a letter (e.g. 'head-of-sales'), got {slug!r}",
                key=True,
            )
    for slug in routines:
        if not SLUG_RE.match(slug):
            rep.add(
                ("routines", slug),
                f"expected a routine name made of lower-case letters, digits, '-' and '_', "
                f"starting with a letter (e.g. 'daily-post'), got {slug!r}",
                key=True,
            )
    for slug, dpath in depts.items():
        if not SLUG_RE.match(slug):
            rep.add(
                dpath,
                f"expected a department name made of lower-case letters, digits, '-' and "
                f"'_', starting with a letter, got {slug!r}",
                key=True,
            )
        if slug in agents:
            rep.add(
                dpath,
                f"{slug!r} names both a department and an agent; rename one of them",
                key=True,
            )

    company = _as_dict(data.get("company"))
    _check_tz(company.get("timezone"), ("company", "timezone"), rep)

    instructions: dict[str, str] = {}
    for slug, a in agents.items():
        if not isinstance(a, dict):
            continue
        ap: Path_ = ("agents", slug)
        boss = a.get("reports_to")
        if isinstance(boss, str):
            if boss == slug:
                rep.add((*ap, "reports_to"), f"expected someone else, got {slug!r} itself")
            elif boss not in agents:
                unknown_agent((*ap, "reports_to"), boss, "reports_to")
        dept = a.get("department")
        if isinstance(dept, str) and dept not in depts and depts_known:
            close = _closest(dept, list(depts))
            hint = f"did you mean {close[0]!r}? " if close else ""
            rep.add(
                (*ap, "department"),
                f"expected a department declared under 'departments', got {dept!r}; "
                f"{hint}departments: {', '.join(depts) or '(none declared)'}",
            )
        for field_name, what in (("consult", "consult"), ("can_modify", "can_modify")):
            items = a.get(field_name)
            if not isinstance(items, list):
                continue
            for i, c in enumerate(items):
                if not isinstance(c, str):
                    continue
                if c == slug:
                    rep.add((*ap, field_name, i), f"expected another agent, got {slug!r} itself")
                elif c not in agents:
                    unknown_agent((*ap, field_name, i), c, what)
        text = a.get("instructions")
        file_ref = a.get("instructions_file")
        if "instructions" in a and "instructions_file" in a:
            rep.add(
                ap,
                "expected either 'instructions' (inline text) or 'instructions_file' (a "
                "path), got both; keep one",
                key=True,
            )
        elif isinstance(file_ref, str):
            loaded = _read_instructions(file_ref, (*ap, "instructions_file"), base, rep)
            if loaded is not None:
                instructions[slug] = loaded
        elif isinstance(text, str) and not text.strip():
            rep.add((*ap, "instructions"), "expected instructions, got empty text")
        elif "instructions" in a and text is None:
            rep.add(
                (*ap, "instructions"),
                "expected instructions, got nothing (an empty value); write them, or remove "
                "the key and give 'instructions_file'",
            )
        elif "instructions_file" in a and file_ref is None:
            rep.add(
                (*ap, "instructions_file"),
                "expected a path, got nothing (an empty value); write the path of the "
                "instructions file (relative to company.yaml)",
            )
        elif not any(k in a for k in ("instructions", "instructions_file", "role", "goal")):
            rep.add(
                ap,
                "expected 'instructions' (inline text) or 'instructions_file' (a path), or "
                "CrewAI-style 'role' and 'goal', got none of them",
                key=True,
            )
        elif "instructions" not in a and "instructions_file" not in a:
            given = [k for k in ("role", "goal") if a.get(k) is not None]
            if len(given) == 1:
                other = "goal" if given[0] == "role" else "role"
                rep.add(
                    ap,
                    f"expected CrewAI-style 'role' and 'goal' together, got only "
                    f"{given[0]!r}; add {other!r} (or give 'instructions')",
                    key=True,
                )

    _check_org_chart(agents, rep)

    for slug, r in routines.items():
        if not isinstance(r, dict):
            continue
        rp: Path_ = ("routines", slug)
        for field_name in ("assignee", "reviewer"):
            who = r.get(field_name)
            if isinstance(who, str) and who not in agents:
                unknown_agent((*rp, field_name), who, field_name)
            elif (
                isinstance(who, str)
                and r.get("enabled") is not False
                and _as_dict(agents[who]).get("enabled") is False
            ):
                # Every fire would be cancelled (and alerted) without doing any work. A
                # warning, not an error: disabling an agent must not make a file that ran
                # yesterday refuse to start or reload.
                rep.warn(
                    (*rp, field_name),
                    f"{field_name} {who!r} has `enabled: false`: every fire of this routine "
                    "will be cancelled; enable the agent, or set `enabled: false` on this "
                    "routine too",
                )
        trigger = _as_dict(r.get("trigger"))
        cron = trigger.get("cron")
        if isinstance(cron, str) and not rep.is_settled((*rp, "trigger", "cron")):
            problem = _cron_problem(cron)
            if problem:
                rep.add((*rp, "trigger", "cron"), problem)
        _check_tz(trigger.get("timezone"), (*rp, "trigger", "timezone"), rep)

    routes = _as_dict(_as_dict(data.get("alerts")).get("routes"))
    if routes:
        for kind in routes:
            if kind not in KINDS:
                close = _closest(kind, list(KINDS))
                hint = f"did you mean {close[0]!r}? " if close else ""
                rep.warn(
                    ("alerts", "routes", kind),
                    f"expected a known event kind, got {kind!r}; {hint}this route applies "
                    f"only if something publishes that kind (known: {', '.join(KINDS)})",
                    key=True,
                )

    quiet = _as_dict(_as_dict(data.get("alerts")).get("quiet_hours"))
    _check_tz(quiet.get("timezone"), ("alerts", "quiet_hours", "timezone"), rep)
    _check_models(data, rep)
    return instructions


def _closest(name: str, choices: list[str], cutoff: float = 0.6) -> list[str]:
    """The most similar of ``choices`` (ties go to the one sharing the longest prefix)."""
    best: list[tuple[float, int, str]] = []
    for c in choices:
        ratio = difflib.SequenceMatcher(None, name, c).ratio()
        if ratio >= cutoff:
            n = min(len(name), len(c))
            prefix = next((i for i in range(n) if name[i] != c[i]), n)
            best.append((ratio, prefix, c))
    return [max(best)[2]] if best else []


def _departments(value: Any, path: Path_, rep: _Report) -> dict[str, Path_]:
    """Every department slug in the (nested) tree → its path; a slug used twice is an error
    (agents name departments by slug alone)."""
    found: dict[str, Path_] = {}

    def walk(node: Any, at: Path_) -> None:
        if not isinstance(node, dict):
            return
        for slug, dept in node.items():
            dpath = (*at, slug)
            if slug in found:
                rep.add(
                    dpath,
                    f"expected department names to be unique across the tree, got {slug!r} "
                    f"again (first at {_dotted(found[slug])}); rename one",
                    key=True,
                )
                continue
            found[slug] = dpath
            if isinstance(dept, dict):
                walk(dept.get("departments"), (*dpath, "departments"))

    walk(value, path)
    return found


def _check_org_chart(agents: dict[str, Any], rep: _Report) -> None:
    """reports_to must form one tree: exactly one root and no cycles. Skipped when an
    agent or a reports_to value is malformed (that is already reported; guessing the
    chart from the rest would only add noise)."""
    boss: dict[str, str | None] = {}
    for slug, a in agents.items():
        if not isinstance(a, dict):
            return
        b = a.get("reports_to")
        if b is not None and not isinstance(b, str):
            return
        boss[slug] = b if b in agents and b != slug else None if b is None else "?"
    if not boss:
        return
    roots = [s for s, b in boss.items() if b is None]
    if len(roots) > 1:
        rep.add(
            ("agents", roots[1]),
            f"expected exactly one agent without 'reports_to' (the root of the org chart), "
            f"got {len(roots)}: {', '.join(roots[:8])}"
            + (f" and {len(roots) - 8} more" if len(roots) > 8 else "")
            + "; make all but one report to someone",
            key=True,
        )
    reported: set[str] = set()
    for start in boss:
        seen: list[str] = []
        cur: str | None = start
        while cur is not None and cur in boss and cur not in seen:
            seen.append(cur)
            cur = boss[cur]
        if cur is not None and cur in seen:
            cycle = seen[seen.index(cur) :]
            if reported & set(cycle):
                continue
            reported.update(cycle)
            chain = " -> ".join([*cycle, cur])
            rep.add(
                ("agents", cycle[0], "reports_to"),
                f"expected reports_to to form a tree, got a cycle: {chain}; break it by "
                "making one of them report to someone outside it",
            )
    if not roots and not reported:
        rep.add(
            ("agents",),
            "expected exactly one agent without 'reports_to' (usually the CEO), got none",
            key=True,
        )


def _check_models(data: dict[str, Any], rep: _Report) -> None:
    """Unknown model ids are warnings: they still run, priced at the dearest known rate."""
    pricing = set(_as_dict(data.get("pricing")))

    def check(value: Any, path: Path_) -> None:
        ids: list[tuple[Any, Path_]] = []
        if isinstance(value, str):
            ids.append((value, path))
        elif isinstance(value, dict):
            ids.append((value.get("primary"), (*path, "primary")))
            fallbacks = value.get("fallbacks")
            if isinstance(fallbacks, list):
                ids.extend((f, (*path, "fallbacks", i)) for i, f in enumerate(fallbacks))
        for mid, mpath in ids:
            if not isinstance(mid, str) or not mid or rep.is_settled(mpath):
                continue
            bare = _model_id(mid)
            if is_known_model(bare) or bare in pricing or mid in pricing:
                continue
            provider = mid.split("/", 1)[0] if "/" in mid else None
            if provider is not None and provider != "anthropic":
                rep.warn(
                    mpath,
                    f"model {mid!r} names the provider {provider!r}, but companyd calls only "
                    "Anthropic's Messages API: this model will fail at run time; use a "
                    "Claude model id",
                )
                continue
            rep.warn(
                mpath,
                f"unknown model id {mid!r}: it will be priced at the most expensive known "
                "rate; check the spelling, or add its price under 'pricing'",
            )

    check(_as_dict(data.get("defaults")).get("model"), ("defaults", "model"))
    for slug, a in _as_dict(data.get("agents")).items():
        if isinstance(a, dict) and "model" in a:
            check(a["model"], ("agents", slug, "model"))


def _read_instructions(ref: str, path: Path_, base: Path, rep: _Report) -> str | None:
    try:
        f = (base / Path(ref).expanduser()) if ref.strip() else base
        text = _read_at_most(f, _MAX_INSTRUCTIONS_BYTES).decode("utf-8")
        if not text.strip():
            rep.add(path, f"expected instructions in {ref!r}, got an empty file; write them")
            return None
        return text.replace("\r\n", "\n").replace("\r", "\n")  # as read_text() did
    except FileTooLarge:
        rep.add(
            path,
            f"expected instructions of at most {_MAX_INSTRUCTIONS_BYTES // _MB} MB in {ref!r}, "
            "got a larger file; check the path",
        )
    except FileNotFoundError:
        rep.add(
            path,
            f"expected an existing file, got {ref!r} (looked for {f}); create it or fix the "
            "path (relative to company.yaml)",
        )
    except IsADirectoryError:
        rep.add(path, f"expected a file, got the directory {ref!r} ({f})")
    except NotRegularFile as exc:
        rep.add(
            path,
            f"expected a regular file of instructions, got {exc.kind}: {ref!r} ({f}); point "
            "instructions_file at a text file (relative to company.yaml)",
        )
    except UnicodeDecodeError as exc:
        rep.add(path, f"expected UTF-8 text in {ref!r}, got the byte at offset {exc.start}")
    except OSError as exc:
        rep.add(path, f"cannot read {ref!r} ({f}): {exc.strerror or exc}")
    except (ValueError, RuntimeError) as exc:  # a NUL byte; `~user` with no such user
        rep.add(
            path,
            f"cannot use {ref!r} as a path ({exc}); fix the path (relative to company.yaml)",
        )
    return None


def _check_tz(value: Any, path: Path_, rep: _Report) -> None:
    if isinstance(value, str) and not rep.is_settled(path) and not _valid_tz(value):
        rep.add(path, _tz_message(value))


def _valid_tz(name: str) -> bool:
    if not name or name != name.strip():
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


@functools.cache
def _zones() -> tuple[str, ...]:
    import zoneinfo

    return tuple(sorted(zoneinfo.available_timezones()))


def _tz_message(name: str) -> str:
    zones = _zones()
    lowered = {z.lower(): z for z in zones}
    close = [lowered[name.lower()]] if name.lower() in lowered else []
    close = close or difflib.get_close_matches(name, zones, n=1, cutoff=0.6)
    if not close and "/" in name:  # right city, wrong region: "Europe/Tokyo"
        city = name.rsplit("/", 1)[1].lower()
        close = [z for z in zones if z.lower().endswith("/" + city)][:1]
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if not close and re.fullmatch(r"(UTC|GMT)?[+-]\d{1,2}(:?\d\d)?", name.strip()):
        hint = (
            "; a fixed offset does not follow daylight saving time — use the place's zone "
            "(e.g. 'Europe/Berlin'), or 'UTC'"
        )
    return f"expected an IANA time zone such as 'UTC' or 'Europe/Berlin', got {name!r}{hint}"


_CRON_FIELDS = ("minute", "hour", "day", "month", "day_of_week")
_CRON_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * sun",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}


def _cron_problem(expr: str) -> str | None:
    """Why ``expr`` is not an acceptable 5-field cron expression, or None."""
    macro = _CRON_MACROS.get(expr.strip().lower())
    if macro:
        return f"expected 5 cron fields, got the macro {expr!r}; write {macro!r} instead"
    fields = expr.split()
    if len(fields) != 5:
        return (
            f"expected 5 cron fields (minute hour day-of-month month day-of-week), got "
            f"{len(fields)} in {expr!r}"
        )
    dow = fields[4]
    if re.search(r"(?<![a-z])\d", dow.lower()):
        return (
            f"expected day-of-week by name (e.g. 'mon-fri', 'sun'), got {dow!r}: numbers are "
            "ambiguous (APScheduler 3 counts 0 as Monday, crontab as Sunday)"
        )
    from apscheduler.triggers.cron import CronTrigger

    for name, value in zip(_CRON_FIELDS, fields, strict=True):
        try:
            CronTrigger(**{name: value}, timezone="UTC")
        except Exception as exc:  # a third-party parser: any failure means "invalid"
            return f"expected a valid cron expression, got {expr!r}: {name} field: {exc}"
    try:
        trigger = CronTrigger(**dict(zip(_CRON_FIELDS, fields, strict=True)), timezone="UTC")
    except Exception as exc:
        return f"expected a valid cron expression, got {expr!r}: {exc}"
    if trigger.get_next_fire_time(None, datetime(2000, 1, 1, tzinfo=UTC)) is None:
        return (
            f"expected a cron expression that fires, got {expr!r}: no month has that day "
            "(e.g. 31 in February); fix the day or the month"
        )
    return None


# ---------------------------------------------------------------------------------------
# Resolution


def _resolve(
    spec: CompanyFile,
    path: Path,
    text: str,
    warnings: tuple[ConfigIssue, ...],
    instruction_files: Mapping[str, str],
) -> CompanyConfig:
    d = spec.defaults
    agents: dict[str, AgentConfig] = {}
    for slug, a in spec.agents.items():
        if a.instructions_file is not None:
            instructions = instruction_files[slug]
        elif a.instructions is not None:
            instructions = a.instructions
        else:
            parts = [
                f"Role: {a.role}" if a.role else "",
                f"Goal: {a.goal}" if a.goal else "",
                a.backstory or "",
            ]
            instructions = "\n".join(p for p in parts if p)
        agents[slug] = AgentConfig(
            slug=slug,
            title=a.title,
            reports_to=a.reports_to,
            department=a.department,
            instructions=instructions,
            model=a.model or d.model,
            budget=a.budget or d.budget,
            limits=a.limits or d.limits,
            restart=a.restart or d.restart,
            tools=a.tools,
            consult=a.consult,
            max_consult_depth=a.max_consult_depth,
            colleague_timeout_seconds=a.colleague_timeout_seconds,
            mcp_servers=dict(a.mcp_servers),
            heartbeat_seconds=a.heartbeat_seconds or d.heartbeat_seconds,
            can_modify=a.can_modify,
            enabled=a.enabled,
        )
    routines = {
        slug: RoutineConfig(
            slug=slug,
            assignee=r.assignee,
            description=r.description,
            expected_output=r.expected_output,
            cron=r.trigger.cron,
            every=r.trigger.every,
            timezone=r.trigger.timezone or spec.company.timezone,
            concurrency=r.concurrency,
            catch_up=r.catch_up,
            precondition=r.precondition,
            reviewer=r.reviewer,
            enabled=r.enabled,
        )
        for slug, r in spec.routines.items()
    }
    departments: dict[str, DepartmentConfig] = {}

    def add(depts: Mapping[str, DepartmentSpec], parent: str | None) -> None:
        for slug, dept in depts.items():
            departments[slug] = DepartmentConfig(
                slug=slug,
                title=dept.title,
                supervisor=dept.supervisor,
                parent=parent,
                departments=tuple(dept.departments),
                agents=tuple(s for s, a in spec.agents.items() if a.department == slug),
            )
            add(dept.departments, slug)

    add(spec.departments, None)
    return CompanyConfig(
        path=path,
        spec=spec,
        agents=agents,
        routines=routines,
        departments=departments,
        warnings=warnings,
        text=text,
    )


def default_config_path() -> Path:
    """company.yaml to use when none is given: ``$COMPANYD_CONFIG``, then
    ``$CONFIGURATION_DIRECTORY/company.yaml`` (systemd), then ``./company.yaml``."""
    env = os.environ.get("COMPANYD_CONFIG")
    if env:
        return Path(env)
    conf_dir = os.environ.get("CONFIGURATION_DIRECTORY")
    if conf_dir:
        return Path(conf_dir.split(":")[0]) / "company.yaml"
    return Path("company.yaml")
