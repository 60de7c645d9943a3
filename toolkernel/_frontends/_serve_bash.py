"""serve's `bash` as seed 002's Bash: its input, progress while a call goes, a client's cancel.

- `timeout` (milliseconds; default 120000, at most 600000; the `[shell] timeout` stays the
  ceiling, and the lower of the two ends the run, which says which one it was);
- `description`: a short label, in the approval question and the run's report;
- `run_in_background`: the run goes on and the call returns its id at once (`bash-1`, ...);
  `bash_output` reads what it printed since the last read, `kill_shell` ends it.

While a call goes, a client that sent a progress token hears `notifications/progress`
within `FIRST_PROGRESS` seconds and then every `PROGRESS_EVERY`: the newest line the run
printed as the message, the calls made so far as the progress. A client's
`notifications/cancelled` (or the client going away) stops the run as an interrupt does.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

import anyio

from .._errors import InvalidInput, printable
from .._mcp_sdk import types
from .._runners._shell import RunControl

DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
FIRST_PROGRESS = 1.0  # seconds into a call before its first progress notification
PROGRESS_EVERY = 5.0  # seconds between progress notifications
MESSAGE_CHARS = 200  # of the newest line, in a progress message
DESCRIPTION_CHARS = 200
CANCEL_WAIT = 5.0  # seconds a cancelled call's handler waits for its run to end (it ends within one)

BASH_INPUT = {
    "type": "object",
    "properties": {
        "script": {"type": "string"},
        "timeout": {"type": "integer", "maximum": MAX_TIMEOUT_MS, "description": f"ms, default {DEFAULT_TIMEOUT_MS}"},
        "description": {"type": "string", "description": "a short label"},
        "run_in_background": {"type": "boolean", "description": "an id at once: bash_output reads, kill_shell ends"},
    },
    "required": ["script"],
}

BASH_OUTPUT = types.Tool(
    name="bash_output",
    description=("A background bash run's output since the last read, status and exit code; with filter (a regex)"
                 " only matching lines, the rest consumed."),
    inputSchema={"type": "object", "properties": {"bash_id": {"type": "string"}, "filter": {"type": "string"}},
                  "required": ["bash_id"]},
)
KILL_SHELL = types.Tool(
    name="kill_shell",
    description="End a background bash run; its output stays readable.",
    inputSchema={"type": "object", "properties": {"shell_id": {"type": "string"}}, "required": ["shell_id"]},
)
BACKGROUND_TOOLS = (BASH_OUTPUT, KILL_SHELL)


@dataclass(frozen=True)
class BashInput:
    """A `bash` call's input, checked."""

    script: str
    timeout_ms: int | None = None  # as given
    description: str | None = None
    background: bool = False

    @classmethod
    def parse(cls, arguments: Mapping[str, Any]) -> "BashInput":
        script = arguments.get("script")
        if not isinstance(script, str):
            raise InvalidInput('bash needs {"script": "..."}')
        unknown = set(arguments) - set(BASH_INPUT["properties"])
        if unknown:
            raise InvalidInput(f"bash takes script, timeout, description and run_in_background, not "
                               f"{', '.join(sorted(map(repr, unknown)))}")
        timeout = arguments.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int)
                                    or not 0 < timeout <= MAX_TIMEOUT_MS):
            raise InvalidInput(f"timeout is in milliseconds: a whole number from 1 to {MAX_TIMEOUT_MS}")
        description = arguments.get("description")
        if description is not None and (not isinstance(description, str) or len(description) > DESCRIPTION_CHARS):
            raise InvalidInput(f"description is a short text (at most {DESCRIPTION_CHARS} characters)")
        background = arguments.get("run_in_background", False)
        if not isinstance(background, bool):
            raise InvalidInput("run_in_background is true or false")
        return cls(script, timeout, (description or "").strip() or None, background)

    def control(self) -> RunControl:
        """The run's control, with its time limit: the one given, else (in the foreground) the default."""
        ms = self.timeout_ms if self.timeout_ms is not None or self.background else DEFAULT_TIMEOUT_MS
        if ms is None:
            return RunControl()
        return RunControl(timeout=ms / 1000, timeout_label=f"the call's timeout ({ms} ms)")


class Newest:
    """The newest line a call's run printed (for its progress messages), as output comes: the
    line being written, else the last one ended (a `\\r` ends a line too, as a progress bar redraws
    it). Only the first MESSAGE_CHARS characters of a line are kept."""

    def __init__(self) -> None:
        self._current = ""  # the line being written
        self._last = ""  # the last line ended that held more than blanks
        self._lock = threading.Lock()

    def printed(self, text: str) -> None:
        *ended, rest = re.split(r"[\r\n]", text)
        with self._lock:
            for part in ended:
                line = (self._current + part)[:MESSAGE_CHARS + 1]
                if line.strip():
                    self._last = line
                self._current = ""
            self._current = (self._current + rest)[:MESSAGE_CHARS + 1]

    def message(self) -> str | None:
        with self._lock:
            line = self._current if self._current.strip() else self._last
        if not line.strip():
            return None
        line = printable(line.strip())
        return line if len(line) <= MESSAGE_CHARS else line[:MESSAGE_CHARS - 3] + "..."


def progress_token(ctx: Any, params: Any) -> Any:
    """The progress token the client sent with the call; None when it sent none."""
    meta = getattr(params, "meta", None) or getattr(ctx, "meta", None)
    if isinstance(meta, Mapping):
        token = meta.get("progress_token", meta.get("progressToken"))
    else:
        token = getattr(meta, "progress_token", None) or getattr(meta, "progressToken", None)
    return None if isinstance(token, bool) else token


async def send_progress(send: Callable[[float, str | None], Awaitable[None]], newest: Newest,
                        count: Callable[[], int]) -> None:
    """`send(progress, message)` at FIRST_PROGRESS seconds, then every PROGRESS_EVERY seconds
    (from the start, so the gaps do not grow), until cancelled."""
    start = anyio.current_time()
    for beat in range(1_000_000):
        at = start + FIRST_PROGRESS + beat * PROGRESS_EVERY
        await anyio.sleep(max(0.0, at - anyio.current_time()))
        try:
            await send(float(count()), newest.message())
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return  # the client is gone: its cancel (or the end of the session) ends the call


async def watched(work: Callable[[], Any], stop: Callable[[str], Any], *,
                  progress: Callable[[], Awaitable[None]] | None = None,
                  on_cancelled: Callable[[Any], Awaitable[None]] | None = None) -> Any:
    """`work()` on a worker thread, `progress()` beside it. Cancelled (the client's
    `notifications/cancelled`, or the client gone), `stop("cancelled by the client")` ends the
    run; the handler then waits for it to end (it ends within a second: Bashkit's cancel, the
    calls in flight cancelled), hands `on_cancelled` what it returned, and is cancelled."""
    finished = threading.Event()
    returned: list[Any] = []

    def body() -> Any:
        try:
            returned.append(work())
            return returned[0]
        finally:
            finished.set()

    async with anyio.create_task_group() as tasks:
        if progress is not None:
            tasks.start_soon(progress)
        try:
            return await anyio.to_thread.run_sync(body, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            stop("cancelled by the client")
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(finished.wait, CANCEL_WAIT)
                if returned and on_cancelled is not None:
                    with anyio.move_on_after(CANCEL_WAIT):
                        await on_cancelled(returned[0])
            raise
        finally:
            tasks.cancel_scope.cancel()
