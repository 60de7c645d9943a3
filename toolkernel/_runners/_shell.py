"""Running one script: the runner seam, streaming its output, interrupting it.

A `ScriptRunner` (Bashkit today; host bash later) runs the script on a
thread of its own and calls the `tools` command for each `tools` line. The
calling thread (the kernel's main thread in a notebook) only pumps the run's
events to a sink and answers questions put to the person, so a kernel
interrupt (KeyboardInterrupt) lands here and cancels the run.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import ctypes
import math
import os
import queue
import threading
import time
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from .. import _loop
from .._command._command import INTERRUPTED_EXIT
from .._config._limits import limit_notice
from ._outputs import OutputLimiter
from ._shadows import Moved, moved_notice

if TYPE_CHECKING:
    from .._command._command import ToolsCommand
    from .._approval._run import RunEvents, RunReport

_STOP_GRACE = 0.5
# After the run's timeout: longer than after an interrupt, as Bashkit, ending the script at the
# same moment, still hands on its last output and its own word on the limit.
_OVERDUE_GRACE = 5.0
_GIVE_BACK_ABOVE = 1 << 20  # output characters


class Sink(Protocol):
    def stdout(self, text: str) -> None: ...
    def stderr(self, text: str) -> None: ...
    def image(self, path: Path) -> None: ...
    def progress(self, tool: str, progress: float, total: float | None, message: str | None) -> None: ...


@dataclass
class ShellResult:
    exit_code: int
    held_stdout: str  # the output, when it was small enough to hold (see `stdout`)
    stderr: str
    interrupted: bool = False
    run_report: RunReport | None = None
    images: list[Path] = field(default_factory=list)
    saved_output: Path | None = None
    # The runner cut the script's output at a hard cap: what was saved is not all of it.
    output_cut: bool = False
    # A person at the prompt denied a call before the start and was told "denied; nothing ran":
    # that line is all a cell shows (no error line; the report is kept for callers, not shown).
    denied_by_person: bool = False
    # A large output is not held: it is read back from its saved file when asked for.
    stdout_file: Path | None = None
    # {"run": ID, "files": N}: the run's entry in the journal of changes, where it changed files.
    changes: Mapping[str, Any] | None = None

    @property
    def stdout(self) -> str:
        """All the script printed."""
        if self.stdout_file is not None:
            return self.stdout_file.read_text(encoding="utf-8", errors="replace")
        return self.held_stdout

    @property
    def report(self) -> dict[str, Any] | None:
        """The stop report as the seed's JSON (None when the run needs none)."""
        return None if self.run_report is None else self.run_report.to_json()


class ScriptRunner(Protocol):
    """Runs a script whose `tools` lines go to `command.handle_sync`. A runner may say
    `sandboxed = True` (Bashkit's): what its scripts leave at the workspace's top in place of
    an installed Python module is then moved aside when the run ends (`_Shadows`)."""

    def literal_calls(self, script: str) -> list[list[str]]:
        """The `tools` argvs written out in full, for the before-start check ([] if unknown)."""

    def run(self, script: str, command: ToolsCommand, events: RunEvents) -> ShellResult:
        """Run to the end, on the calling (script) thread. Output goes to `events.output`;
        when a call stops the run (`Outcome.stops_script`) the script ends there. The
        result's `exit_code` counts, and its `stderr` is what did not reach `events` yet."""

    def cancel(self) -> None:
        """End the script at its next command; any thread, any time."""


class ScriptEvents:
    """`RunEvents` through a queue the calling thread pumps: output, images, progress,
    and functions that must run there (asking a person at `input()`)."""

    def __init__(self) -> None:
        # SimpleQueue waits in C: an interrupt landing in `queue.Queue.get` can leave its
        # Python lock held (the `with`-statement race of CPython), hanging the kernel for good.
        self.queue: queue.SimpleQueue = queue.SimpleQueue()

    def output(self, stdout: str, stderr: str) -> None:
        self.queue.put(("output", (stdout, stderr)))

    def image(self, path: Path) -> None:
        self.queue.put(("image", path))

    def progress(self, tool: str, progress: float, total: float | None, message: str | None) -> None:
        self.queue.put(("progress", (tool, progress, total, message)))

    def stopped(self, stderr: str) -> None:
        self.output("", stderr)

    def on_pump_thread(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """Run `fn(*args)` on the thread that pumps (where `input()` and interrupts work)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.queue.put(("call", (fn, args, future)))
        return future


class RunControl:
    """A run as other threads hold it (`serve`: a client's cancel, its time limit, `kill_shell`).

    `stop(reason)` ends the run as an interrupt does: the script is cancelled, and so is
    each call in flight (an MCP call is cancelled downstream, a command tool's process
    group killed, a notebook cell's kernel interrupted); the reason is what the cancelled
    line and the run's report say. `timeout` (seconds) ends it so when it is lower than the
    runner's own limit, `timeout_label` naming it. From the start on, `calls()` counts the
    calls made so far; `done` is set once the run is over."""

    def __init__(self, *, timeout: float | None = None, timeout_label: str = "") -> None:
        self.timeout = timeout
        self.timeout_label = timeout_label
        self.reason: str | None = None  # why it was stopped from outside; None while not
        self.timed_out: str | None = None  # which limit ended it ("timeout" label or "[shell] timeout")
        self.done = threading.Event()
        self._queue: queue.SimpleQueue | None = None
        self._command: ToolsCommand | None = None
        self._lock = threading.Lock()

    def stop(self, reason: str) -> bool:
        """Stop the run (any thread, also before it started); False when it was over or stopped already."""
        with self._lock:
            if self.reason is not None or self.done.is_set():
                return False
            self.reason = reason
            waiting = self._queue
        if waiting is not None:
            waiting.put(("stop", reason))
        return True

    def calls(self) -> int:
        command = self._command
        return 0 if command is None else command.run.calls

    def _attach(self, waiting: queue.SimpleQueue, command: ToolsCommand) -> str | None:
        """The run's pump listens from now on; the reason it was stopped before, if it was."""
        with self._lock:
            self._queue, self._command = waiting, command
            return self.reason


class _StopRequested(Exception):
    """The pump took a `RunControl.stop`: the run ends as after an interrupt."""


def execute(runner: ScriptRunner, command: ToolsCommand, script: str, events: ScriptEvents, sink: Sink,
            *, before_start: Callable[[], bool] = lambda: True, control: RunControl | None = None) -> ShellResult:
    """Run `script` to the end (or to an interrupt, or `control.stop`) and stream what it prints.

    `before_start()` runs first on the script's thread (it may ask the person);
    False means the script does not start.
    """
    control = control or RunControl()
    future: concurrent.futures.Future = concurrent.futures.Future()
    # Wakes the pump at once when the script ends, instead of at its next poll (up to 50 ms a run).
    future.add_done_callback(lambda _: events.queue.put(("done", None)))
    pump = _Pump(sink, command.workdir)
    interrupted = False
    overdue = _Overdue(command, runner, control)
    shadows = _Shadows(command, runner)
    if (stopped_before := control._attach(events.queue, command)) is not None:
        stop_run(command, runner, stopped_before)  # a cancel before the start: nothing starts

    def body() -> ShellResult | None:
        if not before_start() or command.interrupted:
            return None
        overdue.start()  # a person answering the question before the start is not the run's time
        recorded = workspace_before(runner, command, script)
        try:
            return shadows.around(lambda: runner.run(script, command, events))
        finally:
            if recorded is not None:
                recorded()  # what the script's own commands changed
            command.run.end()  # on the script's thread: after all the run did, also past an interrupt
            said = command.run.journal.said() if command.run.journal is not None else []
            if said:  # what cannot be put back, and runs dropped for this one: never in silence
                events.output("", "".join(said))

    try:
        # Started inside the `try`: an interrupt can land while this thread still waits in
        # `Thread.start`, when the script may be running already.
        _start(body, future)
        pump.until_done(events.queue, future, overdue)
    except (KeyboardInterrupt, _StopRequested) as exc:
        interrupted = True
        try:
            stop_run(command, runner, control.reason if isinstance(exc, _StopRequested) else "interrupted")
        finally:
            pump.let_go()  # the question the interrupt landed in ends only once the script is stopped
        # A builtin such as `sleep` under `execute_sync` only sees the cancel when it ends: past
        # the grace the run is left to finish on its own thread, and the cell returns now.
        pump.drain(events.queue, deadline=time.monotonic() + _STOP_GRACE, future=future)
    finally:
        future.add_done_callback(lambda _: control.done.set())  # the run is over, on its thread too
    result = shadows.said(overdue.said(pump.finish(future, interrupted), sink), sink, future)
    if pump.limiter.size >= _GIVE_BACK_ABOVE and future.done():
        give_back_memory()
    return result


def workspace_before(runner: ScriptRunner, command: ToolsCommand, script: str | None) -> Callable[[], None] | None:
    """The journal told a run that may write the workspace through its own commands is about to
    start: what to call once its writers are done (None: nothing records)."""
    journal = command.run.journal
    if journal is None or getattr(runner, "read_only", False):
        return None
    return journal.before_shell(script, _own_notebook(os.path.realpath(command.workdir)),
                                builtins_only=getattr(runner, "builtins_only", False))


def _own_notebook(workdir: str) -> frozenset[str]:
    """The notebook a Jupyter Server started this kernel for (`JPY_SESSION_NAME`), relative to the
    workspace: the server saves it while the cell runs (outputs, counts), so its changes are not
    the run's, and a rewind must not write it behind the server's back. Nor is the file it writes
    first and renames over it (Jupyter Server's atomic save: `.~` and the notebook's name)."""
    named = os.environ.get("JPY_SESSION_NAME")
    if not named:
        return frozenset()
    path = named if os.path.isabs(named) else os.path.join(os.getcwd(), os.path.basename(named))
    relative = os.path.relpath(os.path.realpath(path), workdir)
    if relative.startswith(".."):
        return frozenset()
    folder, name = os.path.split(relative)
    return frozenset({relative, os.path.join(folder, ".~" + name)})


def stop_run(command: ToolsCommand, runner: ScriptRunner, reason: str = "interrupted") -> None:
    """End the run from another thread: the script is cancelled before the call in flight is let
    go, or the script's thread ran on past it (an `echo after`, a whole turn of a loop) until the
    cancel landed; and again after, for a runner that made its shell in between (it cancels a
    shell made after `command.interrupt` itself)."""
    runner.cancel()
    command.interrupt(reason)
    runner.cancel()


class _Overdue:
    """The run's timeout ([shell] timeout in Bashkit, or a lower one `RunControl` gives), kept
    while a tool call runs: Bashkit's own only ends a script between commands, so a call still
    running when the time is up is cancelled here (and the script with it), and the run fails
    saying which limit ended it."""

    def __init__(self, command: ToolsCommand, runner: ScriptRunner, control: RunControl) -> None:
        self.command, self.runner, self.control = command, runner, control
        # Host bash keeps its own `--timeout`; a runner with a run timeout names it.
        limit = getattr(runner, "run_timeout", None)
        self.seconds = math.inf if limit is None else limit(command)
        self.label = f"the [shell] timeout ({self.seconds:g} s)"
        self.shell = True  # the [shell] table's own limit (not a caller's lower one)
        if control.timeout is not None and control.timeout < self.seconds:
            self.seconds, self.label, self.shell = control.timeout, control.timeout_label, False
        self.fired = False
        self._started: float | None = None  # when the runner started (the pump's thread reads it)

    def start(self) -> None:
        self._started = time.monotonic()

    def deadline(self) -> float:
        """When the run's time is up: never before its runner started."""
        started = self._started
        return math.inf if started is None else started + self.seconds

    def __call__(self) -> None:
        self.fired = True
        self.control.timed_out = self.label
        stop_run(self.command, self.runner, f"ended by {self.label}")

    def said(self, result: ShellResult, sink: Sink) -> ShellResult:
        if not self.fired or "timeout" in result.stderr:
            return result
        if self.shell:
            notice = limit_notice(f"execution timeout ({self.seconds}s)")
        else:
            notice = f"toolkernel: the script was ended by {self.label}.\n"
        sink.stderr(notice)
        return dataclasses.replace(result, exit_code=result.exit_code or 1, stderr=result.stderr + notice)


class _Shadows:
    """Modules a sandboxed run leaves at the workspace's top in place of installed ones
    (_shadows.py): the top is noted right before the runner starts, and what shadows is moved
    aside on the script's thread as the run really ends, whichever way, so that a run left to
    end on its thread after an interrupt is looked at too. The cell's last lines say what moved.
    Host bash has no sandbox by design: only a runner that says `sandboxed` is watched."""

    def __init__(self, command: ToolsCommand, runner: ScriptRunner) -> None:
        self.watch = None
        if getattr(runner, "sandboxed", False):
            from ._sandbox_plan import run_watch

            self.watch = run_watch(command.workdir, command.dispatcher.env.protection(), runner.cancel,
                                   journal=lambda: command.run.journal)
        self.run = command.run
        self._moved: list[Moved] = []
        self._late: Sink | None = None  # where moves made after the cell returned are said
        self._lock = threading.Lock()

    def around(self, run: Callable[[], ShellResult]) -> ShellResult:
        """`run()` between the two looks, on the script's thread."""
        if self.watch is None:
            return run()
        try:
            self.watch.start()
        except OSError as exc:
            return ShellResult(1, "", f"toolkernel: the workspace's top cannot be listed ({exc}), so what a"
                               " script leaves there could not be checked: scripts do not run until it can\n")
        self.run.guard = self.watch  # each call first moves aside what the script made to run
        try:
            return run()
        finally:
            self._note(self.watch.end())

    def _note(self, moved: list[Moved]) -> None:
        with self._lock:
            late = self._late
            if late is None:
                self._moved += moved
        if late is not None and moved:
            try:
                late.stderr(moved_notice(moved))  # the cell is over: said where its sink still leads
            except Exception:  # noqa: BLE001 - the move is what protects; the word is a courtesy
                pass

    def said(self, result: ShellResult, sink: Sink, future: concurrent.futures.Future) -> ShellResult:
        """`result` with what was moved said last, and failing."""
        if self.watch is None:
            return result
        if not future.done():  # the run goes on: look now, and again when it ends
            self._note(self.watch.end(last=False))
        with self._lock:
            moved, self._moved, self._late = self._moved, [], sink
        if not moved:
            return result
        lines = moved_notice(moved)
        sink.stderr(lines)
        return dataclasses.replace(result, exit_code=result.exit_code or 1, stderr=result.stderr + lines)


def give_back_memory() -> None:
    """Hand memory freed after a large output back to the system. The shell's buffers and the
    output's copies are freed when the run ends, but glibc keeps freed memory for reuse, so a
    kernel would stay at its peak size after the cell."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to ask
        pass


def answering(future: concurrent.futures.Future, events: ScriptEvents) -> Any:
    """Wait for `future` (work on the private loop) on this thread, running the
    questions it puts here (`input()` works only on the kernel's main thread)."""
    future.add_done_callback(lambda _: events.queue.put(("done", None)))
    try:
        while not (future.done() and events.queue.empty()):
            try:
                kind, payload = events.queue.get(timeout=0.05)
            except queue.Empty:
                continue
            if kind == "call":
                _call_into(*payload)
    except KeyboardInterrupt:
        _loop.cancel(future)
        raise
    return future.result()


def _start(body: Callable[[], ShellResult | None], future: concurrent.futures.Future) -> None:
    """Run the body on a thread of its own, its result or exception to `future`.

    The runner blocks it (Bashkit's `execute_sync`, or its own loop awaiting
    `execute`), and the kernel's main thread stays free to pump output and take
    interrupts.
    """
    def run() -> None:
        try:
            try:
                result = body()
            finally:
                # The `tools` calls of this run used this thread's loop: closed before the cell
                # returns (the thread is kept, and a waiter must find the run's loops closed).
                _loop.close_here()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            future.set_exception(exc)
        else:
            future.set_result(result)

    _ScriptThread.take().give(run)


def kept_here(name: str, make: Callable[[], Any]) -> Any:
    """What the script thread this runs on keeps for its next runs under `name` (made by
    `make()` once, closed when the thread ends); None on any other thread."""
    worker = _ScriptThread.current()
    if worker is None:
        return None
    kept = worker.kept.get(name)
    if kept is None:
        kept = worker.kept[name] = make()
    return kept


class _ScriptThread(threading.Thread):
    """A thread that runs scripts, one at a time, kept for the next run once one ends: starting
    a thread for each run cost a run about 0.1 ms, and what a thread keeps (`kept_here`: the
    shell's event loop) as much again. A run left to end on its own after an interrupt keeps
    its thread; the next run takes an idle one, or a new one. At most `IDLE` wait idle, each
    for `IDLE_SECONDS` at most; a thread that ends closes what it kept."""

    IDLE = 2
    IDLE_SECONDS = 600.0
    _idle: list["_ScriptThread"] = []
    _lock = threading.Lock()

    def __init__(self) -> None:
        super().__init__(name="toolkernel-script", daemon=True)
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.kept: dict[str, Any] = {}

    @classmethod
    def take(cls) -> "_ScriptThread":
        with cls._lock:
            if cls._idle:
                return cls._idle.pop()
        worker = cls()
        worker.start()
        return worker

    @classmethod
    def current(cls) -> "_ScriptThread | None":
        thread = threading.current_thread()
        return thread if isinstance(thread, cls) else None

    def give(self, work: Callable[[], None]) -> None:
        self.inbox.put(work)

    def run(self) -> None:
        try:
            while True:
                try:
                    work = self.inbox.get(timeout=self.IDLE_SECONDS)
                except queue.Empty:
                    with self._lock:
                        if self in self._idle:  # else taken just now: its work is on the way
                            self._idle.remove(self)
                            return
                    work = self.inbox.get()
                # A fresh context each run: a value one run set must not reach the next.
                contextvars.Context().run(work)
                with self._lock:
                    if len(self._idle) >= self.IDLE:
                        return
                    self._idle.append(self)
        finally:
            for kept in self.kept.values():
                with contextlib.suppress(Exception):
                    kept.close()


class _Pump:
    def __init__(self, sink: Sink, workdir: Path) -> None:
        self.sink = sink
        self.limiter = OutputLimiter(workdir, sink.stdout)
        self.stderr: list[str] = []
        self.images: list[Path] = []
        # Questions an interrupt landed in (`_call_into`), let go once the run is stopped.
        self.held: list[concurrent.futures.Future] = []

    def until_done(self, events: queue.SimpleQueue, future, overdue: "_Overdue") -> None:
        """Pump until the run ends; `overdue()` once if it is still running at its deadline, and
        then for `_OVERDUE_GRACE` at most: a tool of plain sync code that does not look at the
        cancel keeps the script's thread, and the run is left to end there, as after an interrupt."""
        grace_ends = math.inf
        while not (future.done() and events.empty()):
            self._next(events, timeout=0.05)
            now = time.monotonic()
            if now >= grace_ends:
                return
            if grace_ends == math.inf and now >= overdue.deadline():
                overdue()
                grace_ends = now + _OVERDUE_GRACE

    def drain(self, events: queue.SimpleQueue, deadline: float, future) -> None:
        while time.monotonic() < deadline and not (future.done() and events.empty()):
            self._next(events, timeout=0.05, stopping=True)

    def _next(self, events: queue.SimpleQueue, timeout: float, stopping: bool = False) -> None:
        try:
            kind, payload = events.get(timeout=timeout)
        except queue.Empty:
            return
        if kind == "stop":
            if not stopping:  # (stopping already: the run is ending)
                raise _StopRequested(payload)
        if kind == "output":
            self._output(*payload)
        elif kind == "image":
            self.images.append(payload)
            self.sink.image(payload)
        elif kind == "progress":
            self.sink.progress(*payload)
        elif kind == "call":
            _call_into(*payload, held=None if stopping else self.held)

    def let_go(self) -> None:
        """End each question an interrupt landed in: its call is cancelled (`stop_run` cancelled it already)."""
        for future in self.held:
            if not future.done():
                future.set_exception(concurrent.futures.CancelledError())
        self.held = []

    def _output(self, out: str, err: str) -> None:
        if out:
            self.limiter.write(out)
        if err:
            self.stderr.append(err)
            self.sink.stderr(err)

    def finish(self, future, interrupted: bool) -> ShellResult:
        ran = None if interrupted else _result(future)
        saved = self.limiter.close(cut=ran is not None and ran.output_cut)
        if ran is not None and ran.stderr:
            self._output("", ran.stderr)
        failure = None if interrupted else _failure(future)
        if failure is not None:
            self._output("", f"toolkernel: the shell failed: {failure}\n")
        exit_code = INTERRUPTED_EXIT if interrupted else (1 if ran is None else ran.exit_code)
        return ShellResult(exit_code, "" if saved else self.limiter.text(), "".join(self.stderr), interrupted,
                           images=self.images, saved_output=saved,
                           stdout_file=None if saved is None else self.limiter.workdir / saved)


def _call_into(fn: Callable[..., Any], args: tuple, future: concurrent.futures.Future,
               held: list[concurrent.futures.Future] | None = None) -> None:
    """`fn(*args)` (asking a person) here, its result or error to `future`. An interrupt during
    `input()` ends the question too, then the run; with `held`, the question is left there for
    the caller to end once it stopped the run (`_Pump.let_go`): a question ended first let the
    call answer "cancelled", and the script ran on past it (a host bash cell's `echo after`)
    before its process group was ended."""
    try:
        future.set_result(fn(*args))
    except BaseException as exc:
        if isinstance(exc, Exception):
            future.set_exception(exc)
            return
        if held is None:
            future.set_exception(concurrent.futures.CancelledError())
        else:
            held.append(future)
        raise


def _result(future) -> ShellResult | None:
    """What the runner returned; None when it failed, or the script did not start."""
    if not future.done() or future.cancelled() or future.exception() is not None:
        return None
    return future.result()


def _failure(future) -> str | None:
    """One line for an exception the runner raised (else the cell ended 1 with no word)."""
    if not future.done() or future.cancelled() or future.exception() is None:
        return None
    exc = future.exception()
    return f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
