"""What `tools` can reach in one shell run: servers, their tools, own tools.

Rebuilt at the start of every shell run from the config just read, so a
server added during a session shows up on the next run. MCP tool lists are
fetched lazily from the pool: a script that never names a server never
waits for it.
"""

from __future__ import annotations

import asyncio
import difflib
import re
from dataclasses import dataclass
from typing import Iterable

from ._errors import CallError, UnknownCommand
from ._tool import Tool


def norm(name: str) -> str:
    """Hyphens and underscores are interchangeable in every name, and case does not matter."""
    return name.replace("-", "_").lower()


def display(name: str) -> str:
    return name.replace("_", "-")


_QUALIFIED = re.compile(r"^mcp_{1,2}(?P<server>.+?)__(?P<tool>.+)$")


@dataclass
class ServerEntry:
    config: object  # toolkernel._config.ServerConfig
    tools: list[Tool] | None = None
    error: CallError | None = None

    @property
    def on_demand(self) -> bool:
        return getattr(self.config, "load", "eager") == "on-demand"


class Catalog:
    def __init__(self, servers: Iterable[object], own_tools: Iterable[Tool], pool) -> None:
        self._pool = pool
        self.servers = {norm(cfg.name): ServerEntry(cfg) for cfg in servers}
        self.own = {norm(t.name): t for t in own_tools}

    # -- loading ---------------------------------------------------------

    async def server_tools(self, server: str) -> list[Tool]:
        entry = self.servers[norm(server)]
        if entry.tools is None:
            entry.tools = await self._pool.tools(entry.config)
        return entry.tools

    async def load_listed(self) -> None:
        """Fetch the tools of every server `tools --help` lists with a count."""
        wanted = [e for e in self.servers.values() if self._listed_loaded(e)]
        await asyncio.gather(*(self._try_load(e) for e in wanted))

    def _listed_loaded(self, entry: ServerEntry) -> bool:
        return not entry.on_demand or self._pool.loaded(entry.config.name)

    async def _try_load(self, entry: ServerEntry) -> None:
        try:
            await self.server_tools(entry.config.name)
        except CallError as exc:
            entry.error = exc

    # -- resolution ------------------------------------------------------

    def is_server(self, word: str) -> bool:
        return norm(word) in self.servers

    async def find_tool(self, server: str | None, name: str) -> Tool:
        if server is None:
            return self._own_tool(name)
        tools = await self.server_tools(server)
        for t in tools:
            if norm(t.name) == norm(name):
                return t
        close = suggest(name, [t.name for t in tools])
        raise UnknownCommand(
            f"server {display(server)!r} has no tool {display(name)!r}{_hint(close)}"
            f" (run `tools {display(server)} --help` for its tools)",
            suggestions=close,
        )

    def _own_tool(self, name: str) -> Tool:
        tool = self.own.get(norm(name))
        if tool is not None:
            return tool
        close = suggest(name, [*self.own, *self.servers])
        raise UnknownCommand(
            f"no server or tool named {display(name)!r}{_hint(close)}"
            " (run `tools --help` for the list)",
            suggestions=close,
        )

    @staticmethod
    def split_qualified(word: str) -> tuple[str, str] | None:
        """`mcp_github__list_pulls` (or `mcp__github__list_pulls`) -> ("github", "list_pulls")."""
        m = _QUALIFIED.match(norm(word))
        return (m["server"], m["tool"]) if m else None

    # -- search ----------------------------------------------------------

    async def search(self, words: list[str]) -> list[tuple[float, Tool]]:
        terms = [w.lower() for w in words if w.strip()]
        # The catalog is new each run: without this, only servers named earlier in the run are searched.
        await asyncio.gather(self.load_listed(), self._load_matching_on_demand(terms))
        scored = []
        for tool in self.all_loaded_tools():
            score = _score(tool, terms)
            if score > 0:
                scored.append((score, tool))
        scored.sort(key=lambda st: (-st[0], st[1].command))
        return scored

    async def _load_matching_on_demand(self, terms: list[str]) -> None:
        matching = [
            e for e in self.servers.values()
            if e.tools is None and _server_matches(e.config, terms)
        ]
        await asyncio.gather(*(self._try_load(e) for e in matching))

    def all_loaded_tools(self) -> list[Tool]:
        tools = list(self.own.values())
        for entry in self.servers.values():
            tools.extend(entry.tools or ())
        return tools


def _server_matches(cfg, terms: list[str]) -> bool:
    text = f"{cfg.name} {display(cfg.name)} {getattr(cfg, 'description', '')}".lower()
    return any(t in text for t in terms)


def _score(tool: Tool, terms: list[str]) -> float:
    name = f"{tool.server or ''} {tool.name}".lower()
    names = {name, norm(name), display(name)}
    description = (tool.description or "").lower()
    score = 0.0
    for term in terms:
        if any(term in n for n in names):
            score += 3.0
        elif any(norm(term) in norm(n) for n in names):
            score += 2.5
        if term in description:
            score += 1.0
    return score


def suggest(name: str, candidates: Iterable[str]) -> list[str]:
    """Up to three known names close to `name`, in command spelling."""
    known = sorted({display(c) for c in candidates})
    close = difflib.get_close_matches(display(name), known, n=3, cutoff=0.5)
    close += [c for c in known if display(name) in c and c not in close]
    return close[:3]


def _hint(close: list[str]) -> str:
    return f"; did you mean {' or '.join(close)}?" if close else ""
