"""The stdio transport of MCP servers, reading long messages in linear time.

The SDK's `mcp.client.stdio.stdio_client` joins its pending text with every
chunk it reads and splits the whole again (`(buffer + chunk).split("\\n")`), so
one long message costs time quadratic in its size: a 40 MB tool result took
44 s, 100 MB more than 150 s. This transport keeps the pieces of a partial line
in a list and joins them once, when the newline arrives.

Everything else follows the SDK's transport: the server runs in its own
process group with the SDK's minimal environment (`get_default_environment`)
plus the config's `env`; stderr goes where the caller says; shutdown is the
spec's sequence (close stdin, wait, SIGTERM the group, SIGKILL), shielded from
cancellation and bounded, so no server process outlives its connection.
"""

from __future__ import annotations

import contextlib
from typing import IO, Any, AsyncIterator, Mapping, Sequence

import anyio
import mcp_types as types
from anyio.abc import ByteReceiveStream, Process
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

_READ_SIZE = 1 << 20
_EXIT_GRACE = 2.0  # for the server to exit on its own once its stdin closes
_KILL_GRACE = 2.0  # between SIGTERM and SIGKILL of its process group
_FLUSH_GRACE = 0.5  # for messages already accepted to reach the server
_POLL = 0.01


@contextlib.asynccontextmanager
async def stdio_transport(
    command: str, args: Sequence[str], env: Mapping[str, str], cwd: str | None, errlog: IO[bytes]
) -> AsyncIterator[tuple[Any, Any]]:
    """Start the server; yield the (read, write) stream pair a `ClientSession` takes."""
    process = await anyio.open_process(
        [command, *args], env=get_default_environment() | dict(env), stderr=errlog, cwd=cwd,
        start_new_session=True,
    )
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    flushed = anyio.Event()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_read_stdout, process, to_session)
        tasks.start_soon(_write_stdin, process, from_session, to_session, flushed)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                read_stream.close()  # the reader now drains stdout, so a server stuck writing can exit
                write_stream.close()
                with anyio.move_on_after(_FLUSH_GRACE):
                    await flushed.wait()
                await _stop(process)
            tasks.cancel_scope.cancel()


async def _read_stdout(process: Process, to_session: Any) -> None:
    assert process.stdout is not None
    async with to_session:
        try:
            async for line in lines(process.stdout):
                if line.strip():
                    await to_session.send(_parse(line))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass  # the session is gone, or our shutdown closed the pipe
    # Drained until shutdown closes the pipe: a server blocked writing could not exit.
    with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        while True:
            await process.stdout.receive(_READ_SIZE)


async def _write_stdin(process: Process, from_session: Any, to_session: Any, flushed: anyio.Event) -> None:
    assert process.stdin is not None
    try:
        async with from_session:
            async for message in from_session:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send(data.encode() + b"\n")
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        # The server stopped reading: end the session's read side too, so a
        # request waiting for an answer sees the connection close instead of hanging.
        await to_session.aclose()
    finally:
        flushed.set()


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
    await _close(process.stdin)
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
