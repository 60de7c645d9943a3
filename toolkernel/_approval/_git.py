"""What git runs on the host for a repository, found in its work tree.

Git runs the hooks of a repository the next time the person commits there, on the host.
The `.git` folder itself is protected whole (see _protected.py); this finds the places outside
it that those hooks run or read as code, so that a script cannot put its own there:

- the folder `core.hooksPath` names (husky's `.husky`), read from the config of the
  repository: in its `.git` folder, or where a `.git` file points (a submodule's gitdir, a
  linked worktree's common folder);
- what the hooks name: a hook manager's hook is a shim that runs the person's hooks from the
  work tree (pre-commit's `--config=.pre-commit-config.yaml`, whose `entry:` lines name the
  repository's own hook programs; lefthook's `lefthook.yml`; husky 9 keeps git's hooks in
  `.husky/_` and runs the person's from the folder above).

Read leniently: naming a file too many only makes it read-only for scripts (tool calls that
write it ask), while one too few lets a script run code on the host.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from .._providers._tools._paths import is_inside, real_path

GIT = ".git"
_HOOKS_PATH = re.compile(r"^\s*hookspath\s*=\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_GITDIR = re.compile(r"^gitdir:\s*(.+?)\s*$", re.MULTILINE)
# A word of a shell line: what a hook names sits between these.
_WORDS = re.compile(r"[^\s'\"=;:|&()<>`,\[\]{}]+")
# Lines of a hook manager's config that name the programs it runs.
_RUNS = re.compile(r"^\s*-?\s*(?:entry|run|command)\s*:\s*(.+)$", re.MULTILINE)
# Hook managers whose shim names no config: the files they read, by a word of the shim.
_MANAGERS = {
    "pre-commit": (".pre-commit-config.yaml", ".pre-commit-config.yml"),
    "lefthook": ("lefthook.yml", "lefthook.yaml", ".lefthook.yml", ".lefthook.yaml", "lefthook-local.yml",
                 "lefthook-local.yaml", ".lefthook-local.yml", ".lefthook-local.yaml", ".lefthook"),
    "overcommit": (".overcommit.yml", ".git-hooks"),
}
_MANAGER_CONFIGS = {name for names in _MANAGERS.values() for name in names if "." in name[1:]}
_MOST_HOOKS = 64
_HEAD = 65_536  # characters read of a hook or a config: shims and configs are small


def git_config(worktree: Path, looked_at: list[str]) -> Path:
    """The config file of the repository whose work tree is `worktree`."""
    git = worktree / GIT
    looked_at.append(str(git))
    if not git.is_file():
        return git / "config"
    found = _GITDIR.search(_head(git, looked_at))
    gitdir = worktree / Path(found.group(1)).expanduser() if found else git
    common = _head(gitdir / "commondir", looked_at).strip()
    return (gitdir / common if common else gitdir) / "config"


def hooks_paths(config: Path, worktree: Path, looked_at: list[str]) -> list[Path]:
    """The folders `core.hooksPath` names in `config` (any `hooksPath =` line)."""
    return [worktree / Path(value.strip('"')).expanduser() for value in _HOOKS_PATH.findall(_head(config, looked_at))]


def hook_places(worktree: Path, looked_at: list[str]) -> list[Path]:
    """Every place in or beside the work tree that git's hooks for this repository run or read
    as code: the hooks folders, and what the hooks in them (or in the default `hooks` folder of
    the gitdir) name, with what a hook manager's config names in turn."""
    config = git_config(worktree, looked_at)
    folders = hooks_paths(config, worktree, looked_at)
    default = config.parent / "hooks"
    places = list(folders)
    for folder in [*folders, default]:
        if folder.name == "_":  # husky 9: git's hooks in `.husky/_` run the person's in `.husky`
            places.append(folder.parent)
        for hook in _hooks_in(folder, looked_at):
            text = _head(hook, looked_at)
            places += named_files(text, worktree, looked_at)
            places += [worktree / name for manager, names in _MANAGERS.items() if manager in text for name in names]
    for config in [place for place in places if place.name in _MANAGER_CONFIGS]:
        runs = "\n".join(_RUNS.findall(_head(config, looked_at)))
        places += named_files(runs, worktree, looked_at)
    return places


def named_files(text: str, worktree: Path, looked_at: list[str]) -> list[Path]:
    """The files and folders the words of `text` name, relative to `worktree` or absolute: a
    word with a `/` (there or not: a script must not be the one to create it), or with a dot
    in its name that is there (`lint.py`, `.pre-commit-config.yaml`); never the work tree or
    a folder above it, nor a comment's (`#!/bin/sh`). Places outside the work tree count (an
    inner repository's hook may run `../../tools/lint.sh` of the workspace); callers keep those
    in the workspace."""
    found = []
    real_worktree = real_path(worktree)
    for word in dict.fromkeys(_WORDS.findall(text)):
        if word.startswith(("-", "$", "~", "#")) or "$" in word or "://" in word or not word.strip("./"):
            continue
        if "/" not in word and "." not in word:
            continue
        place = worktree / word
        looked_at.append(str(place))
        if "/" not in word and not os.path.lexists(place):
            continue
        if is_inside(real_worktree, real_path(place)):
            continue
        found.append(place)
    return found


def in_inner_hooks(path: str, root: Path) -> bool:
    """Whether `path` (a real path) is a hook place (`hook_places`) of a repository that holds
    it below the workspace's top `root` (whose own are protected already). Looked up for each
    call that may write: a clone brings a repository between two calls. (What a repository's
    hooks run from elsewhere in the workspace is found by the walk of it: `_protected`.)"""
    top = str(root)
    folder = os.path.dirname(path)
    while folder != top and is_inside(folder, top):
        if os.path.lexists(os.path.join(folder, GIT)):
            places = hook_places(Path(folder), [])
            if any(is_inside(path, real_path(place)) for place in places):
                return True
        folder = os.path.dirname(folder)
    return False


def _hooks_in(folder: Path, looked_at: list[str]) -> list[Path]:
    looked_at.append(str(folder))
    try:
        names = sorted(name for name in os.listdir(folder) if not name.endswith(".sample"))
    except OSError:
        return []
    return [folder / name for name in names[:_MOST_HOOKS]]


def _head(path: Path, looked_at: list[str]) -> str:
    """The start of a regular file ("" for anything else: a pipe or a device would block)."""
    looked_at.append(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError):
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        # A NUL separates words: no path holds one (os calls refuse it), and a binary hook has many.
        return os.read(fd, _HEAD).decode("utf-8", "replace").replace("\0", "\n")
    except OSError:
        return ""
    finally:
        os.close(fd)
