"""The MCP SDK (PyPI `mcp`) as toolkernel uses it, under either major: the one module that
knows which is installed. Everything else imports the SDK's names from here.

Jupyter AI 3 (through fastmcp 3) needs mcp 1.x; mcp 2 is the newer line. Where they differ:

- the wire types: 2.x moved them to `mcp_types` (`mcp.types` mirrors it), with snake_case
  fields and camelCase aliases; 1.x's fields are camelCase. Code here builds models with the
  wire (camelCase) names, which both take, and reads a model the SDK hands it as its wire JSON
  (`wire`), never by attribute, but for the JSON-RPC envelope (id, method, params, result,
  error), spelled alike in both;
- the JSON-RPC message: 1.x wraps it in a `RootModel` (`JSONRPCMessage`, `ServerNotification`);
  `parse`, `message_from`, `jsonrpc_of` and `notification` take and give the message itself;
- the error: `McpError(ErrorData)` in 1.x, `MCPError(code, message)` in 2.x. Caught as `MCPError`,
  read as `exc.error.code` / `exc.error.message` (both have `error`), made by `mcp_error`;
- HTTP: 2.x speaks httpx2, 1.x httpx (one API); `httpx` here is the SDK's own;
- the low-level server: 2.x takes handlers `(ctx, params)` in its constructor and serves
  streamable HTTP itself (`server.streamable_http_app`), 1.x registers request handlers and
  leaves the HTTP app to the caller: `make_server` and `streamable_http_app` give 2.x's shape;
- the high-level server is `MCPServer` in 2.x, `FastMCP` in 1.x (`run_server` starts either);
- limits 1.x lacks, kept here so that no major is the weaker: the size of one server-sent event
  the session takes in (`streamable_http_client`, `event_capped_client`), and of a request
  body `serve` reads (`streamable_http_app`).

The oldest 1.x taken is 1.27: its streamable-HTTP session manager closes a session left idle
(`session_idle_timeout`), which `serve` relies on to free an abandoned client's runs, kernels
and servers; 1.24 brought `streamable_http_client` with a client of the caller's, 1.23
`elicit_form`. The 2.x line starts at 2.3, the first with a cap on one server-sent event.
"""

from __future__ import annotations

import contextlib
import re
from importlib.metadata import version as _version
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping

import anyio

MAJOR = int(_version("mcp").split(".")[0])

import mcp.types as types  # noqa: E402  (mcp 2.x mirrors mcp_types here)
from mcp import ClientSession, StdioServerParameters  # noqa: E402,F401
from mcp.client.sse import sse_client  # noqa: E402,F401
from mcp.client.stdio import get_default_environment, stdio_client  # noqa: E402,F401
from mcp.server.lowlevel import Server  # noqa: E402
from mcp.shared.message import SessionMessage  # noqa: E402,F401

if MAJOR >= 2:
    import httpx2 as httpx
    from mcp.client.streamable_http import streamable_http_client as _streamable_http_client
    from mcp.server.mcpserver import Context, MCPServer  # noqa: F401
    from mcp.server.mcpserver.exceptions import ToolError  # noqa: F401
    from mcp.server.mcpserver.utilities.types import Image  # noqa: F401
    from mcp.shared.exceptions import MCPError
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
else:
    import httpx  # type: ignore[no-redef]
    from mcp.client.streamable_http import streamable_http_client as _streamable_http_client
    from mcp.server.fastmcp import Context, FastMCP as MCPServer  # type: ignore[no-redef]  # noqa: F401
    from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef]  # noqa: F401
    from mcp.server.fastmcp.utilities.types import Image  # type: ignore[no-redef]  # noqa: F401
    from mcp.shared.exceptions import McpError as MCPError  # type: ignore[no-redef]

    MODERN_PROTOCOL_VERSIONS: frozenset[str] = frozenset()  # 1.x speaks none of the 2026 wire

# mcp 2.x's caps, applied to 1.x here: one server-sent event an SSE client takes in (the older
# SSE transport's), and one request body `serve` reads.
SSE_EVENT_CAP = 1 << 20
REQUEST_BODY_CAP = 4 << 20

# -- models and messages -------------------------------------------------------------------


def wire(model: Any) -> dict[str, Any]:
    """A model as its JSON on the wire (camelCase keys), with what was sent and nothing added."""
    return model.model_dump(by_alias=True, mode="json", exclude_unset=True)


def validated(model: type[Any], data: Any) -> Any:
    """`data` (wire JSON) as `model`, by its wire names only. Raises pydantic's ValidationError."""
    return model.model_validate(data, by_name=False)


def parse(line: bytes | bytearray) -> SessionMessage:
    """One JSON-RPC message's bytes, for a session's read stream. Raises ValueError."""
    if MAJOR >= 2:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    return SessionMessage(types.JSONRPCMessage.model_validate_json(line))


def message_from(data: Mapping[str, Any]) -> SessionMessage:
    """One JSON-RPC message's JSON, for a session's read stream. Raises ValueError."""
    if MAJOR >= 2:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(data, by_name=False))
    return SessionMessage(types.JSONRPCMessage.model_validate(data))


def jsonrpc_of(message: Any) -> Any:
    """The JSON-RPC request, notification, response or error a `SessionMessage` carries; None
    for anything else (an exception item of a read stream)."""
    if not isinstance(message, SessionMessage):
        return None
    inner = message.message
    return getattr(inner, "root", inner) if MAJOR < 2 else inner


def notification(message: Any) -> Any:
    """What a session's `message_handler` was handed, unwrapped: a notification's own model."""
    return getattr(message, "root", message) if MAJOR < 2 and isinstance(message, types.ServerNotification) else message


def mcp_error(code: int, message: str, data: Any = None) -> MCPError:
    if MAJOR >= 2:
        return MCPError(code=code, message=message, data=data)
    return MCPError(types.ErrorData(code=code, message=message, data=data))


def error_from(error: Any) -> MCPError:
    """The error of a JSON-RPC error response (its `ErrorData`)."""
    return mcp_error(error.code, error.message, error.data)


# -- the client side ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def streamable_http_client(url: str, http_client: Any, max_event_size: int) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's streamable-HTTP transport on `http_client` (made with `event_capped_client` under
    1.x), taking no server-sent event over `max_event_size` bytes; yields (read, write)."""
    if MAJOR >= 2:
        async with _streamable_http_client(url, http_client=http_client, max_sse_event_size=max_event_size) as streams:
            yield streams
    else:
        async with _streamable_http_client(url, http_client=http_client) as (read, write, _):
            yield read, write


def event_capped_client(max_event_size: int, **kwargs: Any) -> Any:
    """`httpx.AsyncClient(**kwargs)` whose event-stream responses end, with a `httpx.ReadError`,
    at an event over `max_event_size` bytes, as mcp 2.x's SSE readers end there. Under 2.x the
    SDK caps them itself: a plain client. A request sent with the extension `UNCAPPED` is not capped
    (a call's own reply, which a lane reads as it arrives)."""
    if MAJOR < 2:
        kwargs["transport"] = _EventCap(kwargs.pop("transport", None) or httpx.AsyncHTTPTransport(), max_event_size)
    return httpx.AsyncClient(**kwargs)


UNCAPPED = {"toolkernel.uncapped": True}  # a request's extensions: its response is read whole by its caller

_LINE_END = re.compile(rb"\r\n|\r|\n")


class _EventCap(httpx.AsyncBaseTransport):  # type: ignore[misc,name-defined]
    def __init__(self, inner: Any, cap: int) -> None:
        self._inner, self._cap = inner, cap

    async def handle_async_request(self, request: Any) -> Any:
        response = await self._inner.handle_async_request(request)
        kind = response.headers.get("content-type", "").lower()
        if request.extensions.get("toolkernel.uncapped") or not kind.startswith("text/event-stream"):
            return response
        return httpx.Response(response.status_code, headers=response.headers, extensions=response.extensions,
                              stream=_CappedEvents(response.stream, self._cap))

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedEvents(httpx.AsyncByteStream):  # type: ignore[misc,name-defined]
    """An event stream's bytes, ended at an event past the cap: an event is what comes before a
    blank line (the lines may end in CR, LF or CRLF, a pair maybe split between two chunks)."""

    def __init__(self, inner: Any, cap: int) -> None:
        self._inner, self._cap = inner, cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        event = line = 0  # bytes of the event's ended lines, of the line not yet ended
        after_cr = False
        async for chunk in self._inner:
            start = 1 if after_cr and chunk[:1] == b"\n" else 0  # the LF of a CRLF split in two
            after_cr = False
            for end in _LINE_END.finditer(chunk, start):
                line += end.start() - start
                event = event + line if line else 0  # a blank line ends the event
                if event > self._cap:
                    break
                line, start = 0, end.end()
                after_cr = end.group() == b"\r" and start == len(chunk)
            else:
                line += len(chunk) - start
            if event + line > self._cap:
                raise httpx.ReadError(f"a server-sent event passed {self._cap} bytes; not read further")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


# -- the server side ---------------------------------------------------------------------

Handler = Callable[[Any, Any], Awaitable[Any]]


def make_server(name: str, *, version: str | None = None, instructions: str | None = None,
                on_list_tools: Handler, on_call_tool: Handler, on_set_logging_level: Handler | None = None) -> Server:
    """A low-level server whose handlers take (ctx, params), as 2.x calls them: `ctx` has
    `session`, `request_id`, `meta` and `request` (the HTTP request, over HTTP) in both."""
    named = {"version": version} if version else {}
    if MAJOR >= 2:
        extra = {"on_set_logging_level": on_set_logging_level} if on_set_logging_level else {}
        return Server(name, **named, instructions=instructions, on_list_tools=on_list_tools,
                      on_call_tool=on_call_tool, **extra)
    server = Server(name, **named, instructions=instructions)

    def register(request: type[Any], handler: Handler) -> None:
        async def handle(req: Any) -> Any:
            return types.ServerResult(await handler(server.request_context, req.params))

        server.request_handlers[request] = handle  # the decorators' table, without their checks and caches

    register(types.ListToolsRequest, on_list_tools)
    register(types.CallToolRequest, on_call_tool)
    if on_set_logging_level is not None:
        register(types.SetLevelRequest, on_set_logging_level)
    return server


def streamable_http_app(server: Server, *, path: str, host: str, session_idle_timeout: float) -> Any:
    """The server's streamable-HTTP ASGI app at `path` (DNS-rebinding protection on a loopback host)."""
    if MAJOR >= 2:
        return server.streamable_http_app(streamable_http_path=path, host=host,
                                          session_idle_timeout=session_idle_timeout)
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Route

    security = None
    if host in ("127.0.0.1", "localhost", "::1"):  # as 2.x's own app guards a loopback address
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])
    manager = StreamableHTTPSessionManager(app=server, security_settings=security,
                                           session_idle_timeout=session_idle_timeout)

    async def endpoint(scope: Any, receive: Any, send: Any) -> None:
        await manager.handle_request(scope, receive, send)

    app = Starlette(routes=[Route(path, endpoint=_BodyCap(endpoint, REQUEST_BODY_CAP))],
                    lifespan=lambda app: manager.run())
    return app


class _BodyCap:
    """A request whose body passes `cap` bytes gets 413 (mcp 2.x's own limit on a POST)."""

    def __init__(self, app: Any, cap: int) -> None:
        self.app, self.cap = app, cap

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.cap:
            return await _too_large(send)
        seen, started = 0, []

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.cap:
                    raise _TooLarge
            return message

        async def sending(message: Any) -> None:
            started.append(True)
            await send(message)

        try:
            await self.app(scope, counted, sending)
        except _TooLarge:
            if not started:
                await _too_large(send)


class _TooLarge(Exception):
    pass


async def _too_large(send: Any) -> None:
    await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"request body too large"})


async def elicit_form(session: Any, message: str, schema: dict[str, Any], related_request_id: Any = None) -> Any:
    """The server session's `elicit_form`. Cancelled, it tells the client (notifications/cancelled),
    whose form goes away: mcp 2.x's session says so itself, 1.x's leaves it to its caller."""
    if MAJOR >= 2:
        return await session.elicit_form(message, schema, related_request_id)
    # 1.x's send_request takes the session's next id before its first await: this request's id.
    # A private name, read only here and only under 1.x; a 1.x without it gets no cancel (the
    # client's form then stays until the client closes it), never a failed question.
    request_id = getattr(session, "_request_id", None)
    try:
        return await session.elicit_form(message, schema, related_request_id)
    except anyio.get_cancelled_exc_class():
        if not isinstance(request_id, int):
            raise
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            cancel = types.CancelledNotification(params=types.CancelledNotificationParams(
                requestId=request_id, reason="answered elsewhere or no longer needed"))
            with contextlib.suppress(Exception):  # a client already gone
                await session.send_notification(types.ServerNotification(cancel), related_request_id)
        raise


def server_request(request: Any) -> Any:
    """A request a server sends its client (`session.send_request`'s first argument): 1.x wants
    it in its `ServerRequest` union."""
    return request if MAJOR >= 2 else types.ServerRequest(request)


def run_server(server: Any, transport: str = "stdio", *, host: str = "127.0.0.1", port: int = 0,
               json_response: bool = False) -> None:
    """Run a high-level server (`MCPServer`) over stdio, streamable HTTP (at /mcp) or the older SSE (at /sse)."""
    if transport == "stdio":
        return server.run()
    if MAJOR >= 2:
        options = {"json_response": json_response} if transport == "streamable-http" else {}
        return server.run(transport, host=host, port=port, **options)
    server.settings.host, server.settings.port = host, port
    server.settings.json_response = json_response
    return server.run(transport)
