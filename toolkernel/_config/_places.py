"""Where toolkernel keeps its own files outside every workspace.

The state folder (`$XDG_STATE_HOME/toolkernel`, default `~/.local/state/toolkernel`: trust
records, pending approvals, the journal's copies of workspace files) and the cache folder
(`$XDG_CACHE_HOME/toolkernel`, default `~/.cache/toolkernel`). With a workspace in `~` they
lie inside it, and what walks the workspace (search, the journal's scans) skips them as it
skips `.git`: their copies of the workspace's files are not the workspace's files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

APP = "toolkernel"


def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME") or Path.home())


def state_folder(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get("XDG_STATE_HOME") or _home(environ) / ".local" / "state") / APP


def cache_folder(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get("XDG_CACHE_HOME") or _home(environ) / ".cache") / APP


def own_folders(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """toolkernel's state and cache folders, as the environment sets them and at their defaults
    (a kernel started with `XDG_STATE_HOME` set and a `serve` started without it share one
    home), each as its real path; folders that do not exist are left out."""
    environ = os.environ if environ is None else environ
    defaults = {key: value for key, value in environ.items() if key not in ("XDG_STATE_HOME", "XDG_CACHE_HOME")}
    found: dict[str, None] = {}
    for env in (environ, defaults):
        for folder in (state_folder(env), cache_folder(env)):
            real = os.path.realpath(folder)
            if os.path.isdir(real):
                found[real] = None
    return tuple(found)


def own_folders_below(root: str | Path, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The own folders that lie below `root` relative to it: what a walk of
    `root` leaves out. A root inside one of them is a search of it by name, as of `.git`."""
    root = os.path.realpath(root)
    prefix = root if root == "/" else root + "/"
    return tuple(folder[len(prefix):] for folder in own_folders(environ) if folder.startswith(prefix))
