"""Claude through the official ``anthropic`` SDK — the only module that imports it.

:class:`ClaudeBackend` implements :class:`companyd.llm._model.ModelBackend`: it turns a
:class:`~companyd.llm._model.ModelRequest` into one ``AsyncAnthropic.messages.create`` call
and the SDK's answer (or exception) into a :class:`~companyd.llm._model.ModelResponse` (or
one of companyd's :class:`~companyd.llm._model.ModelError` subclasses). One call = one
model: falling back to another model is the agent runtime's job.

**Retries are ours, not the SDK's** (the client is built with ``max_retries=0``). SDK 2.12
obeys any ``retry-after`` as given — ``retry-after: 3600`` sleeps an hour inside one call —
and retries a 429 ``enforced_spend_limit_reached`` like any rate limit (ops-notes §3.3).
Here:

* 529, 5xx, 408, 429 (rate limit) and timeouts / connection failures are retried up to
  ``max_retries`` times with jittered exponential backoff (0.5 s · 2ⁿ, at most 8 s, minus up
  to 25 %), or after the server's ``retry-after`` / ``retry-after-ms`` if it is at most
  ``max_retry_after`` seconds. A longer ``retry-after`` is not waited for: the error is
  raised at once (with ``retry_after`` set on :class:`ModelRateLimited`) so the runtime can
  fall back to another model instead of sleeping — or, when every model of the agent's
  chain is that far away, pause the agent until then (a quota wall, docs/agents.md). A 429
  without ``retry-after`` waits for the later ``anthropic-ratelimit-*-reset`` time of its
  exhausted limits (``-remaining: 0``).
* A 429 whose ``error.details.error_code`` is ``enforced_spend_limit_reached`` raises
  :class:`SpendLimitReached` at once and is never retried; so does a 400 or 429 whose
  message says a spend / usage limit or the credit balance is reached (a workspace's
  spend limit is a 400, and not every answer carries the error code).
* A 401 raises :class:`ModelAuthFailed` (the key is refused: nothing can succeed until the
  operator fixes it); other 4xx raise :class:`ModelBadRequest`. Neither is retried.
* ``x-should-retry: false`` from the server is obeyed.
* **Each attempt is budgeted on its own**: ``create(request, before_retry=hook)`` awaits
  ``hook(error)`` before every retry, so the caller settles the failed attempt's
  reservation and reserves the next (a refused budget or a stop ends the call there). A
  timeout, or a connection broken after the request was sent, raises with
  ``maybe_billed=True``: the provider may have processed and billed it.
* Every attempt runs under ``asyncio.timeout(timeout + 5 s)`` on top of the HTTP client's own
  timeout, and the whole call (attempts and waits) under ``asyncio.timeout(deadline)``: a
  call can never hang longer than ``deadline`` seconds, whatever the server does.

**Prompt caching**: with ``request.cache`` (the default) the system prompt is sent as one
text block and it and the last tool carry ``cache_control: {"type": "ephemeral"}`` (TTL
``cache_ttl``), so repeated runs of the same agent pay cache-read prices for the stable
prefix (tools, then system). Messages are not marked: they change on every step.

**Usage**: cache writes are split by TTL from ``usage.cache_creation`` (5m / 1h); when the
breakdown is absent, ``cache_creation_input_tokens`` counts as writes of the TTL sent.

**Credentials**: the key comes from the environment variable named by
``anthropic.api_key_env`` (default ``ANTHROPIC_API_KEY``), else from the file
``$CREDENTIALS_DIRECTORY/<anthropic.api_key_credential>`` (systemd ``LoadCredential=``).
The base URL is ``$ANTHROPIC_BASE_URL``, else ``anthropic.base_url``, else the SDK default.

**The SDK is imported at the first call, not at start** (issue 31): ``import anthropic``
costs ~0.7 s of CPU and ~30 MB here, and a company with a key may not call a model for
hours. Building a :class:`ClaudeBackend` checks what can be checked without the SDK (a key
is present and looks like one — printable ASCII without spaces, as an HTTP header needs —
and the endpoint), so a bad key or URL still stops ``companyd run`` at start; the first
:meth:`ClaudeBackend.create` (or :meth:`~ClaudeBackend.list_models`) imports the SDK in a
worker thread, so the import never stalls the event loop, then builds the client.
tests/daemon/test_startup_imports.py holds both ends.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib
import ipaddress
import logging
import os
import random
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import urlsplit

from companyd._fs import credential_path, read_credential
from companyd.clock import Clock, SystemClock
from companyd.llm._blocks import CacheControl, ContentBlock, TextBlock, ToolParam
from companyd.llm._model import (
    ModelAuthFailed,
    ModelBadRequest,
    ModelError,
    ModelOverloaded,
    ModelRateLimited,
    ModelRequest,
    ModelResponse,
    ModelServerError,
    ModelTimeout,
    ModelUnavailable,
    RetryHook,
    SpendLimitReached,
    Usage,
    estimate_input_tokens,
)

if TYPE_CHECKING:  # the SDK is imported at the first call (module docstring)
    import anthropic

__all__ = [
    "SPEND_LIMIT_CODE",
    "ClaudeBackend",
    "estimate_input_tokens",
    "map_sdk_error",
    "preload_sdk",
    "resolve_api_key",
    "resolve_base_url",
]

log = logging.getLogger("companyd.llm.claude")

#: ``error.details.error_code`` of the organisation's API spend limit.
SPEND_LIMIT_CODE = "enforced_spend_limit_reached"

_INITIAL_BACKOFF = 0.5
_MAX_BACKOFF = 8.0
# Extra time an attempt gets beyond the HTTP timeout before asyncio cancels it: the HTTP
# client's timeouts apply between bytes, so a server dripping bytes could outlast them.
_ATTEMPT_GRACE = 5.0


# ---------------------------------------------------------------------------------------
# Credentials and endpoint


class AnthropicSpec(Protocol):
    """How to reach the Messages API, as this module reads it (config's ``AnthropicSpec``
    satisfies it); a protocol so the model layer sits below the configuration layer.
    """

    @property
    def api_key_env(self) -> str: ...
    @property
    def api_key_credential(self) -> str: ...
    @property
    def base_url(self) -> str | None: ...
    @property
    def timeout_seconds(self) -> float: ...
    @property
    def max_retries(self) -> int: ...


def preload_sdk() -> None:
    """Load the SDK now, as a first call would (its modules, and those of the HTTP
    transport a client loads when it is built: one is built and dropped), without calling
    it. For a process that loads once what its forked children use
    (companyd.testing.forkserver); the daemon itself loads the SDK at its first call
    (:meth:`ClaudeBackend._sdk_client`). Here so that the SDK stays imported by this module
    alone, visibly to the import contracts.
    """
    sdk = importlib.import_module("anthropic")
    sdk.AsyncAnthropic(api_key="preload", base_url="http://127.0.0.1:9", max_retries=0)


def resolve_api_key(spec: AnthropicSpec, environ: Mapping[str, str] | None = None) -> str:
    """The API key: ``$<api_key_env>``, else ``$CREDENTIALS_DIRECTORY/<api_key_credential>``.

    Raises:
        ModelUnavailable: when neither gives a non-empty key (the message says how to set one).
    """
    env = os.environ if environ is None else environ
    value = env.get(spec.api_key_env, "").strip()
    if value:
        return _checked_key(value, f"${spec.api_key_env}")
    path = credential_path(spec.api_key_credential, env)
    tried = [f"${spec.api_key_env} is not set"]
    if path is not None:
        try:
            value = read_credential(path)
        except FileNotFoundError:
            tried.append(f"no credential file {str(path)!r}")
        except OSError as exc:
            tried.append(f"cannot read {str(path)!r}: {exc.strerror}")
        except ValueError as exc:  # a NUL byte in the directory name
            tried.append(f"cannot use {str(path)!r}: {exc}")
        else:
            if value:
                return _checked_key(value, f"credential file {str(path)!r}")
            tried.append(f"credential file {str(path)!r} is empty")
    else:
        tried.append("$CREDENTIALS_DIRECTORY is not set (no systemd credentials)")
    raise ModelUnavailable(
        f"no Anthropic API key ({'; '.join(tried)}): export {spec.api_key_env}=sk-ant-… "
        f"or add `LoadCredential={spec.api_key_credential}:/path/to/key` to the systemd "
        "unit — or run with --offline to use the built-in offline model"
    )


def _checked_key(key: str, source: str) -> str:
    """``key`` if it can be sent as an HTTP header (printable ASCII, no spaces); checked at
    start without the SDK, so a key pasted with a stray character stops ``companyd run``
    instead of failing every agent's first call. The message never quotes the key.

    Raises:
        ModelUnavailable: naming ``source`` and the offending character's position.
    """
    for i, ch in enumerate(key):
        if not ("!" <= ch <= "~"):
            raise ModelUnavailable(
                f"the Anthropic API key in {source} has {_char_name(ch)} at character "
                f"{i + 1} of {len(key)}: an API key is printable ASCII without spaces "
                "(sk-ant-…); copy it again from console.anthropic.com → API keys"
            )
    return key


def _char_name(ch: str) -> str:
    if ch.isspace():
        return "a space or line break"
    if ord(ch) < 0x20 or ord(ch) == 0x7F:
        return f"a control character (U+{ord(ch):04X})"
    return f"a non-ASCII character (U+{ord(ch):04X})"


def resolve_base_url(spec: AnthropicSpec, environ: Mapping[str, str] | None = None) -> str | None:
    """``$ANTHROPIC_BASE_URL``, else ``anthropic.base_url``, else None (the SDK default).

    The environment wins so a deployment (or a test harness) can point the daemon at a
    proxy or a stand-in without editing the company.yaml kept in git.
    """
    env = os.environ if environ is None else environ
    return env.get("ANTHROPIC_BASE_URL") or spec.base_url or None


def _check_test_no_net(base_url: str | None, environ: Mapping[str, str]) -> None:
    # Under the test suite (COMPANYD_TEST_NO_NET=1, inherited by subprocesses) only loopback
    # endpoints are allowed: a misconfigured test must never reach the real API.
    if environ.get("COMPANYD_TEST_NO_NET") != "1":
        return
    host = urlsplit(base_url).hostname if base_url else "api.anthropic.com"
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ModelUnavailable(
            f"COMPANYD_TEST_NO_NET is set but the Anthropic base URL is {base_url!r}; point "
            "ANTHROPIC_BASE_URL at the loopback stand-in (companyd.testing.messages_api)"
        )


# ---------------------------------------------------------------------------------------
# Request building, estimates and response mapping


def _system_param(request: ModelRequest, ttl: str) -> str | list[TextBlock] | None:
    if not request.system:
        return None
    if not request.cache:
        return request.system
    return [
        {
            "type": "text",
            "text": request.system,
            "cache_control": _cache_control(ttl),
        }
    ]


def _cache_control(ttl: str) -> CacheControl:
    # "5m" is the API's default TTL; send it only when it is something else.
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


def _tools_param(request: ModelRequest, ttl: str) -> list[ToolParam]:
    tools = [t.to_api() for t in request.tools]
    if tools and request.cache:
        tools[-1]["cache_control"] = _cache_control(ttl)
    return tools


def _block(block: Any) -> ContentBlock:
    """An SDK content block as the API's JSON (the SDK's models are that JSON, parsed)."""
    return cast(ContentBlock, block.model_dump(mode="json", exclude_none=True))


def _usage(u: Any, ttl: str) -> Usage:
    """Our usage from the SDK's. ``ttl``: the cache TTL the request marked its prefix with;
    cache writes the answer does not attribute to a TTL are of that one (a 1-hour write
    costs 2x input, the 5-minute one 1.25x: guessing 5 minutes would under-count).
    """
    cache_total = int(getattr(u, "cache_creation_input_tokens", None) or 0)
    cc = getattr(u, "cache_creation", None)
    w1 = w5 = 0
    if cc is not None:
        w1 = int(getattr(cc, "ephemeral_1h_input_tokens", 0) or 0)
        w5 = int(getattr(cc, "ephemeral_5m_input_tokens", 0) or 0)
    # Never price fewer cache-write tokens than the total the API reported.
    rest = max(0, cache_total - w1 - w5)
    if ttl == "1h":
        w1 += rest
    else:
        w5 += rest
    return Usage(
        input_tokens=int(u.input_tokens or 0),
        output_tokens=int(u.output_tokens or 0),
        cache_write_5m_tokens=w5,
        cache_write_1h_tokens=w1,
        cache_read_tokens=int(getattr(u, "cache_read_input_tokens", None) or 0),
    )


def _retry_after(headers: Any, now: float | None = None, *, resets: bool = False) -> float | None:
    """Seconds from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date); without
    either and with ``resets`` (a 429: every answer carries the reset headers, only a rate
    limit means them as a wait), from the ``anthropic-ratelimit-*-reset`` headers
    (:func:`_ratelimit_reset`). ``now``: the epoch time dates are measured from (default:
    the system's).
    """
    if headers is None:
        return None
    at = time.time() if now is None else now
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if ra is None:
        return _ratelimit_reset(headers, at) if resets else None
    try:
        return max(0.0, float(ra))
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(ra)
    if parsed is None:
        return _ratelimit_reset(headers, at) if resets else None
    return max(0.0, float(email.utils.mktime_tz(parsed) - at))


#: The limits whose ``anthropic-ratelimit-<limit>-remaining`` / ``-reset`` a 429 carries.
_RATE_LIMITS = ("requests", "tokens", "input-tokens", "output-tokens")


def _ratelimit_reset(headers: Any, now: float) -> float | None:
    """Seconds until the later ``anthropic-ratelimit-<limit>-reset`` (RFC 3339) of the limits
    that are exhausted (``-remaining: 0``), or — when no limit says it is exhausted — of
    every limit that gives a reset time; None when no header gives one. This is what a 429
    without ``retry-after`` means to wait for (round3-notes, "Anthropic rate limits").
    """
    exhausted: list[float] = []
    every: list[float] = []
    for limit in _RATE_LIMITS:
        reset = headers.get(f"anthropic-ratelimit-{limit}-reset")
        if not reset:
            continue
        try:
            at = datetime.fromisoformat(str(reset).strip().replace("Z", "+00:00"))
        except ValueError:
            continue
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        seconds = max(0.0, at.timestamp() - now)
        every.append(seconds)
        if str(headers.get(f"anthropic-ratelimit-{limit}-remaining", "")).strip() == "0":
            exhausted.append(seconds)
    chosen = exhausted or every
    return max(chosen) if chosen else None


# What the API says when money, not request rate, is the limit: the organisation's spend
# limit (429, normally with error_code enforced_spend_limit_reached), a workspace's spend
# limit (400 invalid_request_error, ops-notes §3.3) or an empty prepaid balance (400).
# Retrying, falling back or crashing the agent (a 400 is otherwise a poison input) would not
# help: every agent is paused instead.
_SPEND_LIMIT_PHRASES = ("usage limit", "spend limit", "spending limit", "credit balance")


def _says_spend_limit(message: str) -> bool:
    text = message.lower()
    return any(p in text for p in _SPEND_LIMIT_PHRASES)


def map_sdk_error(exc: BaseException, *, model: str, now: float | None = None) -> ModelError:
    """The companyd error for an SDK exception (status → class as in the module docstring).
    ``now``: the epoch time a rate limit's reset times are measured from (default: the
    system's).
    """
    import anthropic  # loaded already: an SDK error comes from a call (module docstring)

    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        rid = exc.request_id
        api_msg = exc.api_message or str(exc)
        where = f"model {model!r}, HTTP {status}, request {rid or '-'}"
        if exc.error_code == SPEND_LIMIT_CODE or (
            status in (400, 429) and _says_spend_limit(api_msg)
        ):
            return SpendLimitReached(
                f"the Anthropic organisation's API spend limit is reached ({where}): "
                f"{api_msg!r}; every agent is paused — top up or raise the limit in the "
                "Anthropic console, then `companyd resume --all`",
                model=model,
                status=status,
                request_id=rid,
            )
        if status == 529:
            return ModelOverloaded(
                f"the Anthropic API is overloaded ({where}): {api_msg!r}",
                model=model,
                status=status,
                request_id=rid,
            )
        if status == 429:
            return ModelRateLimited(
                f"rate limited by the Anthropic API ({where}): {api_msg!r}",
                retry_after=_retry_after(exc.response.headers, now, resets=True),
                model=model,
                status=status,
                request_id=rid,
            )
        if status >= 500:
            return ModelServerError(
                f"Anthropic API server error ({where}): {api_msg!r}",
                model=model,
                status=status,
                request_id=rid,
                # 504 (the API's timeout_error: "timed out while processing") and 524 (a
                # proxy's origin timeout) come after the request was taken in: it may have
                # been processed, and billed, as for a timeout of our own
                maybe_billed=status in (504, 524),
            )
        if status == 408:
            return ModelTimeout(
                f"the Anthropic API timed the request out ({where})",
                model=model,
                status=status,
                request_id=rid,
            )
        if status == 401:
            return ModelAuthFailed(
                f"the Anthropic API refused the API key ({where}): {api_msg!r}; check the API "
                "key (anthropic.api_key_env / api_key_credential), restart companyd, then "
                "resume the agents",
                model=model,
                status=status,
                request_id=rid,
            )
        hint = {
            403: "the key lacks permission for this model or workspace",
            404: f"check the model id {model!r} in company.yaml",
            413: "the prompt is too large; shorten the instructions or the task",
        }.get(status, "this request will fail the same way if sent again")
        return ModelBadRequest(
            f"the Anthropic API rejected the request ({where}): {api_msg!r}; {hint}",
            model=model,
            status=status,
            request_id=rid,
        )
    if isinstance(exc, anthropic.APITimeoutError | TimeoutError):
        return ModelTimeout(
            f"no answer from the Anthropic API in time (model {model!r})",
            model=model,
            maybe_billed=_was_sent(exc),
        )
    if isinstance(exc, anthropic.APIConnectionError):
        return ModelTimeout(
            f"cannot reach the Anthropic API (model {model!r}): {exc}; check the network "
            "and anthropic.base_url",
            model=model,
            maybe_billed=_was_sent(exc),
        )
    if isinstance(exc, anthropic.APIResponseValidationError):
        return ModelServerError(
            f"the Anthropic API returned an invalid response (model {model!r}): {exc}",
            model=model,
            maybe_billed=True,  # a 200 we could not read was processed, and billed
        )
    return ModelUnavailable(
        f"the Anthropic SDK failed (model {model!r}): {type(exc).__name__}: {exc}", model=model
    )


# httpx failures that happen before a single byte of the request left this machine: the
# provider cannot have processed (or billed) the request.
_NOT_SENT = frozenset({"ConnectError", "ConnectTimeout", "PoolTimeout", "UnsupportedProtocol"})


def _was_sent(exc: BaseException) -> bool:
    """Whether a timeout / connection failure may have come after the request was sent (so
    the provider may have processed and billed it). Only a failure to connect proves it
    was not; anything else (a read timeout, a connection reset mid-answer, our own attempt
    timer) counts as sent.
    """
    cause = exc.__cause__ or exc.__context__
    return not (cause is not None and type(cause).__name__ in _NOT_SENT)


def _should_retry(exc: BaseException, err: ModelError) -> bool:
    if isinstance(err, SpendLimitReached):
        return False  # never, whatever the server's headers say
    import anthropic  # loaded already: see map_sdk_error

    if isinstance(exc, anthropic.APIStatusError):
        hdr = exc.response.headers.get("x-should-retry")
        if hdr == "false":
            return False
        if hdr == "true":
            return True
    return err.retryable


# ---------------------------------------------------------------------------------------
# The backend


class ClaudeBackend:
    """A :class:`~companyd.llm._model.ModelBackend` over ``anthropic.AsyncAnthropic``.

    Args:
        api_key: the key (see :func:`resolve_api_key`).
        base_url: API endpoint; None uses the SDK default.
        timeout: seconds per HTTP attempt.
        max_retries: retries after the first attempt (retryable errors only).
        max_retry_after: longest server-requested wait honoured; a longer one raises at once.
        deadline: hard limit in seconds for the whole call including retries and waits;
            default: every attempt at its timeout plus every wait at its cap.
        cache_ttl: ``"5m"`` or ``"1h"``, the prompt-cache TTL of the stable prefix.
        clock: sleeps between retries (tests pass a clock that records instead).
        rng: jitter source.
    """

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
        max_retry_after: float = 30.0,
        deadline: float | None = None,
        cache_ttl: str = "5m",
        clock: Clock | None = None,
        rng: random.Random | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        if cache_ttl not in ("5m", "1h"):
            raise ValueError(f"cache_ttl must be '5m' or '1h', got {cache_ttl!r}")
        if timeout <= 0 or max_retries < 0 or max_retry_after < 0:
            raise ValueError(
                f"expected timeout > 0, max_retries >= 0, max_retry_after >= 0; got "
                f"{timeout!r}, {max_retries!r}, {max_retry_after!r}"
            )
        _check_test_no_net(base_url, os.environ if environ is None else environ)
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_retry_after = max_retry_after
        self.deadline = (
            deadline
            if deadline is not None
            else (max_retries + 1) * (timeout + _ATTEMPT_GRACE)
            + max_retries * max(max_retry_after, _MAX_BACKOFF)
        )
        self.cache_ttl = cache_ttl
        self.base_url = base_url
        self._clock: Clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._api_key = api_key
        # built by the first call (_sdk_client): the SDK is not imported before it
        self._client: anthropic.AsyncAnthropic | None = None

    async def _sdk_client(self) -> anthropic.AsyncAnthropic:
        """The SDK's client, built at the first call in a worker thread: the SDK's ~0.7 s of
        imports, and the client's own (~0.1 s of CPU: the HTTP transport's modules and its
        TLS context), while the event loop keeps serving.
        """
        if self._client is None:
            client = await asyncio.to_thread(self._new_sdk_client)
            if self._client is None:  # another first call may have built one meanwhile
                self._client = client
        return self._client

    async def warm(self) -> None:
        """Build the SDK's client now rather than at the first call (which otherwise pays
        for its imports: ~0.7 s here, more on a loaded or small machine).
        """
        await self._sdk_client()

    def _new_sdk_client(self) -> anthropic.AsyncAnthropic:
        """A new client of the SDK (imported here, once: see :meth:`_sdk_client`). It binds
        to no event loop until its first request, so it may be built in any thread.
        """
        sdk = importlib.import_module("anthropic")
        client: anthropic.AsyncAnthropic = sdk.AsyncAnthropic(
            api_key=self._api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=0,  # we own the retry loop: see the module docstring
        )
        return client

    @classmethod
    def from_config(
        cls,
        spec: AnthropicSpec,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        **kw: Any,
    ) -> ClaudeBackend:
        """A backend configured from company.yaml's ``anthropic`` block and the environment.

        Raises:
            ModelUnavailable: no API key could be found (the message says where to put it).
        """
        env = os.environ if environ is None else environ
        return cls(
            api_key=resolve_api_key(spec, env),
            base_url=resolve_base_url(spec, env),
            timeout=spec.timeout_seconds,
            max_retries=spec.max_retries,
            clock=clock,
            environ=env,
            **kw,
        )

    async def create(
        self,
        request: ModelRequest,
        *,
        before_retry: RetryHook | None = None,
        on_send: Callable[[], None] | None = None,
    ) -> ModelResponse:
        """Send ``request`` (retrying as described in the module docstring).

        Raises:
            ModelOverloaded, ModelRateLimited, ModelServerError, ModelTimeout: after the
                retries (``retryable``: the runtime may fall back to another model).
            SpendLimitReached: the organisation's API spend limit; not retried.
            ModelBadRequest: the request itself is wrong; not retried.
            ModelUnavailable: the SDK failed in an unexpected way.

        A timeout, or a connection that broke after the request was sent, raises with
        ``maybe_billed`` set. ``before_retry(error)`` is awaited before each retry; what it
        raises ends the call. ``on_send()`` is called as each attempt is about to be sent.
        """
        in_flight = [False]
        try:
            async with asyncio.timeout(self.deadline):
                return await self._create_with_retries(request, before_retry, in_flight, on_send)
        except TimeoutError:
            raise ModelTimeout(
                f"no answer for model {request.model!r} within the {self.deadline:g} s "
                "deadline (all attempts and waits included)",
                model=request.model,
                maybe_billed=in_flight[0],
            ) from None

    async def _create_with_retries(
        self,
        request: ModelRequest,
        before_retry: RetryHook | None,
        in_flight: list[bool],
        on_send: Callable[[], None] | None,
    ) -> ModelResponse:
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": [dict(m) for m in request.messages],
        }
        system = _system_param(request, self.cache_ttl)
        if system is not None:
            params["system"] = system
        tools = _tools_param(request, self.cache_ttl)
        if tools:
            params["tools"] = tools
        client = await self._sdk_client()
        import anthropic  # loaded by _sdk_client

        attempt = 0
        while True:
            try:
                in_flight[0] = True
                if on_send is not None:
                    on_send()
                async with asyncio.timeout(self.timeout + _ATTEMPT_GRACE):
                    message = await client.messages.create(**params)
            except (anthropic.AnthropicError, TimeoutError) as exc:
                in_flight[0] = False
                err = map_sdk_error(exc, model=request.model, now=self._clock.time())
                if not _should_retry(exc, err) or attempt >= self.max_retries:
                    raise err from exc
                headers = (
                    exc.response.headers if isinstance(exc, anthropic.APIStatusError) else None
                )
                wait = self._wait_before_retry(
                    _retry_after(
                        headers, self._clock.time(), resets=isinstance(err, ModelRateLimited)
                    ),
                    attempt,
                )
                if wait is None:
                    raise err from exc
                log.info(
                    "retrying %s in %.2f s (retry %d of %d): %s",
                    request.model,
                    wait,
                    attempt + 1,
                    self.max_retries,
                    err,
                )
                if before_retry is not None:
                    # settles this attempt's reservation and reserves the next one (each
                    # attempt is budgeted on its own); a refusal or a stop ends the call here
                    await before_retry(err)
                await self._clock.sleep(wait)
                attempt += 1
                continue
            return ModelResponse(
                model=message.model or request.model,
                content=[_block(b) for b in message.content],
                stop_reason=str(message.stop_reason or "end_turn"),
                usage=_usage(message.usage, self.cache_ttl),
                request_id=message._request_id,
            )

    def _wait_before_retry(self, retry_after: float | None, attempt: int) -> float | None:
        """Seconds to wait before the next attempt, or None to give up now."""
        if retry_after is not None and retry_after > 0:
            if retry_after > self.max_retry_after:
                return None  # e.g. retry-after: 3600 — fall back rather than sleep an hour
            return float(retry_after)
        base = min(_INITIAL_BACKOFF * 2.0**attempt, _MAX_BACKOFF)
        return base * (1.0 - 0.25 * self._rng.random())

    async def list_models(self, *, timeout: float = 15.0) -> list[str]:
        """The model ids the key may use (``GET /v1/models``, one page): a call that costs
        nothing, so ``companyd doctor`` checks the key with it. No retries.

        Raises:
            ModelError: the key is refused (``AuthenticationError``), the API cannot be
                reached, … (mapped as for a message, see the module docstring).
        """
        client = await self._sdk_client()
        try:
            async with asyncio.timeout(timeout):
                page = await client.models.list(limit=100, timeout=timeout)
        except Exception as exc:  # TimeoutError included: map_sdk_error words it
            raise map_sdk_error(exc, model="(models list)") from exc
        return [m.id for m in page.data]

    async def aclose(self) -> None:
        """Close the HTTP connections (none before the first call)."""
        if self._client is not None:
            await self._client.close()
