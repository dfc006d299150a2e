"""The schema ``companyd/v1``: pydantic models that mirror company.yaml one-to-one.

Every ``*Spec`` forbids unknown keys and is immutable; :class:`CompanyFile` is the top level.
The README's configuration reference is kept in step with these models by a test
(tests/test_readme.py); docs/configuration.md records why the schema looks as it does.
They validate values one at a time: checks that span several values live in
:mod:`companyd.config._checks`.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from companyd.config._done_when import DoneWhenSpec
from companyd.config._scalars import (
    CredentialName,
    Duration,
    EnvName,
    ModelId,
    PositiveInt,
    PositiveUSD,
    Rate,
    Text,
    http_url,
    is_loopback,
    listen_address,
    number,
    whole,
)

SCHEMA = "companyd/v1"
#: The number in :data:`SCHEMA`: the newest company.yaml format this code reads. A file
#: without ``schema:`` is version 1 (the format before the key was introduced).
#: ``companyd migrate`` brings an older file to it; a newer one is refused (docs/upgrade.md).
SCHEMA_VERSION = 1


class Spec(BaseModel):
    """Base of every schema node: unknown keys are errors, values are immutable."""

    # defer_build: pydantic would build each class's own validator and serializer when the
    # class is created, work CompanyFile's validator repeats inline; deferred, only the
    # specs validated on their own are built, at first use (~5 ms of every start, issue 31)
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)


def nested(**values: Any) -> Any:
    """The default of a field holding a nested spec: ``values`` validated by the enclosing
    model's own validator when the key is absent (the same result as ``SomeSpec(**values)``).

    A spec instance as a class-level default would be built when this module is imported,
    each building its class's own validator (:class:`Spec`'s ``defer_build``).
    """
    return Field(default_factory=lambda: dict(values), validate_default=True)


class BudgetSpec(Spec):
    """A spending ceiling. At least one of daily_usd / monthly_usd, or ``unlimited``."""

    daily_usd: PositiveUSD | None = None
    monthly_usd: PositiveUSD | None = None
    warn_at: tuple[
        Annotated[float, BeforeValidator(number), Field(gt=0, le=1, allow_inf_nan=False)], ...
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
    max_output_tokens: Annotated[int, BeforeValidator(whole), Field(gt=0, le=64_000)] = 4096

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
    loop_threshold: Annotated[int, BeforeValidator(whole), Field(ge=2)] = 3


class BackoffSpec(Spec):
    """Opt-in restart backoff (an extension beyond OTP; docs/supervision.md)."""

    min: Duration = 1.0
    max: Duration = 60.0
    factor: Annotated[float, BeforeValidator(number), Field(ge=1, allow_inf_nan=False)] = 2.0
    jitter: Annotated[float, BeforeValidator(number), Field(ge=0, le=1)] = 0.2
    reset_after: Duration = 60.0


Strategy = Literal["one_for_one", "one_for_all", "rest_for_one"]
RestartType = Literal["permanent", "transient", "temporary"]


class SupervisorSpec(Spec):
    """How a supervisor reacts to its children's exits."""

    strategy: Strategy = "one_for_one"
    max_restarts: Annotated[int, BeforeValidator(whole), Field(ge=0)] = 3
    max_seconds: Duration = Field(default=60.0, alias="within_seconds")
    backoff: BackoffSpec | None = None


class DepartmentSpec(Spec):
    """A group of agents (and sub-departments): one supervisor in the tree."""

    title: str | None = None
    description: str | None = None
    supervisor: SupervisorSpec = nested()
    departments: dict[str, DepartmentSpec] = {}


def _daily_limit(value: Any) -> Any:
    """``5/day`` → 5 (the only window there is: a calendar day in the company's timezone)."""
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(day|d)\s*", value)
        if not m:
            raise ValueError(f"expected a number of calls per day such as '5/day', got {value!r}")
        return int(m.group(1))
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a number of calls per day such as '5/day', got {value!r}")
    return value


#: A number of calls per day (``5/day``).
DailyLimit = Annotated[int, BeforeValidator(_daily_limit), Field(ge=0)]

_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


#: How many characters of one tool result the model reads: at least 1,000 (less would cut
#: ordinary answers), at most 2,000,000 (about 500,000 tokens: more than any context window).
ResultChars = Annotated[int, BeforeValidator(whole), Field(ge=1_000, le=2_000_000)]


class ToolsSpec(Spec):
    """Which tools an agent may use. ``allow`` absent = every tool it is given.

    ``require_approval`` names tools whose every call waits for the founder's approval
    (added to ``defaults.tools.require_approval``); ``allow_without_approval`` names tools
    that run without it although their MCP annotations would ask for it (docs/tools.md);
    ``require_approval`` wins when a tool is in both. ``approval_timeout`` is how long such a
    call (or an ``ask_founder`` question) waits before it counts as rejected (default:
    ``defaults.tools.approval_timeout``); ``ask_founder`` gives the agent the
    ``ask_founder`` tool (docs/desk.md); ``max_open_questions`` is how many of its questions
    may wait for the founder at once — a further ``ask_founder`` is refused to the agent
    (default: ``defaults.tools.max_open_questions``, 3).
    ``rate_limit`` caps calls of a tool per day
    (``{post_update: 5/day}``), counted durably in the company's timezone.
    ``max_result_chars`` is how much of one tool result the model reads (default:
    ``defaults.tools.max_result_chars``); the rest is cut, with a note of its full size.
    """

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()
    require_approval: tuple[str, ...] = ()
    allow_without_approval: tuple[str, ...] = ()
    approval_timeout: Duration | None = None
    ask_founder: bool = False
    max_open_questions: Annotated[int, BeforeValidator(whole), Field(ge=1, le=100)] | None = None
    rate_limit: dict[str, DailyLimit] = {}
    max_result_chars: ResultChars | None = None


class DefaultToolsSpec(Spec):
    """What every agent's tool calls wait for, unless it says more (docs/desk.md), and how
    much of a tool result the model reads (docs/tools.md, "Large results").
    """

    require_approval: tuple[str, ...] = ()
    approval_timeout: Duration = 86_400.0
    max_open_questions: Annotated[int, BeforeValidator(whole), Field(ge=1, le=100)] = 3
    max_result_chars: ResultChars = 100_000


def _sandbox_switch(value: Any) -> Any:
    # `sandbox: true` is the default sandbox; `sandbox: false` opts a server out.
    if value is True:
        return {}
    return value


class SandboxSpec(Spec):
    """What a tool server's sandbox lets through (docs/tools.md): extra paths, read-only
    (``read``) or writable (``write``), absolute; the network (``network: false`` — no
    network at all, loopback included); and, when the daemon runs as root, the
    unprivileged user the server runs as (``run_as``).
    """

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    network: bool = True
    run_as: Text = "nobody"

    @field_validator("read", "write")
    @classmethod
    def _absolute(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for path in v:
            if not path.startswith("/"):
                raise ValueError(
                    f"expected an absolute path, got {path!r}; write it in full (e.g. "
                    "/srv/shared/reports)"
                )
            if path.rstrip("/") == "":
                raise ValueError(
                    "expected a directory or file, got '/': binding the whole filesystem "
                    "would undo the sandbox; name the directories the server needs, or set "
                    "`sandbox: false` on this server"
                )
        return v


class ToolServerLimitsSpec(Spec):
    """Resource limits of one tool server's process (setrlimit): address space in MiB,
    processes (and threads) of its user, open files, the size of one file it writes in MiB;
    ``0`` means no limit of that kind. ``message_mb`` bounds one MCP message the server
    writes (what the daemon holds of it).
    """

    memory_mb: Annotated[int, BeforeValidator(whole), Field(ge=0)] = 2048
    processes: Annotated[int, BeforeValidator(whole), Field(ge=0)] = 512
    open_files: Annotated[int, BeforeValidator(whole), Field(ge=0)] = 1024
    file_mb: Annotated[int, BeforeValidator(whole), Field(ge=0)] = 1024
    message_mb: Annotated[int, BeforeValidator(whole), Field(ge=1, le=256)] = 8


class McpServerSpec(Spec):
    """An external tool server an agent talks to over MCP stdio.

    ``env`` sets literal (non-secret) variables for the server; ``env_from`` maps a
    variable of the server to a variable of the daemon's own environment, which is how
    tokens reach it. ``timeout_seconds`` bounds one tool call; ``handshake_timeout_seconds``
    bounds starting the server (process start, MCP ``initialize``, ``tools/list``): a server
    that misses it is left out and retried, the agent runs without its tools. ``sandbox``
    (on by default; ``false`` opts out), ``limits`` and ``risk`` (how its tools' MCP
    annotations decide which calls wait for the founder) are described in docs/tools.md.
    """

    command: Text
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    env_from: dict[str, EnvName] = {}
    idempotent_tools: tuple[str, ...] = ()
    timeout_seconds: Duration = 60.0
    handshake_timeout_seconds: Duration = 30.0
    sandbox: Annotated[SandboxSpec | Literal[False], BeforeValidator(_sandbox_switch)] = nested()
    limits: ToolServerLimitsSpec = nested()
    risk: Literal["from_annotations", "always_ask", "trusted"] = "from_annotations"

    @field_validator("args")
    @classmethod
    def _no_secret_in_argv(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for arg in v:
            m = _ENV_REFERENCE.search(arg)
            if m:
                raise ValueError(
                    f"expected no ${{VAR}} in args, got {arg!r}: the command line of a process "
                    "is readable by every user of the machine (ps, /proc), so a secret must "
                    f"not travel in it; pass it in the environment instead, e.g. `env_from: "
                    f"{{{m.group(1)}: {m.group(1)}}}`, and have the server read it there"
                )
        return v


class RoutineLimitsSpec(Spec):
    """Runaway guards for routines (docs/scheduler.md, "Runaway routines"): at most
    ``max_runs_per_day`` runs a day (in the routine's time zone), and a routine paused after
    ``pause_after_failures`` failed runs in a row. Unset: no limit.
    """

    max_runs_per_day: PositiveInt | None = None
    pause_after_failures: PositiveInt | None = None


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
    tools: ToolsSpec = nested()
    consult: tuple[str, ...] = ()
    max_consult_depth: Annotated[int, BeforeValidator(whole), Field(ge=1, le=5)] = 2
    colleague_timeout_seconds: Duration = 300.0
    mcp_servers: dict[str, McpServerSpec] = {}
    heartbeat_seconds: Duration | None = None
    can_modify: tuple[str, ...] = ()
    enabled: bool = True
    #: runaway guards of this agent's routines (unset keys: ``defaults.routines``)
    routines: RoutineLimitsSpec = nested()


class WebhookTriggerSpec(Spec):
    """``POST /hooks/<routine>`` fires the routine (docs/triggers.md).

    ``secret_env`` names the environment variable holding the Standard Webhooks secret
    (``whsec_…``); ``max_body`` bounds the request body in bytes; ``rate_limit`` is how
    many requests a minute the routine accepts before answering 429.
    """

    secret_env: EnvName
    max_body: Annotated[int, BeforeValidator(whole), Field(ge=1, le=16 << 20)] = 1 << 20
    rate_limit: Annotated[int, BeforeValidator(whole), Field(ge=1, le=10_000)] = 60


class TriggerSpec(Spec):
    """When a routine fires: a 5-field ``cron`` (with ``timezone``) or ``every``, and/or a
    ``webhook`` (an HTTP request signed with the Standard Webhooks scheme).
    """

    cron: str | None = None
    every: Duration | None = None
    timezone: str | None = None
    webhook: WebhookTriggerSpec | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> TriggerSpec:
        if self.cron is not None and self.every is not None:
            raise ValueError("expected exactly one of 'cron' or 'every', got both; remove one")
        if self.cron is None and self.every is None and self.webhook is None:
            raise ValueError(
                "expected 'cron' (e.g. \"0 14 * * *\"), 'every' (e.g. 5m) or 'webhook' "
                "(e.g. {secret_env: STRIPE_WEBHOOK_SECRET}), got none of them"
            )
        if self.cron is None and self.timezone is not None:
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


#: Where a routine's result goes (docs/alerts.md, "Results"), besides ``webhook:NAME``
#: (one of ``alerts.webhooks``, docs/webhooks.md).
DELIVERIES = ("telegram", "digest", "memory", "file")


def _delivery(value: Any) -> Any:
    if isinstance(value, str) and (value in DELIVERIES or value.startswith("webhook:")):
        if value.startswith("webhook:") and not re.fullmatch(
            r"webhook:[a-z][a-z0-9_-]{0,62}", value
        ):
            raise ValueError(
                f"expected webhook:NAME with NAME one of alerts.webhooks' names, got {value!r}"
            )
        return value
    raise ValueError(
        f"expected one of {', '.join(repr(d) for d in DELIVERIES)} or 'webhook:NAME' (a name "
        f"in alerts.webhooks), got {value!r}"
    )


#: One entry of a routine's ``deliver:``.
Delivery = Annotated[str, BeforeValidator(_delivery)]


class BackupSpec(Spec):
    """A scheduled backup (a routine that runs no agent): how often, how many, where."""

    every: Duration
    keep: PositiveInt = 14
    to: Text


class RoutineSpec(Spec):
    """A recurring task for one agent — or, with ``backup``, a scheduled backup."""

    assignee: str | None = None
    description: Text | None = None
    expected_output: str | None = None
    trigger: TriggerSpec | None = None
    backup: BackupSpec | None = None
    concurrency: Literal["skip_if_active", "queue"] = "skip_if_active"
    catch_up: CatchUpSpec = nested()
    precondition: Literal["always", "memory_changed", "inbox_nonempty"] = "always"
    reviewer: str | None = None
    approval: Literal["none", "required"] = "none"
    enabled: bool = True
    deliver: tuple[Delivery, ...] | None = None
    #: evidence the run must leave before it counts as done (docs/agents.md, "Verification")
    done_when: tuple[DoneWhenSpec, ...] = ()
    #: what an unmet done_when does: one follow-up to the agent in the same run, or none
    on_unmet: Literal["retry", "report"] = "retry"
    #: runaway guards (docs/scheduler.md, "Runaway routines"); unset: the assignee's
    #: (``agents.<slug>.routines``), else ``defaults.routines``
    max_runs_per_day: PositiveInt | None = None
    pause_after_failures: PositiveInt | None = None

    @field_validator("deliver")
    @classmethod
    def _no_repeats(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None and len(set(v)) != len(v):
            twice = sorted({d for d in v if v.count(d) > 1})
            raise ValueError(
                f"{', '.join(repr(d) for d in twice)} listed twice; name each delivery once"
            )
        return v

    @model_validator(mode="after")
    def _agent_or_backup(self) -> RoutineSpec:
        task: dict[str, object] = {
            "assignee": self.assignee,
            "description": self.description,
            "trigger": self.trigger,
            "reviewer": self.reviewer,
            "expected_output": self.expected_output,
        }
        if self.backup is not None:
            given = [k for k, v in task.items() if v is not None]
            if self.precondition != "always":
                given.append("precondition")
            if self.approval != "none":
                given.append("approval")
            if self.done_when:
                given.append("done_when")
            if given:
                raise ValueError(
                    f"a backup routine runs no agent and fires every 'backup.every'; remove "
                    f"{', '.join(repr(k) for k in given)}"
                )
            return self
        missing = [k for k in ("assignee", "description", "trigger") if task[k] is None]
        if missing:
            raise ValueError(
                f"required key(s) {', '.join(repr(k) for k in missing)} missing: a routine "
                "needs 'assignee', 'description' and 'trigger' (or 'backup: {every, keep, "
                "to}' for a scheduled backup)"
            )
        return self


class CompanySpec(Spec):
    """The company itself."""

    name: Text
    timezone: str = "UTC"
    context: str | None = None
    budget: BudgetSpec


class DefaultsSpec(Spec):
    """Values every agent inherits unless it sets its own."""

    model: ModelSpec = nested(primary="claude-sonnet-5-5", fallbacks=("claude-haiku-5-5",))
    budget: BudgetSpec | None = None
    restart: RestartType = "permanent"
    limits: LimitsSpec = nested(max_cost_usd=1.0, max_steps=20, max_seconds=600.0)
    heartbeat_seconds: Duration = 300.0
    tools: DefaultToolsSpec = nested()
    #: check every final answer's claims of tool use against the run (docs/agents.md)
    claim_check: bool = True
    #: runaway guards of every routine (docs/scheduler.md, "Runaway routines")
    routines: RoutineLimitsSpec = nested()


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


class ChannelSpec(Spec):
    """One of the founder's other channels (Slack, Discord, email, ntfy …) through Apprise
    (docs/alerts.md, "Other channels"): ``name``, ``url_env`` (the environment variable
    holding its Apprise URL — the URL carries a token, so it is never written here),
    ``min_severity`` (the alerts it gets) and ``deliver`` (whether routine results that go to
    the founder reach it too).
    """

    name: str
    url_env: EnvName
    min_severity: Literal["critical", "warning", "info"] = "warning"
    deliver: bool = False

    @model_validator(mode="before")
    @classmethod
    def _no_url_here(cls, value: Any) -> Any:
        if isinstance(value, dict) and "url" in value:
            raise ValueError(
                "a channel's Apprise URL carries its token, so it is not written in "
                "company.yaml: put it in an environment variable (or the service's "
                "EnvironmentFile) and name that variable with 'url_env'"
            )
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", v):
            raise ValueError(
                f"expected a channel name of lowercase letters, digits, '-' and '_', starting "
                f"with a letter (e.g. 'slack', 'founder-email'), got {v!r}"
            )
        return v


class TelegramSpec(Spec):
    """Where alerts go. Secrets are referenced, never written here."""

    bot_token_env: EnvName | None = "TELEGRAM_BOT_TOKEN"
    bot_token_credential: CredentialName | None = "telegram_bot_token"
    chat_ids: tuple[Annotated[int, BeforeValidator(whole)], ...] = ()
    chat_ids_env: EnvName | None = None
    api_url: str | None = None

    _url = field_validator("api_url")(http_url)


#: The event types a webhook can subscribe to (docs/webhooks.md).
WEBHOOK_EVENT_TYPES: tuple[str, ...] = (
    "run.completed",
    "run.failed",
    "run.unverified",
    "approval.requested",
    "budget.threshold",
    "routine.missed",
    "leader.changed",
)


def _event_type(value: Any) -> Any:
    if value not in WEBHOOK_EVENT_TYPES:
        raise ValueError(f"expected one of {', '.join(WEBHOOK_EVENT_TYPES)}, got {value!r}")
    return value


class OutboundWebhookSpec(Spec):
    """One receiver of signed events (docs/webhooks.md): ``name`` (``deliver:
    [webhook:NAME]``), ``url``, ``secret_env`` (the environment variable holding its
    Standard Webhooks secret, ``whsec_…``) and the ``events`` it gets.
    """

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,62}$")]
    url: str
    secret_env: EnvName
    events: tuple[Annotated[str, BeforeValidator(_event_type)], ...] = ()

    _url = field_validator("url")(http_url)

    @field_validator("events")
    @classmethod
    def _once(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        twice = sorted({e for e in v if v.count(e) > 1})
        if twice:
            raise ValueError(
                f"{', '.join(repr(e) for e in twice)} listed twice; name each event type once"
            )
        return v


class AlertsSpec(Spec):
    """Alert routing and noise control; webhooks out."""

    telegram: TelegramSpec | None = None
    min_severity: Literal["critical", "warning", "info"] = "warning"
    #: the founder's other channels, through Apprise (docs/alerts.md, "Other channels")
    channels: tuple[ChannelSpec, ...] = ()
    routes: dict[str, Severity] = {}
    quiet_hours: QuietHoursSpec | None = None
    coalesce_seconds: Duration = 600.0
    digest_at: str = "08:00"
    webhooks: tuple[OutboundWebhookSpec, ...] = ()

    @field_validator("webhooks")
    @classmethod
    def _names_once(cls, v: tuple[OutboundWebhookSpec, ...]) -> tuple[OutboundWebhookSpec, ...]:
        names = [w.name for w in v]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(
                f"webhook name {', '.join(repr(n) for n in twice)} used twice; give each "
                "webhook its own name"
            )
        return v

    @field_validator("digest_at", mode="before")
    @classmethod
    def _digest_bare_hour(cls, v: object) -> object:
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 23:
            raise ValueError(f'expected a time as "HH:MM", got the number {v}; write "{v:02d}:00"')
        return v

    @field_validator("digest_at")
    @classmethod
    def _digest_hhmm(cls, v: str) -> str:
        if not re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", v):
            raise ValueError(f"expected a time as HH:MM (24-hour), got {v!r}")
        return v

    @field_validator("channels")
    @classmethod
    def _channel_names_once(cls, v: tuple[ChannelSpec, ...]) -> tuple[ChannelSpec, ...]:
        names = [c.name for c in v]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(
                f"channel name(s) {', '.join(repr(n) for n in twice)} used twice; give each "
                "channel its own name"
            )
        return v


class MemorySpec(Spec):
    """The shared knowledge graph file (MCP memory server JSONL format)."""

    path: str | None = None


class RetentionSpec(Spec):
    """How long the state directory keeps what it records."""

    runs_days: PositiveInt = 90


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

    runaway_factor: Annotated[float, BeforeValidator(number), Field(gt=1, allow_inf_nan=False)] = (
        5.0
    )
    runaway_window: Duration = 600.0


class AnthropicSpec(Spec):
    """How to reach the Messages API. The key is referenced, never written here."""

    api_key_env: EnvName = "ANTHROPIC_API_KEY"
    api_key_credential: CredentialName = "anthropic_api_key"
    base_url: str | None = None
    timeout_seconds: Duration = 120.0
    max_retries: Annotated[int, BeforeValidator(whole), Field(ge=0, le=10)] = 2
    #: a 429 asking to wait longer than this on every model of an agent's chain pauses the
    #: agent until then (a quota wall, docs/agents.md) instead of failing its run
    quota_pause_after: Duration = 60.0

    _url = field_validator("base_url")(http_url)


class MetricsSpec(Spec):
    """Optional Prometheus endpoint, loopback only."""

    listen: str | None = None

    @field_validator("listen")
    @classmethod
    def _loopback(cls, v: str | None) -> str | None:
        if v is None:
            return v
        host, _ = listen_address(v)
        if not is_loopback(host):
            raise ValueError(
                f"expected a loopback address (127.0.0.1, ::1 or localhost), got {v!r}: the "
                "metrics endpoint has no authentication; put a reverse proxy in front to "
                "expose it"
            )
        return v


class TelemetrySpec(Spec):
    """OpenTelemetry traces and metrics (docs/telemetry.md): on when ``otlp_endpoint`` is set
    (or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is in the environment). Message contents are
    exported only with ``capture_content: true``, and then redacted.
    """

    otlp_endpoint: str | None = None
    capture_content: bool = False

    _url = field_validator("otlp_endpoint")(http_url)


class DashboardSpec(Spec):
    """The web dashboard (docs/dashboard.md): on by default, on loopback.

    A non-loopback ``listen`` is refused unless ``tls_cert`` and ``tls_key`` are set (the
    daemon serves HTTPS itself) or ``behind_proxy: true`` says a reverse proxy terminates
    TLS in front of it.
    """

    enabled: bool = True
    tls_cert: str | None = None
    tls_key: str | None = None
    behind_proxy: bool = False
    # after the fields its check reads (a field validator sees the ones before it)
    listen: str = "127.0.0.1:8470"

    @field_validator("listen")
    @classmethod
    def _exposed_only_with_tls(cls, v: str, info: ValidationInfo) -> str:
        host, _ = listen_address(v)
        tls = info.data.get("tls_cert") and info.data.get("tls_key")
        if not is_loopback(host) and not tls and not info.data.get("behind_proxy"):
            raise ValueError(
                f"refusing to serve the dashboard on {v!r}: {host} is not a loopback address "
                "and the dashboard would travel unencrypted. Keep 127.0.0.1:8470 and use an "
                "SSH tunnel, set tls_cert and tls_key, or set behind_proxy: true when a "
                "reverse proxy with TLS is in front (docs/dashboard.md)"
            )
        return v

    @model_validator(mode="after")
    def _both_halves(self) -> DashboardSpec:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError(
                "expected both tls_cert and tls_key (the certificate chain and its private "
                "key, PEM files) or neither"
            )
        return self


class StateSpec(Spec):
    """Where the durable stores live (docs/storage.md): SQLite files in the state directory
    (the default), or a PostgreSQL database named by a secret — a connection URL in the
    environment variable ``dsn_env`` or the systemd credential ``dsn_credential`` — with
    one schema per company (default: the company's name as an identifier).
    """

    backend: Literal["sqlite", "postgres"] = "sqlite"
    dsn_env: EnvName = "COMPANYD_DATABASE_URL"
    dsn_credential: CredentialName | None = None
    # lower-case letters, digits and _: a PostgreSQL identifier the same quoted or not
    schema_: str | None = Field(default=None, alias="schema", pattern=r"^[a-z_][a-z0-9_]{0,62}$")


class CompanyFile(Spec):
    """The top level of company.yaml."""

    schema_: Literal["companyd/v1"] = Field(default="companyd/v1", alias="schema")
    company: CompanySpec
    defaults: DefaultsSpec = nested()
    supervisor: SupervisorSpec = nested()
    departments: dict[str, DepartmentSpec] = {}
    agents: dict[str, AgentSpec]
    routines: dict[str, RoutineSpec] = {}
    alerts: AlertsSpec = nested()
    memory: MemorySpec = nested()
    state_dir: str | None = None
    pricing: dict[str, PriceSpec] = {}
    spend: SpendSpec = nested()
    anthropic: AnthropicSpec = nested()
    metrics: MetricsSpec = nested()
    dashboard: DashboardSpec = nested()
    telemetry: TelemetrySpec = nested()
    retention: RetentionSpec = nested()
    state: StateSpec = nested()
