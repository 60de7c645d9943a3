"""`toolkernel serve`: Tools in Shell for any MCP client.

The client sees a handful of tools instead of every configured tool: `bash`
(a Bashkit script with `tools` inside, the same run as `%%tools`), the file
tools and the task list that stay direct (seed 000: structured file editing, and
write_todos, which shapes the turn), and what `[tools_in_shell] keep_visible` names. With `enabled = false` every
tool is listed directly (the classic behaviour, for side-by-side measures).

Every call goes through `Session`: the same dispatcher, policy and approvals
as a notebook. Every question is published under $XDG_STATE_HOME/toolkernel/pending/
(`_pending`), where JupyterLab (`_lab_server`), `toolkernel approve` or `%tools approve ID`
answers it; when the client offers MCP elicitation it is asked there too, and the first answer
counts (`_approver.FirstAnswer`). Otherwise the run stops and its report says
`needs_approval`. With `--notebook`, one pairing serves every client of this process; with
`--server`, each client pairs every notebook of that server its calls name, in pairings of its
own (`_serve_notebooks`).

The SDK's handlers run on the server's event loop; a run blocks (its runner
pumps output on the calling thread), so it runs on a worker thread, and
elicitation requests hop back to the server's loop.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import os
import re
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import anyio

from .. import _loop
from .._approval._approver import (Answer, ApprovalRequest, Approver, ElicitApprover, FirstAnswer, PendingApprover,
                                   first_of, stop_and_report)
from .._approval._run import NO_EVENTS, NoEvents, RunEvents
from .._runners._background import BackgroundRun, BackgroundRuns, KeepingEvents
from .._runners._shell import RunControl, ShellResult
from ._serve_bash import (BACKGROUND_TOOLS, BASH_INPUT, CANCEL_WAIT, BashInput, Newest, progress_token,
                          send_progress, watched)
from .._approval._pending import PendingError, PendingStore
from ._answers import answer_request
from .._command._catalog import Catalog
from .._command._cli import parse_input
from .._command._command import Called
from .._config._config import load_config
from .._config._tools_in_shell import ToolsInShell
from .._config._trust import store_path
from .._errors import CallError, ConfigError, UnknownCommand, printable, printable_json
from .._longtext import whole
from .._mcp_sdk import Server, elicit_form, make_server, streamable_http_app, types, validated, wire
from .._names import fold
from .._approval._policy import CallInfo, deny_rule_covers, rule_matches
from .._providers._notebook._pairing import STATE_KEY as PAIRINGS_KEY
from ._serve_notebooks import NOTEBOOK, PAIR_AGAIN, ServeNotebooks  # noqa: F401 (PAIR_AGAIN: serve's words)
from .._session import Session
from .._tool import Tool

# Seed 000 keeps these direct: structured file editing, and write_todos (here `todo_write`),
# which shapes the turn: the agent must see there is a task list to keep.
DIRECT = ("read_file", "write_file", "edit_file", "todo_write")

# Written for a model, and as short as it goes: it is the whole cost of the tools moved
# into the shell. Every command form, input form and error code it names is real;
# tests/test_serve.py checks the codes against the ones `tools` can print.
BASH_DESCRIPTION = """\
Run a bash script in a sandbox (jq, grep, sed, awk, coreutils; no network or host programs). \
Every other tool is a `tools` command in it:
tools --help: servers and tools; tools SERVER --help: a server's tools; tools [SERVER] TOOL --help: input schema
tools search WORDS: find tools
tools [SERVER] TOOL '{"k":"v"}' key=value --key value --flag: call; pairs merge over the JSON, \
values are JSON unless the schema says string; `-` reads the JSON from stdin
A result prints as text, or JSON: pipe it to jq. One script per task.
A failed call exits 1 with one stderr line {"error":{"code","message","retryable"}}: \
unknown_command: no such tool; invalid_input: not matching the schema; tool_error: the tool failed; \
denied: refused, do not retry; needs_approval: a person is asked; the script stopped at that call \
(the report lists what ran): once approved, write a new script for the rest; stopped: not run, an earlier call stopped the script; \
connection_required: the person must connect that server; call_limit: over 50 calls in one script; \
unavailable: cannot run now, retryable says if it may later"""


# The file tools stay direct (seed 000); in the Tools-in-Shell list they are shown this short.
# Calls are checked against each tool's own full schema all the same.
TERSE = {
    "read_file": ("Read a text file as numbered lines; offset is the 0-based first line. Images come back as images.",
                  {"path": "string", "offset": "integer", "limit": "integer"}, ["path"]),
    "write_file": ("Create or overwrite a file, atomically.", {"path": "string", "content": "string"},
                   ["path", "content"]),
    "edit_file": ("Replace old_string, which must occur once unless replace_all, with new_string.",
                  {"path": "string", "old_string": "string", "new_string": "string", "replace_all": "boolean"},
                  ["path", "old_string", "new_string"]),
    "todo_write": ("Replace the session's task list (the full list each time; one item in_progress).",
                   {"todos": {"type": "array", "items": {"type": "object", "properties": {
                       "content": {"type": "string"}, "status": {"enum": ["pending", "in_progress", "completed"]},
                       "activeForm": {"type": "string"}}, "required": ["content", "status", "activeForm"]}}},
                   ["todos"]),
}


@dataclass(frozen=True)
class ShellSettings:
    """`[tools_in_shell]` of the config (seed 000 names)."""

    enabled: bool = True
    keep_visible: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, section: ToolsInShell) -> "ShellSettings":
        return cls(section.enabled is not False, tuple(section.keep_visible or ()))


class _Collected:
    """The sink of a served run: what would reach a cell (large outputs already cut)."""

    def __init__(self) -> None:
        self.out: list[str] = []

    def stdout(self, text: str) -> None:
        self.out.append(text)

    def stderr(self, text: str) -> None:
        pass  # ShellResult.stderr holds it all

    def image(self, path: Path) -> None:
        pass  # ShellResult.images holds them

    def progress(self, tool: str, progress: float, total: float | None, message: str | None) -> None:
        pass


class ToolServer:
    """The tools of one `toolkernel serve`: listing and calling, over any transport.

    Each MCP session (over HTTP: each `mcp-session-id`) gets a `Session` of its own:
    its own runs, call limits, once-grants and pending approvals, and up to
    `RUNS_AT_ONCE` runs at a time (an agent's parallel tool calls; each run has its
    own call limit and report). Lasting ("always") approvals live in the project's
    .toolkernel/ store, which every session and the notebook share.
    """

    def __init__(self, workdir: Path, *, notebook: Mapping[str, Any] | None = None) -> None:
        self.workdir = Path(workdir).resolve()
        # `--notebook PATH`, `--server URL` and how to reach the kernels: the notebook tools are listed too.
        self.notebooks = ServeNotebooks(self.workdir, notebook)
        self.notebook = self.notebooks.listed
        self._clients: dict[str, tuple[Session, _Runs]] = {}
        self._used: dict[str, float] = {}  # when each client last asked for its session
        self._clients_guard = threading.Lock()
        # Seconds after which an HTTP session the SDK has dropped for idleness (its id then
        # answers 404) has its Session closed: its MCP servers and pairings go with it.
        self.forget_after: float | None = None

    def pair(self) -> list[str]:
        """Pair `--notebook` with its kernel, and check `--server` answers (before any client comes):
        the lines serve says at its start. Raises CallError."""
        return self.notebooks.pair()

    def client(self, key: str) -> tuple[Session, "_Runs"]:
        with self._clients_guard:
            if key not in self._clients:
                session = Session(self.workdir)
                session.trust_advice = trust_advice()  # what serve's user runs; no notebook here
                # A client that cannot be asked leaves its calls where a person can answer them.
                session.approvals.share_pending(PendingStore(self.workdir))
                # This serve's pairing, and the notebooks this client's calls pair: never another client's.
                session.state[PAIRINGS_KEY] = self.notebooks.registry()
                self._clients[key] = (session, _Runs())
            self._used[key] = time.monotonic()
            client, stale = self._clients[key], self._stale()
        for session in stale:
            _close_client(session)
        return client

    @contextmanager
    def running(self, key: str) -> Iterator[Session]:
        """The client's Session, for one run or call (one of `RUNS_AT_ONCE`); its idle time counts
        from the end."""
        session, runs = self.client(key)
        with runs.one():
            try:
                yield session
            finally:
                with self._clients_guard:
                    if key in self._used:
                        self._used[key] = time.monotonic()

    def forget(self, key: str) -> None:
        """The client's MCP session ended (an HTTP DELETE): its runs are stopped, its background
        runs killed, and its Session closed."""
        with self._clients_guard:
            gone = self._clients.pop(key, None)
            self._used.pop(key, None)
        if gone is not None:
            gone[1].stop_all("killed: the client's session ended")
            gone[1].wait_idle()  # after the runs it may still be making
            _close_client(gone[0])

    def gone(self, key: str, request_id: object) -> None:
        """The client went away from one call (an HTTP request it dropped): that call's run is stopped."""
        with self._clients_guard:
            client = self._clients.get(key)
        stop = client[1].stopping.get(request_id) if client is not None else None
        if stop is not None:
            stop("cancelled: the client went away")

    def _stale(self) -> list[Session]:
        """Sessions of clients idle past `forget_after`, none of them running, taken out (under the guard)."""
        if self.forget_after is None:
            return []
        since = time.monotonic() - self.forget_after
        keys = [key for key, used in self._used.items()
                if used < since and not self._clients[key][1].busy()]
        for key in keys:
            del self._used[key]
        return [self._clients.pop(key)[0] for key in keys]

    def close(self) -> None:
        for session, runs in list(self._clients.values()):
            runs.stop_all("killed: serve ended")
            _close_client(session)
        self.notebooks.close()

    def server(self) -> Server:
        from .. import __version__

        # Declared (with a handler for `logging/setLevel`): a background run that ends by itself
        # is told to the client as `notifications/message` (seed 002). The SDK warns on each use
        # that the capability is deprecated from protocol 2026-07-28 on; the older ones have it.
        warnings.filterwarnings("ignore", message="The logging capability is deprecated")
        return make_server("toolkernel", version=__version__, instructions=_INSTRUCTIONS,
                           on_list_tools=self._on_list_tools, on_call_tool=self._on_call_tool,
                           on_set_logging_level=_set_logging_level)

    # -- listing -------------------------------------------------------------

    async def _on_list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        listed = await anyio.to_thread.run_sync(self.listed_tools, _client_key(ctx))
        return types.ListToolsResult(tools=listed)

    def listed_tools(self, key: str = "stdio") -> list[types.Tool]:
        return _loop.run(self._listed(self.client(key)[0]))

    async def _listed(self, session: Session) -> list[types.Tool]:
        settings = ShellSettings.from_config(load_config(self.workdir).tools_in_shell)
        command = await session.prepare(one_call=True)  # nothing runs: no mount plan needed
        policy = command.dispatcher.env.policy
        tools = [t for t in await self._direct_tools(command.catalog, settings)
                 if not deny_rule_covers(policy, t.qualified_name, t.command, t.kind)]
        listed = self.notebooks.listed_tool
        if not settings.enabled:
            return [listed(t, _mcp_tool(t)) for t in tools]
        # No outputSchema: the structured content comes anyway, and the schema would only cost bytes.
        bash = types.Tool(name="bash", description=BASH_DESCRIPTION, inputSchema=BASH_INPUT)
        return ([bash, *BACKGROUND_TOOLS]
                + [_terse_tool(t) if t.name in TERSE and not t.server else listed(t, _mcp_tool(t)) for t in tools])

    async def _direct_tools(self, catalog: Catalog, settings: ShellSettings) -> list[Tool]:
        everything = await _all_tools(catalog)
        if not settings.enabled:
            return [t for t in everything if self.notebook or t.name not in NOTEBOOK or t.server]
        wanted = {fold(n) for n in (*DIRECT, *(NOTEBOOK if self.notebook else ()))}
        return [t for t in everything if fold(t.qualified_name) in wanted or (not t.server and fold(t.name) in wanted)
                or _kept_visible(t, settings.keep_visible)]

    # -- calling -------------------------------------------------------------

    async def _on_call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments, key, name = dict(params.arguments or {}), _client_key(ctx), params.name
        if name in _BACKGROUND_NAMES:
            return await anyio.to_thread.run_sync(self.background_tool, key, name, arguments)
        loop = asyncio.get_running_loop()
        token = progress_token(ctx, params)
        newest = Newest()
        if name == "bash":
            try:
                bash = BashInput.parse(arguments)
            except CallError as exc:
                return _error(exc.code, exc.message)
            if bash.background:
                approver = _approver_for(ctx, loop, stops_first=False, label=bash.description, background=True,
                                         session=lambda: self.client(key)[0])
                notify = _notifier(ctx, loop)
                return await anyio.to_thread.run_sync(self.start_background, key, bash, approver, notify)
            control = bash.control()
            approver = _approver_for(ctx, loop, stops_first=True, label=bash.description,
                                     session=lambda: self.client(key)[0])
            return await self._watched(ctx, key, lambda: self.run_bash(key, bash, approver, control, newest),
                                       control.stop, newest, control.calls, token)
        approver = _approver_for(ctx, loop, stops_first=False, session=lambda: self.client(key)[0])
        call = _DirectCall(newest)
        return await self._watched(ctx, key, lambda: self.call_direct(key, name, arguments, approver, call),
                                   call.stop, newest, call.count, token)

    async def _watched(self, ctx: Any, key: str, work: Callable[[], types.CallToolResult], stop: Callable[[str], Any],
                       newest: Newest, count: Callable[[], int], token: Any) -> types.CallToolResult:
        """`work()` on a worker thread: the client's cancel (or its going away) stops it, and a
        client that sent a progress token hears how it goes."""
        progress = None
        if token is not None:
            async def send(value: float, message: str | None) -> None:
                await ctx.session.send_progress_notification(token, value, None, message,
                                                             related_request_id=ctx.request_id)

            async def progress() -> None:
                await send_progress(send, newest, count)

        async def cancelled(result: types.CallToolResult) -> None:  # said to a client still there
            body = wire(result).get("structuredContent") or {}
            await ctx.session.send_log_message("notice", {"event": "cancelled", **body}, logger="toolkernel.bash")

        runs = self.client(key)[1]
        runs.stopping[ctx.request_id] = stop
        try:
            return await watched(work, stop, progress=progress, on_cancelled=cancelled)
        finally:
            runs.stopping.pop(ctx.request_id, None)

    def run_bash(self, key: str, bash: BashInput | str, approver: Approver, control: RunControl | None = None,
                 newest: Newest | None = None) -> types.CallToolResult:
        """One foreground run, its result in seed 000's shape."""
        bash = bash if isinstance(bash, BashInput) else BashInput(bash)
        control = control or bash.control()
        sink = _Collected()
        events = KeepingEvents(on_output=newest.printed if newest is not None else None)
        try:
            if not ShellSettings.from_config(load_config(self.workdir).tools_in_shell).enabled:
                return _error("unknown_command", "no tool named 'bash': [tools_in_shell] enabled = false"
                              " lists every tool directly")  # not listed, so not callable (fail closed)
            with self.running(key) as session:
                before = _waiting_ids(session)
                result = session.run_script(bash.script, sink, approver=approver, agent=True, route="serve",
                                            always_report=True, control=control, description=bash.description,
                                            events=events)
        except ConfigError as exc:
            return _error("config_error", str(exc))
        body = _bash_body(result, "".join(sink.out), control)
        if waiting := _waiting(session, before, _stopped_call(result.report or {})):
            body["waiting"] = waiting
        content: list[Any] = [types.TextContent(type="text", text=_bash_text(body))]
        content += [_image(self.workdir / p) for p in result.images]
        return types.CallToolResult(content=content, structuredContent=body, isError=result.exit_code != 0)

    # -- background runs (seed 002: run_in_background, BashOutput, KillShell) ---------------

    def start_background(self, key: str, bash: BashInput, approver: Approver,
                         notify: Callable[[Mapping[str, Any]], None]) -> types.CallToolResult:
        """Start the run and return its id at once; `notify` tells the client when it ends by itself."""
        try:
            if not ShellSettings.from_config(load_config(self.workdir).tools_in_shell).enabled:
                return _error("unknown_command", "no tool named 'bash': [tools_in_shell] enabled = false"
                              " lists every tool directly")
        except ConfigError as exc:
            return _error("config_error", str(exc))
        session, runs = self.client(key)
        give_back = runs.take_turn()
        if give_back is None:
            return _error("unavailable", f"{RUNS_AT_ONCE} runs of this client go on already (background runs"
                          " count): end one with kill_shell, or wait for one to end")

        def run(background: BackgroundRun) -> ShellResult:
            events = KeepingEvents(background.output)
            return session.run_script(bash.script, _Discarded(), approver=approver, agent=True, route="serve",
                                      always_report=True, control=background.control, description=bash.description,
                                      events=events)

        def ended(background: BackgroundRun) -> None:
            if not background.killed:  # ended by itself, or by its time limit: the client is told
                notify({"event": "background run ended", **_background_state(background)})

        try:
            background = runs.background.start(bash.script, bash.control(), run, description=bash.description,
                                               on_end=ended, after=give_back)
        except RuntimeError as exc:  # the client's session ended meanwhile
            give_back()
            return _error("unavailable", str(exc))
        background.waiting = getattr(approver, "waiting", None)  # the requests it waits on for a person
        body = {"id": background.id, "status": background.status}
        if bash.description:
            body["description"] = bash.description
        text = (f"started {background.id} in the background; read its output with bash_output"
                f" bash_id={background.id}, end it with kill_shell shell_id={background.id}")
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structuredContent=body)

    def background_tool(self, key: str, name: str, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """`bash_output` and `kill_shell`."""
        runs = self.client(key)[1]
        wanted = arguments.get("bash_id" if name == "bash_output" else "shell_id")
        background = runs.background.get(wanted) if isinstance(wanted, str) else None
        if background is None:
            known = ", ".join(run.id for run in runs.background.all()) or "none"
            return _error("unknown_command", f"no background run {wanted!r} in this session (its runs: {known})")
        if name == "kill_shell":
            killed = background.kill("killed (kill_shell)")
            background.ended.wait(CANCEL_WAIT)
            body = dict(_background_state(background))
            text = (f"{background.id} was killed; what it printed stays readable with bash_output" if killed
                    else f"{background.id} had ended already ({background.status})")
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structuredContent=body)
        pattern = arguments.get("filter")
        try:
            regex = re.compile(pattern) if isinstance(pattern, str) and pattern else None
        except re.error as exc:
            return _error("invalid_input", f"filter is not a regular expression: {exc}")
        body = {**background.read(regex), **_background_state(background)}
        asking = background.waiting or ()
        if waiting := [w for w in _waiting(self.client(key)[0]) if w["id"] in asking]:
            body["waiting"] = waiting
        return types.CallToolResult(content=[types.TextContent(type="text", text=_output_text(body))],
                                    structuredContent=body)

    def call_direct(self, key: str, name: str, arguments: dict[str, Any], approver: Approver,
                    call: _DirectCall | None = None) -> types.CallToolResult:
        call = call or _DirectCall()
        with self.running(key) as session:
            before = _waiting_ids(session)
            try:
                return call.run(self._call_direct(session, name, arguments, approver, call.events))
            except concurrent.futures.CancelledError:
                return _error("stopped", f"{name} was {call.reason or 'cancelled'}")
            except CallError as exc:
                asked = exc.details.get("request")  # a call still waiting since an earlier try
                waiting = "".join(f"\n{_answer_with(w, again='make the call again')}"
                                  for w in _waiting(session) if w["id"] == asked or w["id"] not in before)
                return types.CallToolResult(content=[types.TextContent(type="text", text=exc.json_line() + waiting)],
                                            isError=True)
            except ConfigError as exc:
                return _error("config_error", str(exc))

    async def _call_direct(self, session: Session, name: str, arguments: dict[str, Any],
                           approver: Approver, events: RunEvents = NO_EVENTS) -> types.CallToolResult:
        # One call, no script: the mount plan is worked out only if the call names paths.
        command = await session.prepare(events, approver=approver, one_call=True, agent=True, route="serve")
        try:
            tool = await _find_listed(self, command.catalog, name)
        except CallError as exc:
            raise command.noted(exc) from None
        arguments = parse_input([], tool.input_schema, json.dumps(self.notebooks.filled(tool, arguments)))
        called = await command.call(tool, arguments)
        request = _cell_request(called)
        if request is not None and await self._ask_for_cell(request, approver, arguments):
            called = await command.call(tool, arguments)  # the kernel now holds the person's once-grant
        if called.failure is not None:
            raise called.failure
        content: list[Any] = [types.TextContent(type="text", text=whole(called.stdout))]
        content += [_image(self.workdir / p) for p in called.images]
        return types.CallToolResult(content=content)


    async def _ask_for_cell(self, request: str, approver: Approver, arguments: Mapping[str, Any]) -> bool:
        """An agent's cell in the paired kernel waits for a person (request `request`, which that
        kernel published): asked through the client when it can ask, and answered for the kernel
        as `toolkernel approve` would. True when the person allowed it (run the cell again). The
        request is in the store too (JupyterLab shows it): answered there first, the client's
        question is cancelled."""
        asked = getattr(approver, "asked", approver)  # the client's own question, not a second request
        if not isinstance(asked, ElicitApprover):
            return False  # the request waits for JupyterLab or `toolkernel approve`, as its message says
        for project in self.notebooks.kernel_projects(arguments):
            store = PendingStore(project)
            try:
                waiting = store.find(request)
            except PendingError:
                continue
            question = asked(ApprovalRequest(waiting.call_info(), waiting.reason, before_start=True,
                                             always_offered=False))
            answer, by_client = await first_of(question, lambda: _answered(store, waiting))
            if by_client and answer in (Answer.ONCE, Answer.DENY):
                answer_request(project, request, answer.value)
            return answer is Answer.ONCE
        return False


def trust_advice(environ: Mapping[str, str] | None = None) -> str:
    """What an error the untrusted config caused tells serve's user: `toolkernel trust`, and where
    serve reads trust. An MCP client starts serve with a small environment of its own (the SDK's
    stdio client passes HOME, LOGNAME, PATH, SHELL, TERM and USER), so a folder trusted in a
    shell or a Lab whose $XDG_STATE_HOME points elsewhere is not trusted here until the client's
    `env` passes that variable."""
    environ = os.environ if environ is None else environ
    where = printable(str(store_path(environ)))
    if environ.get("XDG_STATE_HOME"):
        return f"toolkernel trust (serve reads trust from {where})"
    return (f"toolkernel trust (serve reads trust from {where}, as $XDG_STATE_HOME is not set for it: where"
            " your shell sets it, pass it to serve in the MCP client's `env`)")


def _answered(store: PendingStore, request: Any) -> str | None:
    """The answer a person gave elsewhere to a request the paired kernel published (the kernel
    applies it itself); "" once the request is gone without one seen here; None while it waits."""
    answer = store.answer_for(request)
    if answer is not None:
        return answer
    try:
        store.find(request.id)
    except PendingError:
        return ""
    return None


def _cell_request(called: Called) -> str | None:
    """The request id of an agent's cell that did not start for want of a person, as the run's
    report names it: the structured report the kernel displayed for this run (`notebook_run`'s
    `run_reports`), never a line of the failure's text, which the cell's own output can forge."""
    if called.failure is None:
        return None
    for report in called.result.run_reports:
        tools = report.get("tools")
        stopped = tools.get("stopped") if isinstance(tools, dict) else None
        if not isinstance(stopped, dict) or stopped.get("reason") != "needs_approval" or not stopped.get("before_start"):
            continue
        request = stopped.get("request")
        if isinstance(request, str) and _REQUEST_ID.fullmatch(request):
            return request
    return None


_REQUEST_ID = re.compile(r"[0-9a-f]{12}")


RUNS_AT_ONCE = 8  # a client's runs and direct calls at once; more wait their turn
_BACKGROUND_NAMES = frozenset(tool.name for tool in BACKGROUND_TOOLS)


class _DirectCall:
    """One direct call (`notebook_run`, `read_file`, ...) on the private loop, as the client holds
    it: `stop` cancels it there (a kernel's cell is interrupted: `KernelConnection.execute`), and
    what it reports as it goes (a cell's newest output line) feeds its progress."""

    def __init__(self, newest: Newest | None = None) -> None:
        self.newest = newest or Newest()
        self.reason: str | None = None
        self._future: concurrent.futures.Future | None = None
        self._lock = threading.Lock()
        self._reported = 0
        self.events = _CallEvents(self)

    def run(self, coro: Any) -> Any:
        with self._lock:
            stopped = self.reason is not None
            self._future = future = _loop.submit(coro)
        if stopped:
            future.cancel()
        return _loop.wait(future)

    def stop(self, reason: str) -> None:
        with self._lock:
            self.reason = self.reason or reason
            future = self._future
        if future is not None:
            future.cancel()

    def count(self) -> int:
        return self._reported


class _CallEvents(NoEvents):
    """A direct call's events: its tool's progress (a cell's newest output) noted for the client."""

    def __init__(self, call: _DirectCall) -> None:
        self.call = call

    def progress(self, tool: str, progress: float, total: float | None, message: str | None) -> None:
        self.call._reported += 1
        if message:
            self.call.newest.printed(message + "\n")


class _Discarded(_Collected):
    """The sink of a background run: its output is kept by its events (`KeepingEvents`)."""

    def stdout(self, text: str) -> None:
        pass


def _bash_body(result: ShellResult, stdout: str, control: RunControl) -> dict[str, Any]:
    """A run's result in seed 000's shape (`result.tools.stopped`), with what the script
    printed beside it, and which limit ended it, if one did."""
    report = result.report or {}
    body: dict[str, Any] = {"exit_code": result.exit_code, "success": report.get("success", False),
                            "stdout": stdout, "stderr": result.stderr, "tools": report.get("tools", {})}
    if report.get("changes"):
        body["changes"] = report["changes"]  # the journal's run: `tools rewind ID` undoes it
    if control.timed_out is not None:
        body["timed_out"] = control.timed_out
    elif report.get("cancelled"):
        body["cancelled"] = report["cancelled"]
    if report.get("description"):
        body["description"] = report["description"]
    return body


def _background_state(background: BackgroundRun) -> dict[str, Any]:
    """What a background run's status says, and once it ended, its result's shape."""
    state: dict[str, Any] = {"id": background.id, "status": background.status, "exit_code": background.exit_code}
    if background.description:
        state["description"] = background.description
    if background.result is not None:
        body = _bash_body(background.result, "", background.control)
        state.update({key: body[key] for key in ("success", "tools", "changes", "timed_out", "cancelled")
                      if key in body})
        if background.result.stderr:
            state["stderr"] = background.result.stderr[-2000:]
    if background.failure is not None:
        state["failure"] = background.failure
    return state


def _output_text(body: Mapping[str, Any]) -> str:
    """`bash_output`'s text: the output, then a line of status."""
    text = ""
    if body.get("dropped"):
        text += f"[{body['dropped']:,} characters of older output were dropped unread]\n"
    text += body["output"]
    if text and not text.endswith("\n"):
        text += "\n"
    status = f"[{body['id']}: {body['status']}"
    status += f", exit code {body['exit_code']}]" if body["exit_code"] is not None else "]"
    text += status
    if body.get("timed_out"):
        text += f"\n[ended by {body['timed_out']}]"
    text += "".join(f"\n{_answer_with(w, again='the run goes on')}" for w in body.get("waiting", ()))
    return text


async def _set_logging_level(ctx: Any, params: Any) -> types.EmptyResult:
    return types.EmptyResult()


def _notifier(ctx: Any, loop: asyncio.AbstractEventLoop) -> Callable[[Mapping[str, Any]], None]:
    """Tells the client (a `notifications/message`) from any thread, once the call that started
    a background run is over: on the session's own channel, not the call's."""
    def notify(data: Mapping[str, Any]) -> None:
        try:
            asyncio.run_coroutine_threadsafe(
                ctx.session.send_log_message("info", dict(data), logger="toolkernel.bash"), loop)
        except RuntimeError:  # the server's loop is gone: nobody to tell
            pass

    return notify


class _Runs:
    """A client's runs going on: at most `RUNS_AT_ONCE` at once, its background runs among them,
    counted so that its Session is closed only once none is left (`wait_idle`), and not while one
    goes on (`busy`). `stopping` holds how to stop each run and call in flight (the client's
    end stops them all), `background` the runs that go on past their call."""

    def __init__(self) -> None:
        self._turns = threading.Semaphore(RUNS_AT_ONCE)
        self._changed = threading.Condition()
        self._going = 0
        self.background = BackgroundRuns()
        self.stopping: dict[object, Callable[[str], Any]] = {}

    @contextmanager
    def one(self) -> Iterator[None]:
        with self._turns:
            with self._took():
                yield

    def take_turn(self) -> Callable[[], None] | None:
        """A turn taken now, without waiting (a background run's), and the function that gives it
        back; None when all `RUNS_AT_ONCE` are taken."""
        if not self._turns.acquire(blocking=False):
            return None
        taking = self._took()
        taking.__enter__()

        def give_back() -> None:
            taking.__exit__(None, None, None)
            self._turns.release()

        return give_back

    @contextmanager
    def _took(self) -> Iterator[None]:
        with self._changed:
            self._going += 1
        try:
            yield
        finally:
            with self._changed:
                self._going -= 1
                self._changed.notify_all()

    def busy(self) -> bool:
        return self._going > 0

    def stop_all(self, reason: str) -> None:
        """Stop every run of the client: those in flight, and its background runs (their end waited for)."""
        for stop in list(self.stopping.values()):
            stop(reason)
        self.background.close(reason)

    def wait_idle(self) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._going == 0)


_INSTRUCTIONS = ("Use the bash tool: its scripts reach every configured tool through `tools`"
                 " (start with `tools --help`). Prefer one script per task over one call per turn.")


async def _all_tools(catalog: Catalog) -> list[Tool]:
    """Top-level tools, then every listed server's tools (servers that fail to start are left out)."""
    await catalog.load_listed()
    tools = list(catalog.own.values())
    for entry in catalog.servers.values():
        tools += entry.tools or []
    return tools


async def _find_listed(server: ToolServer, catalog: Catalog, name: str) -> Tool:
    """The tool a direct name stands for; a name the list does not show is unknown (fail closed)."""
    settings = ShellSettings.from_config(load_config(server.workdir).tools_in_shell)
    for tool in await server._direct_tools(catalog, settings):
        if name in (tool.qualified_name, tool.name) and not (tool.server and name == tool.name):
            return tool
    raise UnknownCommand(f"no direct tool named {name!r}; other tools are reached inside `bash` with `tools`")


def _kept_visible(tool: Tool, rules: tuple[str, ...]) -> bool:
    """Whether a `keep_visible` entry names `tool`, read as a rule reads it (`github get-pull`,
    `mcp_github__get_pull`, `tools github get-pull`, globs)."""
    if not rules:
        return False
    info = CallInfo(tool.qualified_name, tool.command, {}, tool.kind, schema_keys=frozenset())
    return any(rule_matches(rule, info) for rule in rules)


def _mcp_tool(tool: Tool) -> types.Tool:
    """A tool as its provider describes it, with its server's title and annotations (a client
    shows them and may act on hints such as readOnlyHint). Its outputSchema is left out: a
    direct call returns the result as `tools` renders it, not the server's structured
    content, and a client rejects a result that lacks what a declared outputSchema promises."""
    name = tool.qualified_name if tool.server else tool.name
    annotations = validated(types.ToolAnnotations, tool.annotations) if tool.annotations else None
    return types.Tool(name=name, title=tool.title, description=tool.description or "",
                      inputSchema=dict(tool.input_schema), annotations=annotations)


def _terse_tool(tool: Tool) -> types.Tool:
    description, properties, required = TERSE[tool.name]
    schema = {"type": "object", "required": required,
              "properties": {k: {"type": t} if isinstance(t, str) else t for k, t in properties.items()}}
    return types.Tool(name=tool.name, description=description, inputSchema=schema)


def _close_client(session: Session) -> None:
    session.approvals.withdraw_published()
    session.close()


def _client_key(ctx: Any) -> str:
    """Which MCP session a request belongs to: its `mcp-session-id` over HTTP, else the one stdio client."""
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    return (headers.get("mcp-session-id") if headers is not None else None) or "stdio"


def _approver_for(ctx: Any, loop: asyncio.AbstractEventLoop, *, stops_first: bool, label: str | None = None,
                  background: bool = False, session: Callable[[], Session] | None = None) -> Approver:
    """Elicitation when the client offers it, raced against the pending store where JupyterLab and
    `toolkernel approve` answer (`FirstAnswer`, with the client's `session`); else the run stops and
    reports, and the call waits in the store; a background run's waits there for the answer
    (`PendingApprover`). `label` (the call's description) heads the question."""
    wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    if not ctx.session.check_client_capability(wanted):
        if background and session is not None:
            return PendingApprover(session().approvals)
        return stop_and_report
    related = None if background else ctx.request_id  # a background run's call has ended

    async def elicit(message: str, schema: Mapping[str, Any]) -> Mapping[str, Any] | None:
        if label:
            message = f"[{printable(label)}] {message}"
        asked = asyncio.run_coroutine_threadsafe(elicit_form(ctx.session, message, dict(schema), related), loop)
        result = await asyncio.wrap_future(asked)
        return result.content if result.action == "accept" else None

    asked = ElicitApprover(elicit, stops_first=stops_first)
    return FirstAnswer(asked, lambda: session().approvals) if session is not None else asked


def _waiting_ids(session: Session) -> frozenset[str]:
    return frozenset(r.id for r in session.approvals.published())


def _waiting(session: Session, before: frozenset[str] = frozenset(),
             stopped: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The calls of this client that this run or call left waiting for a person, with the id to
    answer them by: those it published, and the one it stopped at if that waited already (not
    every request still open: those were said in the result that made them)."""
    session.approvals.collect_answers()  # answered meanwhile: no longer waiting
    waiting = [{"id": r.id, "call": {"tool": r.command, "input": dict(r.input)}}
               for r in session.approvals.published()]
    return [w for w in waiting if w["id"] not in before or w["call"] == stopped]


def _stopped_call(report: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The call a run stopped at for want of a person, as its report names it."""
    stopped = (report.get("tools") or {}).get("stopped") or {}
    return stopped.get("call") if stopped.get("reason") == "needs_approval" else None


def _worth_telling(body: Mapping[str, Any]) -> bool:
    """Whether the text of a result shows the report: the run stopped, a person was asked, or it
    failed after changing something (seed 000), as a cell shows it."""
    tools = body["tools"]
    return bool(tools.get("stopped") or tools.get("asked") or (body["exit_code"] and tools.get("done")))


def _answer_with(waiting: Mapping[str, Any], again: str = "write a new script") -> str:
    # A person answers in JupyterLab or a terminal; the agent reading this has no notebook to type in.
    return (f"[waiting for a person] {printable(waiting['call']['tool'])}: a person answers in JupyterLab"
            f" (toolkernel's notification, or the Tools sidebar) or in a terminal with"
            f" `toolkernel approve {waiting['id']} once|always|deny`; then {again}")


def _bash_text(body: Mapping[str, Any]) -> str:
    text = body["stdout"]
    if body["stderr"]:
        text += ("\n" if text and not text.endswith("\n") else "") + "[stderr]\n" + body["stderr"]
    if body["exit_code"]:
        text += f"\n[exit code {body['exit_code']}]"
    if body.get("timed_out"):
        text += f"\n[ended by {body['timed_out']}]"
    if _worth_telling(body):
        shown = {key: body[key] for key in ("exit_code", "success", "tools", "changes") if key in body}
        # Tool names and inputs of a server's and a script's choosing: escaped where not printable.
        text += "\n[report]\n" + printable_json(json.dumps(shown, indent=1, ensure_ascii=False, default=str))
    text += "".join(f"\n{_answer_with(w)}" for w in body.get("waiting", ()))
    return text


def _image(path: Path) -> types.ImageContent:
    mime = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
            ".webp": "image/webp", ".svg": "image/svg+xml"}.get(path.suffix.lower(), "application/octet-stream")
    return types.ImageContent(type="image", data=base64.b64encode(path.read_bytes()).decode(), mimeType=mime)


def _error(code: str, message: str) -> types.CallToolResult:
    line = json.dumps({"error": {"code": code, "message": message}})
    return types.CallToolResult(content=[types.TextContent(type="text", text=line)], isError=True)


async def serve_stdio(tool_server: ToolServer) -> None:
    from mcp.server.stdio import stdio_server  # the same in both majors

    server = tool_server.server()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


# -- transports -------------------------------------------------------------

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def serve_command(workdir: Path, *, http: str | None = None, token: str | None = None,
                  notebook: Mapping[str, Any] | None = None, no_token: bool = False) -> int:
    """`toolkernel serve`: returns the exit code; a bad address, a missing token or a
    notebook that cannot be paired is one line on stderr."""
    import sys

    token = token or None  # an empty token (`TOOLKERNEL_SERVE_TOKEN=`) would let `Bearer ` in
    _close_on_sigterm()
    try:
        tool_server = ToolServer(workdir, notebook=notebook)
    except CallError as exc:  # a --server that is no URL
        print(f"toolkernel serve: {exc.message}", file=sys.stderr)
        return 2
    try:
        address = parse_address(http, token, no_token) if http is not None else None
        for line in tool_server.pair():
            print(f"toolkernel serve: {line}", file=sys.stderr)
        if address is None:
            anyio.run(serve_stdio, tool_server)
        else:
            if token is None and not no_token:
                token = new_token(*address)
            serve_http(tool_server, *address, token)
    except (ValueError, CallError) as exc:
        print(f"toolkernel serve: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 2
    finally:
        tool_server.close()
    return 0


def _close_on_sigterm() -> None:
    """A SIGTERM ends serve as Ctrl-C does, through its `finally`: the kernels and server sessions it
    started are shut down (by default the signal ends the process at once; uvicorn, which handles it
    while it serves, raises it again when it stops, to the same effect)."""
    import signal

    def ended(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, ended)


def parse_address(text: str, token: str | None, no_token: bool = False) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not sep or not port.isdigit():
        raise ValueError(f"--http wants HOST:PORT, not {text!r}")
    if host not in _LOOPBACK and (no_token or not token):
        raise ValueError(f"{host} is not a loopback address: anyone who reaches it could run tools;"
                         " give --token (clients send `Authorization: Bearer TOKEN`)")
    if no_token and token:
        raise ValueError("--no-token and a token (--token or $TOOLKERNEL_SERVE_TOKEN) contradict each other")
    return host, int(port)


def new_token(host: str, port: int) -> str:
    """A token for this serve, shown once on stderr: loopback is every local user's and every
    program's (a browser page among them), so it gets a token unless told otherwise."""
    import secrets
    import sys

    token = secrets.token_urlsafe(24)
    shown = f"[{host}]" if ":" in host else host
    print(f"toolkernel serve: http://{shown}:{port}/mcp wants the header `Authorization: Bearer {token}`"
          " (choose the token with --token or $TOOLKERNEL_SERVE_TOKEN; --no-token serves without one)",
          file=sys.stderr, flush=True)
    return token


# The SDK closes an HTTP session no request reached for this long; its Session goes a little later.
SESSION_IDLE_SECONDS = 30 * 60


def http_app(tool_server: ToolServer, host: str, token: str | None) -> Any:
    """The ASGI app: the SDK's streamable HTTP at /mcp, behind the token check; a session's
    end (a DELETE, or the SDK's idle timeout) closes its Session, MCP servers and all."""
    app = streamable_http_app(tool_server.server(), path="/mcp", host=host, session_idle_timeout=SESSION_IDLE_SECONDS)
    tool_server.forget_after = SESSION_IDLE_SECONDS + 60
    app = _CallsGone(_SessionEnds(app, tool_server), tool_server)
    return app if token is None else _TokenCheck(app, token)


_MAX_CALL_BODY = 1 << 20  # bytes of a POST read for the ids of its calls (a call's input is small)


class _CallsGone:
    """A client that drops the HTTP request of a call still going (it went away mid-call) is
    taken as cancelling it: the call's run is stopped, as on `notifications/cancelled`. The SDK
    would let the run go on for a client that may come back for its answer."""

    def __init__(self, app: Any, tool_server: ToolServer) -> None:
        self.app, self.tool_server = app, tool_server

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        body, calls, answered = bytearray(), [], [False]
        key = dict(scope.get("headers") or ()).get(b"mcp-session-id", b"").decode("latin-1")

        async def receiving() -> dict:
            message = await receive()
            if message["type"] == "http.request":
                if len(body) <= _MAX_CALL_BODY:
                    body.extend(message.get("body", b""))
                if not message.get("more_body"):
                    calls.extend(_call_ids(bytes(body)))
            elif message["type"] == "http.disconnect" and calls and key and not answered[0]:
                for request_id in calls:
                    await anyio.to_thread.run_sync(self.tool_server.gone, key, request_id)
            return message

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body"):
                answered[0] = True
            await send(message)

        await self.app(scope, receiving, sending)


def _call_ids(body: bytes) -> list[Any]:
    """The ids of the `tools/call` requests a POST's body holds (one, or a batch)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return []
    messages = parsed if isinstance(parsed, list) else [parsed]
    return [m["id"] for m in messages if isinstance(m, dict) and m.get("method") == "tools/call"
            and isinstance(m.get("id"), (int, str)) and not isinstance(m.get("id"), bool)]


class _SessionEnds:
    """After a DELETE that ends an MCP session, the serve forgets that client."""

    def __init__(self, app: Any, tool_server: ToolServer) -> None:
        self.app, self.tool_server = app, tool_server

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "DELETE":
            return await self.app(scope, receive, send)
        status = []

        async def noted(message: dict) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        await self.app(scope, receive, noted)
        key = dict(scope.get("headers") or ()).get(b"mcp-session-id")
        if key and status and 200 <= status[0] < 300:  # the SDK ended that session
            await anyio.to_thread.run_sync(self.tool_server.forget, key.decode("latin-1"))


class _TokenCheck:
    """Every HTTP request carries `Authorization: Bearer TOKEN`, or gets 401 (compared in constant time)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        import hmac

        if scope["type"] == "lifespan":  # the server's own start and stop: no request
            return await self.app(scope, receive, send)
        if scope["type"] != "http":  # a websocket: no route takes one, so none reaches the app
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return
        given = dict(scope.get("headers") or ()).get(b"authorization", b"")
        if not hmac.compare_digest(given, self.expected):
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body",
                        "body": b'{"error": {"code": "unauthorized", "message": "a valid bearer token is required"}}'})
            return
        await self.app(scope, receive, send)


def serve_http(tool_server: ToolServer, host: str, port: int, token: str | None) -> None:
    import uvicorn

    uvicorn.run(http_app(tool_server, host, token), host=host, port=port, log_level="warning")
