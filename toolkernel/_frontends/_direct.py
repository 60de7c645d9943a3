"""Direct calls from Python and from the `%tools` line: results as Python values.

The same `ToolsCommand.call` as a `tools` line in a script, so the same
checks (schema, hooks, policy, approvals) and the same error classes.

A call runs on the calling thread, as a script's call does on the script's
thread: no thread hand-off for a tool bound to nothing on the private loop. A
plain sync own tool, with no hook registered, is called from sync code with no
event loop (`ToolsCommand.call_now`, the dispatcher's same checks), as a
script calls it; what waits (a person asked, an async tool, a hook) runs on the
thread's own event loop. In a kernel the cell's thread has the kernel's loop
running, but that loop is blocked in the cell's frame while the call runs, so it
is set aside for the call (`_loop.run_in_place`); a kernel interrupt lands on
this thread and cancels the call. MCP tools, notebook tools and help, which need the private
loop, go on to it from there, and a question one of them asks comes back to this
thread (where `input()` works). A call made while this thread's loop already
runs (a tool or hook of a call making a call of its own) runs on one worker
thread with a loop of its own, or on the private loop when that thread is busy.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from typing import Any, Callable, Coroutine

from .. import _loop
from .._command._cli import Command, parse_input, split_command
from .._command._command import Called, ToolsCommand
from .._errors import CallError, NeedsApproval
from .._names import fold
from .._tool import Tool
from .._approval._approver import Approver, StdinApprover, asking, stop_and_report
from .._session import Session
from .._runners._shell import ScriptEvents, answering
from .._runners._hostbash._cell import in_agent_cell
from . import _jq


async def _call(session: Session, argv: list[str], base: dict[str, Any] | None,
                on_image: Callable[[Any], None], approver: Approver = stop_and_report) -> Any:
    command = await session.prepare(approver=approver, one_call=True, agent=in_agent_cell())
    catalog = command.catalog
    try:
        parsed = split_command(argv, catalog.is_server, catalog.split_qualified)
        return await _finishing(session, command, parsed, base, on_image)
    except CallError as exc:
        raise command.noted(exc) from None


def _finishing(session: Session, command: ToolsCommand, parsed: Command, base: dict[str, Any] | None,
               on_image: Callable[[Any], None]) -> Coroutine[Any, Any, Any]:
    """`_finish` where it runs: here, or on the private loop for what needs it (MCP, notebook, help)."""
    finish = _finish(session, command, parsed, base, on_image)
    here = parsed.action == "call" and not command.catalog.runs_on_private_loop(parsed.server, parsed.tool)
    return finish if here else _loop.on_private(finish)


async def _finish(session: Session, command: ToolsCommand, parsed: Command, base: dict[str, Any] | None,
                  on_image: Callable[[Any], None]) -> Any:
    if parsed.action != "call":
        return _Text((await command.run_command(parsed, None)).stdout)
    tool = await command.catalog.find_tool(parsed.server, parsed.tool)
    return _value(session, await command.call(tool, _arguments(tool, parsed, base)), on_image)


def _arguments(tool: Tool, parsed: Command, base: dict[str, Any] | None) -> dict[str, Any]:
    return {**(base or {}), **parse_input(parsed.args, tool.input_schema, None)}


def _value(session: Session, called: Called, on_image: Callable[[Any], None]) -> Any:
    for path in called.images:
        on_image(session.workdir / path)
    if called.failure is not None:
        raise called.failure
    return called.result.value()


def _with_advice(failure: NeedsApproval) -> NeedsApproval:
    """A call that waits for a person in this kernel: how to answer, in words a cell can follow
    (one published for `toolkernel approve` says so itself)."""
    if not failure.message.endswith("; the call was not made"):
        return failure  # not one the dispatcher left to the front end to explain
    return NeedsApproval(f"{failure.message}. Answer with `%tools approve` (or --always) or"
                         " `toolkernel.approve()`, then make the call again", **failure.details)


class _Text(str):
    """Help text: printed by the line magic, not returned as a value."""


def call_argv(session: Session, argv: list[str], base: dict[str, Any] | None = None,
              on_image: Callable[[Any], None] = lambda path: None,
              ask: Callable[[str], str] | None = None, jq: Any = None) -> Any:
    """One call; with `ask` (such as `input`), a call that needs a person asks here,
    as a script's call does, instead of stopping for `%tools approve`. `jq`, a program of
    `_jq.compiled`, shapes the result (help text is left as it is)."""
    try:
        value = _call_argv(session, argv, base, on_image, ask)
    except NeedsApproval as exc:
        raise _with_advice(exc) from None
    return value if jq is None or is_help_text(value) else _jq.outputs(jq, value)


def _call_argv(session: Session, argv: list[str], base: dict[str, Any] | None,
               on_image: Callable[[Any], None], ask: Callable[[str], str] | None) -> Any:
    if _loop.on_private_loop():
        raise RuntimeError("toolkernel.call() called from its own event loop thread")
    if _loop.free_here():
        return _call_here(session, argv, base, on_image, ask)
    events = ScriptEvents()
    approver = stop_and_report if ask is None else StdinApprover(
        lambda prompt, request: events.on_pump_thread(asking, ask, prompt, request),
        lambda line: events.on_pump_thread(print, line))
    call = _DirectCall(_call(session, argv, base, on_image, approver))
    waiting = (lambda: _loop.wait(call.future)) if ask is None else (lambda: answering(call.future, events))
    try:
        return waiting()
    except BaseException:
        call.cancel()
        raise


def _call_here(session: Session, argv: list[str], base: dict[str, Any] | None,
               on_image: Callable[[Any], None], ask: Callable[[str], str] | None) -> Any:
    """The call on this thread. A plain sync own tool, with no hook registered, is called from
    sync code as a script calls it (`ToolsCommand.call_now`: the dispatcher's same checks), and
    only what waits (a person asked, an async tool) runs on this thread's own loop
    (`_loop.run_in_place`); anything else runs there whole. A question asked on the private
    loop (an MCP tool's call) comes back to this thread, where `input()` works and interrupts land."""
    command = session.prepare_now(stop_and_report if ask is None else _asking_here(ask), agent=in_agent_cell())
    catalog = command.catalog
    try:
        parsed = split_command(argv, catalog.is_server, catalog.split_qualified)
        tool = _callable_now(command, parsed)
        if tool is None:
            return _loop.run_in_place(_finishing(session, command, parsed, base, on_image))
    except CallError as exc:
        raise command.noted(exc) from None
    return _value(session, command.call_now(tool, _arguments(tool, parsed, base), _loop.run_in_place), on_image)


def _asking_here(ask: Callable[[str], str]) -> StdinApprover:
    """Who answers a call that needs a person: `ask` on this thread, also when the question
    comes from the private loop (an MCP tool's call)."""
    here = _loop.own_loop()
    return StdinApprover(lambda prompt, request: _on_thread_of(here, asking, ask, prompt, request),
                         lambda line: _on_thread_of(here, print, line))


def _callable_now(command: ToolsCommand, parsed: Command) -> Tool | None:
    """The own tool `parsed` calls, if `call_now` may call it: bound to nothing on the private
    loop, and no hook registered (hooks may wait)."""
    if parsed.action != "call" or parsed.server is not None:
        return None
    tool = command.catalog.own.get(fold(parsed.tool))
    if tool is None or tool.runs_on_private_loop or not command.dispatcher.can_call_now():
        return None
    return tool


def _on_thread_of(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
    """`fn(*args)` on the thread that runs `loop`: now when this is it, else as its next callback."""
    future: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except Exception as exc:  # noqa: BLE001 - EOFError and the like are the asker's to read
            future.set_exception(exc)

    if asyncio.get_running_loop() is loop:  # asked from a coroutine: some loop runs here
        run()
    else:
        loop.call_soon_threadsafe(run)
    return future


class _DirectCall:
    """One call made while the calling thread's loop runs: on the direct calls' thread, or,
    when that thread is busy (its call makes a call of its own), on the private loop."""

    def __init__(self, coro) -> None:
        self._task: queue.SimpleQueue = queue.SimpleQueue()
        future = _worker().submit_if_idle(lambda: self._run(coro))
        self.on_worker = future is not None
        self.future = future if future is not None else _loop.submit(coro)

    def _run(self, coro) -> Any:
        task = _loop.local_task(coro)
        self._task.put(task)
        return _loop.run_here(task)

    def cancel(self) -> None:
        if self.future.done() or self.future.cancel():
            return
        if self.on_worker:  # started: cancel the task on the worker's loop
            _loop.cancel(self._task.get())


class _Worker:
    """The thread direct calls run on, one at a time. A daemon, as the private loop's is:
    a call that never ends must not hold the kernel at exit."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._busy = False
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._serve, name="toolkernel-direct", daemon=True)
        self.thread.start()

    def submit_if_idle(self, fn: Callable[[], Any]) -> concurrent.futures.Future | None:
        with self._lock:
            if self._busy or threading.current_thread() is self.thread:
                return None
            self._busy = True
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((fn, future))
        return future

    def _serve(self) -> None:
        while True:
            fn, future = self._jobs.get()
            result, error = None, None
            if future.set_running_or_notify_cancel():
                try:
                    result = fn()
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                    error = exc
            with self._lock:
                self._busy = False  # before the result: the caller's next call finds the thread free
            if error is not None:
                future.set_exception(error)
            elif not future.cancelled():
                future.set_result(result)


_lock = threading.Lock()
_started: list[_Worker] = []


def _worker() -> _Worker:
    with _lock:
        if not _started:
            _started.append(_Worker())
        return _started[0]


def is_help_text(value: Any) -> bool:
    return isinstance(value, _Text)
