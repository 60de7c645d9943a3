"""The workspace files a folder's config runs, for its trust (`_trust`).

Trusting a folder's config trusts what its hooks, MCP servers and command tools execute
there: a `git pull` that rewrote only `hooks/check.py` (a hook's `command`) or `server.py`
(a server's `args`) would otherwise run new code with no new question. So a folder's
fingerprint holds each file of its own tree that an entry names in `command` or `args`,
resolved as the program starts: a hook in the config file's folder, a server in its `cwd`
(relative to the config file), a command tool in its `cwd`. A server or command tool with no
`cwd` (or a command tool's relative one) starts in the kernel's folder, unknown when a person
trusts: it is taken to be the config file's folder, where the kernel runs when that folder
is the workspace. A word counts only when it names an existing regular file inside the
folder (links followed): `python3` found on PATH, or `/usr/bin/env`, is not the workspace's.
A command tool's words filled from the input (`{{ ... }}`) name no file before a call.
`python -m pkg.mod` names the files it starts from in its start folder (`pkg/__init__.py`,
`pkg/mod.py`, `pkg/mod/__main__.py`); modules those import are not followed.

The entries are read loosely from the parsed files (what is not a string is skipped): the
config's own checks report what is wrong, and a wrong config never runs.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any, Iterator, Mapping

from .._pycode import run_module
from ._expand import Expander, resolve_cwd

_CHUNK = 1024 * 1024


def named_files(folder: Path, data: Mapping[str, Any], environ: Mapping[str, str],
                looked_at: list[str] | None = None) -> dict[str, str]:
    """{path relative to `folder`: SHA-256} of each file inside `folder` (where links lead) that
    the config files' parsed `data` (by file name) name to execute; "unreadable" for one that
    cannot be read.
    `looked_at` collects every path whose state the answer depends on (for `_cache`)."""
    looked_at = [] if looked_at is None else looked_at
    found: dict[str, str] = {}
    for name, parsed in data.items():
        if isinstance(parsed, Mapping):
            for base, words in _entries(folder, name, parsed, environ):
                places = [os.path.join(base, word) for word in words] + _module_files(base, words)
                for place in places:
                    found.update(_covered(folder, place, looked_at, found))
    return found


def _module_files(base: str, words: list[str]) -> list[str]:
    """The files `python -m a.b` starts from when it finds `a` in its start folder: `a/__init__.py`,
    `a/b.py` or `a/b/__init__.py` and `a/b/__main__.py` (what they import in turn is not named)."""
    module = run_module(words)
    if not module or not all(part.isidentifier() for part in module.split(".")):
        return []
    parts = module.split(".")
    packages = [os.path.join(base, *parts[:depth], "__init__.py") for depth in range(1, len(parts) + 1)]
    return [*packages, os.path.join(base, *parts) + ".py", os.path.join(base, *parts, "__main__.py")]


def _covered(folder: Path, place: str, looked_at: list[str], found: Mapping[str, str]) -> dict[str, str]:
    """{name: digest} of `place` when it is a file inside `folder` (else nothing). Named as the
    config names it (exec takes `~` as a name too): what runs is what that name holds, wherever
    a link leads."""
    if "\0" in place:
        return {}
    root, named = os.path.realpath(folder), os.path.abspath(folder)
    place = os.path.abspath(place)
    real = os.path.realpath(place)
    if _inside(place, named) or _inside(real, root):
        looked_at.append(place)  # a file made or changed there moves the fingerprint
    key = os.path.relpath(place, named)
    if key in found or not (_inside(real, root) and os.path.isfile(real)):
        return {}
    return {key: _file_digest(real)}


def _inside(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip(os.sep) + os.sep)


def _entries(folder: Path, name: str, data: Mapping[str, Any],
             environ: Mapping[str, str]) -> Iterator[tuple[str, list[str]]]:
    """(folder the program starts in, its words) of each hook, stdio server and command tool."""
    home = Path(environ.get("HOME") or Path.home())
    servers = data.get("mcpServers" if name.endswith(".json") else "mcp_servers")
    for server in _tables(servers.values() if isinstance(servers, Mapping) else ()):
        expand = Expander(environ)
        words = [expand(word) for word in _strings([server.get("command"), *_list(server.get("args"))])]
        cwd = server.get("cwd")
        yield (resolve_cwd(expand(cwd), folder, home) if isinstance(cwd, str) and cwd else str(folder)), words
    if name.endswith(".json"):
        return
    for hook in _tables(_list(data.get("hooks"))):
        yield str(folder), _strings(_list(hook.get("command")))
    tools = data.get("tools")
    for tool in _tables(tools.values() if isinstance(tools, Mapping) else ()):
        cwd = tool.get("cwd")
        base = folder / Path(Expander(environ)(cwd)).expanduser() if isinstance(cwd, str) and cwd else folder
        yield str(base), [word for word in _strings(_list(tool.get("command"))) if "{{" not in word]


def _tables(values: Any) -> Iterator[Mapping[str, Any]]:
    return (value for value in values if isinstance(value, Mapping))


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value] if isinstance(value, str) else []


def _strings(values: list[Any]) -> list[str]:
    return [value for value in values if isinstance(value, str)]


def _file_digest(path: str) -> str:
    """SHA-256 of a regular file, read in pieces (a program may be a large binary). Opened without
    blocking and checked to be regular after the open: a pipe swapped in would never end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return "unreadable"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "unreadable"
        hashed = hashlib.sha256()
        while piece := os.read(fd, _CHUNK):
            hashed.update(piece)
        return hashed.hexdigest()
    except OSError:
        return "unreadable"
    finally:
        os.close(fd)
