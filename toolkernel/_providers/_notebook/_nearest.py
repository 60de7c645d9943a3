"""The notebooks a Jupyter Server has nearest to a path it does not have: what its refusal suggests.

A path given from the folder serve runs in (`Untitled.ipynb` from `notebooks/`) is not the path
from the server's root (`notebooks/Untitled.ipynb`): the refusal names what the server has. The
server is asked, never the disk (its root may be on another machine): the notebooks open in its
sessions, the guess from serve's folder when the server runs here, and a walk of its folders
through the Contents API, bounded in folders and in time (a home folder as the root holds
100,000 files: the walk ends early and suggests what it found so far).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from difflib import SequenceMatcher
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from ..._errors import CallError, printable
from ._roots import relative_path

WALK_FOLDERS = 48
WALK_SECONDS = 3.0
WALK_DEPTH = 4
SHOWN = 3
CLOSE_ENOUGH = 0.6  # difflib's ratio of two paths, for a notebook of another name to be suggested
# Folders no notebook is looked for in: environments, caches, packages (each may hold thousands of files).
SKIPPED = frozenset({"node_modules", "site-packages", "__pycache__", "venv", "env", "build", "dist"})


async def missing_notebook(api: Any, path: str, *, workdir: Path | None = None, root: Path | None = None) -> str:
    """Why `path` cannot be paired, and what the server has nearest to it. `workdir` (serve's
    folder) under `root` (the server's root on this machine): `path` from there is a guess too."""
    guesses = []
    if workdir is not None and root is not None:
        guess = relative_path(os.path.realpath(workdir / path), root)
        if guess is not None and guess != path:
            guesses.append(guess)
    found = await nearest_notebooks(api, path, guesses)
    said = (f"no notebook {path} under the root of the Jupyter Server at {api.base} (a notebook is named by its path"
            " from the server's root, whatever folder serve runs in)")
    if found:
        said += "; nearest: " + ", ".join(found)
    return printable(said)


async def nearest_notebooks(api: Any, path: str, guesses: list[str] = ()) -> list[str]:
    """Up to `SHOWN` notebooks of the server, nearest to `path` first."""
    found: set[str] = set()
    for guess in guesses:
        if await _exists(api, guess):
            found.add(guess)
    found |= await _open_notebooks(api)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(_walk(api, found), WALK_SECONDS)  # what it found so far counts
    found.discard(path)
    return rank(path, found)


def rank(path: str, candidates: set[str]) -> list[str]:
    """The candidates that share `path`'s file name (as spelled, then in any case) or read close to
    it, nearest first."""
    name, wanted = PurePosixPath(path).name, path.casefold()

    def closeness(candidate: str) -> tuple[bool, bool, float, int, str]:
        own = PurePosixPath(candidate).name
        ratio = SequenceMatcher(None, wanted, candidate.casefold()).ratio()
        return own != name, own.casefold() != name.casefold(), -ratio, len(candidate), candidate

    scored = sorted(closeness(candidate) for candidate in candidates)
    return [candidate for _, other, ratio, _, candidate in scored if not other or -ratio >= CLOSE_ENOUGH][:SHOWN]


async def _exists(api: Any, path: str) -> bool:
    try:
        model = await api.request("GET", "api/contents", quote(path), params={"content": "0"}, missing_ok=True)
    except CallError:
        return False
    return isinstance(model, dict) and model.get("type") == "notebook"


async def _open_notebooks(api: Any) -> set[str]:
    try:
        sessions = await api.request("GET", "api/sessions")
    except CallError:
        return set()
    paths = (session.get("path") for session in sessions or [] if isinstance(session, dict))
    return {path.lstrip("/") for path in paths if isinstance(path, str) and path.endswith(".ipynb")}


async def _walk(api: Any, found: set[str]) -> None:
    """Breadth first from the root: the notebooks of up to `WALK_FOLDERS` folders, into `found`."""
    folders, listed = [("", 0)], 0
    while folders and listed < WALK_FOLDERS:
        folder, depth = folders.pop(0)
        listed += 1
        try:
            model = await api.request("GET", "api/contents", quote(folder), params={"type": "directory"},
                                      missing_ok=True)
        except CallError:
            continue  # a folder it will not list: the others still may
        entries = model.get("content") if isinstance(model, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                continue
            name = str(entry.get("name") or "")
            if entry.get("type") == "notebook":
                found.add(entry["path"])
            elif entry.get("type") == "directory" and depth < WALK_DEPTH and not _skipped(name):
                folders.append((entry["path"], depth + 1))


def _skipped(name: str) -> bool:
    return name.startswith(".") or name in SKIPPED
