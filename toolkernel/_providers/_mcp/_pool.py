"""MCP servers as tool providers: one live client session per configured server.

Every session lives on toolkernel's private event loop (`toolkernel._loop`).
The SDK's transports are anyio context managers whose cancel scopes must be
entered and left by the same task, so each connection is held open by one
long-lived task (`_Connection._hold`) that opens the transport and the session,
reports ready, and waits for its stop event. Calls are made from other tasks
over the open session: no per-call connection and no per-call listing.

Environment of stdio servers: the SDK's default, kept on purpose. A server
does NOT inherit the kernel's whole environment; it gets only HOME, LOGNAME,
PATH, SHELL, TERM and USER from it (`mcp.client.stdio.get_default_environment`)
plus the config's `env`, which wins. Secrets in the kernel's environment
therefore reach a server only when its config names them (`env = {TOKEN =
"${TOKEN}"}`).

Stdio servers run through `_stdio.stdio_transport` (the SDK's own reads a
long message in quadratic time), streamable-HTTP ones through the SDK's
`streamable_http_client`, older-SSE ones through its `sse_client` (`_sse.py`). A tool call
goes past the session, through the connection's `_lane.Lane`: over stdio, made on another
thread than the private loop's (a script's `tools` line), it is awaited on that thread's
own loop, without being handed to the private loop and back (see _stdio.py); made on the
private loop (`serve`, a direct call that connected its server first, every HTTP or SSE
call), the transport's own reading hands it its reply (`_http.HttpLane` reads it as it
streams). Its result is checked as the SDK's `call_tool` checks one (the result's shape,
the tool's output schema). A long text of its reply may be a `LongText`, kept in a file
(`_long_text_kept` says where it stays one). A call cancelled while it waits (an interrupt,
a client's cancel, its timeout) is cancelled on the server by its lane (`Lane.cancel`).

A server's stderr goes to a temporary file, so its logs never land in a cell;
the last lines are quoted when the server fails to start or dies. Every such
message masks the config's env and header values and whatever a `${VAR}`
expanded to in its command, args or url (a token passed as `--token
${TOKEN}`), and so does every error result a tool of the server returns.

A server that does not finish starting within 30 s is not started again
while its config stays the same (its fingerprint): every use shows the
error of that start at once, instead of waiting 30 s more each time.
Servers that fail fast (crash, missing command) are tried again on next use.

Each call has the server's `timeout` (seconds, default 300); a progress
notification restarts the clock. A call past it is cancelled on the server
(the session stays open for the next call) and fails as `unavailable` with
`retryable: true`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterable, Mapping
from urllib.parse import urlsplit

import anyio

from ..._mcp_sdk import (ClientSession, MCPError, event_capped_client, httpx, notification, streamable_http_client,
                         types, validated, wire)

from ... import _tool
from ... import _loop
from ..._errors import CallError, ConnectionRequired, Unavailable
from ..._longtext import LongJSON, LongText, whole
from ._http import SESSION_CAP, HttpLane
from ._lane import Lane
from ._sse import SseLane, sse_transport
from ._stdio import StdioLane, stdio_transport
from ..._tool import Image, Kind, ProviderRef, Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from ..._config._servers import ServerConfig

DEFAULT_CONNECT_TIMEOUT = 30.0
_STDERR_TAIL_BYTES = 2000
_STDERR_TAIL_LINES = 12
# The SDK's stdio shutdown is bounded by about 6 s (grace, SIGTERM, SIGKILL).
_CLOSE_TIMEOUT = 10.0
_CLIENT_INFO = types.Implementation(name="toolkernel", version="0.1.0")


class ServerPool:
    """Live MCP client sessions, all on toolkernel's private loop (toolkernel._loop)."""

    def __init__(self, *, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT) -> None:
        self.connect_timeout = connect_timeout
        self._connections: dict[str, _Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._errors: dict[str, CallError] = {}
        # A server that hung while starting, by name: the fingerprint of the config it hung
        # with. It is not started again (another 30 s wait on every use) until that changes.
        self._hung: dict[str, str] = {}

    async def tools(self, cfg: ServerConfig) -> list[Tool]:
        """The server's tools; connects first if it is not connected, was
        reconfigured, or died since it was last used (on the private loop: sessions live there)."""
        if not _loop.on_private_loop():
            conn = self._lane_connection(cfg)
            return list(conn.tools) if conn is not None else await _loop.on_private(self.tools(cfg))
        return list((await self._live(cfg)).tools)

    def loaded(self, name: str) -> bool:
        conn = self._connections.get(name)
        return conn is not None and conn.usable

    def callable_here(self, cfg: ServerConfig) -> bool:
        """Whether a call of `cfg`'s tools can run on the calling thread now, past the session."""
        return self._lane_connection(cfg) is not None

    def _lane_connection(self, cfg: ServerConfig) -> _Connection | None:
        """The server's connection when it is up as configured, over a lane, with a current tool list."""
        conn = self._connections.get(cfg.name)
        if (conn is not None and conn.usable and not conn.stale and (conn.cfg is cfg or conn.cfg == cfg)
                and isinstance(conn.lane, StdioLane) and conn.lane.usable):
            return conn
        return None

    def tool_count(self, name: str) -> int | None:
        conn = self._connections.get(name)
        return None if conn is None else len(conn.tools)

    def last_error(self, name: str) -> CallError | None:
        """Why the last attempt to connect `name` failed; None once it succeeds."""
        return self._errors.get(name)

    async def start(self, cfgs: Iterable[ServerConfig]) -> None:
        """Connect several servers in parallel; failures are kept in `last_error`."""
        await asyncio.gather(*(self._start_one(cfg) for cfg in cfgs))

    def holds_other_than(self, keep: set[str]) -> bool:
        """Whether `retire(keep)` has anything to do. Read from any thread (the dicts are copied
        in one step): a direct call spares its trip to the private loop when not."""
        return any(name not in keep for name in (*self._connections, *self._errors))

    async def retire(self, keep: set[str]) -> None:
        """Close the sessions of servers whose names are not in `keep`."""
        gone = [name for name in self._connections if name not in keep]
        await asyncio.gather(*(self._drop(name) for name in gone))
        for name in list(self._errors):
            if name not in keep:
                del self._errors[name]
                self._hung.pop(name, None)

    async def close(self) -> None:
        await self.retire(set())

    async def _start_one(self, cfg: ServerConfig) -> None:
        with contextlib.suppress(CallError):
            await self._live(cfg)

    async def _drop(self, name: str) -> None:
        async with self._lock_for(name):
            conn = self._connections.pop(name, None)
            if conn is not None:
                await conn.close()

    async def _live(self, cfg: ServerConfig) -> _Connection:
        conn = self._connections.get(cfg.name)
        if conn is not None and conn.usable and not conn.stale and conn.cfg == cfg:
            return conn
        async with self._lock_for(cfg.name):
            conn = self._connections.get(cfg.name)
            if conn is not None and conn.usable and conn.cfg == cfg:
                if conn.stale:
                    await conn.relist()
                return conn  # also when another caller connected it while we waited
            if conn is not None:
                del self._connections[cfg.name]
                await conn.close()
            if self._hung.get(cfg.name) == cfg.fingerprint:
                held = self._errors[cfg.name]
                raise _HungAtStart(held.message, retryable=held.retryable)  # a fresh one: no tracebacks pile up
            try:
                conn = await _Connection.open(cfg, self.connect_timeout, self._build_tool)
            except CallError as exc:
                self._errors[cfg.name] = exc
                if isinstance(exc, _HungAtStart):
                    self._hung[cfg.name] = cfg.fingerprint
                raise
            self._errors.pop(cfg.name, None)
            self._hung.pop(cfg.name, None)
            self._connections[cfg.name] = conn
            return conn

    async def _for_call(self, cfg: ServerConfig) -> _Connection:
        """The connection a call should use: the current one if it is alive,
        else a fresh one with the newest config the pool has seen."""
        conn = self._connections.get(cfg.name)
        if conn is not None and conn.usable:
            return conn
        return await self._live(conn.cfg if conn is not None else cfg)

    def _lock_for(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    def _build_tool(self, cfg: ServerConfig, listed: Mapping[str, Any]) -> Tool:
        """A tool from its entry of the server's list (its wire JSON, `_mcp_sdk.wire`)."""
        annotations = _annotations_of(listed)
        output_schema = listed.get("outputSchema")
        call = _ToolCall(self, cfg, listed["name"], _is_wrapped_schema(output_schema), output_schema)
        return Tool(
            name=listed["name"],
            description=listed.get("description") or "",
            input_schema=listed["inputSchema"],
            call=call,
            kind=_kind_of(annotations, cfg.trust_annotations),
            provider=ProviderRef("mcp", cfg.name, loop_bound=True),
            annotations=annotations,
            title=listed.get("title"),
        )


def _lane_of(conn: _Connection) -> Lane | None:
    """How a call on the private loop goes past the session, reading its reply as it arrives;
    None where the session's own path is kept (HTTP on a protocol newer than the lane speaks)."""
    lane = conn.lane
    return lane if lane is not None and lane.usable else None


class _HungAtStart(Unavailable):
    """A server that did not finish starting in time: its error is kept and shown again,
    without a new start, until its config changes (callers see an `Unavailable`)."""


@dataclass
class _ToolCall:
    """The `call` of one MCP tool: one `tools/call` on the server's live session."""

    pool: ServerPool
    cfg: ServerConfig
    name: str
    wrapped: bool
    output_schema: Mapping[str, Any] | None = None
    _output_check: Any = field(default=None, repr=False, compare=False)  # the output schema's validator, made once

    def __post_init__(self) -> None:
        self._any_object = self.output_schema is not None and _takes_any_object(self.output_schema)

    async def __call__(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if _loop.on_private_loop():
            conn = await self.pool._for_call(self.cfg)
            return await self._call(conn, arguments, ctx, _lane_of(conn))
        conn = self.pool._lane_connection(self.cfg)
        if conn is None:  # to be (re)connected, or not over a lane: that is the private loop's work
            return await _loop.on_private(self(arguments, ctx))
        return await self._call(conn, arguments, ctx, conn.lane)

    async def _call(self, conn: _Connection, arguments: dict[str, Any], ctx: ToolContext,
                    lane: Lane | None = None) -> ToolResult:
        """Through the session (on the private loop), or past it through `lane`. An error result
        is masked as the connection's own messages are: a server refused by its backend may
        quote the token it was handed (as a command tool's stderr may)."""
        result = await self._made(conn, arguments, ctx, lane)
        if result.is_error:
            result.texts = [conn.redact(whole(text)) for text in result.texts]
            result.structured = _redacted(result.structured, conn.redact)  # printed in place of the texts
        return result

    async def _made(self, conn: _Connection, arguments: dict[str, Any], ctx: ToolContext,
                    lane: Lane | None) -> ToolResult:
        session = conn.session
        assert session is not None
        timeout = conn.cfg.timeout
        # asyncio's own timeout, not an anyio CancelScope: it cost a tenth of a bare call more.
        clock = asyncio.timeout(timeout)
        try:
            async with clock:
                progress = _Progress(ctx, clock, timeout)
                if lane is None:
                    called = await session.call_tool(self.name, arguments, progress_callback=progress)
                    return convert_result(wire(called), self.wrapped)
                return await self._call_past_session(lane, arguments, progress)
        except TimeoutError:
            if clock.expired():  # the server was told the call is cancelled (by the SDK, or the lane)
                raise conn.timed_out(self.name, timeout) from None
            raise
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                raise conn.lost(f"while running {self.name}", exc.error.message) from exc
            return ToolResult.error(exc.error.message)  # the server refused the request
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, httpx.HTTPError) as exc:
            raise conn.lost(f"while running {self.name}") from exc  # (an HTTP body that does not decode too)
        except RuntimeError as exc:  # the SDK found the output does not match the tool's outputSchema
            return ToolResult.error(str(exc))

    async def _call_past_session(self, lane: Lane, arguments: dict[str, Any],
                                 progress: _Progress) -> ToolResult:
        """`tools/call` through the lane, on this thread's loop; checked as `ClientSession.call_tool`
        checks its result (a RuntimeError for structured content that breaks the output schema)."""
        raw = await lane.request("tools/call", {"name": self.name, "arguments": arguments}, progress.now)
        texts = _plain_texts(raw)
        if texts is None:  # any other shape: the SDK's model checks it, as the session would
            plain = raw if type(raw) is dict else _whole_values(dict(raw))
            structured = plain.get("structuredContent")
            if type(structured) is LongJSON:  # an object, checked by the schema below: {} stands in for it
                plain = {**plain, "structuredContent": {}}
            result = wire(validated(types.CallToolResult, plain))
            if "structuredContent" in plain:
                result["structuredContent"] = structured
            if not result.get("isError") and self.output_schema is not None:
                self._check_output(result.get("structuredContent"), "structuredContent" in result)
            return convert_result(result, self.wrapped)
        is_error, structured = raw.get("isError", False), raw.get("structuredContent")
        checked = None
        if type(raw) is not dict and raw.structured_long:  # a long line's reply (`_spool.LongReply`)
            texts, structured, checked = _long_text_kept(texts, structured)
        if not is_error and self.output_schema is not None:
            self._check_output(structured if checked is None else self._stand_in(checked), "structuredContent" in raw)
        return _converted(texts, [], structured, is_error, self.wrapped)

    def _stand_in(self, wrapper: dict[str, LongText]) -> dict[str, Any]:
        """What the output schema checks for a wrapper around a long text: "" in its place where
        the schema asks that key for any string (as the SDK's {"result": str} does); else the text."""
        ((key, text),) = wrapper.items()
        properties = (self.output_schema or {}).get("properties")
        wanted = properties.get(key) if isinstance(properties, Mapping) else None
        if isinstance(wanted, Mapping) and wanted.get("type") == "string" and wanted.keys() <= _ANY_STRING_KEYS:
            return {key: ""}
        return {key: str(text)}

    def _check_output(self, structured: Any, sent: bool) -> None:
        """`structured` against the output schema (`sent`: the result had the field, maybe null)."""
        if structured is None and not sent:
            raise RuntimeError(f"Tool {self.name} has an output schema but did not return structured content")
        if self._any_object and type(structured) in (dict, LongJSON):  # a `LongJSON` is an object
            return
        check = self._output_check or self._make_output_check()
        try:
            if type(structured) is LongJSON:
                if _long_json().meets(structured, check):  # a run of values at a time, where it can
                    return
                structured = structured.parsed()  # to say why, or to find it valid after all
            if check.is_valid(structured):  # without best_match's bookkeeping
                return
            from jsonschema.exceptions import best_match  # imported off the path of a valid result

            error = best_match(check.iter_errors(structured))
        except Exception as exc:
            from referencing.exceptions import Unresolvable

            if isinstance(exc, Unresolvable):
                raise RuntimeError(f"Invalid schema for tool {self.name}: {exc}") from exc
            raise
        if error is not None:
            raise RuntimeError(f"Invalid structured content returned by tool {self.name}: {error}") from error

    def _make_output_check(self) -> Any:
        from jsonschema import SchemaError
        from jsonschema.validators import validator_for
        from referencing import Registry

        cls = validator_for(self.output_schema)
        try:
            cls.check_schema(self.output_schema)
        except SchemaError as exc:
            raise RuntimeError(f"Invalid schema for tool {self.name}: {exc}") from exc
        # As the SDK: `$ref`s resolve within the schema document only.
        self._output_check = cls(self.output_schema, registry=Registry())
        return self._output_check


class _Progress:
    """Each progress notification restarts the call's clock, and reaches the context if it listens."""

    def __init__(self, ctx: ToolContext, clock: asyncio.Timeout, timeout: float) -> None:
        self.ctx, self.clock, self.timeout = ctx, clock, timeout
        self.listening = ctx.progress is not _tool._no_progress

    def now(self, progress: float, total: float | None, message: str | None) -> None:
        with contextlib.suppress(RuntimeError):  # a late one, after the call ended or timed out
            self.clock.reschedule(asyncio.get_running_loop().time() + self.timeout)
        if self.listening:
            self.ctx.progress(progress, total, message)

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.now(progress, total, message)  # the SDK's callback form



@dataclass
class _Connection:
    """One server's transport and session, held open by one task."""

    cfg: ServerConfig
    build_tool: Callable[[ServerConfig, Mapping[str, Any]], Tool]
    session: ClientSession | None = None
    tools: list[Tool] = field(default_factory=list)
    broken: str | None = None  # why this connection can no longer be used
    stale: bool = False  # the server said its tool list changed
    lane: Lane | None = None  # calls past the session (over stdio, from any thread)
    _stderr: Any = None
    _task: asyncio.Task[None] | None = None
    _ready: asyncio.Future[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def usable(self) -> bool:
        return self.broken is None and self.session is not None

    @classmethod
    async def open(
        cls, cfg: ServerConfig, timeout: float, build_tool: Callable[[ServerConfig, Mapping[str, Any]], Tool]
    ) -> _Connection:
        if cfg.missing_vars:
            raise ConnectionRequired(_missing_vars_message(cfg), retryable=False)
        conn = cls(cfg, build_tool)
        try:
            await conn._start(timeout)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _start(self, timeout: float) -> None:
        self._ready = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(), name=f"toolkernel-mcp-{self.cfg.name}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            raise self._unavailable(
                f"did not finish starting within {timeout:g} s; it is not started again until its config"
                " changes (or the kernel restarts)", retryable=False, kind=_HungAtStart) from None
        except CallError:
            raise
        except Exception as exc:
            raise self._start_failure(exc) from exc

    async def _hold(self) -> None:
        try:
            async with self._transport() as (read, write):
                read = _WatchedStream(read, self._on_stream_end)
                async with ClientSession(
                    read, write, message_handler=self._on_message, client_info=_CLIENT_INFO
                ) as session:
                    await session.initialize()
                    self.tools = await self._list(session)
                    self.session = session
                    self._set_ready()
                    await self._stop.wait()
        except Exception as exc:  # noqa: BLE001 - handed to the opener through _ready
            self._set_ready(exc)
        finally:
            self.broken = self.broken or "closed"
            self._set_ready(ConnectionError("the connection closed"))

    async def _list(self, session: ClientSession) -> list[Tool]:
        self.stale = False  # before the request: a change announced during it is kept
        return [self.build_tool(self.cfg, t) for t in await _list_all_tools(session)]

    async def relist(self) -> None:
        assert self.session is not None
        try:
            self.tools = await self._list(self.session)
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                raise self.lost("while listing its tools") from exc
            raise self._unavailable(f"failed to list its tools: {exc.error.message}") from exc

    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        cfg = self.cfg
        if cfg.transport == "http":
            self.lane = lane = HttpLane(cfg.url or "")
            return _http_transport(cfg, lane)
        if cfg.transport == "sse":
            self.lane = lane = SseLane()
            return sse_transport(cfg.url or "", dict(cfg.headers), lane)
        self._stderr = tempfile.TemporaryFile()
        self.lane = lane = StdioLane()
        return stdio_transport(cfg.command or "", cfg.args, cfg.env, cfg.cwd, self._stderr, lane)

    def _set_ready(self, error: BaseException | None = None) -> None:
        if self._ready is None or self._ready.done():
            return
        if error is None:
            self._ready.set_result(None)
        else:
            self._ready.set_exception(error)
            self._ready.exception()  # retrieved here: the opener may have stopped waiting

    def _on_stream_end(self) -> None:
        if self.broken is None:
            self.broken = "the server closed the connection"

    async def _on_message(self, message: Any) -> None:
        if isinstance(notification(message), types.ToolListChangedNotification):
            self.stale = True
            return
        # Transport faults arrive here as exception items: for stdio, a line on
        # the server's stdout that is not JSON-RPC. Before the handshake is done
        # that means the server will never answer properly, so fail fast.
        if isinstance(message, Exception) and self._ready is not None and not self._ready.done():
            self._set_ready(self._unavailable(
                f"wrote something that is not MCP (JSON-RPC) to stdout: {_first_line(message)}"
            ))

    async def close(self) -> None:
        self.broken = self.broken or "closed"
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            if self.session is None:
                task.cancel()  # still in the handshake: nothing would ever see the stop event
            # asyncio.wait, not await: a cancelled task must not cancel its closer
            done, _ = await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT)
            if not done:
                task.cancel()
                await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def lost(self, when: str, why: str = "") -> Unavailable:
        """The error for a connection that broke mid-call; marks it for restart. `why`: what
        the lane saw, when it says more than that the connection closed."""
        self.broken = self.broken or "the connection broke"
        said = f": {why}" if why and why != "Connection closed" else ""
        return self._unavailable(f"stopped answering {when}{said} (it will be restarted on the next call)")

    def timed_out(self, tool: str, timeout: float) -> Unavailable:
        """The error for a call past its timeout; the SDK has told the server it is cancelled,
        and the session stays open for the next call."""
        return self._unavailable(f"sent no result nor progress for {tool} within {timeout:g} s; the call was "
                                 "cancelled (raise `timeout` in the server's config if it needs longer)")

    def _start_failure(self, exc: BaseException) -> Unavailable:
        leaf = _leaf(exc)
        if isinstance(leaf, FileNotFoundError) and self.cfg.transport == "stdio":
            # A retry cannot help until the config or the machine changes.
            return self._unavailable(f"could not start: command not found: {self.cfg.command}"
                                     " (install it, or fix `command` in the config)", retryable=False)
        if isinstance(leaf, PermissionError) and self.cfg.transport == "stdio":
            return self._unavailable(f"could not start: permission denied running {self.cfg.command}",
                                     retryable=False)
        closed = isinstance(leaf, MCPError) and leaf.error.code == types.CONNECTION_CLOSED
        if closed or isinstance(leaf, ConnectionError):
            if isinstance(self.lane, StdioLane) and self.lane.stray is not None:
                # Read before the end, but the session hands it on in a task of its own, which the
                # end may beat: a program that prints a line and exits is named for its line.
                return self._unavailable(f"wrote something that is not MCP (JSON-RPC) to stdout: "
                                         f"{_first_line(self.lane.stray)}")
            return self._unavailable("exited before it finished starting")
        if self.cfg.transport == "sse" and isinstance(leaf, RuntimeError) and "task_status.started" in str(leaf):
            # The SDK's own words name its task group, not what the server did.
            return self._unavailable("closed its event stream before it named its endpoint")
        if isinstance(leaf, httpx.HTTPStatusError):
            return self._unavailable(f"answered HTTP {leaf.response.status_code} while starting")
        if isinstance(leaf, httpx.TransportError):
            return self._unavailable(f"could not be reached: {type(leaf).__name__}")
        return self._unavailable(f"failed while starting: {type(leaf).__name__}: {leaf}")

    def _unavailable(self, problem: str, *, retryable: bool = True,
                     kind: type[Unavailable] = Unavailable) -> Unavailable:
        message = f"MCP server '{self.cfg.name}' ({_where(self.cfg)}) {problem}"
        tail = self._stderr_tail()
        if tail:
            message += f"\nits stderr ended with:\n{tail}"
        return kind(self.redact(message), retryable=retryable)

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            fd = self._stderr.fileno()
            size = os.fstat(fd).st_size
            data = os.pread(fd, _STDERR_TAIL_BYTES, max(0, size - _STDERR_TAIL_BYTES))
            lines = data.decode("utf-8", "replace").strip().splitlines()[-_STDERR_TAIL_LINES:]
            return "\n".join("  " + line for line in lines)
        return ""

    def redact(self, text: str) -> str:
        # Longest first: a secret that contains another is masked whole.
        values = sorted({*self.cfg.env.values(), *self.cfg.headers.values(), *self.cfg.secrets}, key=len, reverse=True)
        for value in values:
            if len(value) >= 4:
                text = text.replace(value, "***")
        return text


@contextlib.asynccontextmanager
async def _http_transport(cfg: ServerConfig, lane: HttpLane) -> AsyncIterator[Any]:
    """The SDK's streamable-HTTP transport, on a client that sends the config's headers, with
    `lane` open on it. The session reads the transport's messages, and those `lane` hands it."""
    # Same timeouts as the SDK's own default client (30 s, 300 s for a held stream).
    timeout = httpx.Timeout(30.0, read=300.0)
    async with event_capped_client(HTTP_EVENT_CAP, headers=dict(cfg.headers), timeout=timeout,
                                   event_hooks={"request": [lane.watch]}) as client:
        async with streamable_http_client(cfg.url or "", client, HTTP_EVENT_CAP) as (read, write):
            to_session, merged = anyio.create_memory_object_stream[Any](0)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_pass_on, read, to_session, lane)
                lane.open(client, to_session)
                try:
                    yield merged, write
                finally:
                    lane.close()
                    tasks.cancel_scope.cancel()


async def _pass_on(read: Any, to_session: Any, lane: HttpLane) -> None:
    """The transport's messages to the session (but a lane call's progress), until the transport's
    read side ends."""
    async with to_session:
        async for message in read:
            if lane.taken(message):
                continue
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):  # the session is gone
                await to_session.send(message)


class _WatchedStream:
    """The session's read stream, reporting when the server side ends.

    Lets the pool see a server that died while idle, so the next use
    reconnects instead of failing once first.
    """

    def __init__(self, inner: Any, on_end: Any) -> None:
        self._inner = inner
        self._on_end = on_end

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # e.g. `last_context` of the HTTP transport's stream

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> _WatchedStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except (StopAsyncIteration, anyio.ClosedResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._inner.__aexit__(*exc_info)


async def _list_all_tools(session: ClientSession) -> list[dict[str, Any]]:
    """Every page of the server's tool list, each tool as its wire JSON."""
    listed: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = wire(await session.list_tools(params=params))
        listed.extend(page["tools"])
        cursor = page.get("nextCursor")
        if not cursor:
            return listed


def convert_result(result: Mapping[str, Any], wrapped: bool = False) -> ToolResult:
    """An MCP tool result (its wire JSON, as the SDK's model checked it) as a `ToolResult`.

    Servers often send a text result twice: as text and as structured content
    that only wraps it (`{"result": text}`, `{"content": text}`); that wrapper is
    dropped so text stays text.
    Other `{"result": X}` wrappers (declared by the tool's output schema) are
    unwrapped to X.
    """
    texts: list[str] = []
    images: list[Image] = []
    for block in result["content"]:
        _add_block(block, texts, images)
    return _converted(texts, images, result.get("structuredContent"), result.get("isError", False), wrapped)


def _converted(texts: list[str], images: list[Image], structured: Any, is_error: bool, wrapped: bool) -> ToolResult:
    if _is_text_wrapper(structured, texts):
        structured = None
    elif wrapped and isinstance(structured, dict) and structured.keys() == {"result"}:
        structured = structured["result"]
    elif wrapped and type(structured) is LongJSON and structured.wrapped:
        structured = structured.unwrapped()
    return ToolResult(texts=texts, images=images, structured=structured, is_error=is_error, plain_json=True)


# The most of one message over streamable HTTP (an SSE event) that the SDK's session takes in:
# its handshake, its tool lists (a tool call's reply is read by `HttpLane`, as it arrives). The
# SDK's default, 1 MiB, is small for a long list; it holds the event whole and parses it whole,
# at 25-30x its size in the kernel, so a hostile server's 256 MiB would take gigabytes.
HTTP_EVENT_CAP = SESSION_CAP

_ANY_OBJECT_KEYS = frozenset({"type", "additionalProperties", "title", "description"})


def _takes_any_object(schema: Mapping[str, Any]) -> bool:
    """Whether an output schema is met by every JSON object: the Python SDK's for a tool that
    returns a dict. Such results need no validator's walk (a tenth of a lane call's own CPU)."""
    return (schema.get("type") == "object" and schema.keys() <= _ANY_OBJECT_KEYS
            and schema.get("additionalProperties", True) is True
            and all(isinstance(schema.get(key, ""), str) for key in ("title", "description")))


_PLAIN_KEYS = frozenset({"content", "structuredContent", "isError"})
_TEXT_BLOCK_KEYS = frozenset({"type", "text"})
_TEXT_TYPES = (str, LongText)  # a long text of a lane's reply stays in its file (_stdio, _spool)
_ANY_STRING_KEYS = frozenset({"type", "title", "description"})


def _long_text_kept(texts: list[str | LongText], structured: Any) -> tuple[list[Any], Any, dict[str, LongText] | None]:
    """A long reply's texts and structured content: texts stay as they are (a `LongText` is read
    in pieces, or made whole by who needs it so). Structured content that holds a `LongText` is
    either a wrapper around the one text (dropped by `_converted`; returned apart too, for the
    output schema's check), or written indented to a file, its texts a piece at a time (a
    `LongJSON`); made whole only where that cannot be done as it would be whole."""
    if len(texts) == 1 and type(texts[0]) is LongText and type(structured) is dict and len(structured) == 1:
        ((key, value),) = structured.items()
        if value is texts[0] or (type(value) is LongText and _same_text(value, texts[0])):
            wrapper = {key: texts[0]}  # one text, whichever way each copy was escaped
            return texts, wrapper, wrapper
    if type(structured) is dict and _holds_long(structured) and type(structured.get("result")) is not LongText:
        with contextlib.suppress(ValueError):  # `NotStreamed`: a value pydantic cannot write
            return texts, _long_json().with_texts(structured), None
    return texts, _whole_values(structured), None


def _same_text(one: LongText, other: LongText) -> bool:
    """Whether two long texts read the same (sent twice, escaped two ways: kept twice)."""
    if len(one) != len(other):
        return False
    digests = [hashlib.blake2b(digest_size=16), hashlib.blake2b(digest_size=16)]
    for digest, text in zip(digests, (one, other)):
        for piece in text.pieces():
            digest.update(piece.encode("utf-8", "surrogatepass"))
    return digests[0].digest() == digests[1].digest()


def _holds_long(value: Any) -> bool:
    if type(value) is LongText:
        return True
    if type(value) is dict:
        return any(_holds_long(item) for item in value.values())
    if type(value) is list:
        return any(_holds_long(item) for item in value)
    return False


def _whole_values(value: Any) -> Any:
    """`value` with each `LongText` in it made a str (for readers that take only str)."""
    if type(value) is LongText:
        return str(value)
    if type(value) is dict:
        return {key: _whole_values(item) for key, item in value.items()} if _holds_long(value) else value
    if type(value) is list:
        return [_whole_values(item) for item in value] if _holds_long(value) else value
    return value


def _plain_texts(raw: Mapping[str, Any]) -> list[str | LongText] | None:
    """The texts of a `tools/call` result (JSON as sent) made of text blocks alone, in a shape
    the SDK's model takes as it is; None for anything else. Most results are such, and
    building the model cost a lane call as much as reading its reply."""
    content = raw.get("content")
    structured = raw.get("structuredContent")
    if (type(content) is not list or not raw.keys() <= _PLAIN_KEYS or type(raw.get("isError", False)) is not bool
            or (structured is not None and type(structured) not in (dict, LongJSON))):
        return None
    texts = []
    for block in content:
        if (type(block) is not dict or block.keys() != _TEXT_BLOCK_KEYS or block["type"] != "text"
                or type(block["text"]) not in _TEXT_TYPES):
            return None
        texts.append(block["text"])
    return texts


def _add_block(block: Mapping[str, Any], texts: list[str], images: list[Image]) -> None:
    """One content block (wire JSON the SDK's model checked: each type has its fields)."""
    kind = block["type"]
    if kind == "text":
        texts.append(block["text"])
    elif kind == "image":
        try:
            images.append(Image(base64.b64decode(block["data"]), block["mimeType"]))
        except binascii.Error:  # the server's fault, not the call's: the rest of the result stands
            texts.append(f"[image ({block['mimeType']}): the server sent data that is not base64; not shown]")
    elif kind == "resource":
        resource = block["resource"]
        if "text" in resource:
            texts.append(resource["text"])
        else:
            texts.append(f"[resource {resource['uri']} ({resource.get('mimeType') or 'binary'})]")
    elif kind == "resource_link":
        texts.append(str(block["uri"]))
    elif kind == "audio":
        texts.append(f"[audio ({block['mimeType']}), not shown]")


def _is_text_wrapper(structured: Any, texts: list[str]) -> bool:
    """One key around the same text as the text content (the Python SDK's
    {"result": text}, server-filesystem's {"content": text}): the text is the result."""
    if not (isinstance(structured, dict) and len(structured) == 1):
        return False
    (value,) = structured.values()
    if any(type(text) is LongText for text in texts):  # a str is never as long (`_long_text_kept`)
        return len(texts) == 1 and value is texts[0]
    return isinstance(value, str) and value in ("\n".join(texts), "".join(texts))


def _long_json() -> Any:
    from . import _long_json  # with the first long reply's check (its patterns take 6 ms to make)

    return _long_json


def _is_wrapped_schema(schema: Mapping[str, Any] | None) -> bool:
    """Whether an output schema is the SDK's `{"result": X}` wrapper of a non-object X."""
    if not schema:
        return False
    properties = schema.get("properties")
    return (
        isinstance(properties, Mapping)
        and set(properties) == {"result"}
        and list(schema.get("required") or []) == ["result"]
    )


def _annotations_of(listed: Mapping[str, Any]) -> dict[str, Any]:
    annotations = listed.get("annotations")
    return {key: value for key, value in annotations.items() if value is not None} if annotations else {}


def _kind_of(annotations: Mapping[str, Any], trusted: bool) -> Kind:
    if trusted and annotations.get("readOnlyHint") is True and annotations.get("destructiveHint") is not True:
        return "read"
    return "execute"


def _missing_vars_message(cfg: ServerConfig) -> str:
    names = ", ".join(f"${{{var}}}" for var in cfg.missing_vars)
    where = f" (configured in {cfg.source})" if cfg.source else ""
    return (
        f"MCP server '{cfg.name}'{where} needs {names}, which {'are' if len(cfg.missing_vars) > 1 else 'is'} "
        f"not set. Set it in the kernel's environment (for example `%env {cfg.missing_vars[0]}=...` "
        f"or export it before starting Jupyter), then run again."
    )


def _where(cfg: ServerConfig) -> str:
    """How the server is reached, without anything that could be a secret."""
    if cfg.transport in ("http", "sse"):
        parts = urlsplit(cfg.url or "")
        return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"
    return os.path.basename(cfg.command or "")


def _redacted(value: Any, redact: Callable[[str], str]) -> Any:
    """`value` (JSON data) with `redact` applied to every string in it, keys too."""
    if type(value) is LongJSON:
        value = value.parsed()
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): _redacted(v, redact) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v, redact) for v in value]
    return value


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _first_line(exc: Exception) -> str:
    """What the server wrote, for a parse error of one stdout line."""
    with contextlib.suppress(Exception):
        return repr(exc.errors()[0]["input"])[:200]  # type: ignore[attr-defined]  # pydantic
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]
