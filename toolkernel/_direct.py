"""Direct calls from Python and from the `%tools` line: results as Python values.

The same dispatcher as in a script, so the same checks: schema, hooks,
policy, approvals.
"""

from __future__ import annotations

from typing import Any, Callable

from . import _loop
from ._cli import parse_input, split_command
from ._errors import ToolFailed
from ._render import render
from ._session import Session


async def _call(session: Session, argv: list[str], base: dict[str, Any] | None,
                on_image: Callable[[Any], None]) -> Any:
    command = await session.prepare()
    catalog = command.catalog
    parsed = split_command(argv, catalog.is_server, catalog.split_qualified)
    if parsed.action != "call":
        return _Text((await command.run_command(parsed, None)).stdout)
    tool = await catalog.find_tool(parsed.server, parsed.tool)
    arguments = {**(base or {}), **parse_input(parsed.args, tool.input_schema, None)}
    result = await command.dispatcher.call(tool, arguments, command.run)
    label = "-".join(p for p in (tool.server, tool.name) if p)
    for path in render(result, session.workdir, label).images:
        on_image(session.workdir / path)
    if result.is_error:
        raise ToolFailed("\n".join(result.texts) or f"{tool.command} failed")
    return result.value()


class _Text(str):
    """Help text: printed by the line magic, not returned as a value."""


def call_argv(session: Session, argv: list[str], base: dict[str, Any] | None = None,
              on_image: Callable[[Any], None] = lambda path: None) -> Any:
    return _loop.run(_call(session, argv, base, on_image))


def is_help_text(value: Any) -> bool:
    return isinstance(value, _Text)

