"""The older SSE transport of MCP servers, its replies read as they arrive.

The SDK's `sse_client` holds each event of the server's stream whole and parses it whole,
and takes no event over 1 MiB: a longer reply failed its call, as a server that stopped
answering. This transport reads the stream with `_http_lane.Events`: an event past 1 MiB
goes to a `LongLine` as it arrives. The first event names the endpoint that messages are
POSTed to (on the stream's origin only). A tool call goes past the session (`SseLane`):
its reply, found on the stream by its id, reaches its caller, its long strings `LongText`s
and its long structured content a `LongJSON`; every other message goes to the session, as
the SDK's transport hands it on. Timeouts are the SDK's: 30 s, and 300 s between events.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import secrets
from typing import Any, AsyncIterator
from urllib.parse import urljoin, urlsplit

import anyio
import httpx2
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from . import _http_lane
from ._http_lane import Events, closed, line_of, message_of, result_of, send_soon
from ._stdio import ProgressFn, report_progress

_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


def _for_session(message: Any) -> Any:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(message, by_name=False))
    except ValueError as exc:
        return exc


class SseLane:
    """`tools/call` requests POSTed to an older-SSE server's endpoint, answered on its stream."""

    def __init__(self) -> None:
        self._endpoint: str | None = None
        self._client: httpx2.AsyncClient | None = None
        self._calls: dict[str, tuple[asyncio.Future[Any], ProgressFn]] = {}
        self._ids = itertools.count(1)
        self.nonce = secrets.token_hex(8)  # in a LongLine's markers: no server can send one
        self._notices: set[asyncio.Task[None]] = set()

    @property
    def usable(self) -> bool:
        return self._endpoint is not None

    def open(self, client: httpx2.AsyncClient, endpoint: str) -> None:
        self._client, self._endpoint = client, endpoint

    async def request(self, method: str, params: dict[str, Any], on_progress: ProgressFn) -> dict[str, Any]:
        """Send a request and await its result. Raises MCPError: the server's error, or
        CONNECTION_CLOSED; httpx2 errors when the POST fails. Cancelled, it tells the server."""
        request_id = f"toolkernel-{next(self._ids)}"
        answer = asyncio.get_running_loop().create_future()
        self._calls[request_id] = (answer, on_progress)
        try:
            await self.post({"jsonrpc": "2.0", "id": request_id, "method": method,
                             "params": {**params, "_meta": {"progressToken": request_id}}})
            message = await answer
        except asyncio.CancelledError:
            send_soon(self._notices, self.post({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                                "params": {"requestId": request_id, "reason": "caller cancelled"}}))
            raise
        finally:
            del self._calls[request_id]
        if message is None:
            raise closed("the server's stream ended")
        return result_of(message)

    async def post(self, message: dict[str, Any]) -> None:
        if self._client is None or self._endpoint is None:
            raise closed("the connection is closed")
        response = await self._client.post(self._endpoint, content=line_of(message),
                                           headers={"content-type": "application/json"})
        if response.status_code == 404:
            raise closed("the server no longer knows the session (HTTP 404)")
        if response.status_code >= 300:
            raise MCPError(code=types.INTERNAL_ERROR, message=f"the server answered HTTP {response.status_code}")

    def take(self, data: Any) -> Any:
        """A message event's data: handed to its waiting call (None then), or the message for the
        session (a `SessionMessage`, or the exception the session gets for what is not JSON-RPC)."""
        line = data.long
        if line is not None:
            return self._long(data, line)
        try:
            message = json.loads(data.joined())
        except (ValueError, RecursionError) as exc:
            return ValueError(f"the server sent a message that is not JSON: {exc}")
        return None if type(message) is dict and self._answered(message) else _for_session(message)

    def _long(self, data: Any, line: Any) -> Any:
        """A long message: a waiting call's reply read as it came, its long strings `LongText`s;
        anything else made whole for the session, up to `SESSION_CAP` bytes."""
        mine = line.request_id()
        if data.size > _http_lane.SESSION_CAP and mine not in self._calls:
            if mine is not None and mine.startswith("toolkernel-"):
                return None  # a late reply: nobody waits for it
            return ValueError(f"the server sent a message of {data.size >> 20} MiB that answers no call; more than "
                              f"{_http_lane.SESSION_CAP >> 20} MiB is not read whole")
        try:
            message = message_of(data)
        except MCPError as exc:  # not taken in, or not JSON: the call it answers fails with it
            return None if self._settle(line.request_id(), exc) else ValueError(exc.message)
        request_id = message.get("id") if type(message) is dict else None
        if type(request_id) is str and "method" not in message and self._settled(request_id, message):
            return None
        return _for_session(json.loads(line.whole()))

    def _answered(self, message: dict[str, Any]) -> bool:
        """Whether `message` is a reply, or progress, of a waiting call (handed to it if so)."""
        if "method" in message:
            params = message.get("params")
            if message["method"] == "notifications/progress" and type(params) is dict:
                token = params.get("progressToken")
                waiting = self._calls.get(token) if type(token) is str else None
                if waiting is not None:
                    report_progress(params, waiting[1])
                    return True
            return False
        request_id = message.get("id")
        return type(request_id) is str and self._settled(request_id, message)

    def _settled(self, request_id: str, message: Any) -> bool:
        """Whether a reply with `request_id` is done with here: handed to its call, or a late reply
        to a call of the lane's that nobody waits for any more (it timed out), dropped, not made
        whole for the session, which never knew the request."""
        return self._settle(request_id, message) or request_id.startswith("toolkernel-")

    def _settle(self, request_id: str | None, outcome: Any) -> bool:
        waiting = self._calls.get(request_id) if request_id is not None else None  # type: ignore[arg-type]
        if waiting is None or waiting[0].done():
            return False
        if isinstance(outcome, Exception):
            waiting[0].set_exception(outcome)
        else:
            waiting[0].set_result(outcome)
        return True

    def end(self) -> None:
        """The stream ended: no reply will come."""
        self._endpoint = None
        for answer, _ in self._calls.values():
            if not answer.done():
                answer.set_result(None)


@contextlib.asynccontextmanager
async def sse_transport(url: str, headers: dict[str, str], lane: SseLane) -> AsyncIterator[tuple[Any, Any]]:
    """Connect; yield the (read, write) stream pair a `ClientSession` takes, with `lane` open."""
    async with httpx2.AsyncClient(headers=headers, timeout=_TIMEOUT) as client:
        async with client.stream("GET", url, headers={"accept": "text/event-stream"}) as response:
            response.raise_for_status()
            events = Events(lane.nonce).stream(response)
            lane.open(client, await _endpoint(url, events))
            to_session, read = anyio.create_memory_object_stream[Any](0)
            write, from_session = anyio.create_memory_object_stream[SessionMessage](0)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_read, events, lane, to_session)
                tasks.start_soon(_write, from_session, lane, to_session)
                try:
                    yield read, write
                finally:
                    tasks.cancel_scope.cancel()


async def _endpoint(url: str, events: Any) -> str:
    """The first event's endpoint: where messages are POSTed, on the stream's own origin."""
    async for kind, data in events:
        if kind != "endpoint":
            continue
        if data.long is not None:
            raise ValueError("the server named an endpoint more than 1 MiB long")
        endpoint = urljoin(url, data.joined().decode("utf-8", "replace"))
        if urlsplit(endpoint)[:2] != urlsplit(url)[:2]:
            raise ValueError(f"the server named an endpoint on another origin: {urlsplit(endpoint).netloc}")
        return endpoint
    raise ValueError("the server's stream ended before it named its endpoint")


async def _read(events: Any, lane: SseLane, to_session: Any) -> None:
    try:
        async with to_session:
            async for kind, data in events:
                if kind != "message" or not data.size:
                    continue
                message = lane.take(data)
                if message is not None:
                    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                        await to_session.send(message)
    except httpx2.HTTPError:
        pass  # the stream broke: the session sees it end
    finally:
        lane.end()


async def _write(from_session: Any, lane: SseLane, to_session: Any) -> None:
    """The session's messages POSTed in order; a request that cannot be sent fails at once."""
    async with from_session:
        async for message in from_session:
            body = message.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
            try:
                await lane.post(body)
            except (httpx2.HTTPError, MCPError) as exc:
                if "id" in body and "method" in body:
                    why = exc.message if isinstance(exc, MCPError) else type(exc).__name__
                    error = types.JSONRPCError(jsonrpc="2.0", id=body["id"], error=types.ErrorData(
                        code=types.INTERNAL_ERROR, message=f"could not send the request: {why}"))
                    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                        await to_session.send(SessionMessage(error))
