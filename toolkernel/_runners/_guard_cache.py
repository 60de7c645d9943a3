"""The mount plan of the last run, kept while nothing it was worked out from has changed.

Working out `mount_plan` resolves a dozen paths through symlinks (about a
millisecond, most of a direct call). Its answer depends only on the config,
the environment, the current directory and what the filesystem holds at
every path the resolution looks at. So the plan is kept together with the
status (`lstat`) of each such path, found by resolving the same paths again
the way `os.path.realpath` does while noting each entry it looks at; every
run checks those statuses (a few microseconds each) and works the plan out
afresh when any of them moved. Failing closed:

- an entry that changed a moment ago (within the coarse clock of file
  timestamps, where two changes may leave the same time) is not trusted:
  nothing is kept;
- a resolution that does not land where `os.path.realpath` does, or meets a
  symlink loop, keeps nothing;
- the statuses are read before the plan that is kept is worked out, so a
  change in between shows at the next check.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from .._approval._protected import Protection, mount_plan

# Changes this recent are not trusted to show in a timestamp (see the module's note).
_SETTLED_NS = 2_000_000_000


@dataclass(frozen=True)
class _Kept:
    key: tuple[Any, ...]
    config: Any  # held, so that its id in `key` cannot be reused by another object
    statuses: dict[str, tuple[Any, ...] | None]
    plan: Protection


class PlanCache:
    """`mount_plan` for one session's runs, worked out again whenever it may have changed."""

    def __init__(self) -> None:
        self._kept: _Kept | None = None

    def plan(self, workdir: Path, config: Any, environ: Mapping[str, str] | None = None,
             lstat: Callable[[str], os.stat_result | None] | None = None) -> Protection:
        """`lstat`: how the kept statuses are checked (`_config._cache.StatOnce` shares the
        looks with the config's check of the same run)."""
        environ = os.environ if environ is None else environ
        try:
            cwd = os.getcwd()  # relative paths in the config resolve against it
        except OSError:  # the current folder is gone: nothing to key a kept plan on
            return mount_plan(workdir, config, environ)
        key = (str(workdir), id(config), cwd, frozenset(getattr(environ, "_data", environ).items()))
        kept = self._kept
        if kept is not None and kept.key == key and kept.config is config and _unchanged(kept.statuses, lstat):
            return kept.plan
        self._kept = None
        looked_at: list[str] = []
        plan = mount_plan(workdir, config, environ, looked_at)  # which paths matter (creates .toolkernel/)
        statuses = _statuses(looked_at)
        if statuses is None:
            return plan  # as good as uncached: worked out for this run
        again: list[str] = []
        plan = mount_plan(workdir, config, environ, again)
        if again == looked_at:
            self._kept = _Kept(key, config, statuses, plan)
        return plan


def _unchanged(statuses: dict[str, tuple[Any, ...] | None],
               lstat: Callable[[str], os.stat_result | None] | None) -> bool:
    return all(_status(path, lstat) == seen for path, seen in statuses.items())


def _statuses(paths: list[str]) -> dict[str, tuple[Any, ...] | None] | None:
    """The status of every entry resolving `paths` looks at; None when they cannot be trusted."""
    trace = _Trace()
    try:
        for path in dict.fromkeys(paths):
            if trace.resolve(path) != os.path.realpath(path):
                return None
    except (_Loop, OSError):
        return None
    recent = time.time_ns() - _SETTLED_NS
    if any(s is not None and s[-1] is not None and s[-1] > recent for s in trace.seen.values()):
        return None
    return trace.seen


def _status(path: str, lstat: Callable[[str], os.stat_result | None] | None = None) -> tuple[Any, ...] | None:
    """What resolving through `path` depends on: which entry it is and its type and access
    (a folder's times move with every file made in it, so they are left out); for a file or
    a link also its size and change time, so a new entry that reuses an inode number shows."""
    if lstat is not None:
        s = lstat(path)
        if s is None:
            return None
    else:
        try:
            s = os.lstat(path)
        except OSError:
            return None
    if stat.S_ISDIR(s.st_mode):
        return (s.st_ino, s.st_dev, s.st_mode, s.st_uid, s.st_gid, None)
    return (s.st_ino, s.st_dev, s.st_mode, s.st_uid, s.st_gid, s.st_size, s.st_ctime_ns)


class _Loop(Exception):
    """A symlink loop: not worth keeping anything for."""


class _Trace:
    """Resolves paths as `os.path.realpath` does (non-strict), noting each entry's status."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[Any, ...] | None] = {}
        self._links: dict[str, str | None] = {}

    def resolve(self, path: str) -> str:
        return self._follow("/", os.path.abspath(path))

    def _follow(self, base: str, rest: str) -> str:
        if rest.startswith("/"):
            base = "/"
        for name in rest.split("/"):
            if name in ("", "."):
                continue
            if name == "..":
                base = os.path.dirname(base)
                continue
            entry = os.path.join(base, name)
            status = self.seen[entry] = _status(entry)
            if status is None or not stat.S_ISLNK(status[2]):
                base = entry
                continue
            if entry in self._links:
                target = self._links[entry]
                if target is None:
                    raise _Loop(entry)
                base = target
                continue
            self._links[entry] = None
            base = self._links[entry] = self._follow(base, os.readlink(entry))
        return base
