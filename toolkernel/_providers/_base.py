"""Where tools come from: one door for every source.

toolkernel's own tools, the notebook tools, tools registered from Python
(`toolkernel.register_tools`) and each MCP server are all a `ToolProvider`;
the catalog of a run is built from a list of them (`Catalog(providers)`) and
knows no source by name. Config-defined command tools (`tool__<name>`) will be
one more kind.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Iterable, Mapping, Protocol, runtime_checkable

from .._errors import CallError, ConfigError, Unavailable
from .._names import ProviderKind
from .._tool import ProviderRef, Tool

if TYPE_CHECKING:
    from .._config._servers import ServerConfig
    from ._mcp import ServerPool
    from ._tool_lists import ToolLists


@runtime_checkable
class ToolProvider(Protocol):
    """A source of tools.

    name:        None when its tools are top-level commands (`tools read-file`);
                 else the word that groups them (`tools github list-pulls`).
    kind:        "mcp", "builtin", "notebook" or "command".
    description: one line for `tools --help`.
    on_demand:   started only when a command names it (MCP `load = "on-demand"`).
    ref:         what each of its tools carries as `Tool.provider`, including
                 whether the tools are bound to toolkernel's private loop.
    source:      (where it is defined, the key there or None), for errors about it.
    """

    name: str | None
    kind: ProviderKind
    description: str
    on_demand: bool
    source: tuple[str, str | None]

    @property
    def ref(self) -> ProviderRef: ...

    @property
    def loaded(self) -> bool:
        """Its tools can be listed without starting anything."""

    @property
    def error(self) -> CallError | None:
        """Why it last failed to list its tools; None when it did not fail."""

    async def tools(self) -> list[Tool]: ...

    async def close(self) -> None: ...


class ToolSet:
    """A fixed list of in-process tools: the built-ins, the notebook tools, registered ones."""

    on_demand = False
    loaded = True
    error = None

    def __init__(self, kind: ProviderKind, tools: Iterable[Tool], *, name: str | None = None,
                 description: str = "", source: str = "toolkernel") -> None:
        self.kind = kind
        self.name = name
        self.description = description
        self.source = (source, None)
        self.ref = ProviderRef(kind, name)
        # In memory, so also readable without a trip to a loop.
        self.listed = tuple(t if t.provider == self.ref else dataclasses.replace(t, provider=self.ref)
                            for t in tools)

    async def tools(self) -> list[Tool]:
        return list(self.listed)

    async def close(self) -> None:
        pass


class McpProvider:
    """One configured MCP server; its connection lives in the session's `ServerPool`."""

    kind: ProviderKind = "mcp"

    def __init__(self, config: ServerConfig, pool: ServerPool, lists: ToolLists | None = None) -> None:
        self.config = config
        self.name = config.name
        self.description = config.description
        table = "mcpServers" if config.source.endswith(".json") else "mcp_servers"
        self.source = (config.source, f"{table}.{config.name}")
        self.on_demand = config.load == "on-demand"
        self._bound = ProviderRef("mcp", config.name, loop_bound=True)
        self._here = ProviderRef("mcp", config.name)
        self._pool = pool
        self._lists = lists if self.on_demand else None  # kept so an unstarted server can be found

    @property
    def ref(self) -> ProviderRef:
        """Bound to the private loop, where its session lives, except while its server is up
        over a lane: then a call runs on the caller's thread, past the session (see _stdio.py)."""
        return self._here if self._pool.callable_here(self.config) else self._bound

    @property
    def loaded(self) -> bool:
        return self._pool.loaded(self.name)

    @property
    def error(self) -> CallError | None:
        return self._pool.last_error(self.name)

    async def tools(self) -> list[Tool]:
        tools = await self._pool.tools(self.config)
        if self._lists is not None:
            await asyncio.to_thread(self._lists.keep, self.config, tools)  # file I/O off the loop
        return tools

    def kept(self) -> list[Tool] | None:
        """Its tools as listed under this config before, to show (never to call) while it is
        not started; None when it is started, or nothing was kept for this config."""
        if self._lists is None or self.loaded:
            return None
        return self._lists.kept(self.config)

    @property
    def named(self) -> bool:
        """A command of this session named it while it was unstarted (answered from its kept list)."""
        return self._lists is not None and self._lists.named(self.config)

    def note_named(self) -> None:
        if self._lists is not None:
            self._lists.note_named(self.config)

    async def close(self) -> None:
        """The connection is the pool's and outlives a run; closing a run's provider keeps it."""


def mcp_providers(servers: Iterable[ServerConfig], pool: ServerPool,
                  lists: ToolLists | None = None) -> list[McpProvider]:
    return [McpProvider(cfg, pool, lists) for cfg in servers]


class BrokenServer:
    """A configured MCP server whose own config entry is wrong: listed, and unavailable
    with the config's problem, while the rest of the config works."""

    kind: ProviderKind = "mcp"
    on_demand = False
    loaded = False
    description = ""

    def __init__(self, name: str, problem: ConfigError) -> None:
        self.name = name
        self.source = (problem.path, problem.key)
        self.ref = ProviderRef("mcp", name, loop_bound=True)
        self.error: CallError = Unavailable(f"MCP server '{name}' is not started: its config is wrong: {problem}",
                                            retryable=False)

    async def tools(self) -> list[Tool]:
        raise self.error

    async def close(self) -> None:
        pass


def broken_servers(problems: Mapping[str, ConfigError]) -> list[BrokenServer]:
    return [BrokenServer(name, problem) for name, problem in problems.items()]

