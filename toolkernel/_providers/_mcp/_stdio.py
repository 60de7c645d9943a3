"""The stdio transport of MCP servers, reading long messages in linear time.

The SDK's `mcp.client.stdio.stdio_client` joins its pending text with every
chunk it reads and splits the whole again (`(buffer + chunk).split("\\n")`), so
one long message costs time quadratic in its size: a 40 MB tool result took
44 s, 100 MB more than 150 s. This transport keeps the pieces of a partial line
in a list and joins them once, when the newline arrives.

Tool calls go past the session (`StdioLane`, a `_lane.Lane`); one made on the transport's
own loop gets its reply from that loop's reading. A script's `tools`
call runs on the script's own thread, writes its `tools/call` to the server's
stdin itself, and, while it waits, reads the server's stdout on its own loop.
Through the session, the call was handed to the private loop (a wake-up of
that thread) and its result handed back (another), besides the wake-up the
reply itself causes; each such wake-up cost 80-150 us of CPU on the machines
we measured (the woken thread runs on cold caches), and the SDK's per-request
machinery more. Past the session, and reading its own reply, a call takes one
wake-up, as a bare client on its own loop does. The session's own traffic
(handshake, lists, server-initiated requests, notifications) is read by
whoever reads at the time and passed to the session in order; the lane's
requests have ids of their own (`toolkernel-N`, strings) that the session's
integer ids never take, and a server echoes ids as JSON-RPC requires.

A line that grows past 1 MiB while a lane request waits is taken in by a `LongLine`
(`_spool.py`): its long strings go to a file as they arrive, and the reply reaches its
waiter with each of them a `LongText` (a `LongReply`), and its long structured content
written indented to a file as it is parsed, a `LongJSON` (`_long_json.py`); a line that
turns out to be the session's goes on as it came.

Everything else follows the SDK's transport: the server runs in its own
process group with the SDK's minimal environment (`get_default_environment`)
plus the config's `env`; stderr goes where the caller says; shutdown is the
spec's sequence (close stdin, wait, SIGTERM the group, SIGKILL), shielded from
cancellation and bounded, so no server process outlives its connection.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import os
import secrets
import select
import signal
import threading
from typing import IO, Any, AsyncIterator, Callable, Mapping, Sequence

import anyio
from anyio.abc import Process

from ..._mcp_sdk import SessionMessage, error_from, get_default_environment, jsonrpc_of, parse, types

from ..._longtext import LongText
from ..._process import program_env
from ._lane import ID_PREFIX, ProgressFn, cancelled_message, closed, line_of, report_progress, request_message
from ._spool import ENDS, LongLine, LongReply, lane_id, long_reply, not_taken, placed

_READ_SIZE = 1 << 20
_EXIT_GRACE = 2.0  # for the server to exit on its own once its stdin closes
_KILL_GRACE = 2.0  # between SIGTERM and SIGKILL of its process group
_FLUSH_GRACE = 0.5  # for messages already accepted to reach the server
_POLL = 0.01
_HIGH_WATER = 1 << 16  # unsent bytes above which the session's writer waits, as asyncio's pipes do
_BACKLOG = 64  # session messages waiting to be passed on, above which a lane request gives the reading back
_SPOOL_AT = 1 << 20  # bytes of a line past which, while a lane request waits, its long strings go to disk


@contextlib.asynccontextmanager
async def stdio_transport(
    command: str, args: Sequence[str], env: Mapping[str, str], cwd: str | None, errlog: IO[bytes],
    lane: StdioLane | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """Start the server; yield the (read, write) stream pair a `ClientSession` takes.
    `lane`, when given, is opened on the server's stdin and stdout for calls from other threads."""
    lane = lane or StdioLane()
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    try:
        process = await anyio.open_process(
            [command, *args], env=program_env(get_default_environment() | dict(env)), stdin=stdin_read, stdout=stdout_write,
            stderr=errlog, cwd=cwd, start_new_session=True,
        )
    except BaseException:
        os.close(stdin_write)
        os.close(stdout_read)
        raise
    finally:
        os.close(stdin_read)  # the server's ends
        os.close(stdout_write)
    lane.open(stdin_write, stdout_read, asyncio.get_running_loop())
    try:
        to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
        flushed = anyio.Event()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_read_stdout, lane, to_session)
            tasks.start_soon(_write_stdin, lane, from_session, to_session, flushed)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True):
                    read_stream.close()  # the reader now drops the session's messages, so a server stuck writing can exit
                    write_stream.close()
                    with anyio.move_on_after(_FLUSH_GRACE):
                        await flushed.wait()
                        await lane.drained()
                    lane.close()
                    await _stop(process)
                tasks.cancel_scope.cancel()
    finally:
        lane.close_stdout()


async def _read_stdout(lane: StdioLane, to_session: Any) -> None:
    """The session's messages, in order, whoever read them from stdout (see `StdioLane.session_messages`)."""
    try:
        async with to_session:
            async for message in lane.session_messages():
                # The session gone, stdout is still read to its end: a server blocked writing could not exit.
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    await to_session.send(message)
    finally:
        lane.end()


async def _write_stdin(lane: StdioLane, from_session: Any, to_session: Any, flushed: anyio.Event) -> None:
    try:
        async with from_session:
            async for message in from_session:
                lane.reclaim()  # the session's requests need their replies read
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                lane.send(data.encode() + b"\n")
                await lane.drained(_HIGH_WATER)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        # The server stopped reading: end the session's read side too, so a
        # request waiting for an answer sees the connection close instead of hanging.
        await to_session.aclose()
    finally:
        flushed.set()


class StdioLane:
    """The server's stdin and stdout, shared by the session (on the transport's loop) and
    requests made past it from other threads.

    Writing: whole messages at a time, from any thread, never blocking. What the pipe
    cannot take at once is kept, in order, and written by the transport's loop as the
    pipe drains (a lock keeps messages whole).

    Reading: one loop at a time reads stdout (`_reader`). Most of the time that is the
    transport's loop, for the session. A lane request takes the reading over for as long
    as it waits, when nobody else has it: its own loop watches stdout, so its reply wakes
    only its own thread. Each loop that reads watches stdout through an epoll set of its
    own: the transport's loop through `_gate`, every other loop through one made the first
    time it takes the reading and watched by it from then on (`_sets`). Stdout is in the
    reader's set alone (in no other: a set holding it would report its hang-up, when the
    server exits, to a loop that does not read), so taking the reading and giving it back
    moves it between two sets, two kernel calls, safe from any thread: it never wakes the
    transport's loop, and costs neither loop a change of what it watches (asyncio's
    add_reader and remove_reader on every call cost more than the rest of the hand-off).
    Whoever reads hands each message on: the replies and
    progress of lane requests to their waiters (a request that did not get the reading
    waits for them), everything else to a queue the transport's loop passes on to the
    session, in order. A reader that finds that queue long gives the reading back, so a
    server that floods the session meets the session's own pace, as before.
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
        # Reading, all under _read_lock:
        self._read_lock = threading.Lock()
        self._out: int | None = None  # stdout
        self._gate: Any = None  # select.epoll the transport's loop watches stdout through; None without epoll
        self._sets: dict[asyncio.AbstractEventLoop, Any] = {}  # other loops' epoll sets, watched by them
        self._reader: asyncio.AbstractEventLoop | None = None  # the loop that reads now
        self._partial: list[bytes | memoryview] = []  # the pieces of a line not yet ended
        self._partial_size = 0
        self._long: LongLine | None = None  # a line not yet ended, taken in by a LongLine since it grew long
        self._nonce = secrets.token_hex(8)  # in a LongLine's markers: no server can send one
        self._for_session: collections.deque[SessionMessage | Exception] = collections.deque()
        self._woken: asyncio.Future[None] | None = None  # the transport's loop waits for messages
        self._close_out = False  # stdout is to be closed once its reader lets go
        self._ended = False  # the server's stdout ended: no reply will come
        self.stray: Exception | None = None  # what the first line that is not JSON-RPC raised

    @property
    def usable(self) -> bool:
        return self._fd is not None and not self._ended and self._broken is None

    def open(self, stdin: int, stdout: int, loop: asyncio.AbstractEventLoop) -> None:
        os.set_blocking(stdin, False)
        os.set_blocking(stdout, False)
        self._fd, self._out, self._loop, self._reader = stdin, stdout, loop, loop
        with contextlib.suppress(AttributeError, OSError):  # no epoll here (or no descriptor left for
            # one): the transport's loop watches stdout itself and keeps the reading, as before
            gate = select.epoll()
            gate.register(stdout, select.EPOLLIN)
            self._gate = gate

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

    # -- requests past the session (any thread but the transport's) ------------------

    async def request(self, method: str, params: dict[str, Any], on_progress: ProgressFn) -> dict[str, Any]:
        """Send a request and await its result on the calling loop (any thread's).

        Raises MCPError: the server's error, or CONNECTION_CLOSED. Cancelled (a timeout, an
        interrupt), it tells the server with `notifications/cancelled`, as the SDK does.
        """
        loop = asyncio.get_running_loop()
        request_id = f"{ID_PREFIX}{next(self._ids)}"
        waiter = _Waiter(loop, on_progress)
        self._calls[request_id] = waiter
        try:
            if self._ended:  # checked after the waiter is in: `end` settles every waiter it finds
                raise closed()
            self._take_reading(loop)  # before the request goes: its reply must find this loop reading
            try:
                self.send(line_of(request_message(request_id, method, params)) + b"\n")
            except OSError:
                raise closed() from None
            try:
                outcome = await waiter.done
            except asyncio.CancelledError:
                self.cancel(request_id, "caller cancelled")
                raise
        finally:
            del self._calls[request_id]
            waiter.finished = True
            self._give_back_reading(loop)
        if type(outcome) is dict or type(outcome) is LongReply:
            return outcome
        if isinstance(outcome, types.JSONRPCResponse):
            return outcome.result
        if isinstance(outcome, types.JSONRPCError):
            raise error_from(outcome.error)
        raise closed()

    def cancel(self, request_id: str, reason: str) -> None:
        """`notifications/cancelled` for a request of this lane, from any thread, never blocking."""
        with contextlib.suppress(OSError):
            self.send(line_of(cancelled_message(request_id, reason)) + b"\n")

    def _take_reading(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read stdout on `loop` from now on, if the transport's loop has the reading (else the
        reader, or the transport's loop once it has it back, hands this loop its messages)."""
        with self._read_lock:
            self._reclaim_stale()
            if (loop is self._loop or self._gate is None or self._reader is not self._loop or self._ended
                    or self._out is None or len(self._for_session) >= _BACKLOG):
                return  # (the transport's own loop reads already: its request's reply reaches it there)
            watched = self._sets.get(loop) or self._watch_from(loop)
            self._gate.unregister(self._out)
            watched.register(self._out, select.EPOLLIN)
            self._reader = loop

    def _watch_from(self, loop: asyncio.AbstractEventLoop) -> Any:
        """Under the read lock, on `loop`: its epoll set (empty), which it watches from now on;
        the sets of loops closed since are dropped."""
        for gone in [other for other in self._sets if other.is_closed()]:
            self._sets.pop(gone).close()  # a closed loop's selector is gone, and its watch with it
        watched = select.epoll()
        try:
            loop.add_reader(watched.fileno(), self._read, loop)
        except BaseException:
            watched.close()
            raise
        self._sets[loop] = watched
        return watched

    def reclaim(self) -> None:
        """The transport's loop reads again if the loop that took the reading no longer runs."""
        with self._read_lock:
            self._reclaim_stale()

    def _reclaim_stale(self) -> None:
        # A loop that stopped with its request still waiting (its thread left it: run_until_complete
        # ended by an exception) reads nothing until it runs again; nor would anybody else. Its
        # selector is idle, so its reader can be taken off from here; its request, if the loop ever
        # runs again, finds the reading gone and lets go of nothing.
        stale = self._reader
        if stale is not None and stale is not self._loop and not stale.is_running():
            self._let_go(stale)

    def _give_back_reading(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._read_lock:
            self._let_go(loop)

    def _let_go(self, loop: asyncio.AbstractEventLoop) -> None:
        """Under the read lock: the transport's loop reads again, if `loop` was reading
        (kernel calls only: safe from any thread)."""
        if self._reader is not loop or loop is self._loop:
            return
        self._reader = self._loop
        assert self._out is not None
        self._sets[loop].unregister(self._out)
        if self._close_out:
            self._close_stdout()
        elif not self._ended:
            self._gate.register(self._out, select.EPOLLIN)  # the transport's loop wakes if there is more

    # -- reading (whichever loop has the reading) ------------------------------------

    def _read(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read what stdout has, if `loop` has the reading, and hand each whole message on."""
        with self._read_lock:
            if self._reader is not loop or self._out is None or self._ended:
                return
            try:
                chunk = os.read(self._out, _READ_SIZE)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            for line in self._lines(chunk):
                if type(line) is LongLine:
                    self._take_long(line, loop)
                elif line.strip() and not self._answer(line, loop):
                    self._deliver(_parse(line), loop)
            if not chunk:
                self._end(loop)
            elif len(self._for_session) >= _BACKLOG:
                self._let_go(loop)  # the session's pace again: the transport's loop reads as it passes them on

    def _lines(self, chunk: bytes) -> list[bytes | LongLine]:
        """The lines `chunk` ends (at the end of stdout, an unended last one too), each joined once;
        a long line that a lane request may be waiting for, taken in by a `LongLine` instead."""
        ended: list[bytes | LongLine] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._take(_part(chunk, start, end))
            ended.append(self._ended_line())
            start = end + 1
        if start < len(chunk):
            self._take(_part(chunk, start, len(chunk)))
        elif not chunk and (self._partial or self._long is not None):
            ended.append(self._ended_line())
        return ended

    def _take(self, part: bytes | memoryview) -> None:
        if self._long is not None:
            return self._long.feed(part)
        self._partial.append(part)
        self._partial_size += len(part)
        if self._partial_size > _SPOOL_AT and self._calls:
            self._long = LongLine(self._nonce)
            for taken in self._partial:  # not joined first: a copy of the 1 MiB
                self._long.feed(taken)
            self._partial.clear()

    def _ended_line(self) -> bytes | LongLine:
        if self._long is not None:
            line, self._long = self._long, None
        else:
            line = b"".join(self._partial)
            self._partial.clear()
        self._partial_size = 0
        return line

    def _take_long(self, line: LongLine, loop: asyncio.AbstractEventLoop) -> None:
        """A long line: the answer of a lane request, its long strings `LongText`s; else (a message
        for the session, or a line that breaks off inside a string) the line as it came."""
        if line.failed is not None:
            return self._refuse(line, loop)
        try:
            texts: dict[str, LongText] | None = line.finish()
        except ValueError:
            texts = None
        if texts is not None and self._answer(line.skeleton, loop, texts, line.markers(), line.marker):
            return
        self._deliver(_parse(line.whole() if texts is None or texts else bytes(line.skeleton)), loop)

    def _refuse(self, line: LongLine, loop: asyncio.AbstractEventLoop) -> None:
        """A line not kept (`LongLine.failed`): the request it answers fails, saying why."""
        message = not_taken(line)
        if not self._fail(line.request_id(), message, loop):
            self._deliver(ValueError(message), loop)

    def _fail(self, request_id: str | None, message: str, loop: asyncio.AbstractEventLoop) -> bool:
        """The lane request `request_id` fails with `message`; False when nobody waits for it."""
        waiter = self._calls.get(request_id) if request_id is not None else None
        if waiter is None:
            return False
        waiter.answer(types.JSONRPCError(jsonrpc="2.0", id=request_id,
                                         error=types.ErrorData(code=types.INTERNAL_ERROR, message=message)), loop)
        return True

    def _answer(self, line: bytes | bytearray, loop: asyncio.AbstractEventLoop,
                texts: Mapping[str, LongText] | None = None, markers: int = 0, marker: bytes = b"") -> bool:
        """The result of a lane request, straight to its waiter: the common case, taken without
        the JSON-RPC union's validation (on a waking thread that cost about as much as the rest
        of the read). Only what that validation would take for a result; False for the rest.
        `texts`: the `LongText` of each of a long line's `markers`, put in their places; such a line
        that answers a lane request nobody waits for any more (it timed out) is dropped here, not
        made whole again for the session, which never knew the request. Its long structured
        content is written indented to a file as it is parsed (`_long_json`, its `marker` bytes
        in none of it)."""
        if not self._calls and texts is None:
            return False
        try:
            message = json.loads(line) if texts is None else long_reply(line, marker)
        except ValueError:
            return False
        except RecursionError:  # raised here, it lost the rest of what was read with it
            return self._fail(lane_id(line[:ENDS], line[-ENDS:]), "the server's reply is nested too deep to read", loop)
        if type(message) is not dict or type(request_id := message.get("id")) is not str:
            return False
        waiter = self._calls.get(request_id)
        if waiter is None and texts is not None:
            return request_id.startswith(ID_PREFIX) and "method" not in message
        if (waiter is None or message.get("jsonrpc") != "2.0" or type(result := message.get("result")) is not dict
                or "error" in message or "method" in message):
            return False
        waiter.answer(placed(result, texts, markers) if texts else result, loop)
        return True

    def _deliver(self, message: SessionMessage | Exception, loop: asyncio.AbstractEventLoop) -> None:
        """A reply or progress of a lane request to its waiter; any other message to the session."""
        if isinstance(message, Exception) and self.stray is None:
            self.stray = message
        if self._calls and isinstance(message, SessionMessage):
            inner = jsonrpc_of(message)
            if isinstance(inner, (types.JSONRPCResponse, types.JSONRPCError)):
                waiter = self._calls.get(inner.id) if isinstance(inner.id, str) else None
                if waiter is not None:
                    return waiter.answer(inner, loop)
            elif isinstance(inner, types.JSONRPCNotification) and inner.method == "notifications/progress":
                params = inner.params or {}
                token = params.get("progressToken")
                waiter = self._calls.get(token) if isinstance(token, str) else None
                if waiter is not None:
                    return waiter.hand(waiter.progress, params, loop)
        self._for_session.append(message)
        self._wake_transport(loop)

    def _wake_transport(self, loop: asyncio.AbstractEventLoop) -> None:
        woken, self._woken = self._woken, None
        if woken is not None:
            _settle_soon(woken, None, loop)

    def _end(self, loop: asyncio.AbstractEventLoop) -> None:
        """Under the read lock: stdout ended; every waiting request fails, the session is told."""
        self._ended = True
        for waiter in list(self._calls.values()):
            waiter.answer(None, loop)
        self._wake_transport(loop)

    def end(self) -> None:
        """On the transport's loop, when its reading stops: no reply will come any more."""
        with self._read_lock:
            if not self._ended:
                self._end(self._loop)  # type: ignore[arg-type]

    async def session_messages(self) -> AsyncIterator[SessionMessage | Exception]:
        """On the transport's loop: the session's messages in order, whoever read them, until stdout ends.
        The next read waits until the last message is taken (the session's pace)."""
        loop = self._loop
        assert loop is not None
        while True:
            ended = self._ended  # before the queue: what was read before the end is in it
            while self._for_session:
                yield self._for_session.popleft()
            if ended:
                return
            await self._readable()
            self._read(loop)

    async def _readable(self) -> None:
        """Until stdout has something for the transport's loop, or another reader queued a message."""
        loop = self._loop
        with self._read_lock:
            if self._for_session or self._ended or self._out is None:
                return
            self._woken = woken = loop.create_future()  # type: ignore[union-attr]
            watched = self._out if self._gate is None else self._gate.fileno()
        loop.add_reader(watched, _settle_soon, woken, None, loop)  # type: ignore[union-attr]
        try:
            await woken
        finally:
            loop.remove_reader(watched)  # type: ignore[union-attr]
            self._woken = None

    def close_stdout(self) -> None:
        """On the transport's loop, once the server is stopped: close stdout (when its reader lets go)."""
        with self._read_lock:
            self._close_out = True
            self._reclaim_stale()  # a loop that will not run again would never let go
            if self._reader is self._loop:
                self._close_stdout()

    def _close_stdout(self) -> None:
        self._ended = True
        if self._out is not None:
            os.close(self._out)
            self._out = None
        if self._gate is not None:
            self._gate.close()
            self._gate = None
        sets, self._sets = self._sets, {}
        for loop, watched in sets.items():
            _unwatch(loop, watched)


class _Waiter:
    """One lane request, waited for on `loop`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_progress: ProgressFn) -> None:
        self.loop = loop
        self.done: asyncio.Future[Any] = loop.create_future()
        self.on_progress = on_progress
        self.finished = False  # its request is over: late progress is dropped

    def answer(self, outcome: Any, here: asyncio.AbstractEventLoop | None) -> None:
        """Settle the request: read on its own loop, at once (setting a future runs nothing
        of the caller's); else through its loop's wake-up. Progress handed on before it
        still runs first, as both go through the loop's queue in order."""
        _settle_soon(self.done, outcome, here)

    def hand(self, fn: Callable[[Any], None], arg: Any, here: asyncio.AbstractEventLoop | None) -> None:
        """Run `fn(arg)` on the waiter's loop, soon: never inline, as the reader holds its lock."""
        with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits any more
            if self.loop is here:
                self.loop.call_soon(fn, arg)
            else:
                self.loop.call_soon_threadsafe(fn, arg)

    def progress(self, params: Mapping[str, Any]) -> None:
        if not self.finished:
            report_progress(params, self.on_progress)


def _unwatch(loop: asyncio.AbstractEventLoop, watched: Any) -> None:
    """`loop` stops watching the epoll set `watched`, which is then closed. Its descriptor stays
    open until the loop forgot it: a number the loop still watched and the kernel gave to a new
    descriptor would break the loop's next add_reader of that number."""
    def unwatch() -> None:
        with contextlib.suppress(RuntimeError):  # closed meanwhile: its selector forgot it already
            loop.remove_reader(watched.fileno())
        watched.close()
    if loop.is_closed():
        watched.close()
    elif loop is asyncio._get_running_loop() or not loop.is_running():
        unwatch()  # its own thread, or idle (its selector is not in use: what `_reclaim_stale` does)
    else:
        try:
            loop.call_soon_threadsafe(unwatch)
        except RuntimeError:  # closed just now
            watched.close()


def _settle_soon(future: asyncio.Future[Any], value: Any, here: asyncio.AbstractEventLoop | None) -> None:
    """Settle `future` on its own loop: at once from that loop, else through its wake-up."""
    def settle() -> None:
        if not future.done():
            future.set_result(value)
    loop = future.get_loop()
    if loop is here:
        settle()
    else:
        with contextlib.suppress(RuntimeError):  # its loop is closed
            loop.call_soon_threadsafe(settle)


def _part(chunk: bytes, start: int, end: int) -> bytes | memoryview:
    """A part of a chunk read: a large one not copied (it holds the chunk, most of which it is)."""
    return memoryview(chunk)[start:end] if end - start > _READ_SIZE // 4 else chunk[start:end]


def _parse(line: bytes) -> SessionMessage | Exception:
    """One message; what is not JSON-RPC goes to the session as an exception item, as the SDK does."""
    try:
        return parse(line)
    except ValueError as exc:
        return exc


async def _stop(process: Process) -> None:
    if not await _exited(process, _EXIT_GRACE):
        await _terminate_group(process.pid, _KILL_GRACE)
        await _exited(process, _KILL_GRACE)
    with anyio.move_on_after(_KILL_GRACE):
        await process.aclose()  # reaps the process and closes its transport


async def _terminate_group(group: int, grace: float) -> None:
    """SIGTERM the server's process group (it leads it: start_new_session), and SIGKILL what is
    left of it after `grace` seconds. The group outlives its leader while a grandchild is in it;
    only ESRCH says it is gone (EPERM may be an unreaped zombie)."""
    with contextlib.suppress(PermissionError):
        try:
            os.killpg(group, signal.SIGTERM)
        except ProcessLookupError:
            return
    with anyio.move_on_after(grace):
        while _group_alive(group):
            await anyio.sleep(_POLL)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


async def _exited(process: Process, within: float) -> bool:
    # Polls `returncode`, not `process.wait()`: on asyncio that also waits for
    # the pipes to close, which a grandchild holding them can delay forever.
    with anyio.move_on_after(within):
        while process.returncode is None:
            await anyio.sleep(_POLL)
    return process.returncode is not None
