"""company.yaml: the schema ``companyd/v1``, its loader and its resolved view.

The whole company is one YAML file kept in git. This module turns that file into a
:class:`CompanyConfig` or raises :class:`~companyd.errors.ConfigError` listing **every**
problem at once, each with ``file:line:column``, the dotted path, what was expected and
what was found. It never lets a traceback or a half-applied config reach the operator.

Layers:

* ``*Spec`` pydantic models mirror the file one-to-one (``extra="forbid"``); they are the
  schema. docs/configuration.md (and the README's reference) is kept in step with them by a
  test.
* :func:`load_config` reads, parses (rejecting duplicate keys, which PyYAML would silently
  merge), validates, cross-checks (unknown agents, cycles, cron expressions, secrets) and
  returns the resolved :class:`CompanyConfig`.
* :class:`CompanyConfig` is what the rest of companyd reads: agents and routines with
  defaults filled in, instruction files loaded, paths made absolute.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from companyd.errors import ConfigError, ConfigIssue

__all__ = [
    "SCHEMA",
    "AgentConfig",
    "AgentSpec",
    "BackoffSpec",
    "BudgetSpec",
    "CompanyConfig",
    "CompanyFile",
    "DepartmentConfig",
    "LimitsSpec",
    "ModelSpec",
    "RoutineConfig",
    "SupervisorSpec",
    "load_config",
    "load_config_text",
    "parse_duration",
]

SCHEMA = "companyd/v1"

SLUG_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


# ---------------------------------------------------------------------------------------
# Scalar helpers


_DURATION_RE = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*([smhd]))+\s*$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> float:
    """Seconds from ``90``, ``"90s"``, ``"5m"``, ``"1h30m"`` or ``"2d"``.

    Raises:
        ValueError: with a message naming the accepted forms.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 30s, 5m, 2h or 1d, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and _DURATION_RE.match(value):
        return sum(float(n) * _UNIT[u] for n, u in _DURATION_PART.findall(value))
    raise ValueError(f"expected a duration such as 30s, 5m, 2h or 1d, got {value!r}")


Duration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]
PositiveUSD = Annotated[float, Field(gt=0)]


def _model_id(value: Any) -> Any:
    # "anthropic/claude-x" is the provider/model spelling peers use; only Anthropic is served.
    if isinstance(value, str) and value.startswith("anthropic/"):
        return value.removeprefix("anthropic/")
    return value


ModelId = Annotated[str, BeforeValidator(_model_id), Field(min_length=1)]


class Spec(BaseModel):
    """Base of every schema node: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# ---------------------------------------------------------------------------------------
# Schema


class BudgetSpec(Spec):
    """A spending ceiling. At least one of daily_usd / monthly_usd, or ``unlimited``."""

    daily_usd: PositiveUSD | None = None
    monthly_usd: PositiveUSD | None = None
    warn_at: tuple[Annotated[float, Field(gt=0, le=1)], ...] = (0.5, 0.8, 1.0)
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
            raise ValueError("a budget is either 'unlimited' or has daily_usd/monthly_usd")
        if not self.unlimited and self.daily_usd is None and self.monthly_usd is None:
            raise ValueError("expected daily_usd and/or monthly_usd (or write `budget: unlimited`)")
        return self


class ModelSpec(Spec):
    """Which Claude model serves an agent, and what to fall back to."""

    primary: ModelId
    fallbacks: tuple[ModelId, ...] = ()
    max_output_tokens: Annotated[int, Field(gt=0, le=64_000)] = 4096

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
    max_tokens: Annotated[int, Field(gt=0)] | None = None
    max_seconds: Duration | None = None
    max_steps: Annotated[int, Field(gt=0)] | None = None
    loop_threshold: Annotated[int, Field(ge=2)] = 3


class BackoffSpec(Spec):
    """Opt-in restart backoff (an extension beyond OTP; docs/supervision.md)."""

    min: Duration = 1.0
    max: Duration = 60.0
    factor: Annotated[float, Field(ge=1)] = 2.0
    jitter: Annotated[float, Field(ge=0, le=1)] = 0.2
    reset_after: Duration = 60.0


Strategy = Literal["one_for_one", "one_for_all", "rest_for_one"]
RestartType = Literal["permanent", "transient", "temporary"]


class SupervisorSpec(Spec):
    """How a supervisor reacts to its children's exits."""

    strategy: Strategy = "one_for_one"
    max_restarts: Annotated[int, Field(ge=0)] = 3
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
    """An external tool server an agent talks to over MCP stdio."""

    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    env_from: dict[str, str] = {}
    idempotent_tools: tuple[str, ...] = ()
    timeout_seconds: Duration = 60.0


class AgentSpec(Spec):
    """One role agent. Unset fields take their value from ``defaults``."""

    title: str
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
    max_consult_depth: Annotated[int, Field(ge=1, le=5)] = 2
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
        if (self.cron is None) == (self.every is None):
            raise ValueError("expected exactly one of 'cron' or 'every'")
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
    description: str
    expected_output: str | None = None
    trigger: TriggerSpec
    concurrency: Literal["skip_if_active", "queue"] = "skip_if_active"
    catch_up: CatchUpSpec = CatchUpSpec()
    precondition: Literal["always", "memory_changed", "inbox_nonempty"] = "always"
    reviewer: str | None = None
    enabled: bool = True


class CompanySpec(Spec):
    """The company itself."""

    name: str
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

    @field_validator("start", "end")
    @classmethod
    def _hhmm(cls, v: str) -> str:
        if not re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", v):
            raise ValueError(f"expected a time as HH:MM (24-hour), got {v!r}")
        return v


class TelegramSpec(Spec):
    """Where alerts go. Secrets are referenced, never written here."""

    bot_token_env: str | None = "TELEGRAM_BOT_TOKEN"
    bot_token_credential: str | None = "telegram_bot_token"
    chat_ids: tuple[int, ...] = ()
    chat_ids_env: str | None = None
    api_url: str | None = None


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

    input: Annotated[float, Field(ge=0)]
    output: Annotated[float, Field(ge=0)]
    cache_write_5m: Annotated[float, Field(ge=0)] | None = None
    cache_write_1h: Annotated[float, Field(ge=0)] | None = None
    cache_read: Annotated[float, Field(ge=0)] | None = None
    effective_from: date | None = None


class SpendSpec(Spec):
    """Runaway detection: spend rate above ``runaway_factor`` × an agent's usual rate."""

    runaway_factor: Annotated[float, Field(gt=1)] = 5.0
    runaway_window: Duration = 600.0


class AnthropicSpec(Spec):
    """How to reach the Messages API. The key is referenced, never written here."""

    api_key_env: str = "ANTHROPIC_API_KEY"
    api_key_credential: str = "anthropic_api_key"
    base_url: str | None = None
    timeout_seconds: Duration = 120.0
    max_retries: Annotated[int, Field(ge=0, le=10)] = 2


class MetricsSpec(Spec):
    """Optional Prometheus endpoint, loopback only."""

    listen: str | None = None


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
        return self.path.parent

    def state_dir(self, override: str | os.PathLike[str] | None = None) -> Path:
        """State directory: ``override`` (CLI), then ``$STATE_DIRECTORY``, then company.yaml's
        ``state_dir`` (relative to the file), then ``./state``."""
        if override is not None:
            return Path(override).absolute()
        env = os.environ.get("STATE_DIRECTORY")
        if env:
            return Path(env.split(":")[0]).absolute()
        if self.spec.state_dir:
            return (self.base_dir / self.spec.state_dir).absolute()
        return Path("state").absolute()

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


# ---------------------------------------------------------------------------------------
# Loading


class _Positions:
    """Line/column of every node by its path in the document, from the YAML compose tree."""

    def __init__(self) -> None:
        self.value: dict[tuple[str | int, ...], tuple[int, int]] = {}
        self.key: dict[tuple[str | int, ...], tuple[int, int]] = {}

    def of(self, path: tuple[str | int, ...], *, key: bool = False) -> tuple[int, int]:
        """Position of the deepest known node on ``path``."""
        table = self.key if key else self.value
        p = path
        while p:
            if p in table:
                return table[p]
            if key and p in self.value:
                return self.value[p]
            p = p[:-1]
        return self.value.get((), (1, 1))


def _walk(
    node: yaml.Node,
    path: tuple[str | int, ...],
    pos: _Positions,
    issues: list[ConfigIssue],
    file: str,
) -> Any:
    """Turn a composed YAML node into plain Python, recording positions and duplicates."""
    pos.value[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        seen: dict[Any, int] = {}
        for knode, vnode in node.value:
            key = _scalar(knode) if isinstance(knode, yaml.ScalarNode) else str(knode.value)
            kpath = (*path, key)
            if key in seen:
                issues.append(
                    ConfigIssue(
                        file=file,
                        line=knode.start_mark.line + 1,
                        column=knode.start_mark.column + 1,
                        path=".".join(str(p) for p in kpath),
                        message=(
                            f"duplicate key {key!r} (first at line {seen[key]}); YAML would "
                            "silently keep only the last one — merge them into one entry"
                        ),
                    )
                )
                continue
            seen[key] = knode.start_mark.line + 1
            pos.key[kpath] = (knode.start_mark.line + 1, knode.start_mark.column + 1)
            out[key] = _walk(vnode, kpath, pos, issues, file)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_walk(v, (*path, i), pos, issues, file) for i, v in enumerate(node.value)]
    return _scalar(node)


_CONSTRUCTOR = yaml.SafeLoader(stream="")


def _scalar(node: yaml.Node) -> Any:
    return _CONSTRUCTOR.construct_object(node, deep=True)


def _compose(text: str, file: str) -> tuple[Any, _Positions, list[ConfigIssue]]:
    issues: list[ConfigIssue] = []
    pos = _Positions()
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        problem = exc.problem or "invalid YAML"
        context = f" ({exc.context})" if exc.context else ""
        issues.append(
            ConfigIssue(
                file=file,
                line=line,
                column=col,
                path="",
                message=f"YAML syntax error: {problem}{context}; fix the syntax at this position",
            )
        )
        return None, pos, issues
    except yaml.YAMLError as exc:
        issues.append(ConfigIssue(file=file, line=0, column=0, path="", message=str(exc)))
        return None, pos, issues
    if node is None:
        return None, pos, issues
    return _walk(node, (), pos, issues, file), pos, issues


def load_config(path: str | os.PathLike[str]) -> CompanyConfig:
    """Read, validate and resolve a company.yaml.

    Raises:
        ConfigError: listing every problem found, in file order.
    """
    p = Path(path)
    file = str(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            [
                ConfigIssue(
                    file=file,
                    line=0,
                    column=0,
                    path="",
                    message="file not found; create one with `companyd init` or pass --config",
                )
            ]
        ) from None
    except OSError as exc:
        raise ConfigError(
            [ConfigIssue(file=file, line=0, column=0, path="", message=f"cannot read: {exc}")]
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(
            [
                ConfigIssue(
                    file=file,
                    line=line,
                    column=col,
                    path="",
                    message=(
                        f"not UTF-8: byte {raw[exc.start]:#04x} cannot be decoded; save the "
                        "file as UTF-8"
                    ),
                )
            ]
        ) from None
    return load_config_text(text, file=file, base_dir=p.absolute().parent)


def load_config_text(
    text: str, *, file: str = "company.yaml", base_dir: Path | None = None
) -> CompanyConfig:
    """Validate and resolve company.yaml contents given as text.

    Args:
        text: the YAML document.
        file: the name to use in messages.
        base_dir: directory relative paths (instructions_file, memory.path) resolve against.

    Raises:
        ConfigError: listing every problem found.
    """
    base = (base_dir or Path.cwd()).absolute()
    data, pos, issues = _compose(text, file)
    if issues and data is None:
        raise ConfigError(issues)
    if data is None:
        raise ConfigError(
            [
                ConfigIssue(
                    file=file,
                    line=0,
                    column=0,
                    path="",
                    message=(
                        "the file is empty; expected a mapping with at least 'company' and "
                        "'agents' — run `companyd init` for a commented starter"
                    ),
                )
            ]
        )
    if not isinstance(data, dict):
        line, col = pos.of(())
        raise ConfigError(
            [
                ConfigIssue(
                    file=file,
                    line=line,
                    column=col,
                    path="",
                    message=(
                        f"expected a mapping (key: value) at the top level, got "
                        f"{type(data).__name__} {_short(data)}"
                    ),
                )
            ]
        )
    issues.extend(_secret_issues(data, pos, file))
    spec: CompanyFile | None = None
    try:
        spec = CompanyFile.model_validate(data)
    except ValidationError as exc:
        issues.extend(_pydantic_issues(exc, data, pos, file))
    if spec is not None:
        issues.extend(_cross_check(spec, pos, file, base))
    errors = [i for i in issues if i.severity == "error"]
    if errors or spec is None:
        raise ConfigError(sorted(errors, key=lambda i: (i.line, i.column)))
    warnings = tuple(sorted((i for i in issues if i.severity == "warning"), key=_order))
    return _resolve(spec, Path(base / Path(file).name), text, warnings)


def _order(issue: ConfigIssue) -> tuple[int, int]:
    return (issue.line, issue.column)


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


_TYPE_WORDS = {
    "float": "a number",
    "int": "a whole number",
    "bool": "true or false",
    "string": "text",
    "dict": "a mapping (key: value)",
    "list": "a list",
    "tuple": "a list",
    "date": "a date (YYYY-MM-DD)",
}


def _pydantic_issues(
    exc: ValidationError, data: Any, pos: _Positions, file: str
) -> Iterator[ConfigIssue]:
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        # pydantic appends tags such as 'function-before[...]' or union member names; keep
        # only the parts that are real keys or indices in the document.
        path = _document_path(loc, data)
        kind = err["type"]
        value = err.get("input")
        key_only = kind in ("extra_forbidden",)
        line, col = pos.of(path, key=key_only)
        dotted = ".".join(str(p) for p in path)
        if kind == "extra_forbidden":
            parent = _lookup(data, path[:-1])
            msg = f"unknown key {path[-1]!r}" + _did_you_mean(str(path[-1]), path[:-1], parent)
        elif kind == "missing":
            msg = f"required key {str(path[-1])!r} is missing"
        elif kind == "literal_error":
            expected = err.get("ctx", {}).get("expected", "")
            msg = f"expected one of {expected}, got {_short(value)}"
        elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
            ctx = err.get("ctx", {})
            bound = next(iter(ctx.values()), "?")
            words = {
                "greater_than": f"greater than {bound}",
                "greater_than_equal": f"at least {bound}",
                "less_than": f"less than {bound}",
                "less_than_equal": f"at most {bound}",
            }[kind]
            msg = f"expected a number {words}, got {_short(value)}"
        elif kind.endswith("_type") or kind.endswith("_parsing"):
            word = _TYPE_WORDS.get(kind.split("_")[0], kind.split("_")[0])
            msg = f"expected {word}, got {_short(value)}"
        elif kind == "value_error":
            msg = str(err.get("ctx", {}).get("error", err["msg"]))
        else:
            msg = err["msg"][0].lower() + err["msg"][1:] + f", got {_short(value)}"
        yield ConfigIssue(file=file, line=line, column=col, path=dotted, message=msg)


def _document_path(loc: tuple[Any, ...], data: Any) -> tuple[str | int, ...]:
    path: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, dict) and part == "schema_":
            path.append("schema")
            node = node.get("schema")
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and not _is_tag(part):
            path.append(part)  # a missing or unknown key
            node = None
    return tuple(path)


def _is_tag(part: str) -> bool:
    return "[" in part or part in ("str", "int", "float", "bool", "dict", "list", "tuple")


def _lookup(data: Any, path: tuple[str | int, ...]) -> Any:
    node = data
    for p in path:
        try:
            node = node[p]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def _inner_model(annotation: Any, *, want_mapping_value: bool) -> Any:
    import typing

    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if origin is dict and args:
        return _MapOf(args[1])
    for a in args:
        m = _inner_model(a, want_mapping_value=want_mapping_value)
        if m is not None:
            return m
    return None


class _MapOf:
    def __init__(self, inner: Any) -> None:
        self.inner = inner


def _did_you_mean(key: str, parent_path: tuple[str | int, ...], parent: Any) -> str:
    keys = _keys_for(parent_path)
    if not keys:
        return ""
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{hint} valid keys here: {', '.join(sorted(keys))}"


def _keys_for(path: tuple[str | int, ...]) -> list[str]:
    model: Any = CompanyFile
    for part in path:
        if isinstance(model, _MapOf):
            model = _inner_model(model.inner, want_mapping_value=True)
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
        fld = model.model_fields.get(str(part))
        if fld is None:
            fld = next((f for f in model.model_fields.values() if f.alias == part), None)
        if fld is None:
            return []
        model = _inner_model(fld.annotation, want_mapping_value=True)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [f.alias or n for n, f in model.model_fields.items()]
    return []


# -- secrets ----------------------------------------------------------------------------

_SECRET_VALUE_RES = (
    (re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"), "an Anthropic API key"),
    (re.compile(r"^\d{6,12}:[A-Za-z0-9_\-]{30,}$"), "a Telegram bot token"),
)
_SECRET_KEYS = {"api_key", "bot_token", "token", "password", "secret", "apikey", "auth_token"}


def _secret_issues(data: Any, pos: _Positions, file: str) -> Iterator[ConfigIssue]:
    def walk(node: Any, path: tuple[str | int, ...]) -> Iterator[ConfigIssue]:
        if isinstance(node, dict):
            for k, v in node.items():
                kp = (*path, k)
                if isinstance(k, str) and k.lower() in _SECRET_KEYS and isinstance(v, str):
                    line, col = pos.of(kp)
                    yield ConfigIssue(
                        file=file,
                        line=line,
                        column=col,
                        path=".".join(map(str, kp)),
                        message=(
                            "secrets are not written in company.yaml; put the value in an "
                            f"environment variable or a systemd credential and reference it "
                            f"with '{k}_env: NAME' (or '{k}_credential: NAME')"
                        ),
                    )
                    continue
                yield from walk(v, kp)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from walk(v, (*path, i))
        elif isinstance(node, str):
            for rx, what in _SECRET_VALUE_RES:
                if rx.search(node):
                    line, col = pos.of(path)
                    yield ConfigIssue(
                        file=file,
                        line=line,
                        column=col,
                        path=".".join(map(str, path)),
                        message=(
                            f"this looks like {what} written into the file; move it to an "
                            "environment variable or a systemd credential (LoadCredential=) "
                            "and reference it by name, then rotate the key — it may already "
                            "be in git history"
                        ),
                    )
                    break

    yield from walk(data, ())


# -- cross-field checks -----------------------------------------------------------------


def _cross_check(
    spec: CompanyFile, pos: _Positions, file: str, base: Path
) -> Iterator[ConfigIssue]:
    def issue(path: tuple[str | int, ...], message: str, severity: str = "error") -> ConfigIssue:
        line, col = pos.of(path)
        return ConfigIssue(
            file=file,
            line=line,
            column=col,
            path=".".join(map(str, path)),
            message=message,
            severity=severity,
        )

    def key_issue(path: tuple[str | int, ...], message: str) -> ConfigIssue:
        line, col = pos.of(path, key=True)
        return ConfigIssue(
            file=file, line=line, column=col, path=".".join(map(str, path)), message=message
        )

    agents = list(spec.agents)
    depts = dict(_all_departments(spec.departments))

    def unknown_agent(path: tuple[str | int, ...], name: str, what: str) -> ConfigIssue:
        close = difflib.get_close_matches(name, agents, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return issue(
            path,
            f"{what} {name!r} is not an agent; {hint}agents: {', '.join(agents)}",
        )

    for slug in spec.agents:
        if not SLUG_RE.match(slug):
            yield key_issue(
                ("agents", slug),
                f"agent name {slug!r} is not a slug; use lower-case letters, digits, '-' "
                "and '_', starting with a letter (e.g. 'head-of-sales')",
            )
    for slug in spec.routines:
        if not SLUG_RE.match(slug):
            yield key_issue(
                ("routines", slug),
                f"routine name {slug!r} is not a slug; use lower-case letters, digits, '-' "
                "and '_', starting with a letter",
            )
    for slug, _ in _all_departments(spec.departments):
        if not SLUG_RE.match(slug):
            yield issue(("departments", slug), f"department name {slug!r} is not a slug")
        if slug in spec.agents:
            yield issue(
                ("departments", slug),
                f"{slug!r} names both a department and an agent; rename one of them",
            )

    for tz_path, tz in [(("company", "timezone"), spec.company.timezone)]:
        if not _valid_tz(tz):
            yield issue(tz_path, _tz_message(tz))

    roots = [s for s, a in spec.agents.items() if a.reports_to is None]
    for slug, a in spec.agents.items():
        ap: tuple[str | int, ...] = ("agents", slug)
        if a.reports_to is not None:
            if a.reports_to not in spec.agents:
                yield unknown_agent((*ap, "reports_to"), a.reports_to, "reports_to")
            elif a.reports_to == slug:
                yield issue((*ap, "reports_to"), f"{slug!r} cannot report to itself")
        if a.department is not None and a.department not in depts:
            close = difflib.get_close_matches(a.department, list(depts), n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}? " if close else ""
            yield issue(
                (*ap, "department"),
                f"department {a.department!r} is not declared under 'departments'; "
                f"{hint}departments: {', '.join(depts) or '(none)'}",
            )
        for i, c in enumerate(a.consult):
            if c not in spec.agents:
                yield unknown_agent((*ap, "consult", i), c, "consult names")
            elif c == slug:
                yield issue((*ap, "consult", i), f"{slug!r} cannot consult itself")
        for i, c in enumerate(a.can_modify):
            if c not in spec.agents:
                yield unknown_agent((*ap, "can_modify", i), c, "can_modify names")
        if a.instructions is not None and a.instructions_file is not None:
            yield issue(ap, "set either 'instructions' or 'instructions_file', not both")
        if a.instructions_file is not None:
            f = base / a.instructions_file
            if not f.is_file():
                yield issue(
                    (*ap, "instructions_file"),
                    f"file {a.instructions_file!r} not found (looked in {f}); create it or "
                    "fix the path (relative to company.yaml)",
                )
        if a.instructions is None and a.instructions_file is None and not (a.role or a.goal):
            yield issue(
                ap,
                "expected 'instructions' (inline text) or 'instructions_file' (a path), or "
                "CrewAI-style 'role' and 'goal'",
            )
    if len(roots) != 1 and agents:
        where = ("agents",)
        if not roots:
            yield issue(
                where,
                "no agent is the root of the org chart: exactly one agent must have no "
                "'reports_to' (usually the CEO)",
            )
        else:
            yield issue(
                ("agents", roots[1]),
                f"exactly one agent may have no 'reports_to', but {len(roots)} do: "
                f"{', '.join(roots)}; make all but one report to someone",
            )
    yield from _cycles(spec, issue)

    for slug, r in spec.routines.items():
        rp: tuple[str | int, ...] = ("routines", slug)
        if r.assignee not in spec.agents:
            yield unknown_agent((*rp, "assignee"), r.assignee, "assignee")
        if r.reviewer is not None and r.reviewer not in spec.agents:
            yield unknown_agent((*rp, "reviewer"), r.reviewer, "reviewer")
        if r.trigger.cron is not None:
            msg = _cron_problem(r.trigger.cron)
            if msg:
                yield issue((*rp, "trigger", "cron"), msg)
        if r.trigger.timezone is not None and not _valid_tz(r.trigger.timezone):
            yield issue((*rp, "trigger", "timezone"), _tz_message(r.trigger.timezone))

    if spec.alerts.quiet_hours and spec.alerts.quiet_hours.timezone:
        tz = spec.alerts.quiet_hours.timezone
        if not _valid_tz(tz):
            yield issue(("alerts", "quiet_hours", "timezone"), _tz_message(tz))

    from companyd.spend.prices import is_known_model  # late import: spend imports config

    for slug, a in spec.agents.items():
        m = a.model or spec.defaults.model
        mpath: tuple[str | int, ...] = (
            ("agents", slug, "model") if a.model else ("defaults", "model")
        )
        for mid in m.chain:
            if not is_known_model(mid) and mid not in spec.pricing:
                yield issue(
                    mpath,
                    f"unknown model id {mid!r}: it will be priced at the most expensive known "
                    "rate; add it under 'pricing' if its price is known",
                    severity="warning",
                )


def _all_departments(
    depts: Mapping[str, DepartmentSpec], parent: str | None = None
) -> Iterator[tuple[str, DepartmentSpec]]:
    for slug, d in depts.items():
        yield slug, d
        yield from _all_departments(d.departments, slug)


def _cycles(spec: CompanyFile, issue: Any) -> Iterator[ConfigIssue]:
    reported: set[str] = set()
    for start in spec.agents:
        seen: list[str] = []
        cur: str | None = start
        while cur is not None and cur in spec.agents and cur not in seen:
            seen.append(cur)
            cur = spec.agents[cur].reports_to
        if cur is not None and cur in seen:
            cycle = seen[seen.index(cur) :]
            key = min(cycle)
            if key in reported:
                continue
            reported.add(key)
            chain = " -> ".join([*cycle, cur])
            yield issue(
                ("agents", cycle[0], "reports_to"),
                f"reports_to forms a cycle: {chain}; the org chart must be a tree",
            )


def _valid_tz(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def _tz_message(name: str) -> str:
    import zoneinfo

    zones = sorted(zoneinfo.available_timezones())
    close = difflib.get_close_matches(name, zones, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown time zone {name!r}{hint} use an IANA name such as 'UTC' or 'Europe/Berlin'"


_DOW_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _cron_problem(expr: str) -> str | None:
    """Why ``expr`` is not an acceptable 5-field cron expression, or None."""
    fields = expr.split()
    if len(fields) != 5:
        return (
            f"expected 5 cron fields (minute hour day-of-month month day-of-week), got "
            f"{len(fields)} in {expr!r}"
        )
    dow = fields[4]
    if re.search(r"(?<![a-z])\d", dow.lower()) and dow not in ("*",):
        return (
            f"numeric day-of-week {dow!r} is ambiguous (APScheduler 3 counts 0 as Monday, "
            "crontab as Sunday); use names such as 'mon-fri' or 'sun'"
        )
    from apscheduler.triggers.cron import CronTrigger

    try:
        CronTrigger(
            minute=fields[0],
            hour=fields[1],
            day=fields[2],
            month=fields[3],
            day_of_week=fields[4],
            timezone="UTC",
        )
    except (ValueError, TypeError) as exc:
        return f"invalid cron expression {expr!r}: {exc}"
    return None


# -- resolution -------------------------------------------------------------------------


def _resolve(
    spec: CompanyFile, path: Path, text: str, warnings: tuple[ConfigIssue, ...]
) -> CompanyConfig:
    d = spec.defaults
    base = path.parent
    agents: dict[str, AgentConfig] = {}
    for slug, a in spec.agents.items():
        if a.instructions_file is not None:
            instructions = (base / a.instructions_file).read_text(encoding="utf-8")
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
