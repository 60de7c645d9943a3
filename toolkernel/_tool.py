"""The contract every tool meets, whoever provides it.

A `Tool` is a name, a description, a JSON Schema for its input, what kind of
action it is (for the approval layer) and an async `call`. toolkernel's own
tools are plain functions wrapped by the `tool()` decorator; MCP tools and
notebook tools build `Tool` objects the same way.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal, Mapping, Protocol

from ._errors import CallError, ToolInputError
from ._longtext import LongJSON, LongText, whole
from ._loop import may_block
from ._names import ProviderKind, display, qualified

# What a call may do, from the approval layer's point of view:
#   read     changes nothing (runs in every mode but a denial)
#   edit     changes files or notebooks in the workspace (runs in accept-edits)
#   execute  anything else: runs code, calls out, may change the world
Kind = Literal["read", "edit", "execute"]


@dataclass(frozen=True)
class Image:
    data: bytes
    mime_type: str = "image/png"


@dataclass
class ToolResult:
    """What a tool gave back. A tool that ran and failed sets `is_error`."""

    # A text may be a `LongText` (kept in a file) where an MCP server's reply was long; code
    # that needs it as a str says so (`whole`). So may `structured` be a `LongJSON`: code that
    # needs its values asks for them (`value`, `LongJSON.parsed`).
    texts: list[str | LongText] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)
    structured: Any = None
    is_error: bool = False
    # `structured` holds only what parsing JSON makes (str keys; str, int, float, bool, None,
    # lists, dicts), as an MCP server's does: it is printed by a faster encoder (`to_json`).
    plain_json: bool = False
    # The run reports a kernel displayed for this call (`notebook_run`): the MIME part toolkernel's
    # magics display, never text that a cell printed (which it could word as it likes).
    run_reports: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def text(cls, text: str) -> "ToolResult":
        return cls(texts=[text])

    @classmethod
    def json(cls, value: Any) -> "ToolResult":
        return cls(structured=value)

    @classmethod
    def error(cls, message: str) -> "ToolResult":
        return cls(texts=[message], is_error=True)

    def value(self) -> Any:
        """The result as a Python value: JSON data, or text."""
        if self.structured is not None:
            return self.structured.parsed() if type(self.structured) is LongJSON else self.structured
        text = "\n".join(map(whole, self.texts))
        if text.lstrip(" \t\r\n")[:1] not in _JSON_STARTS:
            return text  # not JSON: spared json's raising, a tenth of a direct call of a small tool
        try:
            return json.loads(text)
        except ValueError:
            return text


# The first character of a JSON text after its whitespace (`json.loads` takes NaN and Infinity too).
_JSON_STARTS = frozenset('{["-0123456789tfnNI')

ProgressFn = Callable[[float, "float | None", "str | None"], None]


def _no_progress(progress: float, total: float | None = None, message: str | None = None) -> None:
    pass


def never_cancelled() -> bool:
    return False


class Recorder(Protocol):
    """A run's part of the journal of changes (`_journal.RunJournal`): what a tool, the run's
    record and a runner may ask of it. Defined here, below every layer that holds one."""

    id: str
    # The workspace's journal this run writes to (`_journal.Journal`, a layer above this module,
    # so not named as its type): the rewind tool reads the runs there.
    journal: Any
    # Once finished: the runs the day's limit dropped to make room for this one (their records).
    dropped: list[Mapping[str, Any]]

    def before_change(self, path: str | os.PathLike[str], kind: str | None = None, *,
                      to: str | os.PathLike[str] | None = None, after_the_fact: bool = False) -> None:
        """Record `path` before this run first changes it (`to`: where a rename takes it)."""

    def before_cell(self, server: str, notebook: str, cell_id: str, source: str) -> None:
        """Record a notebook cell on a Jupyter Server before this run first changes its source."""

    def after_cell(self, server: str, notebook: str, cell_id: str, source: str) -> None:
        """The cell's source once the change was made."""

    def before_shell(self, script: str | None, skip: frozenset[str], *,
                     builtins_only: bool = False) -> Callable[[], None]:
        """A shell run is about to start (`script`: its text; `builtins_only`: its commands are the
        shell's own, which write only what they name): returns what to call once the run's writers
        are done, to record what they changed."""

    def written_by_a_call(self, path: str | os.PathLike[str]) -> bool:
        """Whether a tool call of this run recorded `path` before changing it."""

    def finish(self) -> int:
        """End the run; how many files (and served cells) it changed."""

    def said(self) -> list[str]:
        """What the run's cell should say about the journal (runs the day's limit dropped, files
        that are not restorable and why): lines for a person, once the run ended."""


@dataclass
class ToolContext:
    """What a tool may know about the call it serves."""

    workdir: Path
    settings: Mapping[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    progress: ProgressFn = _no_progress

    # Where the call's path arguments lead, by key, as the dispatcher resolved them for its checks
    # (real paths, as strings).
    paths: Mapping[str, str] = field(default_factory=dict)

    # Whether the run this call serves was interrupted or ran out of time (see `check_cancelled`).
    cancelled: Callable[[], bool] = never_cancelled

    # A tool that cuts a large result into its ends (`Tool.cut`) leaves it whole: the dispatcher
    # cuts it after the post-call hooks, so that the whole it saves is what they let through.
    cut_later: bool = False

    # The OS sandbox (`_sandbox.Plan`) a host program this call starts must run in: set for a
    # command tool an agent's run calls; None for a person's run.
    sandbox: Any = None

    # The run's journal of changes, None where nothing records: a tool that changes a workspace
    # file calls `journal.before_change(path)` before it does.
    journal: Recorder | None = None

    def check_cancelled(self) -> None:
        """Raise `asyncio.CancelledError` once the run was interrupted or ran out of time.

        Plain sync code cannot be stopped from outside: on the script's thread an interrupt
        waits for it, and in a worker thread it goes on after the run has ended. A tool that
        may work long in such code (a walk of a big tree) calls this now and then."""
        if self.cancelled():
            raise asyncio.CancelledError("the run was interrupted")

    def resolve(self, path: str) -> Path:
        """A path from tool input, relative to the working directory."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.workdir / p

    def real(self, arguments: Mapping[str, Any], key: str) -> Path:
        """The path argument `key`, symlinks and `..` resolved: the dispatcher's resolution, which
        its checks judged (resolved here when the tool is called without the dispatcher)."""
        return Path(self.real_name(arguments, key))

    def real_name(self, arguments: Mapping[str, Any], key: str) -> str:
        """`real` as a string, for a tool that needs no Path (making one costs microseconds)."""
        known = self.paths.get(key)
        return known if known is not None else os.path.realpath(self.resolve(arguments[key]))


CallFn = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]
CallNowFn = Callable[[dict[str, Any], ToolContext], ToolResult]


@dataclass(frozen=True)
class ServerPath:
    """A path input naming a file on a server (a notebook paired with --server), not on this machine:
    the server's root is its boundary, not the workspace, and rules and the person see it as the
    server names it."""

    path: str  # from the server's root, `..` resolved inside it
    server: str  # the server's URL (never its token)


# (input, session state) -> the input keys whose paths name files on a server
ServerPathsFn = Callable[[Mapping[str, Any], Mapping[str, Any]], Mapping[str, ServerPath]]


@dataclass(frozen=True)
class ProviderRef:
    """Which provider a tool came from (see `_providers.ToolProvider`).

    `name` is None for providers whose tools are top-level commands
    (`tools read-file`); an MCP provider is named after its server. `loop_bound`:
    the provider's tools use connections that live on toolkernel's private loop
    (MCP sessions), so their calls must run there.
    """

    kind: ProviderKind = "builtin"
    name: str | None = None
    loop_bound: bool = False


BUILTIN = ProviderRef()


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: Mapping[str, Any]
    call: CallFn
    kind: Kind = "execute"
    provider: ProviderRef = BUILTIN
    # Input keys that hold file paths; a path outside the workspace asks.
    path_keys: tuple[str, ...] = ()
    # Tools whose paths may name files on a server say which do, for the call at hand.
    server_paths: ServerPathsFn | None = None
    annotations: Mapping[str, Any] = field(default_factory=dict)
    title: str | None = None  # an MCP server's display name, passed on where the tool is listed
    # A single tool of an in-process provider that holds a connection living on
    # toolkernel's private loop (a paired kernel's client) says so here; a
    # provider whose every tool does says so in its `ProviderRef`.
    loop_bound: bool = False
    # A check that needs no person and no I/O, made before anyone is asked about the call
    # (notebook-run with nothing paired): it raises a CallError; None when there is none.
    precheck: Callable[[Mapping[str, Any], ToolContext], None] | None = None
    # A check of what the call needs that may need I/O (a notebook read in this session, a server
    # that keeps a notebook open without collaboration), made after `precheck` and still before
    # anyone is asked: a call that cannot succeed fails at once. It raises a ToolInputError.
    ready: Callable[[Mapping[str, Any], ToolContext], Awaitable[None]] | None = None
    # The same call as `call`, made at once on the calling thread, for a tool of plain sync code
    # (None for any tool that may wait): a call that needs no event loop is made without one.
    call_now: CallNowFn | None = None
    # What a person asked about a call sees beside its input, worked out from the session (the
    # code a notebook cell holds); None: nothing more than the input.
    describe: Callable[[Mapping[str, Any], ToolContext], Mapping[str, Any]] | None = None
    # How a tool that shows a large result by its ends (and saves the whole) cuts it, for the
    # dispatcher to do after the post-call hooks (`ToolContext.cut_later`); None: it never cuts.
    cut: Callable[[ToolResult, ToolContext], ToolResult] | None = None

    @property
    def read_only(self) -> bool:
        return self.kind == "read"

    @property
    def server(self) -> str | None:
        """The provider's name: the MCP server's, None for a top-level tool."""
        return self.provider.name

    @property
    def runs_on_private_loop(self) -> bool:
        # Other tools may run on the calling thread's own loop, which spares a thread hand-off.
        return self.loop_bound or self.provider.loop_bound

    @functools.cached_property  # names are asked for on every call
    def qualified_name(self) -> str:
        return qualified(self.provider.kind, self.provider.name, self.name)

    def describe_call(self, arguments: Mapping[str, Any], ctx: ToolContext | None = None) -> dict[str, Any]:
        """What a person asked about this call sees beside its input (a command tool: argv; a
        notebook cell run: its code). `ctx`: the session's, where the call is judged."""
        if self.describe is None or ctx is None:
            return {}
        return dict(self.describe(arguments, ctx))

    @functools.cached_property
    def command(self) -> str:
        parts = ["tools"] + ([self.provider.name] if self.provider.name else []) + [self.name]
        return " ".join(display(p) for p in parts)


def as_result(value: Any) -> ToolResult:
    """Normalize what a tool function returned."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, Image):
        return ToolResult(images=[value])
    if isinstance(value, str):
        return ToolResult.text(value)
    return ToolResult.json(value)


def tool(
    name: str,
    *,
    description: str,
    input_schema: Mapping[str, Any],
    kind: Kind = "execute",
    path_keys: tuple[str, ...] = (),
    loop_bound: bool = False,
    precheck: Callable[[Mapping[str, Any], ToolContext], None] | None = None,
    ready: Callable[[Mapping[str, Any], ToolContext], Awaitable[None]] | None = None,
    server_paths: ServerPathsFn | None = None,
    cut: Callable[[ToolResult, ToolContext], ToolResult] | None = None,
    describe: Callable[[Mapping[str, Any], ToolContext], Mapping[str, Any]] | None = None,
) -> Callable[[Callable[..., Any]], Tool]:
    """Turn `fn(input, ctx)` (sync or async) into a `Tool`.

    On toolkernel's private loop a sync function runs in a worker thread, so a
    slow file or network call never blocks the loop that serves MCP servers (nor
    the loop that hands a script's output on: `_loop.may_block`); on any other
    thread's loop it runs in place, and a caller with no loop may make it at once
    through `Tool.call_now`. An exception the function
    raises becomes an error result, not a crash.
    """

    def wrap(fn: Callable[..., Any]) -> Tool:
        if inspect.iscoroutinefunction(fn):  # asked once, not on every call
            call, call_now = _async_call(fn), None
        else:
            call_now = _call_now(fn)
            call = _sync_call(fn, call_now)
        return Tool(name, description, dict(input_schema), call, kind=kind, path_keys=path_keys,
                    loop_bound=loop_bound, precheck=precheck, ready=ready, server_paths=server_paths, call_now=call_now,
                    cut=cut, describe=describe)

    return wrap


def _async_call(fn: Callable[..., Awaitable[Any]]) -> CallFn:
    @functools.wraps(fn)
    async def call(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            value = await fn(arguments, ctx)
        except Exception as exc:  # noqa: BLE001 - a failed tool is a result
            return _failed(exc)
        return as_result(value)

    return call


def _call_now(fn: Callable[..., Any]) -> CallNowFn:
    @functools.wraps(fn)
    def call_now(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            value = fn(arguments, ctx)
        except Exception as exc:  # noqa: BLE001 - a failed tool is a result
            return _failed(exc)
        return as_result(value)

    return call_now


def _sync_call(fn: Callable[..., Any], call_now: CallNowFn) -> CallFn:
    @functools.wraps(fn)
    async def call(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if not may_block():  # a slow file or network call must not block the loop of the MCP servers,
            return await asyncio.to_thread(call_now, arguments, ctx)  # nor a script's output
        return call_now(arguments, ctx)

    return call


def _failed(exc: Exception) -> ToolResult:
    """What a tool's exception becomes: a coded failure (unavailable, connection_required...)
    keeps its code and is raised on; anything else is an error result, not a crash."""
    if isinstance(exc, CallError):
        raise exc
    if isinstance(exc, ToolInputError):
        return ToolResult.error(str(exc))
    return ToolResult.error(f"{type(exc).__name__}: {exc}")
