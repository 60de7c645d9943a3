"""The tool lists of MCP servers, kept on disk so on-demand servers can be found unstarted.

`tools search` and `tools <server> --help` read an on-demand server's tools from
`.toolkernel/tool-lists.json` when the entry there was written for the same
server config (its `fingerprint`); otherwise the server starts and lists them,
and the entry is written again. Only names and descriptions are kept: a kept
list is shown, never called. A call always starts the server and uses the list
it gives, so the file cannot change what a call does or how policy judges it
(read-only hints included). The file is read as untrusted input: anything that
is not exactly the expected shape counts as no entry.

Scripts cannot write the file (`.toolkernel/` is mounted read-only for them), and it is
read and written only where it is named: a link on the way (a cloned repository's) is not
followed.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._atomic import write_atomic
from .._checked_open import file_checked
from .._errors import Unavailable
from .._tool import ProviderRef, Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from .._config._servers import ServerConfig

FILE_NAME = "tool-lists.json"
VERSION = 1
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_TOOLS = 2000
MAX_NAME = 256
MAX_DESCRIPTION = 20_000
_SHOWN_SCHEMA = {"type": "object"}


class ToolLists:
    """One workspace's kept tool lists (`<workdir>/.toolkernel/tool-lists.json`)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME
        self._lock = threading.Lock()
        self._written: dict[str, dict[str, Any]] = {}  # what this process last wrote or found, by server
        # Servers a command of this session named while unstarted (a help, a search answered from
        # the kept list), by name: the config's fingerprint then. Seed 000: from the next step on
        # such a server is listed like any other, with its tools counted (from the kept list).
        self._named: dict[str, str] = {}

    def named(self, cfg: ServerConfig) -> bool:
        return self._named.get(cfg.name) == cfg.fingerprint

    def note_named(self, cfg: ServerConfig) -> None:
        self._named[cfg.name] = cfg.fingerprint

    def kept(self, cfg: ServerConfig) -> list[Tool] | None:
        """The server's tools as last listed under this very config (to show, not to call);
        None when there is no such entry."""
        entry = _read(self.path).get(cfg.name)
        if entry is None or entry["config"] != cfg.fingerprint:
            return None
        ref = ProviderRef("mcp", cfg.name, loop_bound=True)
        return [Tool(name, description, _SHOWN_SCHEMA, _not_started, provider=ref)
                for name, description in entry["tools"]]

    def keep(self, cfg: ServerConfig, tools: list[Tool]) -> None:
        """Write the server's current list, if it differs from the kept one."""
        entry = {"config": cfg.fingerprint, "tools": [[t.name, t.description or ""] for t in tools]}
        with self._lock:
            if self._written.get(cfg.name) == entry:
                return  # the common case: no file read on every run that lists the server
            lists = _read(self.path)
            if lists.get(cfg.name) != entry and self.path.parent.is_dir():  # made by the mount plan only
                lists[cfg.name] = entry
                try:  # `path` is the real path as named (the workspace's is real): a link is refused
                    write_atomic(self.path, json.dumps({"version": VERSION, "servers": lists}, ensure_ascii=False),
                                 resolved=True)
                except OSError:
                    return  # a kept list is a convenience: the server lists its tools when started
            self._written[cfg.name] = entry


async def _not_started(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    # Kept lists are only shown: a call finds the tool in the list of the started server.
    raise Unavailable("this tool was listed from the kept tool list; call it through the server")


def _read(path: Path) -> dict[str, dict[str, Any]]:
    """The entries of the file, each checked; {} when the file is missing or malformed."""
    try:
        file, _ = file_checked(str(path))  # not through a link, nor from a pipe
        with file:
            data = file.read(MAX_FILE_BYTES + 1)
        loaded = json.loads(data) if len(data) <= MAX_FILE_BYTES else None
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(loaded, dict) or loaded.get("version") != VERSION or not isinstance(loaded.get("servers"), dict):
        return {}
    return {name: entry for name, entry in loaded["servers"].items() if _well_formed(name, entry)}


def _well_formed(name: object, entry: object) -> bool:
    if not isinstance(name, str) or not isinstance(entry, dict) or set(entry) != {"config", "tools"}:
        return False
    tools = entry["tools"]
    return (isinstance(entry["config"], str) and isinstance(tools, list) and len(tools) <= MAX_TOOLS
            and all(_well_formed_tool(t) for t in tools))


def _well_formed_tool(item: object) -> bool:
    return (isinstance(item, list) and len(item) == 2
            and isinstance(item[0], str) and 0 < len(item[0]) <= MAX_NAME and item[0].isprintable()
            and isinstance(item[1], str) and len(item[1]) <= MAX_DESCRIPTION)
