"""Tool calls to a streamable-HTTP MCP server, their replies read as they arrive.

The SDK's streamable-HTTP transport holds each server-sent event whole (the bytes,
the decoded text, the joined data lines) and then parses it whole: 8 MB of text
took 217 MB of the kernel. `HttpLane` sends a `tools/call` past the SDK's session,
as `_stdio.StdioLane` does over stdio (a `_lane.Lane`): it POSTs the request itself on the session's
HTTP client, with the session's id and protocol version (seen on the session's own
requests, `watch`), and reads the answer as it streams, an SSE event or a JSON body.
A message past `_SPOOL_AT` bytes is taken in by a `LongLine` (`_spool.py`): its long
strings go to a file, its long structured content is written to one as it is parsed.

In the call's stream, progress of the call reaches its caller; any other message (a
server's request, a log) is handed to the session, as if the SDK had read it. The SSE
parser follows the HTML standard's event-stream rules (any line ending, comments,
`data` lines joined by newlines), and never holds a line's value whole.

Only the pre-2026 wire is spoken here (an `initialize` handshake, which `_mcp` makes):
a session on a newer protocol version keeps the SDK's path (`usable` is False).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import secrets
from typing import Any, AsyncIterator
from urllib.parse import urljoin, urlsplit

from ..._mcp_sdk import (MODERN_PROTOCOL_VERSIONS, UNCAPPED, MCPError, error_from, httpx, jsonrpc_of,
                         mcp_error, message_from, types)

from ._lane import (ID_PREFIX, ProgressFn, cancelled_message, closed, line_of, report_progress, request_message,
                    send_soon)
from ._spool import LongLine, give_back_heap, long_reply, not_taken, placed

_SESSION = "mcp-session-id"
_VERSION = "mcp-protocol-version"
_SPOOL_AT = 1 << 20  # bytes of one message past which its long strings go to disk (as over stdio)
# Bytes of one message, past which it is not read whole unless it is a call's reply (found by its id
# at either end): what the session reads is parsed whole, at 25-30x its size in the SDK's hands.
SESSION_CAP = 32 << 20
_FIELD_CAP = 1024  # bytes kept of an SSE field's name, and of an event's type
_REDIRECTS = 3  # same-origin 307/308 redirects followed, as the SDK follows them
# No read timeout of the client's: the call's own clock (`timeout`, restarted by progress) governs.
_CALL_TIMEOUT = httpx.Timeout(30.0, read=None)
_EOL = re.compile(rb"[\r\n]")

class HttpLane:
    """`tools/call` requests to one streamable-HTTP server, on the loop of its session's client."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._client: httpx.AsyncClient | None = None
        self._to_session: Any = None  # a send stream into the session's read side
        self._headers: dict[str, str] = {}
        self._ids = itertools.count(1)
        self._nonce = secrets.token_hex(8)  # in a LongLine's markers: no server can send one
        self._notices: set[asyncio.Task[None]] = set()
        self._progress: dict[str, ProgressFn] = {}  # the calls waiting, by request id (their progress token)

    async def watch(self, request: httpx.Request) -> None:
        """A request hook of the session's client: the session's id and protocol version, as sent."""
        for name in (_SESSION, _VERSION):
            value = request.headers.get(name)
            if value is not None:
                self._headers[name] = value

    def open(self, client: httpx.AsyncClient, to_session: Any) -> None:
        self._client, self._to_session = client, to_session

    def close(self) -> None:
        self._client = self._to_session = None

    @property
    def usable(self) -> bool:
        return self._client is not None and self._headers.get(_VERSION) not in MODERN_PROTOCOL_VERSIONS

    async def request(self, method: str, params: dict[str, Any], on_progress: ProgressFn) -> dict[str, Any]:
        """Send a request and await its result. Raises MCPError: the server's error, a reply that
        is not one, or CONNECTION_CLOSED; httpx.TransportError when the connection fails.
        Cancelled (a timeout, an interrupt), it tells the server with `notifications/cancelled`."""
        request_id = f"{ID_PREFIX}{next(self._ids)}"
        body = line_of(request_message(request_id, method, params))
        self._progress[request_id] = on_progress
        try:
            return await self._post(body, request_id, on_progress)
        except asyncio.CancelledError:
            self.cancel(request_id, "caller cancelled")
            raise
        finally:
            del self._progress[request_id]

    def taken(self, message: Any) -> bool:
        """Whether a message of the session's own streams is a call's progress, handed to it if so: a
        server may send it unrelated to the call's request (mcp 1.x's FastMCP before 1.30 does), and
        then it comes on the session's stream, whose session never knew the call."""
        inner = jsonrpc_of(message)
        if not isinstance(inner, types.JSONRPCNotification) or inner.method != "notifications/progress":
            return False
        params = inner.params or {}
        token = params.get("progressToken")
        on_progress = self._progress.get(token) if isinstance(token, str) else None
        if on_progress is not None:
            report_progress(params, on_progress)
        return on_progress is not None

    def cancel(self, request_id: str, reason: str) -> None:
        """`notifications/cancelled`, POSTed and not waited for (on the lane's loop). A server on
        the 2026 wire takes the closed stream as the cancel."""
        if self._client is None or self._headers.get(_VERSION) in MODERN_PROTOCOL_VERSIONS:
            return
        client, headers = self._client, self._request_headers()
        send_soon(self._notices, client.post(self.url, content=line_of(cancelled_message(request_id, reason)),
                                             headers=headers))

    async def _post(self, body: bytes, request_id: str, on_progress: ProgressFn) -> dict[str, Any]:
        assert self._client is not None
        url = self.url
        for _ in range(_REDIRECTS + 1):
            async with self._client.stream("POST", url, content=body, headers=self._request_headers(),
                                           timeout=_CALL_TIMEOUT, extensions=UNCAPPED) as response:
                if response.status_code not in (307, 308):
                    return await self._reply(response, request_id, on_progress)
                url = _same_origin(url, response.headers.get("location", ""))
        raise mcp_error(types.INVALID_REQUEST, f"the server redirected the call more than {_REDIRECTS} times")

    def _request_headers(self) -> dict[str, str]:
        return {"accept": "application/json, text/event-stream", "content-type": "application/json", **self._headers}

    async def _reply(self, response: httpx.Response, request_id: str, on_progress: ProgressFn) -> dict[str, Any]:
        status, kind = response.status_code, response.headers.get("content-type", "").lower()
        if status == 404 and _SESSION in self._headers:
            raise closed("the server no longer knows the session (HTTP 404)")
        if status >= 400:
            raise await _http_error(response, kind)
        if status == 202:
            raise mcp_error(types.INVALID_REQUEST, "the server answered the call with 202 Accepted")
        if kind.startswith("application/json"):
            data = _Data(self._nonce)
            async for chunk in response.aiter_bytes():
                data.feed(chunk)
            return result_of(message_of(data))
        if kind.startswith("text/event-stream"):
            return await self._events(response, request_id, on_progress)
        raise mcp_error(types.INVALID_REQUEST, f"the server answered with content of type {kind!r}")

    async def _events(self, response: httpx.Response, request_id: str, on_progress: ProgressFn) -> dict[str, Any]:
        async for kind, data in Events(self._nonce).stream(response):
            if kind != "message" or not data.size:
                continue  # a priming event (an id alone), or one that is not a message
            if data.size > SESSION_CAP and data.long.request_id() != request_id:  # type: ignore[union-attr]
                continue  # too long to be anything but the reply, and not the reply: dropped unread
            message = message_of(data)
            if type(message) is dict and "method" in message:
                await self._aside(message, request_id, on_progress)
            else:
                return result_of(message)
        raise closed("the server's stream ended without the call's result")

    async def _aside(self, message: dict[str, Any], request_id: str, on_progress: ProgressFn) -> None:
        """A message in the call's stream that is not its answer: its progress to the caller,
        anything else to the session (a server's request, a log), as the SDK would have read it."""
        params = message.get("params")
        if (message["method"] == "notifications/progress" and type(params) is dict
                and params.get("progressToken") == request_id):
            return report_progress(params, on_progress)
        with contextlib.suppress(ValueError):  # not JSON-RPC: the session would have dropped it too
            parsed = message_from(message)
            with contextlib.suppress(Exception):  # the session is gone
                await self._to_session.send(parsed)



class _Data:
    """One message's bytes, as they arrive: held while short, past `_SPOOL_AT` taken in by a `LongLine`."""

    def __init__(self, nonce: str) -> None:
        self._nonce = nonce
        self._parts: list[bytes] = []
        self._long: LongLine | None = None
        self.size = 0

    def feed(self, data: bytes | memoryview) -> None:
        self.size += len(data)
        if self._long is not None:
            return self._long.feed(data)
        self._parts.append(bytes(data))
        if self.size > _SPOOL_AT:
            self._long = LongLine(self._nonce)
            for part in self._parts:
                self._long.feed(part)
            self._parts.clear()

    @property
    def long(self) -> LongLine | None:
        return self._long

    def joined(self) -> bytes:
        """A short message's bytes (a long one's are in its `LongLine`)."""
        assert self._long is None
        return b"".join(self._parts)


def message_of(data: _Data) -> Any:
    """The JSON of a message: its long strings `LongText`s and its long structured content a
    `LongJSON` when it is long. MCPError when it is not JSON, or could not be taken in."""
    line = data.long
    try:
        if line is None:
            return json.loads(data.joined())
        if line.failed is not None:
            raise mcp_error(types.INTERNAL_ERROR, not_taken(line))
        texts = line.finish()
        message = long_reply(line.skeleton, line.marker)
        give_back_heap()
    except RecursionError:
        raise mcp_error(types.INTERNAL_ERROR, "the server's reply is nested too deep to read") from None
    except ValueError as exc:
        raise mcp_error(types.PARSE_ERROR, f"the server sent a message that is not JSON: {exc}") from None
    if texts and type(message) is dict and type(message.get("result")) is dict:
        message["result"] = placed(message["result"], texts, line.markers())
    elif texts:
        message = json.loads(line.whole())  # not a result: made whole for who reads it
    return message


def result_of(message: Any) -> dict[str, Any]:
    """The result of a JSON-RPC response; MCPError for an error response, or anything else."""
    if type(message) is dict and "error" in message:
        try:
            error = types.ErrorData.model_validate(message["error"])
        except ValueError:
            raise mcp_error(types.PARSE_ERROR, "the server sent an error that is not JSON-RPC's") from None
        raise error_from(error)
    if type(message) is not dict or message.get("jsonrpc") != "2.0" or not isinstance(message.get("result"), dict):
        raise mcp_error(types.PARSE_ERROR, "the server's answer to the call is not a JSON-RPC result")
    return message["result"]


async def _http_error(response: httpx.Response, kind: str) -> MCPError:
    """A status of 400 or more: the JSON-RPC error in its body if there is one (a spec-correct
    server may send one, as the SDK reads it), else the status."""
    if kind.startswith("application/json"):
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > _SPOOL_AT:
                break
        with contextlib.suppress(ValueError, AttributeError):
            return error_from(types.ErrorData.model_validate(json.loads(body).get("error")))
    return mcp_error(types.INTERNAL_ERROR, f"the server answered HTTP {response.status_code}")


def _same_origin(url: str, location: str) -> str:
    target = urljoin(url, location)
    here, there = urlsplit(url), urlsplit(target)
    if (here.scheme, here.netloc) != (there.scheme, there.netloc):
        raise mcp_error(types.INVALID_REQUEST, "the server redirected the call to another origin;"
                                               " not followed (set `url` to where it should go)")
    return target


class Events:
    """Server-sent events, parsed as the bytes arrive; each event's data fed to a `_Data`."""

    def __init__(self, nonce: str) -> None:
        self._nonce = nonce
        self._field: bytes | None = None  # of the line being read, once its colon came
        self._head = bytearray()  # the line's field name so far
        self._value = bytearray()  # an `event` field's value (an `id` or `retry` is not used: no resumption)
        self._skip_space = False  # the one space after the colon is not part of the value
        self._after_cr = False  # a CR ended the last piece: an LF first in the next is its pair
        self._type = b""
        self._data: _Data | None = None

    async def stream(self, response: httpx.Response) -> AsyncIterator[tuple[str, _Data]]:
        """The events of `response`'s body, as they arrive."""
        async for chunk in response.aiter_bytes():
            for event in self.feed(chunk):
                yield event

    def feed(self, chunk: bytes) -> list[tuple[str, _Data]]:
        events: list[tuple[str, _Data]] = []
        pos = 1 if self._after_cr and chunk[:1] == b"\n" else 0
        self._after_cr = False
        while pos < len(chunk):
            found = _EOL.search(chunk, pos)
            end = len(chunk) if found is None else found.start()
            self._more(memoryview(chunk)[pos:end])
            if found is None:
                break
            pos = end + 1
            if chunk[end] == 0x0D:  # CR, maybe CRLF
                if pos == len(chunk):
                    self._after_cr = True
                elif chunk[pos] == 0x0A:
                    pos += 1
            event = self._line_ended()
            if event is not None:
                events.append(event)
        return events

    def _more(self, part: memoryview) -> None:
        if not part:
            return
        if self._field is None:
            colon = bytes(part[:_FIELD_CAP]).find(b":")
            if colon < 0:
                self._head += part[:max(0, _FIELD_CAP - len(self._head))]
                return
            self._head += part[:colon]
            self._begin(bytes(self._head))
            part = part[colon + 1:]
            self._skip_space = True
        if self._skip_space and part:
            self._skip_space = False
            if part[0] == 0x20:
                part = part[1:]
        if self._field == b"data":
            self._data.feed(part)  # type: ignore[union-attr]
        elif self._field == b"event" and len(self._value) < _FIELD_CAP:
            self._value += part[:_FIELD_CAP - len(self._value)]

    def _begin(self, field: bytes) -> None:
        self._field = field
        if field == b"data":
            if self._data is None:
                self._data = _Data(self._nonce)
            else:
                self._data.feed(b"\n")  # data lines are joined by newlines

    def _line_ended(self) -> tuple[str, _Data] | None:
        field, value = self._field, bytes(self._value)
        if field is None and not self._head:
            return self._dispatch()
        if field is None:  # a field name alone: its value is empty
            self._begin(bytes(self._head))
            field = self._field
        if field == b"event":
            self._type = value
        self._field, self._skip_space = None, False
        self._head.clear()
        self._value.clear()
        return None

    def _dispatch(self) -> tuple[str, _Data] | None:
        data, kind = self._data, self._type.decode("utf-8", "replace") or "message"
        self._data, self._type = None, b""
        return None if data is None else (kind, data)
