"""`toolkernel serve`: Tools in Shell for any MCP client.

The client sees a handful of tools instead of every configured tool: `bash`
(a Bashkit script with `tools` inside, the same run as `%%tools`), the file
tools and the task list that stay direct (seed 000: structured file editing, and
write_todos, which shapes the turn), and what `[tools_in_shell] keep_visible` names. With `enabled = false` every
tool is listed directly (the classic behaviour, for side-by-side measures).

Every call goes through `Session`: the same dispatcher, policy and approvals
as a notebook. A person is asked through MCP elicitation when the client
offers it (`_approver.ElicitApprover`); otherwise the run stops, its
report says `needs_approval`, and the call is published under
$XDG_STATE_HOME/toolkernel/pending/ (`_pending`), where `toolkernel approve` or
`%tools approve ID` answers it. With `--notebook`, one pairing serves every
client of this process, and no other notebook is reachable.

The SDK's handlers run on the server's event loop; a run blocks (its runner
pumps output on the calling thread), so it runs on a worker thread, and
elicitation requests hop back to the server's loop.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server

from .. import _loop
from .._approval._approver import Answer, ApprovalRequest, Approver, ElicitApprover, stop_and_report
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
from .._names import fold
from .._approval._policy import CallInfo, deny_rule_covers, rule_matches
from .._providers._notebook import pair, pairings, unpair
from .._providers._notebook._pairing import STATE_KEY as PAIRINGS_KEY
from .._session import Session
from .._tool import Tool

# Seed 000 keeps these direct: structured file editing, and write_todos (here `todo_write`),
# which shapes the turn: the agent must see there is a task list to keep.
DIRECT = ("read_file", "write_file", "edit_file", "todo_write")
NOTEBOOK = ("notebook_read", "notebook_edit", "notebook_run")
# How a notebook tool's message says to pair again, to an agent that cannot: the one who started serve pairs.
PAIR_AGAIN = ("ask whoever started `toolkernel serve` to start it again: its options --notebook, --kernel, "
              "--existing, --server and --server-token pair the notebook")
PAIR_FIRST = ("`toolkernel serve` reaches only the notebook its --notebook option names; another notebook "
              "needs a `toolkernel serve --notebook` of its own, started by whoever runs serve")

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

BASH_INPUT = {"type": "object", "properties": {"script": {"type": "string"}}, "required": ["script"]}

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
        # `--notebook PATH` and how to reach its kernel: the notebook tools are listed too.
        self._pairing_args = dict(notebook) if notebook is not None else None
        self.notebook = notebook is not None
        self._notebook_state: dict[str, Any] = {}  # the one pairing every client of this serve uses
        pairings(self._notebook_state).pair_first = PAIR_FIRST
        self._clients: dict[str, tuple[Session, _Runs]] = {}
        self._used: dict[str, float] = {}  # when each client last asked for its session
        self._clients_guard = threading.Lock()
        # Seconds after which an HTTP session the SDK has dropped for idleness (its id then
        # answers 404) has its Session closed: its MCP servers and pairings go with it.
        self.forget_after: float | None = None

    def pair(self) -> str:
        """Pair `--notebook` with its kernel (before any client comes). Raises CallError."""
        if self._pairing_args is None:
            return ""
        return _loop.run(pair(self._notebook_state, self.workdir, **self._pairing_args,
                              pair_again=PAIR_AGAIN)).describe()

    def client(self, key: str) -> tuple[Session, "_Runs"]:
        with self._clients_guard:
            if key not in self._clients:
                session = Session(self.workdir)
                session.trust_advice = trust_advice()  # what serve's user runs; no notebook here
                # A client that cannot be asked leaves its calls where a person can answer them.
                session.approvals.share_pending(PendingStore(self.workdir))
                # No other notebook is reachable: this serve's pairing, never another session's.
                session.state[PAIRINGS_KEY] = pairings(self._notebook_state)
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
        """The client's MCP session ended (an HTTP DELETE): its Session is closed."""
        with self._clients_guard:
            gone = self._clients.pop(key, None)
            self._used.pop(key, None)
        if gone is not None:
            gone[1].wait_idle()  # after the runs it may still be making
            _close_client(gone[0])

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
        for session, _ in self._clients.values():
            _close_client(session)
        _loop.run(unpair(self._notebook_state), timeout=30)  # a kernel serve started is shut down

    def server(self) -> Server:
        from .. import __version__

        return Server("toolkernel", version=__version__, instructions=_INSTRUCTIONS,
                      on_list_tools=self._on_list_tools, on_call_tool=self._on_call_tool)

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
        if not settings.enabled:
            return [_mcp_tool(t) for t in tools]
        # No outputSchema: the structured content comes anyway, and the schema would only cost bytes.
        bash = types.Tool(name="bash", description=BASH_DESCRIPTION, input_schema=BASH_INPUT)
        return [bash] + [_terse_tool(t) if t.name in TERSE and not t.server else _mcp_tool(t) for t in tools]

    async def _direct_tools(self, catalog: Catalog, settings: ShellSettings) -> list[Tool]:
        everything = await _all_tools(catalog)
        if not settings.enabled:
            return [t for t in everything if self.notebook or t.name not in NOTEBOOK or t.server]
        wanted = {fold(n) for n in (*DIRECT, *(NOTEBOOK if self.notebook else ()))}
        return [t for t in everything if fold(t.qualified_name) in wanted or (not t.server and fold(t.name) in wanted)
                or _kept_visible(t, settings.keep_visible)]

    # -- calling -------------------------------------------------------------

    async def _on_call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        approver = _approver_for(ctx, asyncio.get_running_loop(), stops_first=params.name == "bash")
        if params.name == "bash":
            script = arguments.get("script")
            if not isinstance(script, str):
                return _error("invalid_input", "bash needs {\"script\": \"...\"}")
            return await anyio.to_thread.run_sync(self.run_bash, _client_key(ctx), script, approver)
        return await anyio.to_thread.run_sync(self.call_direct, _client_key(ctx), params.name, arguments, approver)

    def run_bash(self, key: str, script: str, approver: Approver) -> types.CallToolResult:
        sink = _Collected()
        try:
            if not ShellSettings.from_config(load_config(self.workdir).tools_in_shell).enabled:
                return _error("unknown_command", "no tool named 'bash': [tools_in_shell] enabled = false"
                              " lists every tool directly")  # not listed, so not callable (fail closed)
            with self.running(key) as session:
                before = _waiting_ids(session)
                result = session.run_script(script, sink, approver=approver, agent=True, route="serve",
                                            always_report=True)
        except ConfigError as exc:
            return _error("config_error", str(exc))
        report = result.report or {}
        # Seed 000's shape (`result.tools.stopped`), with what the script printed beside it.
        body: dict[str, Any] = {"exit_code": result.exit_code, "success": report.get("success", False),
                                "stdout": "".join(sink.out), "stderr": result.stderr, "tools": report.get("tools", {})}
        if report.get("changes"):
            body["changes"] = report["changes"]  # the journal's run: `tools rewind ID` undoes it
        if waiting := _waiting(session, before, _stopped_call(report)):
            body["waiting"] = waiting
        content: list[Any] = [types.TextContent(type="text", text=_bash_text(body))]
        content += [_image(self.workdir / p) for p in result.images]
        return types.CallToolResult(content=content, structured_content=body, is_error=result.exit_code != 0)

    def call_direct(self, key: str, name: str, arguments: dict[str, Any], approver: Approver) -> types.CallToolResult:
        with self.running(key) as session:
            before = _waiting_ids(session)
            try:
                return _loop.run(self._call_direct(session, name, arguments, approver))
            except CallError as exc:
                asked = exc.details.get("request")  # a call still waiting since an earlier try
                waiting = "".join(f"\n{_answer_with(w, again='make the call again')}"
                                  for w in _waiting(session) if w["id"] == asked or w["id"] not in before)
                return types.CallToolResult(content=[types.TextContent(type="text", text=exc.json_line() + waiting)],
                                            is_error=True)
            except ConfigError as exc:
                return _error("config_error", str(exc))

    async def _call_direct(self, session: Session, name: str, arguments: dict[str, Any],
                           approver: Approver) -> types.CallToolResult:
        # One call, no script: the mount plan is worked out only if the call names paths.
        command = await session.prepare(approver=approver, one_call=True, agent=True, route="serve")
        try:
            tool = await _find_listed(self, command.catalog, name)
        except CallError as exc:
            raise command.noted(exc) from None
        arguments = parse_input([], tool.input_schema, json.dumps(arguments))
        called = await command.call(tool, arguments)
        request = _cell_request(called)
        if request is not None and await self._ask_for_cell(request, approver):
            called = await command.call(tool, arguments)  # the kernel now holds the person's once-grant
        if called.failure is not None:
            raise called.failure
        content: list[Any] = [types.TextContent(type="text", text=whole(called.stdout))]
        content += [_image(self.workdir / p) for p in called.images]
        return types.CallToolResult(content=content)


    async def _ask_for_cell(self, request: str, approver: Approver) -> bool:
        """An agent's cell in the paired kernel waits for a person (request `request`, which that
        kernel published): asked through the client when it can ask, and answered for the kernel
        as `toolkernel approve` would. True when the person allowed it (run the cell again)."""
        if not isinstance(approver, ElicitApprover):
            return False  # the request waits for `toolkernel approve`, as its message says
        for project in self._kernel_projects():
            try:
                waiting = PendingStore(project).find(request)
            except PendingError:
                continue
            answer = await approver(ApprovalRequest(waiting.call_info(), waiting.reason, before_start=True,
                                                    always_offered=False))
            if answer in (Answer.ONCE, Answer.DENY):
                answer_request(project, request, answer.value)
            return answer is Answer.ONCE
        return False

    def _kernel_projects(self) -> list[Path]:
        """Where the paired kernel's session may have published: its notebook's folder, or here."""
        places = [self.workdir]
        notebook = (self._pairing_args or {}).get("notebook")
        if notebook:
            places.insert(0, (self.workdir / notebook).resolve().parent)
        return list(dict.fromkeys(places))


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


class _Runs:
    """A client's runs going on: at most `RUNS_AT_ONCE` at once, counted so that its Session is
    closed only once none is left (`wait_idle`), and not while one goes on (`busy`)."""

    def __init__(self) -> None:
        self._turns = threading.Semaphore(RUNS_AT_ONCE)
        self._changed = threading.Condition()
        self._going = 0

    @contextmanager
    def one(self) -> Iterator[None]:
        with self._turns:
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
    annotations = types.ToolAnnotations.model_validate(tool.annotations) if tool.annotations else None
    return types.Tool(name=name, title=tool.title, description=tool.description or "",
                      input_schema=dict(tool.input_schema), annotations=annotations)


def _terse_tool(tool: Tool) -> types.Tool:
    description, properties, required = TERSE[tool.name]
    schema = {"type": "object", "properties": {k: {"type": t} for k, t in properties.items()}, "required": required}
    return types.Tool(name=tool.name, description=description, input_schema=schema)


def _close_client(session: Session) -> None:
    session.approvals.withdraw_published()
    session.close()


def _client_key(ctx: Any) -> str:
    """Which MCP session a request belongs to: its `mcp-session-id` over HTTP, else the one stdio client."""
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    return (headers.get("mcp-session-id") if headers is not None else None) or "stdio"


def _approver_for(ctx: Any, loop: asyncio.AbstractEventLoop, *, stops_first: bool) -> Approver:
    """Elicitation when the client offers it, else the run stops and reports."""
    wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    if not ctx.session.check_client_capability(wanted):
        return stop_and_report

    async def elicit(message: str, schema: Mapping[str, Any]) -> Mapping[str, Any] | None:
        asked = asyncio.run_coroutine_threadsafe(
            ctx.session.elicit_form(message, dict(schema), ctx.request_id), loop)
        result = await asyncio.wrap_future(asked)
        return result.content if result.action == "accept" else None

    return ElicitApprover(elicit, stops_first=stops_first)


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
    # A person answers from a terminal; the agent reading this has no notebook to type in.
    return (f"[waiting for a person] {printable(waiting['call']['tool'])}: a person answers in a terminal with"
            f" `toolkernel approve {waiting['id']} once|always|deny`; then {again}")


def _bash_text(body: Mapping[str, Any]) -> str:
    text = body["stdout"]
    if body["stderr"]:
        text += ("\n" if text and not text.endswith("\n") else "") + "[stderr]\n" + body["stderr"]
    if body["exit_code"]:
        text += f"\n[exit code {body['exit_code']}]"
    if _worth_telling(body):
        shown = {key: body[key] for key in ("exit_code", "success", "tools", "changes") if key in body}
        # Tool names and inputs of a server's and a script's choosing: escaped where not printable.
        text += "\n[report]\n" + printable_json(json.dumps(shown, indent=1, ensure_ascii=False, default=str))
    text += "".join(f"\n{_answer_with(w)}" for w in body.get("waiting", ()))
    return text


def _image(path: Path) -> types.ImageContent:
    mime = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
            ".webp": "image/webp", ".svg": "image/svg+xml"}.get(path.suffix.lower(), "application/octet-stream")
    return types.ImageContent(type="image", data=base64.b64encode(path.read_bytes()).decode(), mime_type=mime)


def _error(code: str, message: str) -> types.CallToolResult:
    line = json.dumps({"error": {"code": code, "message": message}})
    return types.CallToolResult(content=[types.TextContent(type="text", text=line)], is_error=True)


async def serve_stdio(tool_server: ToolServer) -> None:
    from mcp.server.stdio import stdio_server

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
    tool_server = ToolServer(workdir, notebook=notebook)
    try:
        address = parse_address(http, token, no_token) if http is not None else None
        if paired := tool_server.pair():
            print(f"toolkernel serve: {paired}", file=sys.stderr)
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
    app = tool_server.server().streamable_http_app(streamable_http_path="/mcp", host=host,
                                                   session_idle_timeout=SESSION_IDLE_SECONDS)
    tool_server.forget_after = SESSION_IDLE_SECONDS + 60
    app = _SessionEnds(app, tool_server)
    return app if token is None else _TokenCheck(app, token)


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
