"""Before the start: calls written out in full that need a person stop the script from starting.

This only improves the experience (nothing runs, so nothing is half done).
It is never the guarantee: every call is checked again by the dispatcher
when it runs, and anything this analysis cannot read literally (variables,
loops, eval, functions, stdin input) is left to that run-time check.
"""

from __future__ import annotations

from ._builtin import ToolsCommand
from ._cli import parse_input, split_command
from ._dispatch import call_shown
from ._errors import CallError, NeedsApproval
from ._policy import CallInfo, canonical_call_key
from ._shell import ShellResult


async def preflight(script: str, command: ToolsCommand) -> ShellResult | None:
    """None when the script may start; otherwise the result of a script that did not start."""
    spent: set[str] = set()  # a one-off approval covers one call: the same call twice asks
    for argv in _literal_tools_calls(script):
        info = await _resolve(argv, command)
        if info is None:
            continue
        decision = command.dispatcher.decide(info)
        if decision.action != "ask":
            continue
        key = canonical_call_key(info.qualified_name, info.input)
        if key in spent or not command.dispatcher.env.approvals.has_once(key):
            reason = decision.reason if key not in spent else (
                "the script makes this exact call twice and a one-off approval covers one;"
                " approve it --always or make it once")
            return _not_started(command, info, reason)
        spent.add(key)
    return None


def _literal_tools_calls(script: str) -> list[list[str]]:
    from bashkit import Bash

    try:
        analysis = Bash().analyze(script)
    except Exception:  # noqa: BLE001 - a script Bashkit cannot parse fails when it runs
        return []
    return [
        list(c.args)
        for c in analysis.commands
        if c.name == "tools" and c.context != "function_body" and all(a is not None for a in c.args)
    ]


async def _resolve(argv: list[str], command: ToolsCommand) -> CallInfo | None:
    catalog = command.catalog
    parsed = split_command(argv, catalog.is_server, catalog.split_qualified)
    if parsed.action != "call" or not parsed.args or "-" in parsed.args:
        return None  # no literal input: it may come from stdin, so it is checked as it runs
    try:
        tool = await catalog.find_tool(parsed.server, parsed.tool)
        arguments = parse_input(parsed.args, tool.input_schema, None)
        command.dispatcher.validate(tool, arguments)
    except CallError:
        return None  # the run reports it where the script makes the call
    return command.dispatcher.call_info(tool, arguments)


def _not_started(command: ToolsCommand, info: CallInfo, reason: str) -> ShellResult:
    run = command.run
    run.before_start = True
    run.stopped = {"reason": "needs_approval", "approval": "requested",
                   "call": call_shown(info)}
    command.dispatcher.env.pending.append(info)
    error = NeedsApproval(
        f"{info.command} needs a person's approval ({reason}); the script did not start."
        " Approve with `%tools approve` (or --always), then run it again"
    )
    stderr = error.json_line() + "\n"
    return ShellResult(exit_code=1, stdout="", stderr=stderr, report=run.report(1))
