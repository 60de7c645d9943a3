"""Before the start: calls written out in full that need a person are asked about first.

Such a call goes to the same ask point as at run time (`Dispatcher.ask`,
with `before_start=True`): when the person allows it, the script starts and
the call runs in it; otherwise the script does not start at all (nothing
runs, so nothing is half done). This only improves the experience. It is
never the guarantee: every call is checked again by the dispatcher when it
runs, and anything the runner cannot read literally (variables, loops,
eval, functions, stdin input) is left to that run-time check.
"""

from __future__ import annotations

from .._approval._approver import Answer
from .._command._cli import parse_input, split_command
from .._command._command import ToolsCommand
from .._errors import CallError, Denied, NeedsApproval, NotReadYet
from .._approval._policy import CallInfo, canonical_call_key
from .._tool import Tool

_TWICE = ("the script makes this exact call twice and a one-off approval covers one;"
          " approve it --always or make it once")


async def preflight(literal_calls: list[list[str]], command: ToolsCommand) -> str | None:
    """None when the script may start; otherwise the error line of a script that did not
    start, "" when the person who denied it was already told (the run's stop is recorded,
    with `before_start`). Every call that needs a person is put in one question where the
    approver can ask about several at once (a person at the cell); else one at a time."""
    approvals = command.dispatcher.env.approvals
    asks: dict[str, tuple[CallInfo, str]] = {}
    reads: set[str] = set()  # notebooks a literal call earlier in the script reads
    for argv in literal_calls:
        found = await _resolve(argv, command, reads)
        if found is None:
            continue
        tool, info = found
        if tool.name == "notebook_read":
            reads.add(str(info.input.get("notebook_path")))
        decision = command.dispatcher.decide(info)
        if decision.action != "ask":
            continue
        key = canonical_call_key(info.qualified_name, info.input)
        if key in asks:  # a one-off approval covers one call: nothing is asked in vain
            approvals.add_pending(info)  # `%tools approve --always` answers it
            return _not_started(command, info, _TWICE, "requested")
        asks[key] = (info, decision.reason)
    todo = [(info, reason) for key, (info, reason) in asks.items() if not approvals.has_once(key)]
    if len(todo) > 1 and hasattr(command.dispatcher.env.approver, "ask_all"):
        return await ask_all_before_start(command, todo)
    for info, reason in todo:
        error = await ask_before_start(command, info, reason)
        if error is not None:
            return error
    return None


async def ask_all_before_start(command: ToolsCommand, todo: list[tuple[CallInfo, str]]) -> str | None:
    """One question for every call in `todo`; each answer applied at the one ask point, as a
    question of its own would be (a lasting rule saved, a once-grant kept for the run)."""
    dispatcher = command.dispatcher
    requests = [dispatcher.request(info, reason, before_start=True) for info, reason in todo]
    answers = await dispatcher.env.approver.ask_all(requests)
    for request, answer in zip(requests, answers):
        await dispatcher.ask(request, _given(answer))
    for (info, reason), answer in zip(todo, answers):
        if answer not in (Answer.ONCE, Answer.ALWAYS):
            error = _not_started(command, info, reason, "denied" if answer is Answer.DENY else "requested")
            # The person was told "denied; nothing ran": an error line would contradict it.
            return "" if answer is Answer.DENY and getattr(dispatcher.env.approver, "tells_the_answer", False) \
                else error
    return None


def _given(answer: Answer):
    async def given(request) -> Answer:
        return answer

    return given


async def ask_before_start(command: ToolsCommand, info: CallInfo, reason: str) -> str | None:
    """One call that asks, before anything runs: None when a once-grant or the person
    allows it; otherwise the error line of a script that did not start (its stop recorded)."""
    if command.dispatcher.env.approvals.has_once(canonical_call_key(info.qualified_name, info.input)):
        return None
    approver = command.dispatcher.env.approver
    answer = await command.dispatcher.ask(command.dispatcher.request(info, reason, before_start=True))
    if answer in (Answer.ONCE, Answer.ALWAYS):
        return None
    error = _not_started(command, info, reason, "denied" if answer is Answer.DENY else "requested")
    # The person who just said no was told "denied; nothing ran": an error line would contradict it.
    return "" if answer is Answer.DENY and getattr(approver, "tells_the_answer", False) else error


async def _resolve(argv: list[str], command: ToolsCommand, reads: set[str]) -> tuple[Tool, CallInfo] | None:
    catalog = command.catalog
    parsed = split_command(argv, catalog.is_server, catalog.split_qualified)
    if parsed.action != "call" or not parsed.args or "-" in parsed.args:
        return None  # no literal input: it may come from stdin, so it is checked as it runs
    try:
        tool = await catalog.find_tool(parsed.server, parsed.tool)
        arguments = parse_input(parsed.args, tool.input_schema, None)
        command.dispatcher.validate(tool, arguments)
        command.dispatcher.precheck(tool, arguments)  # nothing paired: said as it runs, never asked
        await _ready(command, tool, arguments, reads)  # a call that cannot succeed: never asked
        return tool, command.dispatcher.call_info(tool, arguments)  # resolves its paths: may be invalid too
    except CallError:
        return None  # the run reports it where the script makes the call


async def _ready(command: ToolsCommand, tool: Tool, arguments: dict, reads: set[str]) -> None:
    """The tool's own readiness check; a notebook to change that the script reads first is ready."""
    try:
        await command.dispatcher.ready(tool, arguments)
    except CallError as exc:
        if not (isinstance(exc.__cause__, NotReadYet) and str(arguments.get("notebook_path")) in reads):
            raise


def _not_started(command: ToolsCommand, info: CallInfo, reason: str, approval: str) -> str:
    # The report names the published request: `serve` asks its client about the request the
    # kernel's own report names, never one a cell's output names.
    request = None if approval == "denied" else command.dispatcher.env.approvals.published_id(info)
    command.run.stop("needs_approval", info.command, info.input, approval=approval, before_start=True,
                     shown=info.shown(), request=request)
    if approval == "denied":
        return Denied(f"{info.command}: a person denied this call; the script did not start").json_line() + "\n"
    if request is not None:  # an agent's: no cell of this kernel is the person's channel
        error = NeedsApproval(f"{info.command} needs a person's approval ({reason}); the script did not start."
                              f" A person answers request {request} (`toolkernel approve {request} once` in a"
                              " terminal, or the agent's client when it can ask); then run it again",
                              request=request)
    else:  # how to answer is the report's to say (the cell shows it: buttons, or `%tools approve`)
        error = NeedsApproval(f"{info.command} needs a person's approval ({reason}); the script did not start")
    return command.noted(error).json_line() + "\n"
