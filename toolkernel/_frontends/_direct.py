"""Direct calls from Python and from the `%tools` line: results as Python values.

The same `ToolsCommand.call` as a `tools` line in a script, so the same
checks (schema, hooks, policy, approvals) and the same error classes.

A call is made on one worker thread with its own event loop (the kernel's main
thread has a running loop of its own, so it cannot wait on one). A tool bound to
nothing on toolkernel's private loop runs there in place, as in a script: one
thread hand-off per call, where the private loop would add a second one for a
plain function (it runs those in a worker thread so as never to block MCP
sessions). MCP tools, command tools and help, which need the private loop, go
on to it from there.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from typing import Any, Callable

from .. import _loop
from .._command._cli import parse_input, split_command
from .._command._command import ToolsCommand
from .._approval._approver import Approver, StdinApprover, asking, stop_and_report
from .._session import Session
from .._runners._shell import ScriptEvents, answering


async def _call(session: Session, argv: list[str], base: dict[str, Any] | None,
                on_image: Callable[[Any], None], approver: Approver = stop_and_report) -> Any:
    command = await session.prepare(approver=approver)
    catalog = command.catalog
    parsed = split_command(argv, catalog.is_server, catalog.split_qualified)
    here = parsed.action == "call" and not catalog.runs_on_private_loop(parsed.server, parsed.tool)
    finish = _finish(session, command, parsed, base, on_image)
    return await (finish if here else _loop.on_private(finish))


async def _finish(session: Session, command: ToolsCommand, parsed, base: dict[str, Any] | None,
                  on_image: Callable[[Any], None]) -> Any:
    if parsed.action != "call":
        return _Text((await command.run_command(parsed, None)).stdout)
    tool = await command.catalog.find_tool(parsed.server, parsed.tool)
    called = await command.call(tool, {**(base or {}), **parse_input(parsed.args, tool.input_schema, None)})
    for path in called.images:
        on_image(session.workdir / path)
    if called.failure is not None:
        raise called.failure
    return called.result.value()


class _Text(str):
    """Help text: printed by the line magic, not returned as a value."""


def call_argv(session: Session, argv: list[str], base: dict[str, Any] | None = None,
              on_image: Callable[[Any], None] = lambda path: None,
              ask: Callable[[str], str] | None = None) -> Any:
    """One call; with `ask` (such as `input`), a call that needs a person asks here,
    as a script's call does, instead of stopping for `%tools approve`."""
    if _loop.on_private_loop():
        raise RuntimeError("toolkernel.call() called from its own event loop thread")
    if threading.current_thread() is _worker_thread():
        return _loop.run(_call(session, argv, base, on_image))  # a call made by a direct call's hook
    if ask is None:
        call = _DirectCall(_call(session, argv, base, on_image))
        return call.wait(lambda: _loop.wait(call.future))
    events = ScriptEvents()
    approver = StdinApprover(lambda prompt, request: events.on_pump_thread(asking, ask, prompt, request),
                             lambda line: events.on_pump_thread(print, line))
    call = _DirectCall(_call(session, argv, base, on_image, approver))
    return call.wait(lambda: answering(call.future, events))


class _DirectCall:
    """One call running on the worker thread's loop; an interrupt of the waiting thread cancels it."""

    def __init__(self, coro) -> None:
        self._task: queue.SimpleQueue = queue.SimpleQueue()
        self.future = _executor().submit(self._run, coro)

    def _run(self, coro) -> Any:
        task = _loop.local_task(coro)
        self._task.put(task)
        return _loop.run_here(task)

    def wait(self, waiting: Callable[[], Any]) -> Any:
        try:
            return waiting()
        except BaseException:
            if not self.future.done() and not self.future.cancel():  # started: cancel it on its loop
                _loop.cancel(self._task.get())
            raise


_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_thread: list[threading.Thread] = []


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(1, "toolkernel-direct", initializer=_note_thread)
        return _pool


def _note_thread() -> None:
    _thread.append(threading.current_thread())


def _worker_thread() -> threading.Thread | None:
    return _thread[0] if _thread else None


def is_help_text(value: Any) -> bool:
    return isinstance(value, _Text)
