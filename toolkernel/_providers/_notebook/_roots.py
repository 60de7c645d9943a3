"""Which Jupyter Servers serve a notebook file of this machine.

A notebook a Jupyter Server serves is only changed through that server: written on disk behind
its back, the open document reloads from the file and a person's typing is lost. The servers
running on this machine publish themselves in Jupyter's runtime folder (`jpserver-<pid>.json`:
URL, root folder, token); that is how a path spelled on this machine (relative, absolute,
through a symlink) is known to lie under a server's root, and how `serve --server` with no URL
finds the server it works for and its token without the token passing through an agent's config:
the file is readable by its user only, and the agent's sandbox hides the folder.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..._errors import ConnectionRequired, InvalidInput

LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0", ""}
SESSIONS_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class RunningServer:
    url: str
    root: Path  # symlinks resolved
    token: str = ""
    pid: int = 0

    def relative(self, real: Path | str) -> str | None:
        """`real` (symlinks resolved) from this server's root, or None when it lies outside it."""
        return relative_path(real, self.root)


def running_servers() -> list[RunningServer]:
    """The Jupyter Servers of this machine's runtime folder whose process still runs. Read here, not
    through jupyter_server (whose import takes a second, on a read of any local notebook)."""
    try:
        from jupyter_core.paths import jupyter_runtime_dir
    except ImportError:  # no Jupyter installed: none runs from here
        return []
    found = []
    for info_file in sorted(Path(jupyter_runtime_dir()).glob("jpserver-*.json")):
        info = _server_info(info_file)
        if info is not None and _runs(info.get("pid")):
            token = info.get("token")
            root = Path(os.path.realpath(info["root_dir"]))
            found.append(RunningServer(info["url"], root, token if isinstance(token, str) else "", info["pid"]))
    return found


def published_token(url: str) -> str:
    """The token the server at `url` published in this machine's runtime folder ("" when it runs elsewhere,
    or publishes none)."""
    return next((server.token for server in running_servers() if same_server(server.url, url)), "")


def server_here(workdir: Path) -> RunningServer:
    """The Jupyter Server `serve --server` (no URL) works for: the one this process runs under (Jupyter AI
    starts an agent, which starts serve), else the one whose root holds `workdir`, the nearest root."""
    servers = running_servers()
    ancestors = set(_ancestors())
    above = [server for server in servers if server.pid in ancestors]
    if above:
        return above[0]
    real = Path(os.path.realpath(workdir))
    holding = sorted((server for server in servers if server.relative(real) is not None),
                     key=lambda server: len(server.root.parts), reverse=True)
    if not holding:
        raise InvalidInput(f"no Jupyter Server running on this machine serves {real} (none this process runs under, "
                           f"and no root holds it; they publish themselves in `jupyter --runtime-dir`): "
                           f"give its URL, --server URL")
    nearest = [server for server in holding if server.root == holding[0].root]
    if len(nearest) > 1:
        raise InvalidInput(f"{len(nearest)} Jupyter Servers serve {holding[0].root} "
                           f"({', '.join(server.url for server in nearest)}): give one, --server URL")
    return holding[0]


def _ancestors() -> list[int]:
    """The ids of this process's parent, its parent's parent, ... (Linux's /proc; elsewhere the parent)."""
    found, pid = [], os.getppid()
    while pid > 1 and pid not in found:
        found.append(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the name, in parentheses, may hold spaces
    return found


def _server_info(info_file: Path) -> dict[str, Any] | None:
    try:
        info = json.loads(info_file.read_text())
    except (OSError, ValueError):
        return None  # being written, or gone: as if it were not there yet
    if not isinstance(info, dict) or not isinstance(info.get("url"), str) or not isinstance(info.get("root_dir"), str):
        return None
    return info


def _runs(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def local_root(url: str) -> Path | None:
    """The root folder on this machine of the server at `url` (None: not a server running here)."""
    return next((server.root for server in running_servers() if same_server(server.url, url)), None)


def same_server(a: str, b: str) -> bool:
    one, two = urlsplit(a), urlsplit(b)
    hosts = {one.hostname or "", two.hostname or ""}
    same_host = len(hosts) == 1 or hosts <= LOOPBACK
    return same_host and one.port == two.port and one.path.rstrip("/") == two.path.rstrip("/")


def relative_path(real: Path | str, root: Path) -> str | None:
    try:
        relative = Path(real).relative_to(root)
    except ValueError:
        return None
    return relative.as_posix()


async def refuse_if_open_elsewhere(real: Path, paired_urls: list[str]) -> None:
    """Refuse a local read or write of `real` while a running Jupyter Server this session is not paired
    with has it open (a session of it): the server's copy is the live one. A server that does not say
    whether it has it open counts as having it open."""
    for server in running_servers():
        relative = server.relative(real)
        if relative is None or any(same_server(server.url, url) for url in paired_urls):
            continue
        if await _has_session(server, relative):
            raise ConnectionRequired(
                f"{real} is open on the Jupyter Server at {server.url} (as {relative}): a change to its file "
                f"would be lost when the open notebook saves, and the file may be older than what it shows. "
                f"Pair with that server to reach its document: `%tools pair {relative} --server {server.url}`, or "
                f"`toolkernel serve --notebook {relative} --server {server.url}` (with the server's token: --token, "
                f"serve's --server-token, or $JUPYTER_TOKEN)")


async def _has_session(server: RunningServer, relative: str) -> bool:
    headers = {"Authorization": f"token {server.token}"} if server.token else {}
    try:
        async with httpx.AsyncClient(headers=headers, timeout=SESSIONS_TIMEOUT_SECONDS) as http:
            response = await http.get(server.url.rstrip("/") + "/api/sessions")
            response.raise_for_status()
            sessions: list[dict[str, Any]] = response.json()
    except (httpx.HTTPError, ValueError):
        return True  # fail closed: it runs and serves this file, and does not say what it has open
    return any(_same_notebook(session.get("path") or "", relative) for session in sessions)


def _same_notebook(session_path: str, relative: str) -> bool:
    return os.path.normpath(session_path.lstrip("/")) == os.path.normpath(relative)
