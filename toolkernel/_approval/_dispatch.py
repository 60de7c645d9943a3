"""The one choke point every tool call passes: limit, schema, hooks, policy, call.

Whatever the route (a `%%tools` script, `%tools`, the Python API), a call
goes through `Dispatcher.call`, so the same checks always run in the same
order:

    call limit -> schema -> pre-call hooks -> policy (+ approvals) -> tool -> post-call hooks
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping  # isinstance with typing.Mapping costs several us per check
from typing import Any, Callable, Coroutine, TypeVar

from ._approvals import Approvals, lasting_rule_covers
from ._approver import Answer, ApprovalRequest, Approver, stop_and_report
from .._errors import CallError, CallLimit, Denied, InvalidInput, NeedsApproval, Stopped, ToolFailed, ToolInputError
from ._hooks import HookOutcome, Hooks
from .._config._limits import ShellLimits
from .._config._sandbox import SandboxSettings
from .._config._tools import own_settings
from ._policy import CallInfo, Decision, Policy, canonical_call_key, decide
from ._run import NO_EVENTS, Run, RunEvents
from .._longtext import LongJSON, whole
from .._tool import Tool, ToolContext, ToolResult, as_result, never_cancelled
from ._protected import Protection, touches_protected
from .._sandbox import Plan, mechanism as sandbox_mechanism
from .._shadowing import Shadow, installed, shadow_of_write
from .._providers._tools._paths import outside_workspace, real_path, real_paths, rule_forms

T = TypeVar("T")
_NO_HOOK = HookOutcome()
_ALLOWS = (Answer.ONCE, Answer.ALWAYS)
_ANSWER_WORDS = {Answer.ONCE: "allowed once", Answer.ALWAYS: "always allowed", Answer.DENY: "denied"}


@dataclass
class CallEnv:
    """What the dispatcher needs from the session, read fresh for each run."""

    workdir: Path
    policy: Policy  # includes the lasting "always allow" rules
    approvals: Approvals
    hooks: Hooks
    settings: Mapping[str, Any]  # [tools]: each own tool is handed its own table
    state: dict[str, Any]
    approver: Approver = stop_and_report  # who answers at the ask point
    guarded: Protection | None = None  # what no call may write unasked (see _protected.py)
    untrusted: tuple[str, ...] = ()  # project folders whose config only tightens, for --help
    # When a project's config waits for trust: what an error it may cause says (`_untrusted.not_trusted`).
    not_trusted: str = ""
    shell: ShellLimits = ShellLimits()  # [shell]: what the runner may use
    # A direct call works `guarded` out only for a call that names paths (most name none).
    plan_guarded: Callable[[], Protection] | None = None
    # An agent's run (`serve`, a cell an agent sent): the host programs its calls start run in
    # the OS sandbox that `sandbox` works out (None where the machine has none: they ask).
    agent: bool = False
    sandbox: Callable[[], Plan | None] | None = None
    sandbox_settings: SandboxSettings = SandboxSettings()  # [sandbox]: what the OS sandbox shows more
    _plan: Plan | None = None

    def protection(self) -> Protection | None:
        if self.plan_guarded is not None:
            self.guarded, self.plan_guarded = self.plan_guarded(), None
        return self.guarded

    def starts_host_code(self, tool: Tool) -> bool:
        """Whether calling `tool` in this run starts a program an agent chose to run."""
        return self.agent and tool.provider.kind == "command"

    def host_sandbox(self, tool: Tool, info: CallInfo | None = None) -> Plan | None:
        """The sandbox `tool`'s program runs in (with the network where a `[policy] network`
        rule names the call `info`); None for a person's run."""
        if not self.starts_host_code(tool) or self.sandbox is None:
            return None
        if self._plan is None:
            self._plan = self.sandbox()
        if self._plan is not None and info is not None and self.policy.grants_network(info):
            return self._plan.with_network(True)
        return self._plan

    def unsandboxed(self, tool: Tool, arguments: Mapping[str, Any] | None = None) -> bool:
        """An agent's call that would start a host program on a machine with no OS sandbox, or
        with the network under Landlock, which cannot hold it (both ask a person)."""
        if not self.starts_host_code(tool):
            return False
        found = sandbox_mechanism()
        return not found.available or (found.name == "landlock" and self.wants_network(tool, arguments or {}))

    def wants_network(self, tool: Tool, arguments: Mapping[str, Any]) -> bool:
        """Whether `tool`'s program gets the network: its config says so, or a `[policy]
        network` rule names the call."""
        if getattr(getattr(tool, "config", None), "network", False):
            return True
        info = CallInfo(tool.qualified_name, tool.command, arguments, tool.kind)
        return self.policy.grants_network(info)


def _schema_keys(tool: Tool) -> frozenset[str] | None:
    """The input keys the tool's schema declares, worked out once per schema (a set per call
    was most of `call_info`); held beside its schema, as the validators are below."""
    schema = tool.input_schema
    cached = _KEYS.get(id(schema))
    if cached is None or cached[0] is not schema:
        properties = schema.get("properties") if isinstance(schema, Mapping) else None
        cached = (schema, frozenset(properties) if isinstance(properties, Mapping) else None)
        if len(_KEYS) >= _MAX_VALIDATORS:
            _KEYS.clear()
        _KEYS[id(schema)] = cached
    return cached[1]


_KEYS: dict[int, tuple[Any, frozenset[str] | None]] = {}


# Checked validators by the id of their schema, shared by every run: a direct call makes a
# fresh dispatcher each time, and checking a schema costs more than the call. The schema is
# held beside its validator, so its id cannot be reused while the entry lives.
_VALIDATORS: dict[int, tuple[Any, "_Checked"]] = {}
_MAX_VALIDATORS = 1024
_MAX_REMEMBERED = 256  # valid inputs kept per schema
_MAX_REMEMBERED_TEXT = 256  # characters of a string value that may be kept


class _Checked:
    """A schema's validator, and inputs it found valid lately. A script calls a tool in a loop
    with the same input, and jsonschema's check cost a small call a quarter of its time: its
    verdict on an input it has seen is not asked for again. Only valid inputs are kept, so an
    invalid one always reaches jsonschema and gets its full error."""

    def __init__(self, validator: Any) -> None:
        self.validator = validator
        self.valid: set[tuple[Any, ...]] = set()

    def remember(self, repeat: tuple[Any, ...] | None) -> None:
        if repeat is None:
            return
        if len(self.valid) >= _MAX_REMEMBERED:
            self.valid.clear()
        self.valid.add(repeat)


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _repeatable(arguments: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """`arguments` as a key that equals another's only when jsonschema cannot tell them apart:
    flat inputs of JSON scalars, each value with its exact type (1, 1.0 and True are not one
    input); None for anything else (nested values, long texts, other types), which is checked
    every time."""
    if type(arguments) is not dict:
        return None
    key = []
    for name, value in arguments.items():
        kind = type(value)
        if kind not in _SCALARS or (kind is str and len(value) > _MAX_REMEMBERED_TEXT):
            return None
        key.append((name, kind, value))
    return tuple(key)


def _refuse_half_pairs(arguments: Mapping[str, Any]) -> None:
    """Half a surrogate pair in a string or key of the input (JSON can write one alone, as
    `"\\ud800"`, and Python input can hold one): it is no character, and no file name,
    program argument or message to a server can carry it (the MCP SDK's encoder failed and the
    server's connection was dropped). Walked without recursion: direct input can be deep."""
    stack: list[tuple[Any, str]] = [(arguments, "input")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and _HALF_PAIR.search(value):
                raise InvalidInput(f"{where}: holds half a surrogate pair (a \\ud800-\\udfff escape alone),"
                                   " which is no character; write the character itself, or both halves of its pair")
        elif isinstance(value, Mapping):
            stack += [(key, f"{where} (a key)") for key in value]
            stack += [(item, f"{where}[{key!r}]") for key, item in value.items()]
        elif isinstance(value, (list, tuple)):
            stack += [(item, f"{where}[{index}]") for index, item in enumerate(value)]


_HALF_PAIR = re.compile("[\ud800-\udfff]")


def _server_paths(tool: Tool, arguments: Mapping[str, Any],
                  state: Mapping[str, Any]) -> tuple[Tool, Mapping[str, Any], str | None]:
    """Paths that name files on a server leave the local checks (workspace, protected files) to the
    server's root, and reach rules, the person and the tool as the server names them."""
    on_server = tool.server_paths(arguments, state) if tool.server_paths is not None else {}
    if not on_server:
        return tool, arguments, None
    local = dataclasses.replace(tool, path_keys=tuple(key for key in tool.path_keys if key not in on_server))
    named = {**arguments, **{key: place.path for key, place in on_server.items()}}
    return local, named, ", ".join(sorted({place.server for place in on_server.values()}))


def _shown(tool: Tool, arguments: Mapping[str, Any], server: str | None, ctx: Callable[[], ToolContext]) -> dict[str, Any]:
    return {**tool.describe_call(arguments, ctx()), **({"server": server} if server else {})}


def _shadows(tool: Tool, paths: Mapping[str, str], root: str) -> tuple[Shadow, ...]:
    """What a call that may write would leave at the workspace's top in place of an installed
    module (see _shadowing.py): a script's run has what it leaves there moved aside when it
    ends; a direct write asks first instead."""
    if tool.read_only:
        return ()
    found = installed(root)
    shadows = (shadow_of_write(key, path, root, found) for key, path in paths.items())
    return tuple(shadow for shadow in shadows if shadow is not None)


class WouldAsk(Exception):
    """A call made `only_if_allowed` that the policy does not simply allow: not made, not
    counted; its caller makes it again where waiting on a person costs nothing."""


class Dispatcher:
    def __init__(self, env: CallEnv) -> None:
        self.env = env

    def call_info(self, tool: Tool, arguments: Mapping[str, Any]) -> CallInfo:
        local, server = tool, None
        if tool.server_paths is not None:
            local, arguments, server = _server_paths(tool, arguments, self.env.state)
        workdir = self.env.workdir
        guarded = self.env.protection() if local.path_keys else None
        paths = real_paths(local, arguments, workdir, guarded and str(guarded.workdir)) if local.path_keys else {}
        if not paths:  # most calls name no path: none of the path checks below
            return CallInfo(tool.qualified_name, tool.command, arguments, tool.kind,
                            schema_keys=_schema_keys(tool), unsandboxed=self.env.unsandboxed(tool, arguments),
                            shown=functools.partial(_shown, tool, arguments, server, functools.partial(self._context, tool)))
        root = guarded.workdir if guarded else real_path(workdir)
        return CallInfo(
            qualified_name=tool.qualified_name,
            command=tool.command,
            input=arguments,
            kind=tool.kind,
            outside_workspace=outside_workspace(local, arguments, workdir, paths, root=root),
            protected=touches_protected(local, arguments, workdir, guarded, paths),
            unsandboxed=self.env.unsandboxed(tool, arguments),
            shadows=_shadows(local, paths, str(root)),
            schema_keys=_schema_keys(tool),
            shown=functools.partial(_shown, tool, arguments, server, functools.partial(self._context, tool)),
            paths=paths,
            path_forms=rule_forms(paths, str(root)),
        )

    async def call(self, tool: Tool, arguments: dict[str, Any], run: Run,
                   events: RunEvents = NO_EVENTS, *, payload: Mapping[str, Any] | None = None,
                   only_if_allowed: bool = False) -> ToolResult:
        """`payload`: values the tool gets over `arguments` that the checks, hooks, person and
        report only see as their stand-ins in `arguments` (a 256 MB `--save` content).
        `only_if_allowed` (with no hooks): see `WouldAsk`."""
        info = self._admit(tool, arguments, run)
        if only_if_allowed and self.decide(info).action != "allow":
            self._not_here(info, run)
        guard = None if run is None else run.guard
        if guard is not None:  # before a hook or the tool may run what the script left there
            guard.before_call()
        try:
            info = await self._before(info, tool, run)
            result = await self._invoke(tool, info, payload or {}, run, events)
        finally:
            if guard is not None:
                guard.after_call()
        if self.env.hooks.any("after_call"):
            result.texts = [whole(text) for text in result.texts]  # a hook reads, and may change, all of it
            if type(result.structured) is LongJSON:
                result.structured = result.structured.parsed()
            result = await self.env.hooks.run_after(info, result)
            if tool.cut is not None:  # the tool left it whole (`_call_args`): the saved whole is what the hooks left
                result = as_result(tool.cut(result, self._context(tool)))
        self._record(tool, info, result, run)
        return result

    def can_call_now(self) -> bool:
        """Whether `call_now` may make calls: no hook is registered (hooks may wait)."""
        hooks = self.env.hooks
        return not hooks.any("before_call") and not hooks.any("after_call")

    def call_now(self, tool: Tool, arguments: dict[str, Any], run: Run, events: RunEvents,
                 wait: Callable[[Coroutine[Any, Any, T]], T], *, only_if_allowed: bool = False) -> ToolResult:
        """The call as `call` makes it, the same checks in the same order, made from sync code
        where `can_call_now`; `wait` runs what may wait (asking a person, when the policy does
        not simply allow the call, and an async tool) to its end on this thread's loop. A tool of
        plain sync code (`Tool.call_now`) then runs with no event loop at all: a loop and its task
        cost a call of a small tool a sixth of its time. `only_if_allowed`: see `WouldAsk`."""
        info = self._admit(tool, arguments, run)
        decision = decide(info, self.env.policy)
        if decision.action != "allow" and only_if_allowed:
            self._not_here(info, run)
        if decision.action != "allow":
            wait(self._enforce(decision, info, run, tool))
        arguments, ctx = self._call_args(tool, info, {}, run, events)
        guard = None if run is None else run.guard
        if guard is not None:  # before the tool may run what the script left there
            guard.before_call()
        try:
            result = tool.call_now(arguments, ctx) if tool.call_now is not None else wait(tool.call(arguments, ctx))
        except CallError as exc:
            self._failed(tool, arguments, run, exc)
            raise
        finally:
            if guard is not None:
                guard.after_call()
        self._record(tool, info, result, run)
        return result

    def _admit(self, tool: Tool, arguments: Mapping[str, Any], run: Run) -> CallInfo:
        """The checks before any hook or person: the call limit, the schema, the tool's own."""
        self._count(tool, arguments, run)
        self.validate(tool, arguments)
        self.precheck(tool, arguments)
        return self.call_info(tool, arguments)

    @staticmethod
    def _not_here(info: CallInfo, run: Run) -> None:
        run.uncount()  # counted by `_admit`, and again when the call is made
        raise WouldAsk(info.command)

    @staticmethod
    def _record(tool: Tool, info: CallInfo, result: ToolResult, run: Run) -> None:
        run.record(tool.command, info.input, read_only=tool.read_only, ok=not result.is_error,
                   make_result=None if tool.read_only else _recorded(result))

    def _count(self, tool: Tool, arguments: Mapping[str, Any], run: Run) -> None:
        refused = run.admit(tool.command, arguments)
        if refused == "stopped":
            # Named: a call of another job may be the one refused, not the next line of the script.
            raise Stopped(f"{tool.command} not run: an earlier call stopped the script ({run.stopped.reason})")
        if refused is not None:
            raise CallLimit(f"{tool.command}: more than {run.limit} tool calls in one shell run;"
                            " the script stops here")

    def validate(self, tool: Tool, arguments: Mapping[str, Any]) -> None:
        checked = self._validator(tool)
        repeat = _repeatable(arguments)
        if repeat is not None and repeat in checked.valid:
            return  # jsonschema found this very input valid for this schema already
        # Imported on first use, not with the module (0.1 s; it was 1.1 s before the lazy
        # grammar of `_imports.LazyFormatGrammar`), which a first `tools --help` never needs.
        import jsonschema
        import referencing.exceptions

        _refuse_half_pairs(arguments)  # not in what was found valid before: it was looked at then
        validator = checked.validator
        try:
            if validator.is_valid(arguments):  # the common case, without best_match's bookkeeping
                checked.remember(repeat)
                return
            error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
        except referencing.exceptions.Unresolvable as exc:  # a $ref that leads nowhere
            raise _broken_schema(tool, str(exc).splitlines()[0]) from exc
        except RecursionError as exc:  # input nested deeper than a recursive schema can follow
            raise InvalidInput("input is nested too deeply to check against the schema") from exc
        where = "input" + "".join(f"[{p!r}]" for p in error.absolute_path)
        schema_path = "/".join(str(p) for p in error.absolute_schema_path)
        raise InvalidInput(
            f"{where}: {error.message} (schema path: {schema_path}; see `{tool.command} --help`)",
            schema_path=schema_path,
        )

    def precheck(self, tool: Tool, arguments: Mapping[str, Any]) -> None:
        """The tool's own check that can fail before a person is asked (raises a CallError)."""
        if tool.precheck is not None:
            tool.precheck(arguments, self._context(tool))

    async def ready(self, tool: Tool, arguments: Mapping[str, Any]) -> None:
        """The tool's own check of what the call needs that may need I/O, before a person is asked
        (a notebook to edit that was not read): a call that cannot succeed fails at once, as the
        tool would fail it (`tool_error`), and nobody approves it in vain."""
        if tool.ready is None:
            return
        try:
            await tool.ready(arguments, self._context(tool))
        except ToolInputError as exc:
            raise ToolFailed(str(exc)) from exc

    def _context(self, tool: Tool, events: RunEvents = NO_EVENTS,
                 paths: Mapping[str, str] | None = None, run: Run | None = None,
                 info: CallInfo | None = None) -> ToolContext:
        return ToolContext(
            workdir=self.env.workdir,
            settings=own_settings(self.env.settings, tool.name),  # its own [tools.NAME] table only
            state=self.env.state,
            progress=lambda p, total=None, msg=None: events.progress(tool.command, p, total, msg),
            paths=paths or {},
            cancelled=never_cancelled if run is None else run.is_cancelled,
            # A post-call hook sees the whole result, and the whole saved is what it let through.
            cut_later=tool.cut is not None and self.env.hooks.any("after_call"),
            sandbox=self.env.host_sandbox(tool, info),
            journal=None if run is None else run.journal,
        )

    def _validator(self, tool: Tool) -> "_Checked":
        schema = tool.input_schema
        cached = _VALIDATORS.get(id(schema))
        if cached is None or cached[0] is not schema:
            import jsonschema

            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            try:
                cls.check_schema(schema)  # once per schema: a bad type or regex fails here, not mid-check
            except jsonschema.SchemaError as exc:
                where = "/".join(str(p) for p in exc.absolute_path) or "(top)"
                raise _broken_schema(tool, f"at {where}: {exc.message}") from exc
            cached = (schema, _Checked(cls(schema)))
            if len(_VALIDATORS) >= _MAX_VALIDATORS:
                _VALIDATORS.clear()
            _VALIDATORS[id(schema)] = cached
        return cached[1]

    async def _before(self, info: CallInfo, tool: Tool, run: Run) -> CallInfo:
        hooks = self.env.hooks
        outcome = await hooks.run_before(info) if hooks.any("before_call") else _NO_HOOK
        if outcome.input is not None:
            self.validate(tool, outcome.input)
            info = self.call_info(tool, outcome.input)
        decision = self.decide(info, outcome)
        if decision.action != "allow":  # the common case spares a coroutine
            await self._enforce(decision, info, run, tool)
        return info

    def decide(self, info: CallInfo, hook: HookOutcome | None = None) -> Decision:
        return decide(info, self.env.policy, hook)

    async def _enforce(self, decision: Decision, info: CallInfo, run: Run, tool: Tool) -> None:
        if decision.action == "deny":
            raise Denied(f"{info.command}: {decision.reason}")
        # A call that cannot succeed whatever the answer fails before anyone is asked; a deny
        # rule still decides first (a denied call says so, not why it could not have run).
        await self.ready(tool, info.input)
        if getattr(self.env.approver, "stops_first", False):
            return await self._stop_then_ask(decision, info, run)
        answer = await self.ask(self.request(info, decision.reason), self._recorded_in(run))
        if answer in _ALLOWS:
            return
        if answer is Answer.DENY:
            raise Denied(f"{info.command}: a person denied this call")
        run.stop("needs_approval", info.command, info.input, approval="requested", shown=info.shown())
        request = self.env.approvals.published_id(info)
        if request is not None:  # an agent's run: its person answers outside it
            raise NeedsApproval(f"{info.command} needs a person's approval ({decision.reason}); the call was not"
                                f" made. A person answers request {request} (in JupyterLab, or `toolkernel approve"
                                f" {request} once` in a terminal); then make it again", request=request)
        # How to answer is the front end's to say: a cell's report (its buttons, or `%tools approve`
        # in its text), a direct call's message (`_direct`); advice here sat red beside the buttons.
        raise NeedsApproval(f"{info.command} needs a person's approval ({decision.reason}); the call was not made")

    def request(self, info: CallInfo, reason: str, *, before_start: bool = False) -> ApprovalRequest:
        return ApprovalRequest(info, reason, before_start,
                               always_offered=lasting_rule_covers(self.env.policy, info))

    async def _stop_then_ask(self, decision: Decision, info: CallInfo, run: Run) -> None:
        """Seed 000, mid-run: the call is not made, the script stops, and the person is asked
        in the same step; a "once" covers this exact call once, for the agent's next script.
        A grant already given (before the start, or by such an answer) lets the call run."""
        key = canonical_call_key(info.qualified_name, info.input)
        if self.env.approvals.consume_once(key):
            return
        answer = await self.ask(self.request(info, decision.reason))
        if answer is Answer.ONCE:
            self.env.approvals.grant_once(key)
        approval = "granted" if answer in _ALLOWS else "denied" if answer is Answer.DENY else "requested"
        run.stop("needs_approval", info.command, info.input, approval=approval, shown=info.shown())
        said = _ANSWER_WORDS.get(answer, "no answer yet")  # the words every other line uses
        raise NeedsApproval(f"{info.command} was not made: the script stopped here and a person was asked"
                            f" ({said}). Write a new script for the rest"
                            + ("; it may make this call." if approval == "granted" else "."))

    async def ask(self, request: ApprovalRequest, approver: Approver | None = None) -> Answer:
        """The one ask point, at run time and before the start alike."""
        return await self.env.approvals.ask(request, approver or self.env.approver)

    def _recorded_in(self, run: Run) -> Approver:
        """The run's approver, each question it puts to a person kept in the run's record
        (`Run.asking`): the report lists what was asked mid-run and the answer. A question
        still open when the run ends (an interrupt) is reported cancelled."""
        approver = self.env.approver

        async def recorded(request: ApprovalRequest) -> Answer:
            call = request.call
            asked = run.asking(call.command, call.input, call.shown())
            answer = await approver(request)
            run.answered(asked, answer.value)
            return answer

        return recorded

    async def _invoke(self, tool: Tool, info: CallInfo, payload: Mapping[str, Any], run: Run,
                      events: RunEvents) -> ToolResult:
        arguments, ctx = self._call_args(tool, info, payload, run, events)
        try:
            return await tool.call(arguments, ctx)
        except CallError as exc:
            self._failed(tool, arguments, run, exc)
            raise

    def _call_args(self, tool: Tool, info: CallInfo, payload: Mapping[str, Any], run: Run,
                   events: RunEvents) -> tuple[dict[str, Any], ToolContext]:
        """What the tool is handed: the input the checks judged (and the payload over it), and
        its context, with the paths the checks judged (a payload value is not one of them)."""
        if not payload:
            return dict(info.input), self._context(tool, events, info.paths, run, info)
        paths = {key: path for key, path in info.paths.items() if key not in payload}
        return {**info.input, **payload}, self._context(tool, events, paths, run, info)

    @staticmethod
    def _failed(tool: Tool, arguments: Mapping[str, Any], run: Run, exc: CallError) -> None:
        if not tool.read_only:
            run.record(tool.command, arguments, read_only=False, ok=False, error=exc.to_json()["error"])


def _recorded(result: ToolResult) -> Callable[[], object]:
    """How the report makes the result it shows, when it is asked (images counted, not kept; a
    long text named by its length: kept, each would hold its file open until the run ends)."""
    kept = dataclasses.replace(result, images=[], texts=[
        text if type(text) is str else f"[a text of {len(text):,} characters, not kept for the report]"
        for text in result.texts])
    if type(result.structured) is LongJSON:
        kept.structured = f"[JSON of {len(result.structured):,} characters, not kept for the report]"
    images = len(result.images)
    return kept.value if not images else lambda: {"images": images, "value": kept.value()}


def _broken_schema(tool: Tool, problem: str) -> ToolFailed:
    owner = f"MCP server '{tool.server}'" if tool.server else "tool"
    return ToolFailed(
        f"{tool.command} cannot be called: its input schema, as the {owner} declares it, is invalid"
        f" ({problem}). This is a fault of the {owner}, not of your input; report it to its maintainers"
    )
