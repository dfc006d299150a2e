"""The loopback Messages API stand-in: wire shapes, scripting, faults, stalls, control API.

Raw HTTP (http.client) checks the exact JSON and headers; the real anthropic SDK checks
that it parses what the stand-in sends.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import pytest

from companyd.llm._model import Usage
from companyd.testing.messages_api import (
    AgentLikeResponder,
    MessagesAPIServer,
    ScriptItem,
    bad_request,
    fault,
    item_from_json,
    overloaded,
    rate_limited,
    reply_text,
    reply_tool_use,
    server_error,
    spend_limit,
    stall,
    usage_of,
)

HELLO: dict[str, Any] = {
    "model": "claude-haiku-5-5",
    "max_tokens": 50,
    "messages": [{"role": "user", "content": "hi"}],
}


def post(
    srv: MessagesAPIServer,
    body: Any,
    *,
    headers: dict[str, str] | None = None,
    path: str = "/v1/messages",
) -> tuple[int, dict[str, str], Any]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    try:
        data = json.dumps(body).encode()
        hdrs = {"content-type": "application/json", "authorization": "Bearer test-key"}
        hdrs.update(headers or {})
        conn.request("POST", path, body=data, headers=hdrs)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(raw)
    finally:
        conn.close()


def test_text_reply_has_the_api_shape_and_headers() -> None:
    with MessagesAPIServer() as srv:
        srv.enqueue(
            reply_text(
                "hello",
                usage=Usage(
                    input_tokens=412,
                    output_tokens=58,
                    cache_write_5m_tokens=2000,
                    cache_write_1h_tokens=48,
                    cache_read_tokens=7,
                ),
            )
        )
        status, headers, body = post(srv, HELLO)
    assert status == 200
    assert headers["request-id"].startswith("req_")
    assert headers["content-type"] == "application/json"
    assert body["type"] == "message" and body["role"] == "assistant"
    assert body["id"].startswith("msg_")
    assert body["model"] == "claude-haiku-5-5"
    assert body["content"] == [{"type": "text", "text": "hello"}]
    assert body["stop_reason"] == "end_turn" and body["stop_sequence"] is None
    assert body["usage"] == {
        "input_tokens": 412,
        "output_tokens": 58,
        "cache_creation_input_tokens": 2048,
        "cache_read_input_tokens": 7,
        "cache_creation": {"ephemeral_5m_input_tokens": 2000, "ephemeral_1h_input_tokens": 48},
        "service_tier": "standard",
    }
    assert srv.served == 1 and srv.errors == 0
    assert usage_of(srv.responses[0]).cache_write_1h_tokens == 48


def test_usage_without_breakdown_omits_cache_creation() -> None:
    with MessagesAPIServer() as srv:
        srv.enqueue(
            reply_text(
                "x",
                usage=Usage(input_tokens=1, output_tokens=1, cache_write_5m_tokens=30),
                usage_breakdown=False,
            )
        )
        _, _, body = post(srv, HELLO)
    assert "cache_creation" not in body["usage"]
    assert body["usage"]["cache_creation_input_tokens"] == 30


def test_both_auth_headers_are_accepted_and_missing_auth_is_401() -> None:
    with MessagesAPIServer(api_key="k1") as srv:
        ok1, _, _ = post(srv, HELLO, headers={"authorization": "Bearer k1"})
        ok2, _, _ = post(srv, HELLO, headers={"authorization": "", "x-api-key": "k1"})
        bad, _, body = post(srv, HELLO, headers={"authorization": "Bearer wrong"})
        none, _, _ = post(srv, HELLO, headers={"authorization": ""})
        assert (ok1, ok2, bad, none) == (200, 200, 401, 401)
        assert body["error"]["type"] == "authentication_error"
        assert [r.api_key for r in srv.requests] == ["k1", "k1", "wrong", None]
        assert srv.served == 2 and srv.errors == 2


@pytest.mark.parametrize(
    ("item", "status", "etype"),
    [
        (overloaded(), 529, "overloaded_error"),
        (rate_limited(retry_after=7), 429, "rate_limit_error"),
        (server_error(), 500, "api_error"),
        (server_error(503), 503, "api_error"),
        (bad_request("nope"), 400, "invalid_request_error"),
        (fault(403), 403, "permission_error"),
        (fault(404), 404, "not_found_error"),
    ],
)
def test_scripted_errors_have_the_api_error_shape(item: Any, status: int, etype: str) -> None:
    with MessagesAPIServer() as srv:
        srv.enqueue(item)
        got, headers, body = post(srv, HELLO)
        assert got == status
        assert body["type"] == "error"
        assert body["error"]["type"] == etype
        assert body["request_id"] == headers["request-id"]
        assert srv.served == 0 and srv.errors == 1
        if status == 429:
            assert headers["retry-after"] == "7"


def test_spend_limit_error_carries_the_error_code_and_no_retry_after() -> None:
    with MessagesAPIServer() as srv:
        srv.enqueue(spend_limit())
        status, headers, body = post(srv, HELLO)
    assert status == 429
    assert body["error"]["details"] == {"error_code": "enforced_spend_limit_reached"}
    assert "retry-after" not in headers and "retry-after-ms" not in headers


def test_retry_headers_are_sent_as_scripted() -> None:
    with MessagesAPIServer() as srv:
        srv.enqueue(rate_limited(retry_after_ms=250, should_retry=False))
        _, headers, _ = post(srv, HELLO)
    assert headers["retry-after-ms"] == "250"
    assert headers["x-should-retry"] == "false"


@pytest.mark.anyio
async def test_the_real_sdk_parses_replies_and_errors() -> None:
    async with asyncio.timeout(10):
        with MessagesAPIServer() as srv:
            srv.enqueue(
                reply_tool_use("get_spend", {"period": "today"}, text="Let me check."),
                spend_limit(),
            )
            client = anthropic.AsyncAnthropic(api_key="k", base_url=srv.base_url, max_retries=0)
            try:
                msg = await client.messages.create(**HELLO)
                assert msg.stop_reason == "tool_use"
                assert [b.type for b in msg.content] == ["text", "tool_use"]
                assert msg.content[1].input == {"period": "today"}
                with pytest.raises(anthropic.RateLimitError) as ei:
                    await client.messages.create(**HELLO)
                assert ei.value.error_code == "enforced_spend_limit_reached"
            finally:
                await client.close()


def test_validation_rejects_an_unanswered_tool_use_like_the_real_api() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}],
            },
            {"role": "user", "content": "I ignore your tool call"},
        ],
    }
    with MessagesAPIServer() as srv:
        status, _, err = post(srv, body)
        assert status == 400
        assert "toolu_1" in err["error"]["message"]
        body["messages"][2] = {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}],
        }
        status, _, _ = post(srv, body)
        assert status == 200
        status, _, err = post(srv, {"model": "m", "messages": []})
        assert status == 400 and "max_tokens" in err["error"]["message"]


def test_script_exhausted_without_responder_is_a_clear_400() -> None:
    with MessagesAPIServer(default_responder=False) as srv:
        status, _, body = post(srv, HELLO)
    assert status == 400
    assert "script exhausted" in body["error"]["message"]


def test_agent_like_responder_calls_a_tool_then_ends_and_simulates_caching() -> None:
    tools = [
        {
            "name": "remember",
            "description": "store a fact",
            "input_schema": {
                "type": "object",
                "properties": {"fact": {"type": "string"}, "n": {"type": "integer"}},
                "required": ["fact", "n"],
            },
            "cache_control": {"type": "ephemeral"},
        }
    ]
    system = [{"type": "text", "text": "You are the CFO. " * 50}]
    first = {**HELLO, "tools": tools, "system": system}
    with MessagesAPIServer(responder=AgentLikeResponder()) as srv:
        _, _, r1 = post(srv, first)
        assert r1["stop_reason"] == "tool_use"
        call = r1["content"][0]
        assert call["name"] == "remember" and call["input"] == {"fact": "example fact", "n": 1}
        u1 = usage_of(r1)
        assert u1.cache_write_5m_tokens > 0 and u1.cache_read_tokens == 0
        second = {
            **first,
            "messages": [
                *first["messages"],
                {"role": "assistant", "content": r1["content"]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": call["id"], "content": "stored"}
                    ],
                },
            ],
        }
        _, _, r2 = post(srv, second)
        assert r2["stop_reason"] == "end_turn"
        u2 = usage_of(r2)
        assert u2.cache_read_tokens == u1.cache_write_5m_tokens and u2.cache_write_tokens == 0
        # Never more tokens than bytes: companyd's byte-based estimate stays an upper bound.
        for body, u in ((first, u1), (second, u2)):
            size = len(json.dumps(body).encode())
            assert u.input_tokens + u.cache_write_tokens + u.cache_read_tokens <= size


def test_fault_injection_is_seeded_and_does_not_consume_the_script() -> None:
    def statuses(seed: int) -> list[int]:
        with MessagesAPIServer(fault_rate=0.3, seed=seed) as srv:
            out = [post(srv, HELLO)[0] for _ in range(40)]
            assert srv.injected_faults == sum(1 for s in out if s != 200)
            assert srv.served == out.count(200)
            return out

    a, b = statuses(7), statuses(7)
    assert a == b
    assert set(a) <= {200, 529, 500} and 200 in a and (529 in a or 500 in a)
    with MessagesAPIServer(fault_rate=1.0, fault_statuses=[529], seed=1) as srv:
        srv.enqueue(reply_text("kept"))
        assert post(srv, HELLO)[0] == 529
        assert srv.pending == 1


@pytest.mark.anyio
async def test_a_client_that_times_out_is_not_counted_as_served() -> None:
    async with asyncio.timeout(10):
        with MessagesAPIServer() as srv:
            srv.enqueue(stall(1.0, then=reply_text("too late")), reply_text("on time"))
            client = anthropic.AsyncAnthropic(
                api_key="k", base_url=srv.base_url, max_retries=0, timeout=0.2
            )
            try:
                with pytest.raises(anthropic.APITimeoutError):
                    await client.messages.create(**HELLO)
                msg = await client.messages.create(**HELLO)
                assert msg.content[0].text == "on time"
            finally:
                await client.close()
            deadline = time.monotonic() + 5
            while srv.abandoned < 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert srv.abandoned == 1
            assert srv.served == 1
            assert [r.outcome for r in srv.requests] == ["abandoned", "served"]


@pytest.mark.anyio
async def test_the_slow_api_mode_bills_a_reply_whose_client_gave_up() -> None:
    # issue 15: the real API bills what it processed, whatever became of the connection
    async with asyncio.timeout(10):
        with MessagesAPIServer(latency=1.0, bill_abandoned=True) as srv:
            srv.enqueue(reply_text("too late", usage=Usage(input_tokens=7, output_tokens=3)))
            client = anthropic.AsyncAnthropic(
                api_key="k", base_url=srv.base_url, max_retries=0, timeout=0.2
            )
            try:
                with pytest.raises(anthropic.APITimeoutError):
                    await client.messages.create(**HELLO)
            finally:
                await client.close()
            deadline = time.monotonic() + 5
            while srv.abandoned < 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert srv.served == 0 and srv.abandoned == 1
            assert srv.billed_usage() == Usage(input_tokens=7, output_tokens=3)
            assert srv.requests[0].billed is not None
            assert srv.stats()["billed_abandoned"] == 1


@pytest.mark.anyio
async def test_held_stall_is_released_on_demand() -> None:
    async with asyncio.timeout(10):
        with MessagesAPIServer() as srv:
            srv.enqueue(stall(None, then=reply_text("released")))
            client = anthropic.AsyncAnthropic(api_key="k", base_url=srv.base_url, max_retries=0)
            try:
                call = asyncio.ensure_future(client.messages.create(**HELLO))
                await asyncio.to_thread(srv.wait_for_requests, 1, 5.0)
                await asyncio.sleep(0.05)
                assert not call.done() and srv.served == 0
                srv.release_stalls()
                msg = await asyncio.wait_for(call, 5)
                assert msg.content[0].text == "released"
            finally:
                await client.close()


def test_stop_aborts_a_held_request() -> None:
    srv = MessagesAPIServer().start()
    srv.enqueue(stall(None, then=reply_text("never")))
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    conn.request(
        "POST",
        "/v1/messages",
        body=json.dumps(HELLO),
        headers={"authorization": "Bearer k", "content-type": "application/json"},
    )
    srv.wait_for_requests(1)
    srv.stop()
    with pytest.raises((http.client.HTTPException, OSError)):
        conn.getresponse().read()
    conn.close()
    assert srv.served == 0


def test_wait_for_requests_has_a_deadline() -> None:
    with MessagesAPIServer() as srv, pytest.raises(TimeoutError, match="expected at least 1"):
        srv.wait_for_requests(1, timeout=0.05)


def test_items_round_trip_through_json() -> None:
    items: list[ScriptItem] = [
        reply_text("a", usage=Usage(input_tokens=3, output_tokens=4, cache_read_tokens=5)),
        reply_tool_use("t", {"x": 1}, id="toolu_x"),
        spend_limit(),
        rate_limited(retry_after=3),
        stall(0.5, then=overloaded()),
    ]
    for item in items:
        assert item_from_json(json.loads(json.dumps(item.to_json()))) == item
    with pytest.raises(ValueError, match="unknown script item type 'bogus'"):
        item_from_json({"type": "bogus"})


def test_control_endpoints_script_and_inspect_over_http() -> None:
    with MessagesAPIServer(default_responder=False) as srv:
        status, _, out = post(
            srv,
            [{"type": "text", "text": "from afar"}, {"type": "error", "status": 529}],
            path="/_standin/enqueue",
        )
        assert status == 200 and out == {"pending": 2}
        assert post(srv, HELLO)[2]["content"][0]["text"] == "from afar"
        assert post(srv, HELLO)[0] == 529
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
        conn.request("GET", "/_standin/stats")
        stats = json.loads(conn.getresponse().read())
        conn.close()
        assert stats["served"] == 1 and stats["errors"] == 1 and stats["requests"] == 2
        assert post(srv, {"type": "nope"}, path="/_standin/enqueue")[0] == 400


@pytest.mark.anyio
async def test_module_entry_point_serves_a_script_from_another_process(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"type": "text", "text": "subprocess says hi"}]))
    url_file = tmp_path / "url"
    cmd = [
        sys.executable,
        "-m",
        "companyd.testing.messages_api",
        "--port",
        "0",
        "--script",
        str(script),
        "--responder",
        "none",
        "--url-file",
        str(url_file),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            async with asyncio.timeout(20):
                line = (await asyncio.to_thread(proc.stdout.readline)).strip()
                assert line.startswith("MESSAGES_API_URL=http://127.0.0.1:")
                url = line.split("=", 1)[1]
                assert url_file.read_text().strip() == url
                client = anthropic.AsyncAnthropic(api_key="k", base_url=url, max_retries=0)
                try:
                    msg = await client.messages.create(**HELLO)
                    assert msg.content[0].text == "subprocess says hi"
                    with pytest.raises(anthropic.BadRequestError, match="script exhausted"):
                        await client.messages.create(**HELLO)
                finally:
                    await client.close()
        finally:
            proc.terminate()
            assert proc.wait(timeout=10) == 0
