"""The stdio transport of MCP servers, reading long messages in linear time.

The SDK's `mcp.client.stdio.stdio_client` joins its pending text with every
chunk it reads and splits the whole again (`(buffer + chunk).split("\\n")`), so
one long message costs time quadratic in its size: a 40 MB tool result took
44 s, 100 MB more than 150 s. This transport keeps the pieces of a partial line
in a list and joins them once, when the newline arrives.

Calls from other threads go past the session (`Lane`): a script's `tools`
call runs on the script's own thread, writes its `tools/call` to the server's
stdin itself, and the reader hands the reply straight to that thread's loop.
Through the session, the call was handed to the private loop (a wake-up of
that thread) and its result handed back (another), besides the wake-up the
reply itself causes; each such wake-up cost 80-150 us of CPU on the machines
we measured, and the SDK's per-request machinery more. Past the session a call
takes two wake-ups (the reader's, the caller's), where a bare client on its
own loop takes one. Only the reading of stdout stays on the private loop, so
the session's own traffic (handshake, lists, server-initiated requests,
notifications) is untouched; the lane's requests have ids of their own
(`toolkernel-N`, strings) that the session's integer ids never take, and a server
echoes ids as JSON-RPC requires. HTTP and SSE servers keep the session.

Everything else follows the SDK's transport: the server runs in its own
process group with the SDK's minimal environment (`get_default_environment`)
plus the config's `env`; stderr goes where the caller says; shutdown is the
spec's sequence (close stdin, wait, SIGTERM the group, SIGKILL), shielded from
cancellation and bounded, so no server process outlives its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import threading
from typing import IO, Any, AsyncIterator, Callable, Mapping, Sequence

import anyio
import mcp_types as types
from anyio.abc import ByteReceiveStream, Process
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

_READ_SIZE = 1 << 20
_EXIT_GRACE = 2.0  # for the server to exit on its own once its stdin closes
_KILL_GRACE = 2.0  # between SIGTERM and SIGKILL of its process group
_FLUSH_GRACE = 0.5  # for messages already accepted to reach the server
_POLL = 0.01
_HIGH_WATER = 1 << 16  # unsent bytes above which the session's writer waits, as asyncio's pipes do

ProgressFn = Callable[[float, "float | None", "str | None"], None]


@contextlib.asynccontextmanager
async def stdio_transport(
    command: str, args: Sequence[str], env: Mapping[str, str], cwd: str | None, errlog: IO[bytes],
    lane: Lane | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """Start the server; yield the (read, write) stream pair a `ClientSession` takes.
    `lane`, when given, is opened on the server's stdin for calls from other threads."""
    lane = lane or Lane()
    stdin_read, stdin_write = os.pipe()
    try:
        process = await anyio.open_process(
            [command, *args], env=get_default_environment() | dict(env), stdin=stdin_read, stderr=errlog,
            cwd=cwd, start_new_session=True,
        )
    except BaseException:
        os.close(stdin_write)
        raise
    finally:
        os.close(stdin_read)  # the server's end
    lane.open(stdin_write, asyncio.get_running_loop())
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    flushed = anyio.Event()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_read_stdout, process, to_session, lane)
        tasks.start_soon(_write_stdin, lane, from_session, to_session, flushed)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                read_stream.close()  # the reader now drains stdout, so a server stuck writing can exit
                write_stream.close()
                with anyio.move_on_after(_FLUSH_GRACE):
                    await flushed.wait()
                    await lane.drained()
                lane.close()
                await _stop(process)
            tasks.cancel_scope.cancel()


async def _read_stdout(process: Process, to_session: Any, lane: Lane) -> None:
    assert process.stdout is not None
    try:
        async with to_session:
            try:
                async for line in lines(process.stdout):
                    if line.strip():
                        message = _parse(line)
                        if not lane.route(message):
                            await to_session.send(message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                pass  # the session is gone, or our shutdown closed the pipe
    finally:
        lane.end()
    # Drained until shutdown closes the pipe: a server blocked writing could not exit.
    with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        while True:
            await process.stdout.receive(_READ_SIZE)


async def _write_stdin(lane: Lane, from_session: Any, to_session: Any, flushed: anyio.Event) -> None:
    try:
        async with from_session:
            async for message in from_session:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                lane.send(data.encode() + b"\n")
                await lane.drained(_HIGH_WATER)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        # The server stopped reading: end the session's read side too, so a
        # request waiting for an answer sees the connection close instead of hanging.
        await to_session.aclose()
    finally:
        flushed.set()


class Lane:
    """The server's stdin, written whole messages at a time from any thread, and requests
    made past the session: their replies and progress go back to the loop that asked.

    Writes never block: what the pipe cannot take at once is kept, in order, and written
    by the transport's loop as the pipe drains (a lock keeps messages whole). The reader
    (on that loop) offers every message to `route` first.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unsent = bytearray()
        self._writing = False  # the loop watches the pipe to write what is unsent
        self._broken: OSError | None = None  # why nothing more can be written
        self._drain: asyncio.Future[None] | None = None
        self._calls: dict[str, _Waiter] = {}
        self._ids = itertools.count(1)
        self._ended = False  # the server's stdout ended: no reply will come

    @property
    def usable(self) -> bool:
        return self._fd is not None and not self._ended and self._broken is None

    def open(self, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        os.set_blocking(fd, False)
        self._fd, self._loop = fd, loop

    # -- writing (any thread) ----------------------------------------------

    def send(self, data: bytes) -> None:
        """Write one whole message, or keep it to be written next; OSError once the pipe broke."""
        with self._lock:
            if self._broken is not None or self._fd is None:
                raise BrokenPipeError("the server's stdin is closed") from self._broken
            if self._unsent:
                self._unsent += data
                return
            try:
                written = os.write(self._fd, data)
            except BlockingIOError:
                written = 0
            except OSError as exc:
                self._broken = exc
                raise
            if written < len(data):
                self._unsent += memoryview(data)[written:]
                self._watch()

    def _watch(self) -> None:
        if not self._writing:
            self._writing = True
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._start_writing)

    def _start_writing(self) -> None:
        with self._lock:
            if self._fd is not None and self._writing:
                self._loop.add_writer(self._fd, self._write_unsent)  # type: ignore[union-attr]

    def _write_unsent(self) -> None:
        """On the loop, when the pipe takes more."""
        with self._lock:
            try:
                del self._unsent[:os.write(self._fd, self._unsent)]  # type: ignore[arg-type]
            except BlockingIOError:
                return
            except OSError as exc:
                self._broken = exc
                self._unsent.clear()
            if not self._unsent:
                self._stop_writing()

    def _stop_writing(self) -> None:
        if self._writing and self._fd is not None:
            self._loop.remove_writer(self._fd)  # type: ignore[union-attr]
        self._writing = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    async def drained(self, keep: int = 0) -> None:
        """On the transport's loop: wait until at most `keep` bytes are unsent (or the pipe broke)."""
        while len(self._unsent) > keep and self._broken is None and self._fd is not None:
            self._drain = asyncio.get_running_loop().create_future()
            await self._drain

    def close(self) -> None:
        """On the transport's loop: close the server's stdin (what is unsent is dropped)."""
        with self._lock:
            self._stop_writing()
            self._unsent.clear()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    # -- requests past the session ---------------------------------------------

    async def request(self, method: str, params: dict[str, Any], on_progress: ProgressFn) -> dict[str, Any]:
        """Send a request and await its result on the calling loop (any thread's).

        Raises MCPError: the server's error, or CONNECTION_CLOSED. Cancelled (a timeout, an
        interrupt), it tells the server with `notifications/cancelled`, as the SDK does.
        """
        request_id = f"toolkernel-{next(self._ids)}"
        waiter = _Waiter(asyncio.get_running_loop(), on_progress)
        self._calls[request_id] = waiter
        try:
            if self._ended:  # checked after the waiter is in: `end` settles every waiter it finds
                raise _closed()
            try:
                self.send(_line({"jsonrpc": "2.0", "id": request_id, "method": method,
                                 "params": {**params, "_meta": {"progressToken": request_id}}}))
            except OSError:
                raise _closed() from None
            try:
                outcome = await waiter.done
            except asyncio.CancelledError:
                with contextlib.suppress(OSError):
                    self.send(_line({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                     "params": {"requestId": request_id, "reason": "caller cancelled"}}))
                raise
        finally:
            del self._calls[request_id]
        if isinstance(outcome, types.JSONRPCResponse):
            return outcome.result
        if isinstance(outcome, types.JSONRPCError):
            raise MCPError.from_error_data(outcome.error)
        raise _closed()

    def route(self, message: SessionMessage | Exception) -> bool:
        """On the transport's loop: hand a reply or progress of a lane request to its waiter.
        False for every other message (the session's)."""
        if not self._calls or not isinstance(message, SessionMessage):
            return False
        body = message.message
        if isinstance(body, (types.JSONRPCResponse, types.JSONRPCError)):
            waiter = self._calls.get(body.id) if isinstance(body.id, str) else None
            if waiter is not None:
                waiter.hand(waiter.settle, body)
            return waiter is not None
        if isinstance(body, types.JSONRPCNotification) and body.method == "notifications/progress":
            params = body.params or {}
            token = params.get("progressToken")
            waiter = self._calls.get(token) if isinstance(token, str) else None
            if waiter is not None:
                waiter.hand(waiter.progress, params)
            return waiter is not None
        return False

    def end(self) -> None:
        """On the transport's loop: the server's stdout ended; every waiting request fails."""
        self._ended = True
        for waiter in list(self._calls.values()):
            waiter.hand(waiter.settle, None)


class _Waiter:
    """One lane request, waited for on `loop`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_progress: ProgressFn) -> None:
        self.loop = loop
        self.done: asyncio.Future[Any] = loop.create_future()
        self.on_progress = on_progress

    def hand(self, fn: Callable[[Any], None], arg: Any) -> None:
        with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits any more
            self.loop.call_soon_threadsafe(fn, arg)

    def settle(self, outcome: Any) -> None:
        if not self.done.done():
            self.done.set_result(outcome)

    def progress(self, params: Mapping[str, Any]) -> None:
        value, total, message = params.get("progress"), params.get("total"), params.get("message")
        if isinstance(value, (int, float)) and not self.done.done():
            self.on_progress(value, total if isinstance(total, (int, float)) else None,
                             message if isinstance(message, str) else None)


def _line(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _closed() -> MCPError:
    return MCPError(code=types.CONNECTION_CLOSED, message="Connection closed")


async def lines(stream: ByteReceiveStream) -> AsyncIterator[bytes]:
    """The newline-ended lines of a byte stream (a last unended line too), each joined once."""
    pending: list[bytes] = []
    while True:
        try:
            chunk = await stream.receive(_READ_SIZE)
        except anyio.EndOfStream:
            break
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            pending.append(chunk[start:end])
            yield b"".join(pending)
            pending.clear()
            start = end + 1
        if start < len(chunk):
            pending.append(chunk[start:])
    if pending:
        yield b"".join(pending)


def _parse(line: bytes) -> SessionMessage | Exception:
    """One message; what is not JSON-RPC goes to the session as an exception item, as the SDK does."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


async def _stop(process: Process) -> None:
    if not await _exited(process, _EXIT_GRACE):
        await terminate_posix_process_tree(process, _KILL_GRACE)
        await _exited(process, _KILL_GRACE)
    await _close(process.stdout)
    with anyio.move_on_after(_KILL_GRACE):
        await process.aclose()  # reaps the process and closes its transport


async def _close(pipe: Any) -> None:
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await pipe.aclose()


async def _exited(process: Process, within: float) -> bool:
    # Polls `returncode`, not `process.wait()`: on asyncio that also waits for
    # the pipes to close, which a grandchild holding them can delay forever.
    with anyio.move_on_after(within):
        while process.returncode is None:
            await anyio.sleep(_POLL)
    return process.returncode is not None
