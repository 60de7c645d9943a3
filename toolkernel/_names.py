"""The one place that says when two names are the same, and how tools are named.

Config, catalog, policy and help all go through here, so a name the config
accepts is the name the catalog finds and the name a rule matches.

- `fold`: the key two names are compared by. Hyphens and underscores are
  interchangeable, and case does not matter in the Unicode sense (NFKC, then
  `str.casefold`): `Straße` and `STRASSE` are one name, which `.lower()` misses,
  so a deny rule in either spelling cannot fail open.
- `display`: how a name is shown in commands (`list-pulls`).
- `qualified` / `parse_qualified`: the one flat name of a tool, as rules and
  (later) `toolkernel serve` use it, and its inverse:

      mcp_<server>__<tool>   a tool of an MCP server
      tool__<name>           a config-defined command tool
      <name>                 toolkernel's own and notebook tools (and registered ones)

  The inverse is exact because a server name has no separator run and does not
  end in one (`SERVER_NAME`): the first `__` after `mcp_` is the boundary.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

ProviderKind = Literal["mcp", "builtin", "notebook", "command"]

# Letters and digits in runs joined by single `-` or `_`: `my-docs`, `gh_2`.
# Not `foo-`, `foo_` or `foo__x`: those would blur the server/tool boundary.
SERVER_NAME = re.compile(r"[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*")
SERVER_NAME_RULE = ("a server name may use only letters, digits, '-' and '_', must start with a letter or digit, "
                    "end with one and have no doubled separator (so `mcp_<server>__<tool>` reads one way)")

MCP_PREFIX = "mcp_"
COMMAND_PREFIX = "tool__"
SEPARATOR = "__"


@functools.lru_cache(maxsize=8192)  # names repeat on every call and every rule
def fold(name: str) -> str:
    """The comparison key of a name: `GitHub`, `github` and `git_hub`/`git-hub` pairs fold alike."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
    return folded.replace("-", "_")


def display(name: str) -> str:
    """A name as the command line spells it: `list_pulls` -> `list-pulls`."""
    return name.replace("_", "-")


@dataclass(frozen=True)
class QualifiedName:
    kind: ProviderKind | None  # None: a bare name (own, notebook or registered tool)
    server: str | None
    tool: str | None  # None: `mcp_<server>` names the whole server


def qualified(kind: ProviderKind | None, server: str | None, tool: str) -> str:
    """The flat name of a tool of a provider of `kind` (`server` only for MCP)."""
    if kind == "mcp":
        if not server:
            raise ValueError("an MCP tool needs its server's name")
        return f"{MCP_PREFIX}{server}{SEPARATOR}{tool}"
    if kind == "command":
        return f"{COMMAND_PREFIX}{tool}"
    return tool


@functools.lru_cache(maxsize=8192)
def parse_qualified(name: str) -> QualifiedName:
    """The inverse of `qualified`; `mcp__github__x` is read as `mcp_github__x` too.

    `mcp_github` (no tool part) names the whole server.
    """
    if name.startswith(COMMAND_PREFIX):
        return QualifiedName("command", None, name[len(COMMAND_PREFIX):])
    if name.startswith(MCP_PREFIX) and len(name) > len(MCP_PREFIX):
        rest = name[len(MCP_PREFIX):]
        if rest.startswith("_"):  # the `mcp__server__tool` spelling
            rest = rest[1:]
        server, sep, tool = rest.partition(SEPARATOR)
        if server:
            return QualifiedName("mcp", server, tool if sep else None)
    return QualifiedName(None, None, name)
