"""The `mcp` SDK's own client, as the tests read what a server sends it, under either major.

A tool list, a call's result and an elicitation's question are read back from their wire JSON
(`toolkernel._mcp_sdk.wire`) into plain objects named as mcp 2.x names them (`is_error`,
`structured_content`, `input_schema`, ...), so that an assertion reads alike under 1.x and 2.x.
"""

from __future__ import annotations

import math
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, Mapping

import anyio

from toolkernel._mcp_sdk import (MAJOR, ClientSession, StdioServerParameters, event_capped_client, httpx,
                                 jsonrpc_of, stdio_client, streamable_http_client, types, wire)


@dataclass(frozen=True)
class Block:
    type: str
    text: str | None = None
    data: str | None = None
    mime_type: str | None = None
    uri: str | None = None

    @classmethod
    def of(cls, block: Mapping[str, Any]) -> "Block":
        return cls(block["type"], block.get("text"), block.get("data"), block.get("mimeType"), block.get("uri"))


@dataclass(frozen=True)
class Result:
    content: list[Block]
    structured_content: Any = None
    is_error: bool = False

    @classmethod
    def of(cls, result: Mapping[str, Any]) -> "Result":
        return cls([Block.of(b) for b in result["content"]], result.get("structuredContent"),
                   result.get("isError", False))


@dataclass(frozen=True)
class Annotations:
    title: str | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None


@dataclass(frozen=True)
class ListedTool:
    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    title: str | None = None
    output_schema: dict[str, Any] | None = None
    annotations: Annotations | None = None

    @classmethod
    def of(cls, tool: Mapping[str, Any]) -> "ListedTool":
        hints = tool.get("annotations")
        annotations = None if hints is None else Annotations(
            hints.get("title"), hints.get("readOnlyHint"), hints.get("destructiveHint"), hints.get("idempotentHint"),
            hints.get("openWorldHint"))
        return cls(tool["name"], tool["inputSchema"], tool.get("description"), tool.get("title"),
                   tool.get("outputSchema"), annotations)


@dataclass(frozen=True)
class Listed:
    tools: list[ListedTool]


@dataclass(frozen=True)
class Question:
    """An elicitation's question (form mode)."""

    message: str
    requested_schema: dict[str, Any]


Elicit = Callable[[Any, Question], Awaitable[Any]]  # answers with a `types.ElicitResult`


class Client:
    """A `ClientSession` whose answers are read as above; anything else is the session's own.

    A call cancelled (its task's scope) tells the server with `notifications/cancelled`, as every
    real client does: mcp 2.x's session says so itself, 1.x's leaves it to its caller."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def list_tools(self) -> Listed:
        return Listed([ListedTool.of(t) for t in wire(await self.session.list_tools())["tools"]])

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, **options: Any) -> Result:
        try:
            return Result.of(wire(await self.session.call_tool(name, dict(arguments or {}), **options)))
        except anyio.get_cancelled_exc_class():
            if MAJOR < 2 and _last_call.get(None) is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    cancel = types.CancelledNotification(
                        params=types.CancelledNotificationParams(requestId=_last_call.get(), reason="cancelled"))
                    await self.session.send_notification(types.ClientNotification(cancel))
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)


def elicitation(elicit: Elicit | None, cancels: "_Cancels | None" = None) -> Any:
    """`elicit` as the session's `elicitation_callback`, handed the question as a `Question`; under
    1.x cancelled through `cancels` when the server withdraws the question."""
    if elicit is None:
        return None

    async def callback(context: Any, params: Any) -> Any:
        asked = wire(params)
        question = Question(asked.get("message", ""), asked.get("requestedSchema") or {})
        if cancels is None:
            return await elicit(context, question)
        with cancels.scope(context.request_id):
            return await elicit(context, question)
        return types.ErrorData(code=0, message="Request cancelled")  # as 2.x's session answers it

    return callback


class _Cancels:
    """mcp 1.x's `ClientSession` runs a server's request (an elicitation) inside its receive loop,
    so the server's `notifications/cancelled` for it waits behind it, and the client's question
    would never go away: the messages are read ahead here, and the callback's scope cancelled."""

    def __init__(self) -> None:
        self._scopes: dict[Any, anyio.CancelScope] = {}
        self._cancelled: set[Any] = set()  # read ahead before its request reached the callback

    @contextmanager
    def scope(self, request_id: Any) -> Iterator[anyio.CancelScope]:
        with anyio.CancelScope() as scope:
            self._scopes[request_id] = scope
            if request_id in self._cancelled:
                scope.cancel()
            try:
                yield scope
            finally:
                self._scopes.pop(request_id, None)

    async def pump(self, read: Any, ahead: Any) -> None:
        async with ahead:
            async for message in read:
                notified = jsonrpc_of(message)
                if isinstance(notified, types.JSONRPCNotification) and notified.method == "notifications/cancelled":
                    request_id = (notified.params or {}).get("requestId")
                    self._cancelled.add(request_id)
                    if request_id in self._scopes:
                        self._scopes[request_id].cancel()
                await ahead.send(message)


_last_call: ContextVar[Any] = ContextVar("last_call")  # the id of the task's last `tools/call` request


class _Noting:
    """A session's write stream that notes, in the sending task's context, the id of each
    `tools/call` it sends (1.x's session sends a request from its caller's task)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def send(self, message: Any) -> None:
        request = jsonrpc_of(message)
        if isinstance(request, types.JSONRPCRequest) and request.method == "tools/call":
            _last_call.set(request.id)
        await self._inner.send(message)

    async def __aenter__(self) -> "_Noting":
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._inner.__aexit__(*exc_info)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@asynccontextmanager
async def session_on(read: Any, write: Any, *, elicit: Elicit | None = None, **options: Any) -> AsyncIterator[Client]:
    """An initialized session on a transport's streams."""
    if MAJOR >= 2:
        async with ClientSession(read, write, elicitation_callback=elicitation(elicit), **options) as session:
            await session.initialize()
            yield Client(session)
        return
    cancels = _Cancels()
    ahead, behind = anyio.create_memory_object_stream[Any](math.inf)
    async with anyio.create_task_group() as group:
        group.start_soon(cancels.pump, read, ahead)
        async with ClientSession(behind, _Noting(write), elicitation_callback=elicitation(elicit, cancels),
                                 **options) as session:
            await session.initialize()
            yield Client(session)
        group.cancel_scope.cancel()


@asynccontextmanager
async def over_stdio(params: StdioServerParameters, *, elicit: Elicit | None = None,
                     **options: Any) -> AsyncIterator[Client]:
    async with stdio_client(params) as (read, write):
        async with session_on(read, write, elicit=elicit, **options) as client:
            yield client


@asynccontextmanager
async def over_http(url: str, headers: Mapping[str, str], *, elicit: Elicit | None = None,
                    **options: Any) -> AsyncIterator[Client]:
    """Streamable HTTP, on a client with the SDK's default limits (an event of 1 MiB at most)."""
    async with event_capped_client(1 << 20, headers=dict(headers), timeout=httpx.Timeout(30.0, read=300.0)) as http:
        async with streamable_http_client(url, http, 1 << 20) as (read, write):
            async with session_on(read, write, elicit=elicit, **options) as client:
                yield client


def accepted(decision: str) -> Any:
    return types.ElicitResult(action="accept", content={"decision": decision})
