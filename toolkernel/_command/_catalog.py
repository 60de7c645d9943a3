"""What `tools` can reach in one shell run: servers, their tools, own tools.

Rebuilt at the start of every shell run from the config just read, so a
server added during a session shows up on the next run. MCP tool lists are
fetched lazily from the pool: a script that never names a server never
waits for it.
"""

from __future__ import annotations

import asyncio
import difflib
import operator
from dataclasses import dataclass
from typing import Iterable

from .._errors import CallError, ConfigError, UnknownCommand
from .._names import SERVER_NAME, SERVER_NAME_RULE, display, fold, parse_qualified
from .._providers._base import ToolProvider
from .._tool import Tool


@dataclass
class ServerEntry:
    """A named provider (an MCP server) and what this run learned of it."""

    provider: ToolProvider
    tools: list[Tool] | None = None
    error: CallError | None = None
    # An unstarted on-demand server's tools as kept on disk: shown by help and search, never called.
    kept: list[Tool] | None = None
    kept_read: bool = False

    @property
    def name(self) -> str:
        return self.provider.name or ""


# Words the command line itself takes: a server of that name could not be reached.
_RESERVED = ("search", "help")


class Catalog:
    """The tools of one run. Build it with `await Catalog.open(providers)`."""

    def __init__(self, providers: Iterable[ToolProvider], top_level: Iterable[Tool] = (),
                 own: dict[str, Tool] | None = None) -> None:
        """`own`: the top-level tools by folded name, when worked out before (read only)."""
        self.providers = list(providers)
        self.servers = {fold(p.name): ServerEntry(p) for p in self.providers if p.name is not None}
        self.own = own if own is not None else {fold(t.name): t for t in top_level}

    @classmethod
    async def open(cls, providers: Iterable[ToolProvider]) -> "Catalog":
        """Take the top-level tools of every unnamed provider; a name two sources claim is a ConfigError."""
        providers = list(providers)
        unnamed = [p for p in providers if p.name is None]
        listed = await asyncio.gather(*(p.tools() for p in unnamed))
        check_names(providers, listed)
        return cls(providers, [t for tools in listed for t in tools])

    # -- loading ---------------------------------------------------------

    async def server_tools(self, server: str) -> list[Tool]:
        entry = self.servers[fold(server)]
        if entry.tools is None:
            entry.tools = await entry.provider.tools()
        return entry.tools

    async def server_listing(self, server: str) -> list[Tool]:
        """What `tools <server> --help` shows: an unstarted on-demand server's kept list when
        there is one for its config (it is not started for this), else its tools."""
        entry = self.servers[fold(server)]
        if entry.tools is None and _kept(entry) is not None:
            _note_named(entry)
            return entry.kept or []
        return await self.server_tools(server)

    async def load_listed(self) -> None:
        """Fetch the tools of every server `tools --help` lists with a count: an on-demand one
        a command of this session named unstarted shows its kept list (started if none is kept)."""
        wanted = [e for e in self.servers.values()
                  if not e.provider.on_demand or e.provider.loaded or (_was_named(e) and _kept(e) is None)]
        await asyncio.gather(*(self._try_load(e) for e in wanted))

    @staticmethod
    def listing(entry: ServerEntry) -> list[Tool] | None:
        """The tools `tools --help` counts for a server: its own once listed in this run, else
        the kept list of an unstarted on-demand server a command of this session named."""
        if entry.tools is not None:
            return entry.tools
        return entry.kept if _was_named(entry) and entry.kept_read else None

    async def _try_load(self, entry: ServerEntry) -> None:
        try:
            await self.server_tools(entry.name)
        except CallError as exc:
            entry.error = exc

    # -- resolution ------------------------------------------------------

    def is_server(self, word: str) -> bool:
        return fold(word) in self.servers

    def runs_on_private_loop(self, server: str | None, tool: str | None) -> bool:
        """Whether a call of this tool must hop to the private loop (unknown names do: they fail there)."""
        if server is not None:
            entry = self.servers.get(fold(server))
            return entry is None or entry.provider.ref.loop_bound
        found = self.own.get(fold(tool or ""))
        return found is None or found.runs_on_private_loop

    def listed_here(self, server: str, name: str) -> Tool | None:
        """A tool of `server` that a call from this thread can reach now: listed already in this
        run, its server up over a lane (not bound to the private loop). None otherwise, and for a
        name it does not have: `find_tool` then lists, starts or says what is wrong."""
        entry = self.servers.get(fold(server))
        if entry is None or entry.tools is None or entry.provider.ref.loop_bound:
            return None
        return _named(entry.tools, name)

    async def find_tool(self, server: str | None, name: str) -> Tool:
        if server is None:
            if fold(name) not in self.own:
                await self._not_top_level(name)
            return self._own_tool(name)
        tools = await self.server_tools(server)
        found = _named(tools, name)
        if found is not None:
            return found
        close = suggest(name, [t.name for t in tools])
        raise UnknownCommand(
            f"server {display(server)!r} has no tool {display(name)!r}{_hint(close)}"
            f" (run `tools {display(server)} --help` for its tools)",
            suggestions=close,
        )

    async def _not_top_level(self, name: str) -> None:
        """A server's tool named alone (`tools git-log`): say how to name it."""
        await self.load_listed()
        forms = [f"tools {display(e.name)} {display(t.name)}" for e in self.servers.values()
                 for t in e.tools or () if fold(t.name) == fold(name)]
        if forms:
            raise UnknownCommand(f"{display(name)!r} is a tool of an MCP server: name the server first,"
                                 f" as in `{forms[0]}`" + (f" (or {', '.join(forms[1:])})" if forms[1:] else ""),
                                 suggestions=forms)

    def _own_tool(self, name: str) -> Tool:
        tool = self.own.get(fold(name))
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
        parsed = parse_qualified(fold(word))
        return (parsed.server, parsed.tool) if parsed.kind == "mcp" and parsed.tool else None

    # -- search ----------------------------------------------------------

    async def search(self, words: list[str]) -> list[tuple[float, Tool]]:
        terms = [w.lower() for w in words if w.strip()]
        # The catalog is new each run: without this, only servers named earlier in the run are searched.
        await asyncio.gather(self.load_listed(), self._load_matching_on_demand(terms))
        scored = []
        for tool in self._loaded_tools():
            score = _score(tool, terms)
            if score > 0:
                scored.append((score, tool))
        scored.sort(key=lambda st: (-st[0], st[1].command))
        for entry in self.servers.values():  # a match in a kept list names its server
            if entry.tools is None and entry.kept and any(t.server == entry.name for _, t in scored):
                _note_named(entry)
        return scored

    async def _load_matching_on_demand(self, terms: list[str]) -> None:
        """Start the unstarted servers a search names, and those whose tools are not kept on
        disk for their current config (starting them keeps their list for the next search)."""
        wanted = [
            e for e in self.servers.values()
            if e.tools is None and (_server_matches(e.provider, terms) or _kept(e) is None)
        ]
        await asyncio.gather(*(self._try_load(e) for e in wanted))

    def _loaded_tools(self) -> list[Tool]:
        tools = list(self.own.values())
        for entry in self.servers.values():
            tools.extend(entry.tools if entry.tools is not None else entry.kept or ())
        return tools


class CatalogCache:
    """`Catalog.open` for the runs of one session: the names are checked again only when the
    providers changed, or when one of the unnamed ones lists its tools anew each time."""

    def __init__(self) -> None:
        self._kept: tuple[tuple[ToolProvider, ...], dict[str, Tool]] | None = None

    def kept(self, providers: tuple[ToolProvider, ...]) -> Catalog | None:
        """The catalog of `providers` with names checked before (None: `open` must check them)."""
        kept = self._kept
        if kept is not None and same_items(kept[0], providers):
            return Catalog(providers, own=kept[1])  # folding ~40 names was a tenth of a direct call's prepare
        return None

    async def open(self, providers: Iterable[ToolProvider]) -> Catalog:
        providers = tuple(providers)
        catalog = self.kept(providers)
        if catalog is not None:
            return catalog
        self._kept = None
        catalog = await Catalog.open(providers)
        # A ToolSet's list is a tuple fixed when it was made; any other provider may change its list.
        if all(isinstance(getattr(p, "listed", None), tuple) for p in providers if p.name is None):
            self._kept = (providers, catalog.own)
        return catalog


def _kept(entry: ServerEntry) -> list[Tool] | None:
    """The entry's kept list (read once per run); None for providers that keep none."""
    if not entry.kept_read:
        kept = getattr(entry.provider, "kept", None)
        entry.kept, entry.kept_read = (kept() if kept is not None else None), True
    return entry.kept


def _was_named(entry: ServerEntry) -> bool:
    return bool(getattr(entry.provider, "named", False))


def _note_named(entry: ServerEntry) -> None:
    note = getattr(entry.provider, "note_named", None)
    if note is not None:
        note()


def same_items(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    # With no generator: each direct call compares its providers twice.
    return len(a) == len(b) and all(map(operator.is_, a, b))


def check_names(providers: list[ToolProvider], listed: list[list[Tool]]) -> None:
    """Fail closed: a name two sources claim would make one of them silently unreachable."""
    claimed: dict[str, str] = {fold(word): f"the command word {word!r}" for word in _RESERVED}
    unnamed = [p for p in providers if p.name is None]
    for provider, tools in zip(unnamed, listed):
        for tool in tools:
            if parse_qualified(fold(tool.name)).kind is not None:
                raise ConfigError(*provider.source, f"the tool name {tool.name!r} reads as a qualified name "
                                  "(`mcp_<server>__<tool>` or `tool__<name>`); rename the tool")
            _claim(claimed, tool.name, f"the {_kind_words(provider.kind)} {display(tool.name)!r}", provider)
    for provider in providers:
        if provider.name is not None:
            if not SERVER_NAME.fullmatch(provider.name):
                raise ConfigError(*provider.source, f"{provider.name!r}: {SERVER_NAME_RULE}")
            _claim(claimed, provider.name, f"the MCP server {display(provider.name)!r}", provider)


def _claim(claimed: dict[str, str], name: str, what: str, provider: ToolProvider) -> None:
    key = fold(name)
    if key in claimed:
        raise ConfigError(*provider.source, f"{what} has the same name as {claimed[key]} (case does not "
                          "matter, and hyphens and underscores are interchangeable); rename one")
    claimed[key] = what


def _kind_words(kind: str) -> str:
    return {"builtin": "tool", "notebook": "notebook tool", "command": "command tool"}.get(kind, f"{kind} tool")


def _server_matches(provider: ToolProvider, terms: list[str]) -> bool:
    text = f"{provider.name} {display(provider.name or '')} {provider.description}".lower()
    return any(t in text for t in terms)


def _score(tool: Tool, terms: list[str]) -> float:
    name = f"{tool.server or ''} {tool.name}".lower()
    names = {name, fold(name), display(name)}
    description = (tool.description or "").lower()
    score = described = 0.0
    for term in terms:
        if any(term in n for n in names):
            score += 3.0
        elif any(fold(term) in fold(n) for n in names):
            score += 2.5
        if term in description:
            described += 1.0
    # A description that has only some of the words ("every time" for "time zone") is noise.
    if not score and described < len(terms):
        return 0.0
    return score + described


def suggest(name: str, candidates: Iterable[str]) -> list[str]:
    """Up to three known names close to `name`, in command spelling."""
    known = sorted({display(c) for c in candidates})
    close = difflib.get_close_matches(display(name), known, n=3, cutoff=0.5)
    close += [c for c in known if display(name) in c and c not in close]
    return close[:3]


def _hint(close: list[str]) -> str:
    return f"; did you mean {' or '.join(close)}?" if close else ""


def _named(tools: list[Tool], name: str) -> Tool | None:
    """The tool of `tools` called `name` (as names fold), or None."""
    wanted = fold(name)
    return next((t for t in tools if fold(t.name) == wanted), None)
