"""The `tools` command: argv, stdin and cwd in; stdout, stderr and an exit code out.

It knows no shell. A runner (Bashkit, later host bash) calls `handle_sync`
on the script's thread for every `tools` line; `%tools` and
`toolkernel.call` take the same `call` path for a tool call. A command that
needs the MCP pool or a paired kernel makes one trip to toolkernel's private
loop; a call of any other tool is handled on the calling thread's own loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, NamedTuple

from . import _help
from .. import _loop
from ._catalog import Catalog
from ._cli import Command, parse_input, split_command, take_save
from .._approval._dispatch import Dispatcher, WouldAsk
from .._approval._policy import deny_rule_covers
from .._errors import (CallError, Denied, InvalidInput, NeedsApproval, Stopped, ToolFailed, Unavailable,
                       UnknownCommand)
from .._longtext import LongText, pieces, whole
from .._names import fold
from .._saved import SavingStream
from ._render import Rendered, render, result_text
from .._approval._run import NO_EVENTS, Run, RunEvents
from .._tool import Tool, ToolResult

INTERRUPTED_EXIT = 130
SAVE_TOOL = "write-file"


@dataclass
class Outcome:
    stdout: str | LongText = ""  # a `LongText`: a long MCP text, read from its file by who prints it
    stderr: str = ""
    exit_code: int = 0
    images: list[Path] = field(default_factory=list)
    stops_script: bool = False  # this call stopped the run: the runner ends the script now


@dataclass
class Called:
    """A tool's result as the caller sees it: rendered text, saved images, or the failure."""

    result: ToolResult
    stdout: str | LongText
    images: list[Path]
    failure: ToolFailed | None


class _Known(NamedTuple):
    """A line calling a tool, parsed: what `handle_sync` needs to make the call again."""

    command: Command
    tool: Tool
    arguments: dict[str, Any]

    def stdin_free(self, stdin: str | None) -> bool:
        """Whether `parse_input` would not read `stdin` for this line (no words: it reads data there)."""
        return bool(self.command.args) or not stdin or not stdin.strip()


_MAX_KNOWN = 64  # lines kept per run
_MAX_KNOWN_ARGV = 1024  # characters of a line that may be kept
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _flat(arguments: dict[str, Any]) -> bool:
    return all(type(value) in _SCALARS for value in arguments.values())


class ToolsCommand:
    """Handles every form of `tools` for one shell run (or one `%tools` line)."""

    def __init__(self, catalog: Catalog, dispatcher: Dispatcher, run: Run, workdir: Path,
                 events: RunEvents = NO_EVENTS) -> None:
        self.catalog = catalog
        self.dispatcher = dispatcher
        self.run = run
        self.workdir = workdir
        self.events = events
        # The calls in flight, which `interrupt` cancels: a script's calls may run at once
        # (background jobs, `xargs -P`, host bash's connections on threads of their own).
        self._inflight: set[concurrent.futures.Future | asyncio.Task] = set()
        self.interrupted = False
        self.stop_reason = "interrupted"  # what a cancelled line reports (see `interrupt`)
        # Characters of one result a script may take in; a runner sets it (None: no limit), and
        # says why when it is not the config's (`result_limit_why`).
        self.result_limit: int | None = None
        self.result_limit_why = ""
        # Lines of own-tool calls parsed before, by argv (see `_keep`).
        self._known: dict[tuple[str, ...], _Known] = {}

    # -- called by a runner, on the script's thread -----------------------------

    def handle_sync(self, argv: list[str], stdin: str | None, cwd: str | None = None, *,
                    now_only: bool = False) -> Outcome | None:
        """One `tools` line. `cwd` is the script's directory; tools resolve their
        paths against the workspace, so it only matters to runners that move it.
        `now_only`: None, having made no call, for a line that may wait on a hook or a
        person (a hook is set, `--save`, a call the policy does not simply allow)."""
        known = self._known.get(tuple(argv))
        if known is not None and not self.interrupted and known.stdin_free(stdin) and self.dispatcher.can_call_now():
            try:  # a line parsed before: straight to the dispatcher, whose checks all run again
                outcome = self._made_now(known.tool, dict(known.arguments), now_only)
            except WouldAsk:
                return None
            except BaseException as exc:  # noqa: BLE001 - sorted out by _caught
                return _caught(exc, self.stop_reason)
            return self._finished(outcome, known.command)
        command = self._parsed(argv)
        if isinstance(command, Outcome):
            return command
        if now_only and ("--save" in command.args or not self.dispatcher.can_call_now()):
            return None
        try:
            outcome = self._call_now(command, stdin, argv, now_only)
            if outcome is None:
                outcome = self._run(self.handle(argv, stdin, command, now_only=now_only), self._runs_here(command))
        except WouldAsk:
            return None
        except BaseException as exc:  # noqa: BLE001 - sorted out by _caught
            return _caught(exc, self.stop_reason)
        return self._finished(outcome, command)

    async def handle_async(self, argv: list[str], read_stdin: Callable[[], Awaitable[str | None]],
                           cwd: str | None = None) -> Outcome:
        """`handle_sync` for a runner that awaits the line on the script's own running loop
        (Bashkit's live command): the call is awaited there, or on the private loop for a
        tool bound to it, and never blocks the loop, which meanwhile hands on the output.
        `read_stdin` is awaited only for a command whose input may come from stdin."""
        command = self._parsed(argv)
        if isinstance(command, Outcome):
            return command
        try:
            stdin = await read_stdin() if _may_read_stdin(command) else None
            outcome = await self._awaited(self.handle(argv, stdin, command), self._runs_here(command))
        except BaseException as exc:  # noqa: BLE001 - sorted out by _caught
            return _caught(exc, self.stop_reason)
        return self._finished(outcome, command)

    def _parsed(self, argv: list[str]) -> Command | Outcome:
        if self.interrupted:
            return _failure(Stopped(f"not run: the script was {self.stop_reason}"))
        try:
            return split_command(argv, self.catalog.is_server, self.catalog.split_qualified)
        except CallError as exc:
            return _failure(exc)

    def _finished(self, outcome: Outcome, command: Command) -> Outcome:
        try:
            outcome = self._kept_out(outcome, command)
        except Exception as exc:  # noqa: BLE001 - a bug of ours is still one error line, never a traceback
            return _failure(internal_failure(exc))
        for path in outcome.images:
            self.events.image(path)
        outcome.stops_script = bool(outcome.exit_code) and self.run.stopped is not None
        return outcome

    def _runs_here(self, command: Command) -> bool:
        """A call of a tool bound to nothing on the private loop runs on this thread."""
        if command.action not in ("call", "tool_help"):
            return False
        return not self.catalog.runs_on_private_loop(command.server, command.tool)

    def _call_now(self, command: Command, stdin: str | None, argv: list[str], now_only: bool = False) -> Outcome | None:
        """A call made from this sync code (the dispatcher's `call_now`: the same checks) of an own
        tool bound to nothing on the private loop (a plain sync tool runs with no event loop at
        all), or of a server's tool listed in this run while the server is up over a lane (see
        `Catalog.listed_here`). None for any other command, which `handle` runs."""
        tool = self._tool_now(command)
        if tool is None:
            return None
        try:
            save_to, args = take_save(command.args, tool.input_schema)
            if save_to is not None:
                return None  # the write of the result is a call of its own, made by `handle`
            arguments = parse_input(args, tool.input_schema, stdin)
        except CallError as exc:
            return _failure(exc)
        self._keep(argv, stdin, _Known(command, tool, arguments))
        return self._made_now(tool, arguments, now_only)

    def _tool_now(self, command: Command) -> Tool | None:
        if command.action != "call" or not self.dispatcher.can_call_now():
            return None
        if command.server is not None:
            return self.catalog.listed_here(command.server, command.tool)
        tool = self.catalog.own.get(fold(command.tool))
        return None if tool is None or tool.runs_on_private_loop else tool

    def _keep(self, argv: list[str], stdin: str | None, known: "_Known") -> None:
        """Keep a parsed line that a script may run again (a loop's body), when its input is
        plain words: not stdin's, and flat JSON scalars that nothing can change in place."""
        if ("-" in known.command.args or not known.stdin_free(stdin) or not _flat(known.arguments)
                or sum(map(len, argv)) > _MAX_KNOWN_ARGV):
            return
        if len(self._known) >= _MAX_KNOWN:
            self._known.clear()
        self._known[tuple(argv)] = known._replace(arguments=dict(known.arguments))

    def _made_now(self, tool: Tool, arguments: dict[str, Any], now_only: bool = False) -> Outcome:
        """The call through the dispatcher's `call_now`, and what the script sees of it."""
        try:
            result = self.dispatcher.call_now(tool, arguments, self.run, self.events, self._wait_here,
                                              only_if_allowed=now_only)
        except CallError as exc:
            return _failure(self.noted(exc))
        if result.images or result.is_error:
            return _outcome(self._called(tool, result, render(result, self.workdir, tool)))
        return Outcome(result_text(result))  # a text or JSON result: nothing to save, no failure

    def _wait_here(self, coro):
        return self._run(coro, here=True)

    def _run(self, coro, here: bool) -> Any:
        # The hand-off to the private loop costs about 200 us on these machines;
        # running here costs about 15.
        if here:
            task = _loop.local_task(coro)
            with self._flying(task):
                return _loop.run_here(task)
        future = _loop.submit(coro)
        with self._flying(future):
            return _loop.wait(future)

    @contextlib.contextmanager
    def _flying(self, inflight):
        self._inflight.add(inflight)
        try:
            if self.interrupted:  # the interrupt came between the check at the start and here
                _loop.cancel(inflight)
            yield
        finally:
            self._inflight.discard(inflight)

    async def _awaited(self, coro, here: bool) -> Outcome:
        # What `interrupt` cancels from another thread: the task that awaits here (a task of
        # its own only where there is none: it costs a turn of the loop), or the private
        # loop's future (an asyncio future wrapping it cannot be cancelled from there).
        if here:
            task = asyncio.current_task()
            waited = coro if task is not None else asyncio.ensure_future(coro)
            inflight = task or waited
        else:
            inflight = _loop.submit(coro)
            waited = asyncio.wrap_future(inflight)
        with self._flying(inflight):
            return await waited

    def interrupt(self, reason: str = "interrupted") -> None:
        """Called from the kernel's main thread on interrupt, or when the run's time is up:
        the call in flight is cancelled, and later lines are not run."""
        self.stop_reason = reason
        self.interrupted = True
        self.run.cancel(reason)  # seen by a sync tool still at work (`ToolContext.check_cancelled`)
        for inflight in list(self._inflight):
            _loop.cancel(inflight)

    # -- the command (on the private loop, or this thread's own) ---------------

    async def handle(self, argv: list[str], stdin: str | None, command: Command | None = None, *,
                     now_only: bool = False) -> Outcome:
        try:
            if command is None:
                command = split_command(argv, self.catalog.is_server, self.catalog.split_qualified)
            return await self.run_command(command, stdin, now_only=now_only)
        except CallError as exc:
            return _failure(self.noted(exc))

    def noted(self, error: CallError) -> CallError:
        """`error`, saying so when the untrusted config may be its cause: a name it would define,
        or an approval its rules would give."""
        note = self.dispatcher.env.not_trusted
        if note and isinstance(error, UnknownCommand):
            # The list `tools --help` points at would only say the same, first.
            message = error.message.removesuffix(" (run `tools --help` for the list)")
            return UnknownCommand(f"{message} ({note})", retryable=error.retryable, **error.details)
        if note and isinstance(error, NeedsApproval):
            return NeedsApproval(f"{error.message} ({note}; its allow rules count only once it is)",
                                 retryable=error.retryable, **error.details)
        return error

    async def run_command(self, command: Command, stdin: str | None, *, now_only: bool = False) -> Outcome:
        """One parsed command; a failure is raised as its `CallError` (`now_only`: see `handle_sync`)."""
        if command.action == "help":
            await self.catalog.load_listed()
            env = self.dispatcher.env
            return Outcome(_help.untrusted_note(env.untrusted, env.not_trusted)
                           + _help.top_help(self.catalog, self._listed, env.not_trusted))
        if command.action == "search":
            words = [w for w in command.args if w.strip()]
            if not words:
                raise InvalidInput("tools search needs words to look for: tools search <words>")
            scored = [(score, tool) for score, tool in await self.catalog.search(words) if self._listed(tool)]
            return Outcome(_help.search_results(scored, words))
        if command.action == "server_help":
            tools = [t for t in await self.catalog.server_listing(command.server) if self._listed(t)]
            return Outcome(_help.server_help(self.catalog.servers[fold(command.server)], tools))
        tool = await self.catalog.find_tool(command.server, command.tool)
        if command.action == "tool_help":
            if not self._listed(tool):  # as in the lists: a denied tool shows no schema to fill
                raise Denied(f"{tool.command} is denied by a rule of the policy: every call of it is refused")
            return Outcome(_help.tool_help(tool))
        save_to, args = take_save(command.args, tool.input_schema)
        called = await self.call(tool, parse_input(args, tool.input_schema, stdin), now_only=now_only)
        if save_to is not None and called.failure is None:
            called = await self._save(called, save_to)
        return _outcome(called)

    def _kept_out(self, outcome: Outcome, command: Command) -> Outcome:
        """A result above `result_limit` does not enter the script: it is saved whole under
        .toolkernel/outputs/ and the script stops there, so that no pipe reads a part of it
        and nothing after it runs on data that never came."""
        limit = self.result_limit
        if limit is None or len(outcome.stdout) <= limit:
            return outcome
        name = " ".join(p for p in (command.server, command.tool) if p)
        why = self.result_limit_why or f"[shell] max_result_mb = {limit // 1_000_000}"
        size = f"the result of `tools {name}` has {len(outcome.stdout):,} characters, above {why}"
        instead = "add `--save PATH` to the call" + ("" if self.result_limit_why else ", or raise max_result_mb")
        try:
            path = _save_whole(self.workdir, outcome.stdout)
        except OSError as exc:  # a full disk, or a link where the outputs folder goes
            self.run.stop("result_too_large", name, {})
            error = Stopped(f"{size}, and it could not be saved ({exc}): the script stopped before"
                            f" using it. {instead[:1].upper()}{instead[1:]}")
        else:
            self.run.stop("result_too_large", name, {}, shown={"saved_to": str(path)})
            error = Stopped(f"{size}: it is saved whole in {path} and the script stopped before using it."
                            f" Load that file in the next cell (from Python), or {instead}")
        return Outcome(stderr=outcome.stderr + error.json_line() + "\n", exit_code=1, images=outcome.images)

    def _listed(self, tool: Tool) -> bool:
        """Lists leave out a tool that a deny rule covers whatever its input (issue 14)."""
        return not deny_rule_covers(self.dispatcher.env.policy, tool.qualified_name, tool.command, tool.kind)

    async def call(self, tool: Tool, arguments: dict[str, Any], *, now_only: bool = False) -> Called:
        """The one call path of scripts, `%tools` and `toolkernel.call`: the dispatcher's
        checks, the call, then the result rendered (images saved under tool-images/)."""
        result = await self.dispatcher.call(tool, arguments, self.run, self.events, only_if_allowed=now_only)
        # Saving images is file I/O: keep it off the loop; text needs no thread.
        rendered = await asyncio.to_thread(render, result, self.workdir, tool) if result.images \
            else render(result, self.workdir, tool)
        return self._called(tool, result, rendered)

    def call_now(self, tool: Tool, arguments: dict[str, Any], wait: Callable[[Any], Any]) -> Called:
        """`call` made from sync code (the dispatcher's `call_now`: the same checks), where
        `dispatcher.can_call_now()`; `wait` runs what must wait on this thread's loop."""
        result = self.dispatcher.call_now(tool, arguments, self.run, self.events, wait)
        return self._called(tool, result, render(result, self.workdir, tool))

    @staticmethod
    def _called(tool: Tool, result: ToolResult, rendered: Rendered) -> Called:
        failure = None
        if result.is_error:
            failure = ToolFailed(whole(rendered.stdout).strip() or f"{tool.command} reported an error")
        elif rendered.unsaved is not None:
            failure = ToolFailed(rendered.unsaved)
        return Called(result, rendered.stdout, rendered.images, failure)


    async def _save(self, called: Called, path: str) -> Called:
        """`--save PATH`: the result goes to a file by a `write-file` call of its own, so the
        write meets the same checks (workspace, protected paths, policy, approval) and is atomic."""
        writer = self.catalog.own.get(fold(SAVE_TOOL))
        if writer is None:
            raise ToolFailed(f"--save needs the built-in {SAVE_TOOL} tool, which this session does not have")
        stand_in = f"<the result of the call before: {len(called.stdout)} characters>"
        result = await self.dispatcher.call(writer, {"path": path, "content": stand_in}, self.run, self.events,
                                            payload={"content": called.stdout})
        rendered = render(result, self.workdir, writer)
        failure = ToolFailed(whole(rendered.stdout).strip()) if result.is_error else None
        return Called(result, rendered.stdout, called.images, failure)


def internal_failure(exc: Exception) -> Unavailable:
    """A failure inside toolkernel itself, told as the call's one error line."""
    # The type and message only: a traceback is noise in a cell, and the message is ours.
    return Unavailable(f"toolkernel failed on this call ({type(exc).__name__}: {exc}); this is a bug"
                       " in toolkernel, please report it", retryable=False)


def _save_whole(workdir: Path, text: str | LongText) -> Path:
    saving = SavingStream(workdir, "result")
    for piece in pieces(text, SavingStream.SLICE):
        saving.write(piece)
    return saving.finish()


def _outcome(called: Called) -> Outcome:
    notes = "".join(f"tools: image saved to {p}\n" for p in called.images)
    if called.failure is not None:
        return Outcome(stderr=notes + called.failure.json_line() + "\n", exit_code=1, images=called.images)
    return Outcome(called.stdout, notes, 0, called.images)


def _may_read_stdin(command: Command) -> bool:
    """Whether `parse_input` may take the call's input from stdin (`-`, or no input words
    once `--save PATH` is out)."""
    args = command.args
    return command.action == "call" and (not args or "-" in args or "--save" in args)


def _caught(exc: BaseException, stop_reason: str) -> Outcome:
    """What a line that raised reports: an interrupt (or the run's timeout) as such, a bug of
    ours as one error line."""
    if isinstance(exc, (concurrent.futures.CancelledError, asyncio.CancelledError)):
        return _failure(Stopped(stop_reason), INTERRUPTED_EXIT)
    if isinstance(exc, Exception):  # a bug of ours is still one error line, never a traceback
        return _failure(internal_failure(exc))
    raise exc


def _failure(error: CallError, exit_code: int = 1) -> Outcome:
    return Outcome(stderr=error.json_line() + "\n", exit_code=exit_code)
