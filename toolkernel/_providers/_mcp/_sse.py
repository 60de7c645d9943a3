"""The older SSE transport of MCP servers (deprecated by the protocol): the SDK's `sse_client`.

The SDK's client keeps the connection: one stream of server-sent events, the first naming
the endpoint that messages are POSTed to (on the stream's origin only), timeouts of 30 s and
300 s between events. It takes no event over 1 MiB: a message that long ends the stream, and
the connection is lost (the call's error says so); a server whose results run longer belongs
on streamable HTTP, whose lane reads them as they arrive (`_http.HttpLane`).

A tool call goes past the session all the same (`SseLane`, a `_lane.Lane`): POSTed to the
endpoint on the transport's own client, its reply and its progress taken off the stream by
its id before the rest goes on to the session, and a cancel told to the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any, AsyncIterator, Mapping

import anyio

from ..._mcp_sdk import (SSE_EVENT_CAP, error_from, event_capped_client, httpx, jsonrpc_of, mcp_error, sse_client,
                         types)

from ._lane import (ID_PREFIX, ProgressFn, cancelled_message, closed, line_of, report_progress, request_message,
                    send_soon)

_TIMEOUT, _READ_TIMEOUT = 30.0, 300.0
ENDED = ("the server's event stream ended; over the older SSE transport no message may pass 1 MiB (the SDK's"
         " client ends the stream at one): a server with longer results belongs on streamable HTTP")


class SseLane:
    """`tools/call` requests POSTed to an older-SSE server's endpoint, answered on its stream."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None
        self._endpoint: str | None = None  # seen on the session's first POST (its handshake)
        self._calls: dict[str, tuple[asyncio.Future[Any], ProgressFn]] = {}
        self._ids = itertools.count(1)
        self._notices: set[asyncio.Task[None]] = set()

    @property
    def usable(self) -> bool:
        return self._client is not None and self._endpoint is not None

    def client(self, headers: dict[str, str] | None = None, timeout: httpx.Timeout | None = None,
               auth: httpx.Auth | None = None) -> httpx.AsyncClient:
        """The transport's HTTP client (`sse_client`'s `httpx_client_factory`): the lane POSTs on it."""
        self._client = event_capped_client(SSE_EVENT_CAP, headers=headers, auth=auth,
                                           event_hooks={"request": [self._watch]},
                                           timeout=timeout or httpx.Timeout(_TIMEOUT, read=_READ_TIMEOUT))
        return self._client

    async def _watch(self, request: httpx.Request) -> None:
        if request.method == "POST" and self._endpoint is None:
            self._endpoint = str(request.url)  # where the SDK POSTs: the endpoint the stream named

    async def request(self, method: str, params: dict[str, Any], on_progress: ProgressFn) -> Mapping[str, Any]:
        """Send a request and await its result. Raises MCPError: the server's error, or
        CONNECTION_CLOSED; httpx errors when the POST fails. Cancelled, it tells the server."""
        request_id = f"{ID_PREFIX}{next(self._ids)}"
        answer = asyncio.get_running_loop().create_future()
        self._calls[request_id] = (answer, on_progress)
        try:
            await self._post(request_message(request_id, method, params))
            message = await answer
        except asyncio.CancelledError:
            self.cancel(request_id, "caller cancelled")
            raise
        finally:
            del self._calls[request_id]
        if message is None:
            raise closed(ENDED)
        if isinstance(message, types.JSONRPCError):
            raise error_from(message.error)
        return message.result

    def cancel(self, request_id: str, reason: str) -> None:
        if self.usable:
            send_soon(self._notices, self._post(cancelled_message(request_id, reason)))

    async def _post(self, message: dict[str, Any]) -> None:
        if self._client is None or self._endpoint is None:
            raise closed("the connection is closed")
        response = await self._client.post(self._endpoint, content=line_of(message),
                                           headers={"content-type": "application/json"})
        if response.status_code == 404:
            raise closed("the server no longer knows the session (HTTP 404)")
        if response.status_code >= 300:
            raise mcp_error(types.INTERNAL_ERROR, f"the server answered HTTP {response.status_code}")

    def taken(self, message: Any) -> bool:
        """Whether a message of the stream is a lane call's (its reply or progress), handed to it if so."""
        inner = jsonrpc_of(message)
        if isinstance(inner, types.JSONRPCNotification) and inner.method == "notifications/progress":
            params = inner.params or {}
            token = params.get("progressToken")
            waiting = self._calls.get(token) if isinstance(token, str) else None
            if waiting is not None:
                report_progress(params, waiting[1])
            return waiting is not None
        if not isinstance(inner, (types.JSONRPCResponse, types.JSONRPCError)) or not isinstance(inner.id, str):
            return False
        waiting = self._calls.get(inner.id)
        if waiting is not None and not waiting[0].done():
            waiting[0].set_result(inner)
        return inner.id.startswith(ID_PREFIX)  # a late reply to a call nobody waits for: dropped

    def close(self) -> None:
        """The stream ended: no reply will come, no request goes."""
        self._endpoint = None
        for answer, _ in self._calls.values():
            if not answer.done():
                answer.set_result(None)


@contextlib.asynccontextmanager
async def sse_transport(url: str, headers: dict[str, str], lane: SseLane) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's `sse_client`; yield the (read, write) stream pair a `ClientSession` takes, the
    lane's messages taken out of what reaches the session."""
    async with sse_client(url, headers=headers, timeout=_TIMEOUT, sse_read_timeout=_READ_TIMEOUT,
                          httpx_client_factory=lane.client) as (read, write):
        to_session, merged = anyio.create_memory_object_stream[Any](0)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_pass_on, read, to_session, lane)
            try:
                yield merged, write
            finally:
                lane.close()
                tasks.cancel_scope.cancel()


async def _pass_on(read: Any, to_session: Any, lane: SseLane) -> None:
    """The stream's messages to the session, but for the lane's calls' own, until the stream ends."""
    try:
        async with to_session:
            async for message in read:
                if not lane.taken(message):
                    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                        await to_session.send(message)
    finally:
        lane.close()
