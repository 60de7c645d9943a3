"""Direct calls from Python and from the `%tools` line: results as Python values.

The same `ToolsCommand.call` as a `tools` line in a script, so the same
checks (schema, hooks, policy, approvals) and the same error classes.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _loop
from .._command._cli import parse_input, split_command
from .._approval._approver import Approver, StdinApprover, asking, stop_and_report
from .._session import Session
from .._runners._shell import ScriptEvents, answering


async def _call(session: Session, argv: list[str], base: dict[str, Any] | None,
                on_image: Callable[[Any], None], approver: Approver = stop_and_report) -> Any:
    command = await session.prepare(approver=approver)
    catalog = command.catalog
    parsed = split_command(argv, catalog.is_server, catalog.split_qualified)
    if parsed.action != "call":
        return _Text((await command.run_command(parsed, None)).stdout)
    tool = await catalog.find_tool(parsed.server, parsed.tool)
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
    if ask is None:
        return _loop.run(_call(session, argv, base, on_image))
    events = ScriptEvents()
    approver = StdinApprover(lambda prompt, request: events.on_pump_thread(asking, ask, prompt, request),
                             lambda line: events.on_pump_thread(print, line))
    return answering(_loop.submit(_call(session, argv, base, on_image, approver)), events)


def is_help_text(value: Any) -> bool:
    return isinstance(value, _Text)
