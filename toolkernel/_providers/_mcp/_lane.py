"""A tool call past the MCP session: the `Lane` every transport's calls go through.

The SDK's `ClientSession` keeps the connection: the handshake, the tool lists, the
server's own requests and notifications. A `tools/call` goes past it, on the transport's
lane, for what the session's path cannot do: read a long reply as it arrives (its long
strings to files, `_spool`; its long structured content indented to a file, `_long_json`)
in time linear in its size, and wake only the thread that waits (over stdio a script's
thread reads the reply itself). One lane per transport, siblings on this Protocol:

    _stdio.StdioLane   the server's pipes, shared with the session's transport
    _http.HttpLane     a POST of its own on the session's client, its reply read as it streams
    _sse.SseLane       a POST to the endpoint, its reply taken off the SDK's `sse_client` stream

A lane's requests have ids of their own (`toolkernel-N`, strings) that the session's integer
ids never take. `cancel` is the one seam of a downstream cancel: a request cancelled while
it waits (an interrupt, a client's cancel, a timeout) tells the server so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, Callable, Mapping, Protocol

from ..._mcp_sdk import MCPError, mcp_error, types

ID_PREFIX = "toolkernel-"  # of a lane's request ids
ProgressFn = Callable[[float, "float | None", "str | None"], None]


class Lane(Protocol):
    @property
    def usable(self) -> bool:
        """Whether a request can go this way now (else the session's path is taken)."""

    async def request(self, method: str, params: dict[str, Any], on_progress: ProgressFn) -> Mapping[str, Any]:
        """Send a request and await its result. Raises MCPError (the server's error, or
        CONNECTION_CLOSED). Cancelled while it waits, it calls `cancel` first."""

    def cancel(self, request_id: str, reason: str) -> None:
        """Tell the server the request is cancelled (`notifications/cancelled`), not waited for."""

    def close(self) -> None:
        """No request goes this way any more."""


def request_message(request_id: str, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """A lane's request, its id doubling as its progress token."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method,
            "params": {**params, "_meta": {"progressToken": request_id}}}


def cancelled_message(request_id: str, reason: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": reason}}


def report_progress(params: Mapping[str, Any], on_progress: ProgressFn) -> None:
    """A `notifications/progress`'s params to `on_progress`, if they hold a number of progress."""
    value, total, message = params.get("progress"), params.get("total"), params.get("message")
    if isinstance(value, (int, float)):
        on_progress(value, total if isinstance(total, (int, float)) else None,
                    message if isinstance(message, str) else None)


def line_of(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def closed(why: str = "Connection closed") -> MCPError:
    return mcp_error(types.CONNECTION_CLOSED, why)


def send_soon(notices: set[asyncio.Task[Any]], sending: Any) -> None:
    """Send a courtesy notice (a cancelled call's) without waiting for it; kept in `notices` until
    done, and quiet when it fails: the call is over either way (a closed client raises RuntimeError)."""
    async def quietly() -> None:
        with contextlib.suppress(Exception):
            await sending

    task = asyncio.get_running_loop().create_task(quietly())
    notices.add(task)
    task.add_done_callback(notices.discard)
