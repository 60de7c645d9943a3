"""The `tools` builtin: argv and stdin in, stdout, stderr and an exit code out.

Bashkit calls it on the script's thread. A command that needs the MCP pool
or a paired kernel makes one trip to toolkernel's private loop; a call of
any other tool is handled on the script thread's own loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bashkit import BuiltinResult

from . import _help, _loop
from ._catalog import Catalog, norm
from ._cli import Command, parse_input, split_command
from ._dispatch import Dispatcher, Run
from ._errors import CallError, Stopped
from ._render import render

INTERRUPTED_EXIT = 130


@dataclass
class Outcome:
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    images: list[Path] = field(default_factory=list)


class ToolsCommand:
    """Handles every form of `tools` for one shell run (or one `%tools` line)."""

    def __init__(self, catalog: Catalog, dispatcher: Dispatcher, run: Run, workdir: Path) -> None:
        self.catalog = catalog
        self.dispatcher = dispatcher
        self.run = run
        self.workdir = workdir
        self.on_image: Callable[[Path], None] = lambda path: None
        # Bashkit drops a cancelled script's buffered output, so the error of the call
        # that stopped the script must reach the cell by this side door.
        self.on_stop_stderr: Callable[[str], None] = lambda text: None
        self._inflight: concurrent.futures.Future | asyncio.Task | None = None
        self.interrupted = False

    # -- the Bashkit callback (worker thread) -------------------------------

    def __call__(self, ctx) -> object:
        outcome = self.handle_sync(list(ctx.argv), ctx.stdin)
        return BuiltinResult(stdout=outcome.stdout, stderr=outcome.stderr, exit_code=outcome.exit_code)

    def handle_sync(self, argv: list[str], stdin: str | None) -> Outcome:
        if self.interrupted:
            return _failure(Stopped("not run: the script was interrupted"))
        try:
            command = split_command(argv, self.catalog.is_server, self.catalog.split_qualified)
        except CallError as exc:
            return _failure(exc)
        try:
            outcome = self._run(self.handle(argv, stdin, command), self._runs_here(command))
        except (concurrent.futures.CancelledError, asyncio.CancelledError):
            return _failure(Stopped("interrupted"), INTERRUPTED_EXIT)
        for path in outcome.images:
            self.on_image(path)
        if outcome.exit_code and self.run.stopped is not None:
            self.on_stop_stderr(outcome.stderr)
        return outcome

    def _runs_here(self, command: Command) -> bool:
        """A call of a tool bound to nothing on the private loop runs on this thread."""
        if command.action not in ("call", "tool_help") or command.server is not None:
            return False
        tool = self.catalog.own.get(norm(command.tool or ""))
        return tool is not None and not tool.loop_bound

    def _run(self, coro, here: bool) -> Outcome:
        # The hand-off to the private loop costs about 200 us on these machines;
        # running here costs about 15.
        if here:
            task = _loop.local_task(coro)
            self._inflight = task
            try:
                return _loop.run_here(task)
            finally:
                self._inflight = None
        self._inflight = future = _loop.submit(coro)
        try:
            return _loop.wait(future)
        finally:
            self._inflight = None

    def interrupt(self) -> None:
        """Called from the kernel's main thread on interrupt."""
        self.interrupted = True
        inflight = self._inflight
        if inflight is not None:
            _loop.cancel(inflight)

    # -- the command (on the private loop, or this thread's own) ---------------

    async def handle(self, argv: list[str], stdin: str | None, command: Command | None = None) -> Outcome:
        try:
            if command is None:
                command = split_command(argv, self.catalog.is_server, self.catalog.split_qualified)
            return await self.run_command(command, stdin)
        except CallError as exc:
            return _failure(exc)

    async def run_command(self, command: Command, stdin: str | None) -> Outcome:
        """One parsed command; a failure is raised as its `CallError`."""
        if command.action == "help":
            await self.catalog.load_listed()
            return Outcome(_help.top_help(self.catalog) + _help.untrusted_note(self.dispatcher.env.untrusted))
        if command.action == "search":
            words = list(command.args)
            return Outcome(_help.search_results(await self.catalog.search(words), words))
        if command.action == "server_help":
            tools = await self.catalog.server_tools(command.server)
            return Outcome(_help.server_help(self.catalog.servers[norm(command.server)], tools))
        tool = await self.catalog.find_tool(command.server, command.tool)
        if command.action == "tool_help":
            return Outcome(_help.tool_help(tool))
        return await self._call(tool, command, stdin)

    async def _call(self, tool, command: Command, stdin: str | None) -> Outcome:
        arguments = parse_input(command.args, tool.input_schema, stdin)
        result = await self.dispatcher.call(tool, arguments, self.run)
        label = "-".join(p for p in (tool.server, tool.name) if p)
        # Saving images is file I/O: keep it off the loop; text needs no thread.
        rendered = await asyncio.to_thread(render, result, self.workdir, label) if result.images \
            else render(result, self.workdir, label)
        notes = "".join(f"tools: image saved to {p}\n" for p in rendered.images)
        if result.is_error:
            message = rendered.stdout.strip() or "the tool reported an error"
            error = CallError(message)
            return Outcome(stderr=notes + error.json_line() + "\n", exit_code=1, images=rendered.images)
        return Outcome(rendered.stdout, notes, 0, rendered.images)


def _failure(error: CallError, exit_code: int = 1) -> Outcome:
    return Outcome(stderr=error.json_line() + "\n", exit_code=exit_code)
