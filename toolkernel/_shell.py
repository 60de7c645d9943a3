"""Running one script in Bashkit: streaming its output, interrupting it.

The script runs on a thread of its own. The calling thread — the kernel's
main thread in a notebook — only pumps output events to a sink, so a kernel
interrupt (KeyboardInterrupt) lands here and cancels the run.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from . import _loop
from ._builtin import INTERRUPTED_EXIT, ToolsCommand
from ._guard import STATE_DIR
from ._outputs import OutputLimiter

MAX_COMMANDS = 1_000_000  # Bashkit's default (10,000) ends ordinary loops over data
# Bashkit's default (30 s) cut every longer script, swallowing the error line of a
# tool that was still waiting (a server starting, a slow call with its own timeout).
# A person stops a cell with an interrupt; this only bounds a run nobody watches.
MAX_SECONDS = 24 * 3600
_STOP_GRACE = 0.5


class Sink(Protocol):
    def stdout(self, text: str) -> None: ...
    def stderr(self, text: str) -> None: ...
    def image(self, path: Path) -> None: ...
    def progress(self, tool: str, progress: float, total: float | None, message: str | None) -> None: ...


@dataclass
class ShellResult:
    exit_code: int
    stdout: str
    stderr: str
    interrupted: bool = False
    report: dict[str, Any] | None = None
    images: list[Path] = field(default_factory=list)
    saved_output: Path | None = None


def new_bash(command: ToolsCommand, workdir: Path, *, read_only: bool = False):
    from bashkit import Bash, FileSystem

    bash = Bash(custom_builtins={"tools": command}, cwd=str(workdir), max_commands=MAX_COMMANDS,
                timeout_seconds=MAX_SECONDS)
    # Mounted at run time rather than through `mounts=`: the constructor prints a warning
    # for every writable mount to the process's stderr, which a kernel shows in the cell.
    bash.mount(str(workdir), FileSystem.real(str(workdir), writable=not read_only))
    state = workdir / STATE_DIR
    if state.is_dir():  # approvals live here: a script must not write them (see _guard.py)
        bash.mount(str(state), FileSystem.real(str(state), writable=False))
    return bash


def execute(bash, command: ToolsCommand, script: str, sink: Sink, workdir: Path) -> ShellResult:
    """Run `script` to the end (or to an interrupt) and stream what it prints."""
    # SimpleQueue waits in C: an interrupt landing in `queue.Queue.get` can leave its
    # Python lock held (the `with`-statement race of CPython), hanging the kernel for good.
    events: queue.SimpleQueue = queue.SimpleQueue()
    command.on_image = lambda path: events.put(("image", path))
    command.run.on_progress = lambda *args: events.put(("progress", args))
    command.run.on_stop = bash.cancel
    command.on_stop_stderr = lambda text: events.put(("output", ("", text)))
    future = _start(bash, script, lambda out, err: events.put(("output", (out, err))))
    # Wakes the pump at once when the script ends, instead of at its next poll (up to 50 ms a run).
    future.add_done_callback(lambda _: events.put(("done", None)))
    pump = _Pump(sink, workdir)
    interrupted = False
    try:
        pump.until_done(events, future)
    except KeyboardInterrupt:
        interrupted = True
        command.interrupt()
        bash.cancel()
        # A builtin such as `sleep` only sees the cancel when it ends: past the grace
        # the run is left to finish on its own thread, and the cell returns now.
        pump.drain(events, deadline=time.monotonic() + _STOP_GRACE, future=future)
    return pump.finish(future, interrupted)


def _start(bash, script: str, on_output) -> concurrent.futures.Future:
    """Run the script on a thread of its own.

    Bashkit's synchronous `execute_sync` calls the `tools` builtin about three
    times faster than its async `execute` does, and the kernel's main thread
    stays free to pump output and take interrupts.
    """
    future: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(bash.execute_sync(script, on_output=on_output))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            future.set_exception(exc)
        finally:
            _loop.close_here()  # the `tools` calls of this run used this thread's loop

    threading.Thread(target=run, name="toolkernel-script", daemon=True).start()
    return future


class _Pump:
    def __init__(self, sink: Sink, workdir: Path) -> None:
        self.sink = sink
        self.limiter = OutputLimiter(workdir, sink.stdout)
        self.stderr: list[str] = []
        self.images: list[Path] = []

    def until_done(self, events: queue.SimpleQueue, future) -> None:
        while not (future.done() and events.empty()):
            self._next(events, timeout=0.05)

    def drain(self, events: queue.SimpleQueue, deadline: float, future) -> None:
        while time.monotonic() < deadline and not (future.done() and events.empty()):
            self._next(events, timeout=0.05)

    def _next(self, events: queue.SimpleQueue, timeout: float) -> None:
        try:
            kind, payload = events.get(timeout=timeout)
        except queue.Empty:
            return
        if kind == "output":
            out, err = payload
            if out:
                self.limiter.write(out)
            if err:
                self.stderr.append(err)
                self.sink.stderr(err)
        elif kind == "image":
            self.images.append(payload)
            self.sink.image(payload)
        elif kind == "progress":
            self.sink.progress(*payload)

    def finish(self, future, interrupted: bool) -> ShellResult:
        saved = self.limiter.close()
        exit_code = INTERRUPTED_EXIT if interrupted else _exit_code(future)
        stderr = "".join(self.stderr)
        if not interrupted and future.done() and not future.cancelled() and future.exception() is None:
            message = _limit_message(future.result())
            if message:
                self.sink.stderr(message)
                stderr += message
        return ShellResult(exit_code, self.limiter.text(), stderr, interrupted,
                           images=self.images, saved_output=saved)


def _exit_code(future) -> int:
    if future.cancelled() or future.exception() is not None:
        return 1
    return future.result().exit_code


def _limit_message(result) -> str:
    # Bashkit reports its own limits (timeout, command count) in `error`, not through on_output.
    error = getattr(result, "error", None)
    if error and "cancelled" not in str(error):
        return f"bashkit: {error}\n"
    return ""
