"""Links already in the workspace when a script runs, laid under read-only mounts.

Bashkit resolves the links in a path on the host and checks only that the end stays
inside the mount. So a link to a folder in the workspace (`me -> .`, which a cloned
repository can bring) would lead a script's writes past the read-only mounts over the
protected paths: `me/toolkernel.toml` is the host's `toolkernel.toml`. Scripts cannot
make links (`ln` is refused, see _runners/_guard.py); the ones already there are found before
each run, and each gets a read-only mount at its own path: a link to a folder in the
workspace shows that folder, which a script reads but does not write; any other link an
empty stand-in (Bashkit neither reads through a link to a file nor follows one out of the
workspace). To `cp` and `mv` a mount is a folder, never a link that, copied or moved
elsewhere, would lead somewhere else.

The walk is kept between runs: a folder whose status has not moved is looked at (one
lstat) and not listed again. A folder changed within the last two seconds is listed
every time (a coarse clock may not show a second change).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection

from .._providers._tools._paths import is_inside

_SETTLED_NS = 2_000_000_000


@dataclass(frozen=True)
class _Listed:
    status: tuple[Any, ...]
    links: tuple[str, ...]
    folders: tuple[str, ...]
    git: bool = False  # it holds a `.git` (a folder, or a file naming one): a repository's top
    gitdir: bool = False  # it is a repository's folder itself, by its entries (`is_gitdir`)


class LinkScan:
    """The links below one folder, found again cheaply while its folders stay as they were."""

    def __init__(self) -> None:
        self._listed: dict[str, _Listed] = {}
        self._lock = threading.Lock()  # two runs in one workspace (serve) walk in turn

    def links(self, root: str, skip: Collection[str] = ()) -> list[str]:
        """Every link below `root` (not below the folders in `skip`), as paths."""
        return self.walk(root, skip)[0]

    def walk(self, root: str, skip: Collection[str] = ()) -> tuple[list[str], list[str]]:
        """Every link below `root` (not below the folders in `skip`), and every repository below
        it (the top's own left out), as paths: each `.git`, and each folder that is a gitdir by
        its entries without that name (a bare repository: git run in it, or in a folder below,
        takes it for one, reads its config and runs what it names), but those inside a `.git`."""
        with self._lock:
            found: list[str] = []
            repositories: list[str] = []
            listed: dict[str, _Listed] = {}
            stack = [root]
            while stack:
                folder = stack.pop()
                entry = self._look(folder, found)
                if entry is None:
                    continue
                listed[folder] = entry
                found.extend(os.path.join(folder, name) for name in entry.links)
                if entry.git and folder != root:
                    repositories.append(os.path.join(folder, ".git"))
                if entry.gitdir and folder != root and ".git" not in os.path.relpath(folder, root).split(os.sep):
                    repositories.append(folder)
                stack.extend(path for name in entry.folders if (path := os.path.join(folder, name)) not in skip)
            self._listed = listed  # folders no longer reached are forgotten
            return found, repositories

    def _look(self, folder: str, found: list[str]) -> _Listed | None:
        try:
            status = os.lstat(folder)  # before the listing: a change during it shows next time
        except OSError:
            return None
        if stat.S_ISLNK(status.st_mode):
            found.append(folder)  # a folder swapped for a link since its parent was listed
            return None
        key = (status.st_ino, status.st_dev, status.st_mtime_ns, status.st_ctime_ns)
        kept = self._listed.get(folder)
        if kept is not None and kept.status == key and max(key[2:]) < time.time_ns() - _SETTLED_NS:
            return kept
        return _list(folder, key)


def _list(folder: str, status: tuple[Any, ...]) -> _Listed | None:
    links, folders, git, names = [], [], False, set()
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                names.add(entry.name)
                try:
                    if entry.is_symlink():
                        links.append(entry.name)
                        continue
                    git = git or entry.name == ".git"
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.name)
                except OSError:
                    continue
    except OSError:  # unreadable: a script cannot list or write it either
        return None
    return _Listed(status, tuple(links), tuple(folders), git, is_gitdir(names))


def is_gitdir(names: Collection[str]) -> bool:
    """Whether a folder holding entries of these names may be a gitdir, as git's discovery tells
    one (`is_git_directory`): a `HEAD`, and `objects` and `refs`, or a `commondir` naming where
    those are. Any kind of entry counts (git only tries to open HEAD and search the others)."""
    return "HEAD" in names and ("commondir" in names or ("objects" in names and "refs" in names))


_scans: dict[str, LinkScan] = {}
_scans_lock = threading.Lock()


def links_to_mount(workdir: Path, skip: Collection[Path]) -> list[tuple[Path, bool]]:
    """(link, leads to a folder in the workspace) for every link in `workdir` (a real path), not
    below `skip` (folders mounted read-only already). Every link gets a mount, whatever it leads
    to: one copied or moved elsewhere leads elsewhere (`x/h -> hooks`, where `x/hooks` is a
    file, leads to the protected `hooks/` once moved to the top), and a mount cannot be."""
    return found_in(workdir, skip)[0]


def found_in(workdir: Path, skip: Collection[Path]) -> tuple[list[tuple[Path, bool]], list[Path]]:
    """`links_to_mount`, and the `.git` of every repository inside the workspace (below its top),
    from one walk."""
    root = str(workdir)
    with _scans_lock:
        scan = _scans.setdefault(root, LinkScan())
    links, repositories = scan.walk(root, {str(path) for path in skip})
    mounts = []
    for link in links:
        target = os.path.realpath(link)
        mounts.append((Path(link), is_inside(target, root) and os.path.isdir(target)))
    return mounts, [Path(git) for git in repositories]
