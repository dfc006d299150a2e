"""ClaudeBackend: the real anthropic SDK against the loopback stand-in.

Error mapping for every status, our retry loop (capped retry-after, spend limit never
retried), prompt-caching markers, usage mapping, content echo, credentials, deadlines.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from companyd.clock import SystemClock
from companyd.config import AnthropicSpec
from companyd.llm._blocks import ImageBlock, Message
from companyd.llm._claude import ClaudeBackend, estimate_input_tokens, resolve_api_key
from companyd.llm._model import (
    ModelAuthFailed,
    ModelBadRequest,
    ModelError,
    ModelOverloaded,
    ModelRateLimited,
    ModelRequest,
    ModelServerError,
    ModelTimeout,
    ModelUnavailable,
    SpendLimitReached,
    ToolDef,
    Usage,
)
from companyd.testing.messages_api import (
    MessagesAPIServer,
    bad_request,
    fault,
    overloaded,
    rate_limited,
    reply_text,
    reply_tool_use,
    server_error,
    spend_limit,
    stall,
)


class RecordingClock(SystemClock):
    """Real time, except that retry waits are recorded and return at once."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(0)


TOOL = ToolDef(
    name="get_spend",
    description="today's spend",
    input_schema={
        "type": "object",
        "properties": {"period": {"type": "string"}},
        "required": ["period"],
    },
)


def request(**kw: Any) -> ModelRequest:
    base: dict[str, Any] = {
        "model": "claude-sonnet-5-5",
        "system": "You are the CFO of Northwind Solo.",
        "messages": [{"role": "user", "content": "How much did we spend today?"}],
        "tools": (TOOL,),
        "max_tokens": 256,
    }
    base.update(kw)
    return ModelRequest(**base)


def backend(srv: MessagesAPIServer, **kw: Any) -> tuple[ClaudeBackend, RecordingClock]:
    clock = RecordingClock()
    kw.setdefault("max_retries", 2)
    kw.setdefault("timeout", 5.0)
    return (
        ClaudeBackend(
            api_key="test-key", base_url=srv.base_url, clock=clock, rng=random.Random(1), **kw
        ),
        clock,
    )


@pytest.mark.anyio
async def test_a_tool_use_loop_echoes_blocks_verbatim_and_maps_usage() -> None:
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(
            reply_tool_use(
                "get_spend",
                {"period": "today"},
                text="Let me check.",
                usage=Usage(
                    input_tokens=412,
                    output_tokens=58,
                    cache_write_5m_tokens=2000,
                    cache_write_1h_tokens=48,
                ),
            ),
            reply_text(
                "Spend today is $1.23.",
                usage=Usage(input_tokens=35, output_tokens=14, cache_read_tokens=2048),
            ),
        )
        llm, _ = backend(srv)
        try:
            async with asyncio.timeout(10):
                r1 = await llm.create(request())
                assert r1.stop_reason == "tool_use"
                assert r1.usage == Usage(
                    input_tokens=412,
                    output_tokens=58,
                    cache_write_5m_tokens=2000,
                    cache_write_1h_tokens=48,
                )
                assert r1.request_id and r1.request_id.startswith("req_")
                assert r1.model == "claude-sonnet-5-5"
                assert json.loads(json.dumps(r1.content)) == list(r1.content)  # plain JSON
                call = r1.tool_uses[0]
                messages = [
                    *request().messages,
                    {"role": "assistant", "content": list(r1.content)},
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": call["id"],
                                "content": '{"usd": 1.23}',
                            }
                        ],
                    },
                ]
                # The stand-in validates tool_use/tool_result pairing like the real API.
                r2 = await llm.create(request(messages=messages))
        finally:
            await llm.aclose()
        assert r2.text == "Spend today is $1.23." and r2.stop_reason == "end_turn"
        assert r2.usage.cache_read_tokens == 2048
        echoed = srv.requests[1].body["messages"][1]["content"]
        assert echoed == [
            {"type": "text", "text": "Let me check."},
            {
                "type": "tool_use",
                "id": call["id"],
                "name": "get_spend",
                "input": {"period": "today"},
            },
        ]


@pytest.mark.anyio
async def test_cache_control_marks_the_stable_prefix() -> None:
    with MessagesAPIServer() as srv:
        llm, _ = backend(srv)
        llm1h, _ = backend(srv, cache_ttl="1h")
        try:
            async with asyncio.timeout(10):
                await llm.create(request())
                await llm.create(request(cache=False))
                await llm1h.create(request())
                await llm.create(request(system="", tools=()))
        finally:
            await llm.aclose()
            await llm1h.aclose()
    cached, uncached, hour, bare = (r.body for r in srv.requests)
    assert cached["system"] == [
        {
            "type": "text",
            "text": "You are the CFO of Northwind Solo.",
            "cache_control": {"type": "ephemeral"},
        }
    ]
    assert cached["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in json.dumps(cached["messages"])
    assert uncached["system"] == "You are the CFO of Northwind Solo."
    assert "cache_control" not in json.dumps(uncached)
    assert hour["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert hour["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert "system" not in bare and "tools" not in bare
    # metadata is companyd's own and never sent
    assert set(cached) == {"model", "max_tokens", "messages", "system", "tools"}


@pytest.mark.anyio
async def test_repeated_runs_pay_cache_read_prices_for_the_prefix() -> None:
    with MessagesAPIServer() as srv:  # the agent-like responder simulates the cache
        llm, _ = backend(srv)
        try:
            async with asyncio.timeout(10):
                first = await llm.create(request())
                second = await llm.create(request())
        finally:
            await llm.aclose()
    assert first.usage.cache_write_5m_tokens > 0 and first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens == first.usage.cache_write_5m_tokens
    assert second.usage.cache_write_tokens == 0


@pytest.mark.anyio
@pytest.mark.parametrize("ttl", ["5m", "1h"])
async def test_usage_without_breakdown_counts_cache_writes_at_the_ttl_sent(ttl: str) -> None:
    # Without the 5m/1h breakdown the writes are of the only TTL companyd marks: a 1-hour
    # write costs 2x input, not the 5-minute 1.25x (under-counting is the unsafe side).
    with MessagesAPIServer() as srv:
        srv.enqueue(
            reply_text(
                "x",
                usage=Usage(input_tokens=3, output_tokens=2, cache_write_1h_tokens=700),
                usage_breakdown=False,
            )
        )
        llm, _ = backend(srv, cache_ttl=ttl)
        try:
            async with asyncio.timeout(10):
                r = await llm.create(request(cache=True))
        finally:
            await llm.aclose()
    writes = {"cache_write_5m_tokens" if ttl == "5m" else "cache_write_1h_tokens": 700}
    assert r.usage == Usage(input_tokens=3, output_tokens=2, **writes)


@pytest.mark.parametrize(
    ("item", "error", "retried"),
    [
        (overloaded(), ModelOverloaded, True),
        (rate_limited(), ModelRateLimited, True),
        (server_error(500), ModelServerError, True),
        (server_error(502), ModelServerError, True),
        (server_error(503), ModelServerError, True),
        (fault(408), ModelTimeout, True),
        (bad_request(), ModelBadRequest, False),
        (fault(401), ModelAuthFailed, False),
        (fault(403), ModelBadRequest, False),
        (fault(404), ModelBadRequest, False),
        (fault(413), ModelBadRequest, False),
        (fault(422), ModelBadRequest, False),
        (spend_limit(), SpendLimitReached, False),
    ],
)
@pytest.mark.anyio
async def test_every_status_maps_to_its_error(
    item: Any, error: type[ModelError], retried: bool
) -> None:
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(item, item, item)
        llm, clock = backend(srv, max_retries=2)
        try:
            async with asyncio.timeout(10):
                with pytest.raises(error) as ei:
                    await llm.create(request())
        finally:
            await llm.aclose()
        assert type(ei.value) is error
        assert ei.value.model == "claude-sonnet-5-5"
        assert ei.value.status == item.status
        assert ei.value.request_id and ei.value.request_id.startswith("req_")
        assert ei.value.retryable is retried
        assert "claude-sonnet-5-5" in str(ei.value)
        assert len(srv.requests) == (3 if retried else 1)
        assert len(clock.sleeps) == (2 if retried else 0)


@pytest.mark.anyio
async def test_spend_limit_is_never_retried_even_if_the_server_says_so() -> None:
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(spend_limit(should_retry=True, retry_after=1), reply_text("no"))
        llm, clock = backend(srv, max_retries=5)
        try:
            async with asyncio.timeout(10):
                with pytest.raises(SpendLimitReached, match="spend limit"):
                    await llm.create(request())
        finally:
            await llm.aclose()
        assert len(srv.requests) == 1 and clock.sleeps == []


@pytest.mark.parametrize(
    "item",
    [
        # the organisation's limit without the error code in the body
        fault(
            429,
            "You have reached your specified API usage limits. You will regain access on "
            "2026-12-01 at 00:00 UTC.",
        ),
        # a workspace's spend limit is a 400 invalid_request_error (ops-notes §3.3)
        fault(400, "You have reached your specified workspace API usage limits."),
        fault(400, "Your credit balance is too low to access the Anthropic API."),
    ],
)
@pytest.mark.anyio
async def test_a_spend_limit_said_only_in_the_message_is_a_spend_limit(item: Any) -> None:
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(item, reply_text("no"))
        llm, clock = backend(srv, max_retries=2)
        try:
            async with asyncio.timeout(10):
                with pytest.raises(SpendLimitReached) as ei:
                    await llm.create(request())
        finally:
            await llm.aclose()
        assert ei.value.status == item.status and ei.value.retryable is False
        assert len(srv.requests) == 1 and clock.sleeps == []


@pytest.mark.anyio
async def test_an_ordinary_rate_limit_is_not_a_spend_limit() -> None:
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(
            fault(429, "This request would exceed the rate limit for your organization."),
            reply_text("fine"),
        )
        llm, _ = backend(srv, max_retries=2)
        try:
            async with asyncio.timeout(10):
                r = await llm.create(request())
        finally:
            await llm.aclose()
        assert r.text == "fine" and len(srv.requests) == 2


@pytest.mark.anyio
async def test_a_transient_error_is_retried_then_succeeds() -> None:
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(overloaded(), server_error(), reply_text("finally"))
        llm, clock = backend(srv, max_retries=2)
        try:
            async with asyncio.timeout(10):
                r = await llm.create(request())
        finally:
            await llm.aclose()
        assert r.text == "finally"
        assert [x.headers.get("x-stainless-retry-count") for x in srv.requests] == ["0"] * 3
        # jittered exponential backoff: 0.5·2ⁿ minus up to 25 %
        assert 0.375 <= clock.sleeps[0] <= 0.5 and 0.75 <= clock.sleeps[1] <= 1.0


@pytest.mark.anyio
async def test_retry_after_is_honoured_up_to_the_cap() -> None:
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(
            rate_limited(retry_after=2),
            rate_limited(retry_after_ms=1500),
            reply_text("ok"),
        )
        llm, clock = backend(srv, max_retries=3, max_retry_after=30)
        try:
            async with asyncio.timeout(10):
                await llm.create(request())
        finally:
            await llm.aclose()
        assert clock.sleeps == [2.0, 1.5]


@pytest.mark.anyio
async def test_a_retry_after_beyond_the_cap_raises_at_once_instead_of_sleeping() -> None:
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(rate_limited(retry_after=3600), reply_text("an hour later"))
        llm, clock = backend(srv, max_retries=2, max_retry_after=30)
        try:
            async with asyncio.timeout(10):
                with pytest.raises(ModelRateLimited) as ei:
                    await llm.create(request())
        finally:
            await llm.aclose()
        assert ei.value.retry_after == 3600
        assert clock.sleeps == [] and len(srv.requests) == 1
        # The same for a 529 carrying a long retry-after.
        srv.reset()
        srv.enqueue(overloaded(retry_after=900), reply_text("later"))
        llm, clock = backend(srv, max_retries=2, max_retry_after=30)
        try:
            async with asyncio.timeout(10):
                with pytest.raises(ModelOverloaded):
                    await llm.create(request())
        finally:
            await llm.aclose()
        assert clock.sleeps == [] and len(srv.requests) == 1


@pytest.mark.anyio
async def test_x_should_retry_false_is_obeyed() -> None:
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(overloaded(should_retry=False), reply_text("no"))
        llm, _ = backend(srv, max_retries=2)
        try:
            async with asyncio.timeout(10):
                with pytest.raises(ModelOverloaded):
                    await llm.create(request())
        finally:
            await llm.aclose()
        assert len(srv.requests) == 1


@pytest.mark.anyio
async def test_a_slow_server_is_a_timeout_and_is_not_served() -> None:
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(stall(5.0, then=reply_text("late")), reply_text("on time"))
        llm, clock = backend(srv, max_retries=1, timeout=0.3)
        try:
            async with asyncio.timeout(10):
                r = await llm.create(request())
        finally:
            await llm.aclose()
        assert r.text == "on time"
        assert len(clock.sleeps) == 1
        assert srv.served == 1


@pytest.mark.anyio
async def test_the_whole_call_has_a_hard_deadline() -> None:
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(stall(None), stall(None), stall(None))
        # Each attempt would be allowed 5 s; the call as a whole only 0.3 s.
        llm, _ = backend(srv, max_retries=2, timeout=5.0, deadline=0.3)
        try:
            async with asyncio.timeout(10):
                with pytest.raises(ModelTimeout, match="deadline"):
                    await llm.create(request())
        finally:
            await llm.aclose()
        assert srv.served == 0


@pytest.mark.anyio
async def test_connection_refused_is_a_timeout_error() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens here now
    llm = ClaudeBackend(
        api_key="k", base_url=f"http://127.0.0.1:{port}", max_retries=0, timeout=2.0
    )
    try:
        async with asyncio.timeout(10):
            with pytest.raises(ModelTimeout, match="cannot reach"):
                await llm.create(request())
    finally:
        await llm.aclose()


@pytest.mark.anyio
async def test_from_config_reads_the_key_from_the_environment() -> None:
    spec = AnthropicSpec(api_key_env="MY_KEY", max_retries=0)
    with MessagesAPIServer(api_key="sk-env") as srv:
        llm = ClaudeBackend.from_config(
            spec, environ={"MY_KEY": "sk-env", "ANTHROPIC_BASE_URL": srv.base_url}
        )
        try:
            async with asyncio.timeout(10):
                await llm.create(request())
        finally:
            await llm.aclose()
        assert srv.requests[0].headers["authorization"] == "Bearer sk-env"
        assert srv.served == 1


@pytest.mark.anyio
async def test_from_config_reads_the_key_from_systemd_credentials(tmp_path: Path) -> None:
    (tmp_path / "anthropic_api_key").write_text("sk-cred\n")
    spec = AnthropicSpec(max_retries=0)
    with MessagesAPIServer(api_key="sk-cred") as srv:
        spec = spec.model_copy(update={"base_url": srv.base_url})
        llm = ClaudeBackend.from_config(spec, environ={"CREDENTIALS_DIRECTORY": str(tmp_path)})
        try:
            async with asyncio.timeout(10):
                await llm.create(request())
        finally:
            await llm.aclose()
        assert srv.served == 1


def test_the_environment_wins_over_the_credential_file(tmp_path: Path) -> None:
    (tmp_path / "anthropic_api_key").write_text("sk-cred")
    env = {"ANTHROPIC_API_KEY": "sk-env", "CREDENTIALS_DIRECTORY": str(tmp_path)}
    assert resolve_api_key(AnthropicSpec(), env) == "sk-env"


def test_a_missing_key_says_where_to_put_one(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable) as ei:
        resolve_api_key(AnthropicSpec(), {})
    msg = str(ei.value)
    assert "ANTHROPIC_API_KEY" in msg and "LoadCredential=anthropic_api_key" in msg
    assert "--offline" in msg
    (tmp_path / "anthropic_api_key").write_text("  \n")
    with pytest.raises(ModelUnavailable, match="is empty"):
        resolve_api_key(AnthropicSpec(), {"CREDENTIALS_DIRECTORY": str(tmp_path)})


def test_tests_cannot_point_the_backend_at_the_real_api() -> None:
    # conftest sets COMPANYD_TEST_NO_NET=1; the backend refuses a non-loopback endpoint.
    with pytest.raises(ModelUnavailable, match="COMPANYD_TEST_NO_NET"):
        ClaudeBackend(api_key="k", base_url="https://api.anthropic.com")
    with pytest.raises(ModelUnavailable, match="COMPANYD_TEST_NO_NET"):
        ClaudeBackend(api_key="k")


@pytest.mark.anyio
async def test_the_estimate_bounds_the_billed_prompt_tokens() -> None:
    # The agent-like responder reports ~1 token per 4 bytes, as real tokenisers do; even at
    # one token per byte the estimate must hold.
    from companyd.testing.messages_api import AgentLikeResponder

    with MessagesAPIServer(responder=AgentLikeResponder(bytes_per_token=1)) as srv:
        llm, _ = backend(srv)
        req = request(
            system="Ünïcödé prompt ✓ " * 200, messages=[{"role": "user", "content": "€" * 500}]
        )
        try:
            async with asyncio.timeout(10):
                r = await llm.create(req)
        finally:
            await llm.aclose()
    prompt = r.usage.input_tokens + r.usage.cache_write_tokens + r.usage.cache_read_tokens
    assert prompt <= estimate_input_tokens(req)


text = st.text(max_size=300)


@settings(max_examples=30, deadline=None)
@given(system=text, turns=st.lists(text, min_size=1, max_size=6), with_tools=st.booleans())
def test_the_estimate_is_at_least_one_token_per_byte(
    system: str, turns: list[str], with_tools: bool
) -> None:
    messages: list[Message] = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)
    ]
    req = ModelRequest(
        model="m", system=system, messages=messages, tools=(TOOL,) if with_tools else ()
    )
    raw = system.encode() + b"".join(t.encode() for t in turns)
    assert estimate_input_tokens(req) >= len(raw) + 16 * len(turns)


def test_the_estimate_counts_images_by_their_size_not_their_base64() -> None:
    tiny: ImageBlock = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "x"},
    }
    req = ModelRequest(model="m", system="", messages=[{"role": "user", "content": [tiny, tiny]}])
    assert estimate_input_tokens(req) >= 2 * 1600


@pytest.mark.anyio
async def test_each_retry_goes_through_the_hook_with_the_failed_attempts_error() -> None:
    # issue 15: each attempt is budgeted on its own; the hook sees why the last one failed
    # and whether it may have been billed (a timeout: yes; an error answer: no).
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(stall(5.0, then=reply_text("late")), overloaded(), reply_text("third"))
        llm, _ = backend(srv, max_retries=2, timeout=0.3)
        seen: list[tuple[str, bool]] = []

        async def hook(err: ModelError) -> None:
            seen.append((type(err).__name__, err.maybe_billed))

        try:
            async with asyncio.timeout(10):
                r = await llm.create(request(), before_retry=hook)
        finally:
            await llm.aclose()
    assert r.text == "third"
    assert seen == [("ModelTimeout", True), ("ModelOverloaded", False)]


@pytest.mark.anyio
async def test_a_gateway_timeout_may_have_been_billed_but_a_server_error_was_not() -> None:
    # the API's 504 timeout_error ("timed out while processing") and a proxy's 524 answer a
    # request that was taken in: like a timeout of our own, it may have been billed
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(
            fault(504, "Request timed out", error_type="timeout_error"),
            fault(524, "A timeout occurred"),
            fault(500, "Internal server error"),
            fault(502, "Bad gateway"),
            reply_text("fifth"),
        )
        llm, _ = backend(srv, max_retries=4)
        seen: list[tuple[int | None, bool]] = []

        async def hook(err: ModelError) -> None:
            seen.append((err.status, err.maybe_billed))

        try:
            async with asyncio.timeout(30):
                r = await llm.create(request(), before_retry=hook)
        finally:
            await llm.aclose()
    assert r.text == "fifth"
    assert seen == [(504, True), (524, True), (500, False), (502, False)]


@pytest.mark.anyio
async def test_a_hook_that_refuses_ends_the_call_without_the_retry() -> None:
    class Refused(Exception):
        pass

    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(overloaded(), reply_text("never sent"))
        llm, _ = backend(srv, max_retries=2)

        async def hook(err: ModelError) -> None:
            raise Refused("the budget does not fit another attempt")

        try:
            async with asyncio.timeout(10):
                with pytest.raises(Refused):
                    await llm.create(request(), before_retry=hook)
        finally:
            await llm.aclose()
        assert len(srv.requests) == 1


@pytest.mark.anyio
async def test_a_timeout_may_have_been_billed_but_a_refused_connection_was_not() -> None:
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(stall(None))
        llm, _ = backend(srv, max_retries=0, timeout=0.3)
        try:
            async with asyncio.timeout(10):
                with pytest.raises(ModelTimeout) as slow:
                    await llm.create(request())
        finally:
            await llm.aclose()
            srv.release_stalls()
    assert slow.value.maybe_billed
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens here now
    llm = ClaudeBackend(
        api_key="k", base_url=f"http://127.0.0.1:{port}", max_retries=0, timeout=2.0
    )
    try:
        async with asyncio.timeout(10):
            with pytest.raises(ModelTimeout, match="cannot reach") as refused:
                await llm.create(request())
    finally:
        await llm.aclose()
    assert not refused.value.maybe_billed


def _reset_in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


@pytest.mark.anyio
async def test_a_429_without_retry_after_waits_for_its_exhausted_limits_reset() -> None:
    # The later reset of the limits at 0 remaining is the wait (round3-notes); a limit with
    # room left does not count.
    exhausted = {
        "anthropic-ratelimit-tokens-remaining": "0",
        "anthropic-ratelimit-tokens-reset": _reset_in(1200),
        "anthropic-ratelimit-requests-remaining": "12",
        "anthropic-ratelimit-requests-reset": _reset_in(3000),
        "anthropic-ratelimit-input-tokens-remaining": "0",
        "anthropic-ratelimit-input-tokens-reset": _reset_in(600),
    }
    with MessagesAPIServer(default_responder=False) as srv:
        srv.enqueue(rate_limited(headers=exhausted), reply_text("later"))
        llm, clock = backend(srv, max_retries=2, max_retry_after=30)
        try:
            async with asyncio.timeout(10):
                with pytest.raises(ModelRateLimited) as ei:
                    await llm.create(request())
        finally:
            await llm.aclose()
        assert ei.value.retry_after is not None and 1190 <= ei.value.retry_after <= 1200
        assert clock.sleeps == [] and len(srv.requests) == 1
        # A short reset is waited for and retried, like a short retry-after.
        srv.reset()
        short = {
            "anthropic-ratelimit-tokens-remaining": "0",
            "anthropic-ratelimit-tokens-reset": _reset_in(10),
        }
        srv.enqueue(rate_limited(headers=short), reply_text("ok"))
        llm, clock = backend(srv, max_retries=2, max_retry_after=30)
        try:
            async with asyncio.timeout(10):
                assert (await llm.create(request())).text == "ok"
        finally:
            await llm.aclose()
        assert len(clock.sleeps) == 1 and 5 <= clock.sleeps[0] <= 10
        # A 529 carries the same headers on every answer: they are no wait for it.
        srv.reset()
        srv.enqueue(overloaded(headers=exhausted), reply_text("ok"))
        llm, clock = backend(srv, max_retries=2, max_retry_after=30)
        try:
            async with asyncio.timeout(10):
                assert (await llm.create(request())).text == "ok"
        finally:
            await llm.aclose()
        assert len(clock.sleeps) == 1 and clock.sleeps[0] <= 0.5


@pytest.mark.anyio
async def test_the_sdk_client_is_built_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # Building AsyncAnthropic imports the HTTP transport's modules and makes a TLS context
    # (~0.1 s of CPU): at the first call, in a worker thread, not on the daemon's loop.
    import threading

    import anthropic

    built_in: list[threading.Thread] = []
    real_init = anthropic.AsyncAnthropic.__init__

    def observed_init(self: anthropic.AsyncAnthropic, *args: Any, **kwargs: Any) -> None:
        built_in.append(threading.current_thread())  # the real SDK's __init__, observed
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(anthropic.AsyncAnthropic, "__init__", observed_init)
    with MessagesAPIServer(script=[reply_text("one"), reply_text("two")]) as srv:
        b, _ = backend(srv)
        first = await b.create(request())
        second = await b.create(request())
        await b.aclose()
    assert [first.text, second.text] == ["one", "two"]  # through the SDK to the stand-in
    assert len(built_in) == 1 and built_in[0] is not threading.main_thread()
