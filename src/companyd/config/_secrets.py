"""Secrets and company.yaml: the file refers to them by name and never holds them.

:func:`secret_references` lists every secret a config names (environment variables,
systemd credentials) with whether it is available, never its value; :func:`secret_values`
and :func:`register_secrets` hand the values to the process's one redactor
(:mod:`companyd._secrets`). :func:`check_secrets` is the load pass that refuses a secret
written into the file itself, by key name or by the look of the value.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from companyd._frozen import Frozen
from companyd._fs import credential_path, read_credential
from companyd._secrets import SECRET_PATTERNS, protect
from companyd.config._model import CompanyConfig
from companyd.config._report import Path_, Report
from companyd.config._tree import schema_at, schema_keys
from companyd.errors import ConfigError, ConfigIssue

if TYPE_CHECKING:
    from companyd.storage import Backend

# The stores' face (and under it the SQLite layer's worker thread and asyncio) is imported
# where a database URL or the backend is needed: `companyd validate` of a SQLite company
# with no database URL set does without it (~45 ms, issue 31).

__all__ = [
    "SecretReference",
    "check_secrets",
    "company_schema",
    "register_secrets",
    "secret_references",
    "secret_values",
    "state_backend",
]


class SecretReference(Frozen):
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

    def ref(path: str, kind: Literal["env", "credential"], name: str) -> SecretReference:
        if kind == "env":
            present = bool(env.get(name))
        else:
            # A stat of one file in a tmpfs systemd prepared: tiny, fine on the loop.
            cred = credential_path(name, env)
            present = cred is not None and cred.is_file()
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
    for hook in spec.alerts.webhooks:  # each outbound webhook's signing secret
        refs.append(ref(f"alerts.webhooks.{hook.name}.secret_env", "env", hook.secret_env))
    for channel in spec.alerts.channels:  # each channel's Apprise URL (it carries a token)
        refs.append(ref(f"alerts.channels.{channel.name}.url_env", "env", channel.url_env))
    st = spec.state
    if st.backend == "postgres":
        refs.append(ref("state.dsn_env", "env", st.dsn_env))
        if st.dsn_credential:
            refs.append(ref("state.dsn_credential", "credential", st.dsn_credential))
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
_DEFAULT_SECRET_ENV = ("ANTHROPIC_API_KEY", "TELEGRAM_BOT_TOKEN", "COMPANYD_DATABASE_URL")


def secret_values(config: CompanyConfig, environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of every secret ``config`` names that can be found right now: the API
    key, the bot token, every credential and every ``env_from`` variable (not the chat ids,
    which are not secret). For registering with the redactor; never print them.
    """
    env = os.environ if environ is None else environ
    values: list[str] = []
    for ref in secret_references(config, env):
        if ref.path == "alerts.telegram.chat_ids_env" or not ref.is_set:
            continue
        if ref.kind == "env":
            value = env.get(ref.name, "")
        elif (cred := credential_path(ref.name, env)) is not None:
            try:
                value = read_credential(cred)
            except (OSError, ValueError):
                continue  # the consumer of this credential reports what is wrong with it
        else:
            continue
        values.append(value)
        # a database URL's password is a secret on its own too (an error may quote it, or
        # a piece of it, alone), however the URL or key=value string is written
        if ref.path.startswith("state.dsn_") or value.startswith(("postgres", "host=")):
            from companyd.storage import dsn_secrets

            values += dsn_secrets(value)
    return [v.strip() for v in values if v.strip()]


def register_secrets(config: CompanyConfig | None) -> None:
    """Register the secrets ``config`` names (or, without one, those of the default
    variables) with the process's redactor.
    """
    if config is None:
        values = [os.environ.get(name, "") for name in _DEFAULT_SECRET_ENV]
        if url := os.environ.get("COMPANYD_DATABASE_URL", ""):  # dsn_secrets("") is []
            from companyd.storage import dsn_secrets

            values += dsn_secrets(url)
    else:
        values = secret_values(config)
    for value in values:
        protect(value)


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


def check_secrets(data: Any, rep: Report) -> None:
    """A secret written into company.yaml is one error (not also an 'unknown key'): the
    file is kept in git, so the value must move out and be rotated.
    """

    def advice(path: Path_, key: str) -> str:
        if len(path) >= 2 and path[-2] == "env" and "mcp_servers" in path:
            return (
                f"pass it from the daemon's environment instead: `env_from: {{{key}: "
                f"{key}}}` (server variable: daemon variable), and remove it from 'env'"
            )
        schema = schema_at(path[:-1])
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            canonical = schema_keys(schema)[0]
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


def company_schema(config: CompanyConfig) -> str:
    """The company's PostgreSQL schema: ``state.schema``, else its name as an identifier
    (lower case, runs of other characters as ``_``, ``co_`` before a leading digit, at most
    63 characters): two companies in one database never share tables by accident.
    """
    if config.spec.state.schema_:
        return config.spec.state.schema_
    name = re.sub(r"[^a-z0-9]+", "_", config.name.lower()).strip("_") or "company"
    if name[0].isdigit():
        name = f"co_{name}"
    return name[:63]


def state_backend(config: CompanyConfig, environ: Mapping[str, str] | None = None) -> Backend:
    """Where ``config``'s stores live (``state:``), its PostgreSQL URL read from the
    environment variable or systemd credential it names.

    Raises:
        ConfigError: ``backend: postgres`` and neither names a URL (says what to set).
    """
    from companyd.storage import Backend, dsn_problem

    st = config.spec.state
    if st.backend == "sqlite":
        return Backend()
    env = os.environ if environ is None else environ
    dsn = env.get(st.dsn_env, "").strip()
    if not dsn and st.dsn_credential and (cred := credential_path(st.dsn_credential, env)):
        with contextlib.suppress(OSError):
            dsn = read_credential(cred).strip()
    if not dsn:
        where = f"${st.dsn_env}"
        if st.dsn_credential:
            where += f" or the systemd credential {st.dsn_credential!r}"
        raise ConfigError(
            [
                ConfigIssue(
                    file=str(config.path),
                    line=0,
                    column=0,
                    path="state.backend",
                    message=f"is 'postgres' but {where} is not set; set it to the "
                    "database's URL (e.g. postgresql://companyd@db.example.com:5432/companyd, "
                    "a password after the user name and a colon), or set state.backend: "
                    "sqlite (docs/storage.md)",
                )
            ]
        )
    if (problem := dsn_problem(dsn)) is not None:
        where = f"${st.dsn_env}" if env.get(st.dsn_env, "").strip() else "the credential"
        if where == "the credential":
            where += f" {st.dsn_credential!r}"
        raise ConfigError(
            [
                ConfigIssue(
                    file=str(config.path),
                    line=0,
                    column=0,
                    path="state.backend",
                    message=f"is 'postgres' but the database URL in {where} {problem}; "
                    "fix it there (docs/storage.md)",
                )
            ]
        )
    return Backend(kind="postgres", dsn=dsn, schema=company_schema(config))
