"""The one choke point every tool call passes: limit, schema, hooks, policy, call.

Whatever the route (a `%%tools` script, `%tools`, the Python API), a call
goes through `Dispatcher.call`, so the same checks always run in the same
order:

    call limit -> schema -> pre-call hooks -> policy (+ approvals) -> tool -> post-call hooks
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import jsonschema

from ._approvals import ApprovalStore
from ._errors import CallError, CallLimit, Denied, InvalidInput, NeedsApproval, Stopped
from ._hooks import HookOutcome, Hooks
from ._policy import CallInfo, Decision, Policy, canonical_call_key, decide
from ._tool import Tool, ToolContext, ToolResult
from ._guard import touches_protected
from ._tools._paths import outside_workspace

CALL_LIMIT = 50
_NO_HOOK = HookOutcome()
NOT_REACHED = "the stopped call and everything after it; write a new script for the rest"


@dataclass
class Run:
    """The calls of one shell run (or one direct call), for the report."""

    limit: int = CALL_LIMIT
    calls: int = 0
    done: list[dict[str, Any]] = field(default_factory=list)
    read_only_calls: int = 0
    stopped: dict[str, Any] | None = None
    before_start: bool = False
    on_stop: Callable[[], None] = lambda: None
    on_progress: Callable[[str, float, float | None, str | None], None] = lambda *a: None

    def stop(self, reason: str, call: CallInfo, **extra: Any) -> None:
        self.stopped = {"reason": reason, **extra, "call": call_shown(call)}
        self.on_stop()

    def record(self, tool: Tool, arguments: Mapping[str, Any], result: ToolResult) -> None:
        if tool.read_only:
            self.read_only_calls += 1
            return
        value = result.value() if not result.images else {"images": len(result.images), "value": result.value()}
        self.done.append({"tool": tool.command, "input": dict(arguments), "ok": not result.is_error, "result": value})

    def record_failure(self, tool: Tool, arguments: Mapping[str, Any], error: CallError) -> None:
        if not tool.read_only:
            self.done.append({"tool": tool.command, "input": dict(arguments), "ok": False, "error": error.to_json()["error"]})

    def needs_report(self, exit_code: int) -> bool:
        return self.stopped is not None or (exit_code != 0 and bool(self.done))

    def report(self, exit_code: int) -> dict[str, Any]:
        tools: dict[str, Any] = {"done": self.done, "read_only_calls": self.read_only_calls}
        if self.stopped is not None:
            tools["stopped"] = {**self.stopped, **({"before_start": True} if self.before_start else {})}
            tools["not_reached"] = NOT_REACHED
        return {"exit_code": exit_code, "success": exit_code == 0 and self.stopped is None, "tools": tools}


def call_shown(call: CallInfo) -> dict[str, Any]:
    """A call as a person is shown it: the tool, the input and what the tool adds (argv)."""
    return {"tool": call.command, "input": dict(call.input), **call.shown()}


@dataclass
class CallEnv:
    """What the dispatcher needs from the session, read fresh for each run."""

    workdir: Path
    policy: Policy  # includes the lasting "always allow" rules
    approvals: ApprovalStore
    hooks: Hooks
    settings: Mapping[str, Any]
    state: dict[str, Any]
    pending: list[CallInfo]  # calls that asked a person; `%tools approve` answers the last


class Dispatcher:
    def __init__(self, env: CallEnv) -> None:
        self.env = env
        self._validators: dict[int, tuple[Any, Any]] = {}

    def call_info(self, tool: Tool, arguments: Mapping[str, Any]) -> CallInfo:
        return CallInfo(
            qualified_name=tool.qualified_name,
            command=tool.command,
            input=arguments,
            kind=tool.kind,
            outside_workspace=outside_workspace(tool, arguments, self.env.workdir),
            protected=touches_protected(tool, arguments, self.env.workdir),
            shown=functools.partial(tool.describe_call, arguments),
        )

    async def call(self, tool: Tool, arguments: dict[str, Any], run: Run) -> ToolResult:
        self._count(tool, arguments, run)
        self.validate(tool, arguments)
        info = self.call_info(tool, arguments)
        info = await self._before(info, tool, run)
        result = await self._invoke(tool, dict(info.input), run)
        if self.env.hooks.any("after_call"):
            result = await self.env.hooks.run_after(info, result)
        run.record(tool, info.input, result)
        return result

    def _count(self, tool: Tool, arguments: Mapping[str, Any], run: Run) -> None:
        if run.stopped is not None:
            raise Stopped(f"not run: an earlier call stopped the script ({run.stopped['reason']})")
        run.calls += 1
        if run.calls > run.limit:
            info = CallInfo(tool.qualified_name, tool.command, arguments, tool.kind)
            run.stop("call_limit", info)
            raise CallLimit(f"more than {run.limit} tool calls in one shell run; the script stops here")

    def validate(self, tool: Tool, arguments: Mapping[str, Any]) -> None:
        validator = self._validator(tool)
        if validator.is_valid(arguments):  # the common case, without best_match's bookkeeping
            return
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
        where = "input" + "".join(f"[{p!r}]" for p in error.absolute_path)
        schema_path = "/".join(str(p) for p in error.absolute_schema_path)
        raise InvalidInput(
            f"{where}: {error.message} (schema path: {schema_path}; see `{tool.command} --help`)",
            schema_path=schema_path,
        )

    def _validator(self, tool: Tool):
        schema = tool.input_schema
        cached = self._validators.get(id(schema))
        if cached is None or cached[0] is not schema:
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            cached = (schema, cls(schema))
            self._validators[id(schema)] = cached
        return cached[1]

    async def _before(self, info: CallInfo, tool: Tool, run: Run) -> CallInfo:
        hooks = self.env.hooks
        outcome = await hooks.run_before(info) if hooks.any("before_call") else _NO_HOOK
        if outcome.input is not None:
            self.validate(tool, outcome.input)
            info = self.call_info(tool, outcome.input)
        self._enforce(self.decide(info, outcome), info, run)
        return info

    def decide(self, info: CallInfo, hook: HookOutcome | None = None) -> Decision:
        return decide(info, self.env.policy, hook)

    def _enforce(self, decision: Decision, info: CallInfo, run: Run) -> None:
        if decision.action == "allow":
            return
        if decision.action == "deny":
            raise Denied(f"{info.command}: {decision.reason}")
        if self.env.approvals.consume_once(canonical_call_key(info.qualified_name, info.input)):
            return
        self.env.pending.append(info)
        run.stop("needs_approval", info, approval="requested")
        raise NeedsApproval(
            f"{info.command} needs a person's approval ({decision.reason}); it was not made,"
            " and in a script nothing after it runs. Approve with `%tools approve` (or --always),"
            " or `toolkernel.approve()`, then make the call again (in a new script for the rest)"
        )

    async def _invoke(self, tool: Tool, arguments: dict[str, Any], run: Run) -> ToolResult:
        ctx = ToolContext(
            workdir=self.env.workdir,
            settings=self.env.settings,
            state=self.env.state,
            progress=lambda p, total=None, msg=None: run.on_progress(tool.command, p, total, msg),
        )
        try:
            return await tool.call(arguments, ctx)
        except CallError as exc:
            run.record_failure(tool, arguments, exc)
            raise

