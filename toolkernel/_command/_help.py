"""Help texts of the `tools` command: the lists, a tool's schema, search results."""

from __future__ import annotations

import json
from typing import Callable

from ._catalog import Catalog, ServerEntry
from .._errors import printable
from .._names import display as _display
from .._tool import Tool

USAGE = """\
Usage:
  tools --help                    servers and tools (this list)
  tools <server> --help           one server's tools
  tools <tool> --help             a tool's input schema (also: tools <server> <tool> --help)
  tools search <words>            find tools by name and description
  tools <server> <tool> [input]   call an MCP server's tool
  tools <tool> [input]            call any other tool
Input: a JSON object '{...}', key=value pairs, --key value, --flag (true); or JSON on stdin
(`-`, or no input arguments). Output: text as is, other results as JSON.
Large results: `tools <tool> [input] --save PATH` writes the result to a file (a write-file call);
`> PATH` holds the result whole first: up to 10 million characters.
Errors: one JSON line on stderr, exit code 1: {"error":{"code":...,"message":...,"retryable":...}}
"""


def display(name: str) -> str:
    # Names and descriptions come from servers and from kept lists a cloned repository may
    # bring: escaped, so that none drives the terminal or forges a line of the list.
    return printable(_display(name))


def top_help(catalog: Catalog, listed: Callable[[Tool], bool] = lambda tool: True, not_trusted: str = "") -> str:
    """The servers and the other tools; a tool `listed` refuses is left out (and not counted).
    `not_trusted`: why a project's servers are not used (see `untrusted_note`)."""
    lines = [USAGE, "MCP servers:"]
    if not catalog.servers and not_trusted:
        lines.append(f"  (none in use: {not_trusted})")
    elif not catalog.servers:
        lines.append("  (none configured: add [mcp_servers.NAME] to toolkernel.toml or .mcp.json)")
    lines += [_server_line(e, listed) for e in sorted(catalog.servers.values(), key=lambda e: e.name)]
    lines += ["", "Other tools:"]
    lines += _tool_lines(sorted(filter(listed, catalog.own.values()), key=lambda t: t.name))
    return "\n".join(lines) + "\n"


def untrusted_note(folders: tuple[str, ...], not_trusted: str = "") -> str:
    """What `tools --help` says first about project config that only tightens (see _trust.py):
    its first line says what to do, where trusting is the fix (`not_trusted`)."""
    if not folders:
        return ""
    first = f"{not_trusted[:1].upper()}{not_trusted[1:]}." if not_trusted else "Project config that only tightens:"
    unused = "Not used until trusted" if not_trusted else "Not used"
    lines = [first, f"  {unused}: servers, hooks, allow rules, [tools] settings, a looser mode, lasting approvals;"
             " deny and ask rules and a stricter mode apply."]
    return "\n".join(lines + [f"  {printable(folder)}" for folder in folders]) + "\n\n"


def _server_line(entry: ServerEntry, listed: Callable[[Tool], bool]) -> str:
    name = display(entry.name)
    if entry.error is not None:
        status = f"(unavailable: {entry.error.message.splitlines()[0]})"
    elif (tools := Catalog.listing(entry)) is None and entry.provider.error is not None:
        # An on-demand server not started this run, whose last start failed (the pool remembers why).
        status = f"(not loaded; last start failed: {entry.provider.error.message.splitlines()[0]})"
    elif tools is None:
        status = "(not loaded)"
    else:
        count = sum(1 for tool in tools if listed(tool))
        status = f"({count} tool{'s' if count != 1 else ''})"
    description = printable(entry.provider.description or "")
    return f"  {name} {status}" + (f"  {description}" if description else "")


def _tool_lines(tools: list[Tool], prefix: str = "") -> list[str]:
    if not tools:
        return ["  (none)"]
    width = max(len(display(t.name)) for t in tools)
    return [f"  {prefix}{display(t.name):<{width}}  {_first_line(t.description)}" for t in tools]


def server_help(entry: ServerEntry, tools: list[Tool]) -> str:
    name = display(entry.name)
    head = f"{name}: {printable(entry.provider.description or '') or 'MCP server'}"
    lines = [head, f"Usage: tools {name} <tool> [input]   (tools {name} <tool> --help for its input)", ""]
    lines += _tool_lines(sorted(tools, key=lambda t: t.name))
    return "\n".join(lines) + "\n"


def tool_help(tool: Tool) -> str:
    access = "read-only" if tool.read_only else ("edits files" if tool.kind == "edit" else "may change something")
    lines = [
        f"{printable(tool.command)} ({access})",
        "",
        printable(tool.description.strip(), keep="\n\t") or "(no description)",
        "",
        "Input schema:",
        json.dumps(tool.input_schema, indent=2, ensure_ascii=False),
    ]
    example = _example(tool)
    if example:
        lines += ["", f"Example: {printable(tool.command)} {example}"]
    return "\n".join(lines) + "\n"


def _example(tool: Tool) -> str:
    properties = tool.input_schema.get("properties") or {}
    required = tool.input_schema.get("required") or list(properties)[:1]
    return " ".join(f"{key}=..." for key in required if key in properties)


def search_results(scored: list[tuple[float, Tool]], words: list[str]) -> str:
    if not scored:
        return f"no tools match {' '.join(words)!r} (tools --help lists them all)\n"
    width = max(len(printable(t.command)) for _, t in scored)
    return "".join(f"{printable(t.command):<{width}}  {_first_line(t.description)}\n" for _, t in scored)


def _first_line(text: str) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    line = printable(line)
    return line if len(line) <= 100 else line[:97] + "..."
