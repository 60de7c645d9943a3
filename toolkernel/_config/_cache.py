"""The config, re-read on every run only when a file it comes from may have changed.

Reading and checking every config file costs about a millisecond and a half, most
of a direct call (`%tools ...`, `toolkernel.call`). The promise stays "the config is
re-read on every run": what is checked on every run is a fingerprint of everything
`load_config` reads (each candidate file's and folder's status, the trust store's,
the environment, and each place a project folder's trust looked for the code its config
runs, `Config.code_paths`), and a change to any of it reads the files again (of a folder,
only what it is and its mode count: its times move with every entry made in it).

Most candidate files do not exist, and looking for each of them again was most of
that check. A folder's times change whenever an entry in it is made, removed or
renamed (its change time too, which nobody can set back), so a file missing at the
last check in a folder whose status has not changed since is still missing, and is
not looked for again. A file that exists is looked at on every check: an edit in
place moves its own times, not its folder's. Failing closed: a folder that had
changed within `_SETTLED_NS` of that check (file systems stamp times from a coarse
clock, so a second change may leave the same times) has its entries looked at, and
so does a link (its own times do not follow its target's).
"""

from __future__ import annotations

import os
import stat
from os import F_OK
from stat import S_IFDIR, S_IFLNK
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ._config import Config, load_config
from ._sources import CONFIG_NAME, MCP_JSON_NAME, admin_path, home, project_dirs, user_config_dir
from ._trust import store_path


def lstat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


class StatOnce:
    """`lstat_or_none` for the checks of one run (the config's fingerprint, the mount plan's):
    each path is looked at once, and an entry of a folder found missing is missing too
    (as it was at that moment) without a look. On this VM an `lstat` costs 3-13 us, and a
    script run's checks looked at about 38 paths, 11 of them twice or in a missing folder."""

    def __init__(self) -> None:
        self._seen: dict[str, os.stat_result | None] = {}

    def __call__(self, path: str) -> os.stat_result | None:
        seen = self._seen
        if path in seen:
            return seen[path]
        cut = path.rfind("/")  # os.path.dirname's Python would cost more than the look it spares
        parent = (path[:cut] or "/") if cut >= 0 else path
        # Only a missing parent: a parent that is a link may still lead to a folder.
        if parent != path and parent in seen and seen[parent] is None:
            found = None
        else:
            try:  # `lstat_or_none` written out: a direct call's check runs this for every path
                found = os.lstat(path)
            except OSError:
                found = None
        seen[path] = found
        return found


_FILE_TYPE = 0o170000  # the bits of st_mode `stat.S_IFMT` keeps: tested inline, with no call

# Whether `os.access` can tell a link is there without following it (it can on Linux and macOS).
_ACCESS_NO_FOLLOW = os.access in os.supports_follow_symlinks

# Changes this recent may not show in a folder's times (FAT stamps to 2 s, others to a clock tick).
_SETTLED_NS = 2_000_000_000


@dataclass(frozen=True)
class _Check:
    """One check: the environment, the status of each of `_watched`'s paths, and which
    folders among them had settled."""

    workdir: str
    environ: dict  # the process's own (encoded) table, copied
    paths: tuple[str, ...]
    entries: tuple[tuple[int, ...], ...]  # by index: the watched entries of that folder
    statuses: tuple[Any, ...]
    settled: frozenset[int]

    def missing(self, path: str) -> bool:
        """Whether this check found `path` missing (False for a path it does not watch)."""
        return path in self.paths and self.statuses[self.paths.index(path)] is None

    def is_folder(self, path: str) -> bool:
        """Whether this check found `path` a folder itself, not a link (False for a path it does not watch)."""
        return path in self.paths and _is_folder(self.statuses[self.paths.index(path)])


def fingerprint(workdir: Path, environ: Mapping[str, str] | None = None,
                lstat: Callable[[str], os.stat_result | None] = lstat_or_none,
                last: _Check | None = None) -> _Check:
    """What `load_config(workdir)` depends on, as cheap `lstat`s and the environment;
    `last`, the check before, spares the looks the module's note says it may."""
    environ = os.environ if environ is None else environ
    # os.environ decodes every value on each read; its encoded table is what the process
    # holds, ten times cheaper to compare, and changes with every `os.environ[...] = `.
    table = getattr(environ, "_data", environ)
    where = str(workdir)
    if last is not None and last.workdir == where and last.environ == table:
        table, paths, entries, before = last.environ, last.paths, last.entries, last.statuses
    else:
        table, before = dict(table), None
        paths, entries = _watched(where, frozenset(table.items()), environ)
    since = time.time_ns() - _SETTLED_NS
    settled_then = last.settled if before is not None else frozenset()
    statuses: list[Any] = [None] * len(paths)  # what is not looked at is missing now, or still
    settled: set[int] = set()
    plain, os_lstat, os_access = lstat is lstat_or_none, os.lstat, os.access
    quick_missing = _ACCESS_NO_FOLLOW and before is not None
    # A walk from the paths no watched folder holds, each folder before its entries (the order of
    # `paths`), in plain code: it runs on every direct call, and every watched path visited cost
    # Python time even when it was not looked at. Nothing in a folder missing now is visited.
    todo = list(entries[-1])
    while todo:
        index = todo.pop()
        path = paths[index]
        if plain:  # `lstat_or_none` written out: a call per path cost more than its look
            if quick_missing and before[index] is None and not os_access(path, F_OK, follow_symlinks=False):
                continue  # missing then and now: told without a failed lstat's error, 4x its cost
            try:
                found = os_lstat(path)
            except OSError:
                continue
        else:
            found = lstat(path)
            if found is None:
                continue
        mode = found.st_mode
        kind = mode & _FILE_TYPE
        inside = entries[index]
        if kind == S_IFLNK:
            statuses[index] = _link_status(path, found)  # what it leads to may change unseen: look inside
        else:
            status = statuses[index] = (found.st_ino, found.st_dev, mode, found.st_size,
                                        found.st_mtime_ns, found.st_ctime_ns)
            if kind == S_IFDIR:
                if status[4] < since and status[5] < since:
                    settled.add(index)
                if inside and index in settled_then and before[index] == status:
                    # Unchanged since the last check, and settled then: missing then is missing still.
                    inside = [entry for entry in inside if before[entry] is not None]
        if inside:
            todo.extend(inside)
    return _Check(where, table, paths, entries, tuple(statuses), frozenset(settled))


_WATCHED: dict[tuple[str, frozenset], tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]] = {}


def _watched(workdir: str, snapshot: frozenset,
             environ: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """Every file and folder whose status can change the config, folders first; and for each
    the indexes of its entries among them, last first (to be popped in order), with one more
    at the end: the paths no watched folder holds (the same for the same workdir and
    environment, so worked out once)."""
    key = (workdir, snapshot)
    watched = _WATCHED.get(key)
    if watched is None:
        where = home(environ)
        found = [admin_path(environ), user_config_dir(environ, where) / CONFIG_NAME, store_path(environ)]
        for folder in project_dirs(Path(workdir).resolve(), where.resolve()):
            # approvals.json too: whether its lasting approvals count is part of the config (trust).
            found += [folder, folder / CONFIG_NAME, folder / MCP_JSON_NAME,
                      folder / ".toolkernel", folder / ".toolkernel" / "approvals.json"]
        paths = tuple(str(p) for p in found)
        index = {path: i for i, path in reversed(list(enumerate(paths)))}
        parents = [index.get(str(Path(p).parent), -1) for p in paths]
        parents = [p if p < i else -1 for i, p in enumerate(parents)]  # a folder comes before its entries
        held = [[i for i, parent in enumerate(parents) if parent == folder] for folder in [*range(len(paths)), -1]]
        entries = tuple(tuple(reversed(inside)) for inside in held)
        if len(_WATCHED) > 16:
            _WATCHED.clear()
        watched = _WATCHED[key] = (paths, entries)
    return watched


def _link_status(path: str, link: os.stat_result) -> tuple[Any, ...]:
    # Both the link and what it leads to: a swapped symlink target changes the config.
    try:
        return _entry(link), _entry(os.stat(path))
    except OSError:
        return _entry(link), None


def _is_folder(status: tuple[Any, ...] | None) -> bool:
    return status is not None and len(status) == 6 and stat.S_ISDIR(status[2])  # a link's is a pair


def _entry(s: os.stat_result) -> tuple[Any, ...]:
    return (s.st_ino, s.st_dev, s.st_mode, s.st_size, s.st_mtime_ns, s.st_ctime_ns)


class ConfigCache:
    """One workspace's config, read again whenever its fingerprint moves."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._key: tuple[Any, ...] | None = None
        self._config: Config | None = None
        self._last: _Check | None = None

    def load(self, lstat: Callable[[str], os.stat_result | None] = lstat_or_none) -> Config:
        return self.check(lstat)[0]

    def check(self, lstat: Callable[[str], os.stat_result | None] = lstat_or_none) -> tuple[Config, _Check]:
        """The config, and the check that found it current (what it saw of each watched path)."""
        checked = self._last = fingerprint(self.workdir, lstat=lstat, last=self._last)
        code = _code_statuses(self._config.code_paths, lstat) if self._config is not None else ()
        key = (checked.environ, checked.statuses, code)
        if self._config is None or (key != self._key and _read_by_config(key) != _read_by_config(self._key)):
            # A bad config raises here every time: only a good one is kept (with its key).
            self._config = load_config(self.workdir)
            key = (checked.environ, checked.statuses, _code_statuses(self._config.code_paths, lstat))
        self._key = key
        return self._config, checked


def _code_statuses(paths: tuple[str, ...], lstat: Callable[[str], os.stat_result | None]) -> tuple[Any, ...]:
    """The status of each place the code a folder's config runs was looked for (`Config.code_paths`):
    a folder's trust covers that code, so an edit there, or a file made there, may untrust it."""
    found = []
    for path in paths:
        status = lstat(path)
        found.append(None if status is None else _link_status(path, status) if stat.S_ISLNK(status.st_mode)
                     else _entry(status))
    return tuple(found)


def _read_by_config(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """What `load_config` reads of a key's paths. A folder's times and size move with every
    entry made, renamed or removed in it (a notebook's autosave, a saved output), and the
    entries that can hold config are watched themselves (the check looks at them when their
    folder moved): of a folder, only what it is (inode, device) and its mode (who may write
    there) count. Reading the config again for anything else cost a direct call 1-2 ms."""
    environ, statuses, code = key
    return environ, tuple(status[:3] if _is_folder(status) else status for status in statuses), code
