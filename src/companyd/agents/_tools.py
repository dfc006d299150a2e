"""Tools an agent can use, and how a tool call becomes a ``tool_result``.

A :class:`Tool` is a name, a description and a JSON Schema (what the model sees), a
handler (what runs), and an ``idempotent`` flag (whether it may be re-run after a crash
left its outcome unknown). The agent's :class:`ToolBox` holds the tools it is allowed —
after company.yaml's ``tools.allow`` / ``tools.deny`` — and turns each ``tool_use`` block
into a ``tool_result`` block. A handler signals a failure the model should see by raising
:class:`ToolError`; the message goes back as ``is_error: true`` and the run continues.

Built-in tool families (each built where its state lives, registered here):

* memory — the nine MCP memory operations and ``recall`` (companyd.memory);
* colleagues — ``consult`` and ``delegate`` (companyd.agents._colleagues);
* improver — ``read_agent`` and ``propose_change`` (companyd.desk._proposals);
* external — every tool of the MCP servers declared under the agent's ``mcp_servers``:
  the ``mcp`` SDK's client session over companyd's bounded stdio link
  (:class:`McpToolServer`, :mod:`companyd.agents._stdio`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO, cast

from companyd._frozen import Frozen
from companyd.config import McpServerSpec, ToolsSpec
from companyd.errors import CompanydError
from companyd.llm import ToolDef, ToolResultBlock, ToolUseBlock
from companyd.memory import MemoryToolError, MemoryUnavailable, tool_definitions
from companyd.runs import cut
from companyd.sandbox import Launch, SandboxUnavailable

__all__ = [
    "MAX_RESULT_CHARS",
    "MCP_RETRY_MAX_SECONDS",
    "MCP_RETRY_MIN_SECONDS",
    "McpServerFailed",
    "McpToolServer",
    "Tool",
    "ToolBox",
    "ToolCallContext",
    "ToolError",
    "tool_risk",
    "unknown_outcome_result",
]

log = logging.getLogger(__name__)


class ToolError(CompanydError):
    """A tool call failed in a way the model should see (sent back as ``is_error``)."""


#: Tool names the Messages API accepts.
_API_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_API_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


class McpServerFailed(CompanydError):
    """An external MCP server could not be started: ``reason`` says why, for an alert."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"MCP server {server!r} {reason}")
        self.server = server
        self.reason = reason


#: First wait before an MCP server that failed to start is tried again; it doubles after
#: each failure, up to MCP_RETRY_MAX_SECONDS.
MCP_RETRY_MIN_SECONDS = 5.0
MCP_RETRY_MAX_SECONDS = 300.0


class ToolCallContext(Frozen):
    """Who is calling a tool, for tools that need it (consult, delegate, ask_founder)."""

    agent: str
    run_id: str
    task_id: str
    consult_chain: tuple[str, ...] = ()
    #: the ``tool_use`` block's id: a colleague's run links back to it (``asked_in``), and with
    #: ``run_id`` it names this one call across restarts
    tool_use_id: str = ""
    routine: str | None = None
    #: what is left of the run's ``max_seconds`` (None: no limit)
    run_seconds_left: float | None = None
    #: the W3C trace context of the call's ``execute_tool`` span (``traceparent``), sent to
    #: an MCP tool server in ``params._meta`` so its spans join the run's trace; empty when
    #: not tracing
    trace: Mapping[str, str] = field(default_factory=dict)


Handler = Callable[[Mapping[str, Any], ToolCallContext], Awaitable[Any]]


class Tool(Frozen):
    """One tool.

    Attributes:
        name: the name the model calls.
        description: what it does, for the model.
        input_schema: JSON Schema of its input.
        handler: ``await handler(arguments, context)`` → any JSON-serialisable result, or
            raises :class:`ToolError`.
        idempotent: True if running it twice has the effect of running it once (reads,
            create-if-absent writes); decides what happens to a call whose outcome a crash
            left unknown.
        family: ``memory``, ``colleagues``, ``improver``, ``external:<server>``.
        rejoin: for a non-idempotent call a stop interrupted: ``await rejoin(arguments,
            context)`` waits for what the call had started (a colleague's task) and returns
            the call's result, or None when there is nothing to wait for (the outcome is
            then unknown to the run); it may raise :class:`ToolError` like ``handler``.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    handler: Handler
    idempotent: bool = False
    family: str = ""
    #: whether its calls wait for the founder by what the tool itself says (an MCP tool
    #: under ``risk: from_annotations`` not annotated read-only, or ``risk: always_ask``);
    #: the agent's ``require_approval`` / ``allow_without_approval`` override it
    approval: bool = False
    #: the risk as ``companyd tools`` shows it: ``read-only``, ``destructive``,
    #: ``unannotated``, ``trusted``… ('' for built-in tools)
    risk: str = ""
    rejoin: Handler | None = None

    def definition(self) -> ToolDef:
        """The tool as the model sees it: name, description, input schema."""
        return ToolDef(name=self.name, description=self.description, input_schema=self.input_schema)


def unknown_outcome_result(tool_use_id: str, name: str) -> ToolResultBlock:
    """The ``tool_result`` for a non-idempotent call a crash interrupted."""
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "is_error": True,
        "content": (
            f"The outcome of this {name!r} call is unknown: the agent stopped while it was in "
            "flight, and the tool is not idempotent, so it was not called again. Check its "
            "effect (for example in memory or the external system) before calling it again."
        ),
    }


#: How much of one tool result the model reads unless company.yaml says otherwise
#: (``defaults.tools.max_result_chars``): about 25,000 tokens.
MAX_RESULT_CHARS = 100_000


@dataclass
class ToolBox:
    """The tools one agent may use, filtered by its allow/deny lists.

    A result (or error) longer than ``max_result_chars`` reaches the model cut, with a note
    of its full size: one large answer (a whole file, a long page) would otherwise fill
    the context window — the API refuses the request, and the run fails — or be paid for
    again at every later turn of the run.
    """

    tools: dict[str, Tool] = field(default_factory=dict)
    max_result_chars: int = MAX_RESULT_CHARS

    @classmethod
    def build(
        cls, tools: Iterable[Tool], policy: ToolsSpec, *, max_result_chars: int = MAX_RESULT_CHARS
    ) -> ToolBox:
        """Keep the tools ``policy`` allows (``allow`` absent = all; ``deny`` wins)."""
        box = cls(max_result_chars=max_result_chars)
        box.add(tools, policy)
        return box

    def add(self, tools: Iterable[Tool], policy: ToolsSpec) -> list[str]:
        """Add the tools ``policy`` allows (an MCP server that came up late); the names
        they got.
        """
        allow = set(policy.allow) if policy.allow is not None else None
        deny = set(policy.deny)
        kept = self.tools
        added: list[str] = []
        for t in tools:
            if t.name in deny or (allow is not None and t.name not in allow):
                continue
            if t.name in kept:
                # an external server reusing a built-in name gets its server prefix
                t = dataclasses.replace(
                    t,
                    name=_API_BAD_CHARS.sub("_", f"{t.family.removeprefix('external:')}__{t.name}")[
                        :64
                    ],
                )
            kept[t.name] = t
            added.append(t.name)
        return added

    def remove(self, names: Iterable[str]) -> None:
        """Drop tools (those of an MCP server that went away)."""
        for name in names:
            self.tools.pop(name, None)

    def definitions(self) -> list[ToolDef]:
        """Every tool's definition, in registration order, for the model request."""
        return [t.definition() for t in self.tools.values()]

    def is_idempotent(self, name: str) -> bool:
        """Whether tool ``name`` may be re-run after a crash interrupted it (False for an unknown
        tool).
        """
        t = self.tools.get(name)
        return t is not None and t.idempotent

    def needs_approval(self, name: str) -> bool:
        """Whether tool ``name`` asks for the founder's approval by itself (its MCP
        annotations and its server's ``risk``); False for an unknown tool.
        """
        t = self.tools.get(name)
        return t is not None and t.approval

    def family(self, name: str) -> str | None:
        """The family of tool ``name`` (``memory``, ``colleagues``, …), None if unknown."""
        t = self.tools.get(name)
        return t.family if t is not None else None

    async def call(self, tool_use: ToolUseBlock, ctx: ToolCallContext) -> ToolResultBlock:
        """Run one ``tool_use`` block and return its ``tool_result`` block. Never raises for
        a tool's own failure (that becomes ``is_error``); cancellation propagates.
        """
        name = str(tool_use.get("name"))
        tool_id = str(tool_use.get("id"))
        args = tool_use.get("input") or {}
        tool = self.tools.get(name)
        if tool is None:
            return {
                "type": "tool_result",
                "tool_use_id": tool_id,
                "is_error": True,
                "content": (
                    f"there is no tool named {name!r}; available tools: "
                    f"{', '.join(sorted(self.tools)) or '(none)'}"
                ),
            }
        try:
            result = await tool.handler(args if isinstance(args, Mapping) else {}, ctx)
        except ToolError as exc:
            return self._bounded(name, _tool_error(tool_id, exc))
        return self._bounded(name, _tool_result(tool_id, result))

    async def rejoin(self, tool_use: ToolUseBlock, ctx: ToolCallContext) -> ToolResultBlock | None:
        """The result of a call a stop interrupted, by its tool's ``rejoin`` (waiting for
        what the call started); None if the tool has none or there is nothing to wait for.
        Never raises for a tool's own failure; cancellation propagates.
        """
        name = str(tool_use.get("name"))
        tool = self.tools.get(name)
        if tool is None or tool.rejoin is None:
            return None
        tool_id = str(tool_use.get("id"))
        args = tool_use.get("input") or {}
        try:
            result = await tool.rejoin(args if isinstance(args, Mapping) else {}, ctx)
        except ToolError as exc:
            return self._bounded(name, _tool_error(tool_id, exc))
        return None if result is None else self._bounded(name, _tool_result(tool_id, result))

    def _bounded(self, name: str, block: ToolResultBlock) -> ToolResultBlock:
        text = block.get("content")
        limit = self.max_result_chars
        if not isinstance(text, str) or len(text) <= limit:
            return block
        log.info(
            "tool %r returned %d characters; the model reads the first %d (tools.max_result_chars)",
            name,
            len(text),
            limit,
        )
        return {**block, "content": cut(text, limit)}


def _tool_error(tool_id: str, exc: ToolError) -> ToolResultBlock:
    return {"type": "tool_result", "tool_use_id": tool_id, "is_error": True, "content": str(exc)}


def _tool_result(tool_id: str, result: Any) -> ToolResultBlock:
    text = (
        result
        if isinstance(result, str)
        else json.dumps(result, indent=2, ensure_ascii=False, default=str)
    )
    return {"type": "tool_result", "tool_use_id": tool_id, "content": text}


class _ServerStderr:
    """A tool server's stderr: a pipe whose lines the daemon logs as the server's own
    (``MCP server 'name' (stderr): …``), never raw into the daemon's log, where a server
    could write lines that read as the daemon's and flood it (journald then drops the
    daemon's lines too). At most :attr:`BURST` lines, refilled at :attr:`RATE` a second,
    each cut at :attr:`LINE` bytes; what is not logged is counted and said.

    :attr:`stream` is what the stdio client gives the process; :meth:`spawned` closes the
    daemon's copy of it once the process has it, so the pipe ends when the server (and
    every child of it) has exited. A plain thread reads it: a blocking read, off the loop.
    """

    BURST = 100
    RATE = 1.0
    LINE = 4096

    def __init__(self, name: str, now: Callable[[], float] | None = None) -> None:
        import threading
        import time

        self.name = name
        self._now = now or time.monotonic
        read, write = os.pipe()
        self.stream: TextIO = os.fdopen(write, "w")
        self._thread = threading.Thread(
            target=self._pump, args=(read,), name=f"mcp-stderr-{name}", daemon=True
        )
        self._thread.start()

    def spawned(self) -> None:
        """The process has its copy (or was not started): close the daemon's."""
        self.stream.close()

    def _pump(self, fd: int) -> None:
        tokens, last, dropped = float(self.BURST), self._now(), 0
        with os.fdopen(fd, "rb") as pipe:
            while line := pipe.readline(self.LINE):
                whole = line.endswith(b"\n")
                while not whole and (rest := pipe.readline(self.LINE)):
                    whole = rest.endswith(b"\n")  # the rest of a long line: not kept
                now = self._now()
                tokens = min(float(self.BURST), tokens + (now - last) * self.RATE)
                last = now
                if tokens < 1:
                    dropped += 1
                    continue
                tokens -= 1
                text = line.decode("utf-8", "replace").rstrip("\r\n")
                log.info("MCP server %r (stderr): %s%s", self.name, text, "" if whole else " […]")
        if dropped:
            log.warning(
                "MCP server %r wrote %d more line(s) to its stderr, not logged (at most %d "
                "at once, then %g a second)",
                self.name,
                dropped,
                self.BURST,
                self.RATE,
            )


class McpToolServer:
    """An external MCP tool server (stdio) attached to one agent.

    ``async with McpToolServer(name, spec) as server: server.tools`` starts the server
    process, initialises the session and lists its tools; leaving the block stops it.
    A tool is idempotent if company.yaml lists it in ``idempotent_tools`` or the server
    annotates it ``idempotentHint`` / ``readOnlyHint``.

    Starting raises :class:`McpServerFailed` (never another exception, except
    cancellation) if the command cannot be run, the server closes the connection (it
    exited), answers nonsense, or does not finish the handshake (``initialize`` and
    ``tools/list``) within ``handshake_timeout_seconds``; the process is stopped first.
    """

    def __init__(
        self,
        name: str,
        spec: McpServerSpec,
        *,
        launcher: Callable[[], Awaitable[Launch]] | None = None,
    ) -> None:
        self.name = name
        self.spec = spec
        self.tools: list[Tool] = []
        #: the raw ``tools/list`` entries (name, description, input schema, annotations)
        self.listed: list[Any] = []
        #: set when a call found the server gone (it exited, was killed by a limit); the
        #: reason is in :attr:`death`
        self.dead = asyncio.Event()
        self.death = ""
        self._launcher = launcher
        self._stack: contextlib.AsyncExitStack | None = None
        self._session: Any = None
        self._sandboxed = False

    async def _launch(self) -> Launch:
        if self._launcher is not None:
            return await self._launcher()
        # No launcher (a bare McpToolServer): the daemon's own child, as before sandboxes.
        env = dict(self.spec.env)
        for var, source in self.spec.env_from.items():
            value = os.environ.get(source)
            if value is not None:
                env[var] = value
        return Launch(
            command=self.spec.command,
            args=list(self.spec.args),
            env=env,
            cwd=None,
            sandboxed=False,
        )

    async def __aenter__(self) -> McpToolServer:
        if "mcp.client.stdio" not in sys.modules:
            # the mcp SDK (pydantic models, anyio, httpx: ~1 s of CPU here) is imported when
            # the first tool server starts, in a thread: not on the event loop (issue 31)
            await asyncio.to_thread(importlib.import_module, "mcp.client.stdio")
        from mcp import ClientSession

        from companyd.agents._stdio import stdio_link

        stack = contextlib.AsyncExitStack()
        limit = self.spec.handshake_timeout_seconds
        try:
            # Loop time, not the injected clock: anyio's cancel scopes inside the mcp SDK
            # must be left in this task, which asyncio.timeout guarantees.
            async with asyncio.timeout(limit):
                launch = await self._launch()
                self._sandboxed = launch.sandboxed
                stderr = _ServerStderr(self.name)
                try:
                    read, write = await stack.enter_async_context(
                        stdio_link(
                            launch.command,
                            launch.args,
                            env=launch.env,
                            cwd=launch.cwd,
                            errlog=stderr.stream,
                            name=self.name,
                            max_message_bytes=self.spec.limits.message_mb * 2**20,
                            on_broken=self._broken,
                        )
                    )
                finally:
                    stderr.spawned()
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                listed = await session.list_tools()
        except asyncio.CancelledError:
            await stack.aclose()
            raise
        except SandboxUnavailable as exc:
            with contextlib.suppress(Exception):
                await stack.aclose()
            raise McpServerFailed(self.name, f"was not started: {exc}") from None
        except Exception as exc:
            with contextlib.suppress(Exception):
                await stack.aclose()
            raise McpServerFailed(self.name, self._why(exc, limit)) from None
        self._stack = stack
        self._session = session
        self.listed = list(listed.tools)
        declared = set(self.spec.idempotent_tools)
        refused: list[str] = []
        for t in listed.tools:
            schema = dict(t.input_schema or {"type": "object"})
            # The Messages API refuses the whole request for one bad tool (HTTP 400), so
            # one such tool would fail every run of the agent: leave it out instead.
            if not _API_TOOL_NAME.fullmatch(t.name) or schema.get("type") != "object":
                refused.append(t.name)
                continue
            ann = t.annotations
            hinted = bool(ann is not None and (ann.idempotent_hint or ann.read_only_hint))
            risk, approval = tool_risk(self.spec.risk, ann)
            self.tools.append(
                Tool(
                    name=t.name,
                    description=t.description or f"{t.name} (from MCP server {self.name!r})",
                    input_schema=schema,
                    handler=self._handler(t.name),
                    idempotent=t.name in declared or hinted,
                    family=f"external:{self.name}",
                    approval=approval,
                    risk=risk,
                )
            )
        if refused:
            log.warning(
                "MCP server %r: %d tool(s) left out because the Messages API would refuse "
                "them (a name must be 1-64 letters, digits, '_' or '-', and the input schema "
                "an object): %s",
                self.name,
                len(refused),
                ", ".join(repr(n[:80]) for n in refused),
            )
        return self

    def _why(self, exc: BaseException, limit: float) -> str:
        """One line for an operator: what went wrong starting the server, and what to do."""
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]  # anyio wraps the task group's failure
        command = self.spec.command
        if isinstance(exc, TimeoutError):
            return (
                f"did not answer the MCP handshake within {limit:g} s (command {command!r}); "
                "check that it speaks MCP over stdio, or raise its handshake_timeout_seconds"
            )
        if isinstance(exc, OSError):
            return (
                f"could not be started: {exc.strerror or exc} (command {command!r}); check "
                "the command and that the daemon's user may run it"
            )
        from mcp.shared.exceptions import MCPError

        if isinstance(exc, MCPError) and self.death:
            # the daemon broke the link itself (junk on stdout, a flood of its own
            # messages): that is why, not an exit
            return (
                f"was stopped during the MCP handshake: it {self.death} (command {command!r}); "
                "a server's stdout carries MCP messages only — its own output belongs on stderr"
            )
        if isinstance(exc, MCPError):
            where = (
                "in its sandbox (its errors are in the daemon's log; docs/tools.md, "
                "'Debugging a sandboxed server')"
                if self._sandboxed
                else "by hand, as the daemon's user, to see its error"
            )
            return (
                f"closed the connection during the MCP handshake ({exc}); it probably exited "
                f"at once — run {command!r} {where}"
            )
        return (
            f"failed during the MCP handshake: {type(exc).__name__}: {str(exc)[:200]} "
            f"(command {command!r})"
        )

    def _broken(self, reason: str) -> None:
        """The link to the server broke (companyd.agents._stdio): it counts as dead."""
        if not self.dead.is_set():
            self.death = reason
            self.dead.set()

    async def __aexit__(self, *exc: object) -> None:
        if self._stack is not None:
            with contextlib.suppress(Exception):
                await self._stack.aclose()
            self._stack = None

    def _handler(self, tool_name: str) -> Handler:
        async def call(arguments: Mapping[str, Any], ctx: ToolCallContext) -> Any:
            if self.dead.is_set():
                raise ToolError(
                    f"MCP server {self.name!r} is not running (it {self.death}); it is being "
                    "restarted — do not rely on its tools in this run"
                )
            try:
                async with asyncio.timeout(self.spec.timeout_seconds):
                    result = await self._session.call_tool(
                        tool_name, dict(arguments), meta=cast(Any, dict(ctx.trace)) or None
                    )
            except TimeoutError:
                raise ToolError(
                    f"tool {tool_name!r} of MCP server {self.name!r} did not answer within "
                    f"{self.spec.timeout_seconds:g} s"
                ) from None
            except Exception as exc:
                # A server that died (or broke the protocol) is the tool's failure, which
                # the model sees, not the agent's: it must not crash the run.
                while isinstance(exc, ExceptionGroup) and exc.exceptions:
                    exc = exc.exceptions[0]
                refusal = _refusal(exc)
                if refusal is not None:  # the server answered: it is alive
                    raise ToolError(
                        f"MCP server {self.name!r} refused {tool_name!r}: {refusal}"
                    ) from None
                log.warning("MCP server %r failed during %r: %r", self.name, tool_name, exc)
                if self.dead.is_set():  # its link broke first: that is the reason
                    raise ToolError(
                        f"MCP server {self.name!r} failed during {tool_name!r}: it "
                        f"{self.death}; it is being restarted — do not rely on its tools in "
                        "this run"
                    ) from None
                lim = self.spec.limits
                self.death = (
                    f"failed during {tool_name!r} ({type(exc).__name__}: "
                    f"{str(exc)[:200] or 'no detail'}); it exited or was killed — "
                    "perhaps by one of its limits (memory_mb "
                    f"{lim.memory_mb or 'unlimited'}, processes "
                    f"{lim.processes or 'unlimited'}, open_files "
                    f"{lim.open_files or 'unlimited'}, file_mb {lim.file_mb or 'unlimited'})"
                )
                self.dead.set()
                raise ToolError(
                    f"MCP server {self.name!r} failed during {tool_name!r}: "
                    f"{type(exc).__name__}: {str(exc)[:200] or 'no detail'}; it may have "
                    "exited — do not rely on its tools in this run"
                ) from None
            parts = [_content_text(c) for c in result.content]
            body: Any = "\n".join(parts)
            if not parts and result.structured_content is not None:
                body = result.structured_content
            if result.is_error:
                raise ToolError(str(body) or f"tool {tool_name!r} failed")
            return body

        return call


def _content_text(item: Any) -> str:
    """One item of an MCP tool result as the text the model reads. Text as it is, an
    embedded text resource with its URI; what the model is not given (an image, audio, a
    binary resource) is named with its type and size, so that it does not vanish without
    a trace — a result of one image would otherwise read as an empty answer.
    """
    kind = getattr(item, "type", "")
    if kind == "text":
        return str(item.text)
    if kind == "resource":
        res = item.resource
        if hasattr(res, "text"):
            return f"[resource {res.uri}]\n{res.text}"
        size = len(res.blob) * 3 // 4  # base64
        what = f"{res.mime_type or 'no type'}, ~{size:,} bytes"
        return f"[binary resource {res.uri} ({what}): not passed to the model]"
    if kind == "resource_link":
        return f"[resource link {item.name!r}: {item.uri}]"
    if kind in ("image", "audio"):
        size = len(item.data) * 3 // 4  # base64
        return f"[{kind} ({item.mime_type}, ~{size:,} bytes): not passed to the model]"
    return f"[{kind or 'unknown'} content: not passed to the model]"


def _refusal(exc: BaseException) -> str | None:
    """What a JSON-RPC error answer said (the server, or the link for an answer too large
    to read, answered the request), or None when the call failed for want of an answer: the
    connection closed (the server exited) or the SDK gave up.
    """
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    if not isinstance(exc, MCPError) or exc.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
        return None
    return f"{exc.message[:500] or 'no detail'} (JSON-RPC error {exc.code})"


def tool_risk(policy: str, annotations: Any) -> tuple[str, bool]:
    """``(risk, asks for approval)`` of an MCP tool with ``annotations`` on a server with
    ``risk: policy``. By the MCP spec's defaults an unannotated tool is not read-only and
    may destroy, so under ``from_annotations`` only a tool annotated ``readOnlyHint: true``
    (and not ``destructiveHint: true``) runs without the founder's approval. Annotations
    are the server's word, not a security boundary: the sandbox is.
    """
    read_only = bool(annotations is not None and annotations.read_only_hint is True)
    destructive_hint = None if annotations is None else annotations.destructive_hint
    if read_only and destructive_hint is not True:
        risk = "read-only"
    elif destructive_hint is True:
        risk = "destructive"
    elif annotations is None or (
        annotations.read_only_hint is None and annotations.destructive_hint is None
    ):
        risk = "unannotated (may destroy)"
    else:
        risk = "not read-only" if destructive_hint is None else "non-destructive write"
    if policy == "trusted":
        return f"{risk}; server trusted", False
    if policy == "always_ask":
        return f"{risk}; server always asks", True
    return risk, risk != "read-only"


def json_schema(properties: Mapping[str, Any], required: Sequence[str]) -> dict[str, Any]:
    """A small helper for built-in tool schemas."""
    return {"type": "object", "properties": dict(properties), "required": list(required)}


# ---------------------------------------------------------------------------------------
# Memory tools: the nine MCP memory operations plus recall, served by the memory owner.


class MemoryPort(Protocol):
    """What the memory tools need from the memory owner (companyd.memory.MemoryService)."""

    async def call(
        self, tool: str, arguments: Mapping[str, Any], *, by: str | None = None
    ) -> dict[str, Any]: ...

    async def recall(self, entity: str, depth: int = 1) -> dict[str, Any]: ...


_STR = {"type": "string"}


def memory_tools(memory: MemoryPort) -> list[Tool]:
    """The memory tool family bound to ``memory``."""

    def op(name: str) -> Handler:
        async def call(arguments: Mapping[str, Any], ctx: ToolCallContext) -> Any:
            try:
                return await memory.call(name, arguments, by=ctx.agent)
            except (MemoryToolError, MemoryUnavailable) as exc:
                # MemoryUnavailable: a full state disk, an owner restarting. The model sees
                # what happened (its message says whether the call was applied and to retry
                # later) and the run goes on.
                raise ToolError(str(exc)) from None

        return call

    async def recall(arguments: Mapping[str, Any], ctx: ToolCallContext) -> Any:
        entity = arguments.get("entity")
        if not isinstance(entity, str) or not entity:
            raise ToolError("recall needs 'entity': the name of an entity in memory")
        depth = arguments.get("depth", 1)
        if not isinstance(depth, int) or not 1 <= depth <= 3:
            raise ToolError(f"'depth' must be a whole number from 1 to 3, got {depth!r}")
        try:
            return await memory.recall(entity, depth)
        except MemoryUnavailable as exc:
            raise ToolError(str(exc)) from None

    # The official server's own names, descriptions and input schemas. All nine are safe to
    # run again after a crash left a call's outcome unknown: creates skip what exists, adds
    # skip observations already present, deletes of missing things are silent — so they
    # count as idempotent here even where the MCP annotations are more cautious.
    tools = [
        Tool(
            name=d["name"],
            description=d["description"],
            input_schema={k: v for k, v in d["inputSchema"].items() if k != "$schema"},
            handler=op(d["name"]),
            idempotent=True,
            family="memory",
        )
        for d in tool_definitions()
    ]
    tools.append(
        Tool(
            name="recall",
            description=(
                "Recall what the company memory knows around one entity: the entity, its "
                "neighbours to the given depth and the relations between them."
            ),
            input_schema=json_schema(
                {"entity": _STR, "depth": {"type": "integer", "minimum": 1, "maximum": 3}},
                ["entity"],
            ),
            handler=recall,
            idempotent=True,
            family="memory",
        )
    )
    return tools
