"""`[tools.NAME]`: the settings of toolkernel's own tools, and command tools (seed 003).

A table with a `command` defines a command tool (the tool itself is in
`_providers._commands`); any other table holds the settings of the own tool of that
name (`[tools.web_fetch]`), which that tool alone receives. Names are written either
way (`web-fetch` or `web_fetch`) and kept with `_`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from collections.abc import Mapping  # isinstance with typing.Mapping costs several us per check
from typing import Any

from .._names import SERVER_NAME, SERVER_NAME_RULE
from . import _commands
from ._check import boolean, known_keys, positive_number, string, string_list, string_table, table
from ._expand import EMPTY, Expander
from ._sources import Source

_COMMAND_TOOL_KEYS = ("command", "description", "parameters", "timeout", "env", "cwd", "read_only",
                      "input_options", "network")


def settings_key(tool_name: str) -> str:
    """The `[tools]` key of a tool's settings table."""
    return tool_name.replace("-", "_")


@dataclass(frozen=True)
class ToolsSection:
    # the own tools' settings tables, as the file has them
    settings: Mapping[str, Any] = field(default_factory=dict)
    commands: Mapping[str, _commands.CommandToolConfig] = field(default_factory=dict)


def tools_section(source: Source, raw: Any, environ: Mapping[str, str]) -> ToolsSection:
    tables = {settings_key(name): value for name, value in table(source, "tools", raw).items()}
    is_command = [name for name, value in tables.items() if isinstance(value, dict) and "command" in value]
    commands = {name: source.attempt(command_tool, source, name, tables[name], environ) for name in is_command}
    return ToolsSection(settings={name: value for name, value in tables.items() if name not in is_command},
                        commands={name: tool for name, tool in commands.items() if tool is not None})


def command_tool(source: Source, name: str, raw: dict[str, Any],
                 environ: Mapping[str, str]) -> _commands.CommandToolConfig:
    key = f"tools.{name}"
    if not SERVER_NAME.fullmatch(name):  # the same words as a server: `tool__<name>` reads one way
        raise source.error(key, SERVER_NAME_RULE.replace("a server name", "a command tool name"))
    known_keys(source, key, raw, _COMMAND_TOOL_KEYS)
    command = string_list(source, f"{key}.command", raw["command"], empty_ok=False)
    for index, template in enumerate(command):
        if problem := _commands.template_problem(template):
            source.problems.append(source.error(f"{key}.command[{index}]", problem))
    parameters = _commands.plain_json(raw.get("parameters", _commands.NO_PARAMETERS))
    if problem := _commands.schema_problem(parameters):
        raise source.error(f"{key}.parameters", problem)
    expand = Expander(environ)
    env = expand.table(string_table(source, f"{key}.env", raw["env"])) if "env" in raw else None
    cwd = expand(string(source, f"{key}.cwd", raw["cwd"], empty_ok=False)) if "cwd" in raw else None
    return _commands.CommandToolConfig(
        name=name, command=command, parameters=parameters, env=env, cwd=cwd,
        description=string(source, f"{key}.description", raw.get("description", "")),
        timeout=positive_number(source, f"{key}.timeout", raw.get("timeout", _commands.DEFAULT_TIMEOUT)),
        read_only=boolean(source, f"{key}.read_only", raw.get("read_only", False)),
        input_options=boolean(source, f"{key}.input_options", raw.get("input_options", False)),
        network=boolean(source, f"{key}.network", raw.get("network", False)),
        missing_vars=tuple(expand.missing), source=str(source.path), secrets=tuple(expand.values))


def merge_settings(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Settings tables merge key by key, the nearer file winning."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_settings(merged[key], value)
        else:
            merged[key] = value
    return merged


def freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def own_settings(tools: Mapping[str, Any], tool_name: str) -> Mapping[str, Any]:
    """The settings table of one own tool (empty when the config has none)."""
    settings = tools.get(settings_key(tool_name), EMPTY)
    return settings if settings is EMPTY or isinstance(settings, Mapping) else EMPTY
