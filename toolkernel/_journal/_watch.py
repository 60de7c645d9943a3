"""The kernel's knowledge of the workspace's files, kept between runs (issue 44, item 1).

A shell run's own commands change files without telling anyone, so the journal compares the
workspace before and after each run. Walking a 100,000-file folder twice a run cost 3.3 s a
cell. Instead the kernel keeps what it knows of every file (size, mtime, mode, inode, kind) and
an inotify watch on every folder (PyPI's `inotify_simple`: the system calls and nothing else,
so the journal reads the queue when it wants, which is what makes the barrier below possible;
asyncinotify wants an event loop, watchfiles debounces on a thread of its own and so can say
nothing about "every event of the run is in"). Each `look()` reads what queued since the last
and looks again at only the files named there: a run costs what it changed.

The barrier: the kernel queues an inotify event inside the system call that changes the file,
before that call returns. So once the run's writers are done (Bashkit's script returned; a host
cell's process group exited), reading the queue until it is empty gives every event of the run.
Not seen by inotify, and so by this: writes through a shared memory map, and changes made on
another machine to a network filesystem. A background process the run started goes on after
the run: what it writes later is the next run's, as it was with the walk.

Where watching is impossible, a walk, one pass, and only there:
- no inotify (not Linux, no instance left): every folder is listed and every file stat'ed at
  each look;
- the watch limit (`/proc/sys/fs/inotify/max_user_watches`) reached: the folders past it are
  listed at each look (their files stat'ed), the rest watched;
- the queue overflowed (`IN_Q_OVERFLOW`: more than `max_queued_events` events between two
  looks): the whole workspace is walked again, once, and compared. Nothing is missed in silence.
Folders the journal leaves out (`_ignore`) are neither watched nor walked.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from typing import Iterable

from ._ignore import ENVIRONMENT_MARKERS, Ignores

try:  # Linux only: elsewhere the workspace is walked
    from inotify_simple import INotify, flags as _flags
except (ImportError, OSError):  # pragma: no cover - not Linux
    INotify = None  # type: ignore[assignment,misc]

# path -> (size, mtime_ns, mode, inode, kind)
State = tuple[int, int, int, int, str]
Change = tuple["State | None", "State | None"]  # (before, after); None: absent

if INotify is not None:
    _MASK = (_flags.CREATE | _flags.DELETE | _flags.MODIFY | _flags.ATTRIB | _flags.CLOSE_WRITE | _flags.MOVED_FROM
             | _flags.MOVED_TO | _flags.ONLYDIR | _flags.DONT_FOLLOW | _flags.EXCL_UNLINK)
    _ISDIR, _OVERFLOW, _IGNORED = _flags.ISDIR, _flags.Q_OVERFLOW, _flags.IGNORED
    _ARRIVED = _flags.CREATE | _flags.MOVED_TO
    _LEFT = _flags.DELETE | _flags.MOVED_FROM
_LIMIT_FILE = "/proc/sys/fs/inotify/max_user_watches"


def state_of_entry(info: os.stat_result) -> State:
    kind = "file" if stat.S_ISREG(info.st_mode) else "link" if stat.S_ISLNK(info.st_mode) else "other"
    return info.st_size, info.st_mtime_ns, stat.S_IMODE(info.st_mode), info.st_ino, kind


class Workspace:
    """Every file of the workspace the journal records, kept up to date by `look()`."""

    def __init__(self, workdir: str, ignores: Ignores, *, watch: bool = True) -> None:
        self.workdir = workdir
        self.ignores = ignores
        self.files: dict[str, State] = {}
        self.folders: dict[str, int] = {}  # every folder below the workspace it records: its mode bits
        self.moved_folders: dict[str, tuple[int | None, int | None]] = {}  # since the last look: modes before, after
        self.unwatched: set[str] = set()  # folders listed at each look: no watch could be had
        self.repositories: set[str] = set()  # folders holding a `.git` (git keeps their tracked files)
        self.holding_left_out: set[str] = set()  # folders that hold something the journal leaves out
        self.started = False
        self.rescans = 0  # whole walks after an overflow
        self.why_walked: str | None = None  # why some (or all) folders are walked, not watched
        self._watch_wanted = watch
        self._inotify = None
        self._wd: dict[int, str] = {}
        self._wd_of: dict[str, int] = {}
        self._lock = threading.Lock()

    # -- looking ---------------------------------------------------------------------------------

    def look(self) -> dict[str, Change]:
        """What changed since the last look, by path (nothing on the first: it learns the
        workspace then). Reads every event queued so far: called once a run's writers are done,
        it sees all they did."""
        with self._lock:
            if not self.started:
                self._start()
                return {}
            changes: dict[str, Change] = {}
            self.moved_folders = {}
            events = self._drain()
            if events is None:  # the queue overflowed: walked again, all of it
                self.rescans += 1
                self._rescan_all(changes)
                return changes
            self._apply(events, changes)
            for folder in sorted(self.unwatched):
                if folder in self.unwatched:
                    self._relist(folder, changes)
            return changes

    def _start(self) -> None:
        if self._watch_wanted and INotify is not None:
            try:
                self._inotify = INotify()
            except OSError as exc:
                self.why_walked = f"no inotify instance could be had ({exc.strerror})"
        elif INotify is None:
            self.why_walked = "no inotify on this system"
        else:
            self.why_walked = "watching is off"
        self.started = True
        self._scan("", {}, learning=True)
        self.moved_folders = {}

    def close(self) -> None:
        with self._lock:
            if self._inotify is not None:
                self._inotify.close()
                self._inotify = None

    # -- what the kernel said ----------------------------------------------------------------

    def _drain(self) -> list | None:
        """Every event queued so far (None: the queue overflowed, some were lost)."""
        if self._inotify is None:
            return []
        events = []
        while True:
            batch = self._inotify.read(timeout=0)
            if not batch:
                break
            events.extend(batch)
        if any(event.mask & _OVERFLOW for event in events):
            return None
        return events

    def _apply(self, events: list, changes: dict[str, Change]) -> None:
        arrived: set[str] = set()  # folders made or moved in: listed whole
        left: set[str] = set()  # folders deleted or moved out: all they held goes
        dirty: set[str] = set()
        environments: set[str] = set()
        for event in events:
            if event.mask & _IGNORED:
                folder = self._wd.pop(event.wd, None)
                if folder is not None and self._wd_of.get(folder) == event.wd:
                    del self._wd_of[folder]
                continue
            folder = self._wd.get(event.wd)
            if folder is None or not event.name:
                continue
            path = f"{folder}/{event.name}" if folder else event.name
            if event.mask & _ISDIR:
                if event.mask & _LEFT:
                    left.add(path)
                    arrived.discard(path)
                if event.mask & _ARRIVED:
                    arrived.add(path)
            else:
                dirty.add(path)
                if event.name in ENVIRONMENT_MARKERS and event.mask & _ARRIVED:
                    environments.add(folder)  # a virtual environment now: left out whole, said by no run
                    self.ignores.forget(folder)
        if left:
            self._drop_below(left, changes)
        if environments:
            self._drop_below(environments, {}, said=False)
        for folder in sorted(arrived):
            if not _below_any(folder, arrived - {folder}):
                self._scan(folder, changes)
        for path in dirty:
            parent = path.rpartition("/")[0]
            if not _below_any(path, arrived) and (parent == "" or parent in self.folders):
                self._restat(path, changes)

    def _restat(self, path: str, changes: dict[str, Change]) -> None:
        try:
            info = os.lstat(os.path.join(self.workdir, path))
        except OSError:
            self._set(path, None, changes)
            return
        if stat.S_ISDIR(info.st_mode):  # a file replaced by a folder
            self._set(path, None, changes)
            self._scan(path, changes)
        elif not self.ignores.file_left_out(path):
            self._set(path, state_of_entry(info), changes)

    def _set(self, path: str, now: State | None, changes: dict[str, Change]) -> None:
        was = self.files.get(path)
        if was == now:
            return
        first = changes[path][0] if path in changes else was
        if first == now:
            changes.pop(path, None)
        else:
            changes[path] = (first, now)
        if now is None:
            self.files.pop(path, None)
        else:
            self.files[path] = now

    def _drop_below(self, folders: Iterable[str], changes: dict[str, Change], said: bool = True) -> None:
        """Every file in `folders` gone (deleted, moved out, or left out now: not `said`), and
        their watches' names: one pass over what the workspace holds."""
        prefixes = tuple(f"{folder}/" for folder in folders)
        for path in [path for path in self.files if path.startswith(prefixes)]:
            self._set(path, None, changes)
        gone = {folder for folder in self.folders if folder.startswith(prefixes) or f"{folder}/" in prefixes}
        for folder in gone:
            self._folder_set(folder, None, said)
        self.unwatched -= gone
        for folder in gone:
            wd = self._wd_of.pop(folder, None)
            if wd is not None and self._wd.get(wd) == folder:
                del self._wd[wd]

    # -- walking, where it must ------------------------------------------------------------------

    def _scan(self, below: str, changes: dict[str, Change], learning: bool = False) -> None:
        """The folder `below` and all it holds learnt (a watch on each folder before its listing,
        so that nothing made meanwhile is missed): the files found set, those no longer there gone."""
        found: dict[str, State] = {}
        folders = [below]
        while folders:
            relative = folders.pop()
            if relative and self.ignores.named_out(relative):
                self.holding_left_out.add(relative.rpartition("/")[0])
                continue
            self._watch(relative)
            entries = self._listed(relative)
            if entries is None or (relative and self.ignores.folder_left_out(relative, [e.name for e in entries])):
                self._unwatch(relative)
                if entries is not None:
                    self.holding_left_out.add(relative.rpartition("/")[0])
                continue
            if relative:
                try:
                    self._folder_set(relative, stat.S_IMODE(os.lstat(os.path.join(self.workdir, relative)).st_mode))
                except OSError:
                    continue
            for entry in entries:
                if entry.name == ".git":
                    self.repositories.add(relative)
                name = f"{relative}/{entry.name}" if relative else entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(name)
                    elif not self.ignores.file_left_out(name, entry.name):
                        found[name] = state_of_entry(entry.stat(follow_symlinks=False))
                    else:
                        self.holding_left_out.add(relative)
                except OSError:
                    continue
        if learning:  # the workspace learnt anew: nothing to compare with
            self.files = found
            return
        if below:
            prefix = f"{below}/"
            for path in [path for path in self.files if path.startswith(prefix) and path not in found]:
                self._set(path, None, changes)
        for path, now in found.items():
            self._set(path, now, changes)

    def holds_left_out(self, folder: str) -> bool:
        """Whether `folder`, or a folder in it, holds something the journal leaves out (a folder
        made for a cache or the journal's own state: no run's to remove)."""
        prefix = f"{folder}/"
        return any(held == folder or held.startswith(prefix) for held in self.holding_left_out)

    def _folder_set(self, relative: str, mode: int | None, said: bool = True) -> None:
        was = self.folders.get(relative)
        if mode is None:
            self.folders.pop(relative, None)
        else:
            self.folders[relative] = mode
        if not said or was == mode:
            return
        first = self.moved_folders[relative][0] if relative in self.moved_folders else was
        if (first is None) == (mode is None):  # there before and now (a mode change: no entry), or neither
            self.moved_folders.pop(relative, None)
        else:
            self.moved_folders[relative] = (first, mode)

    def _listed(self, relative: str) -> list[os.DirEntry] | None:
        try:
            return list(os.scandir(os.path.join(self.workdir, relative)))
        except OSError:
            return None

    def _relist(self, folder: str, changes: dict[str, Change]) -> None:
        """A folder no watch covers, listed again: its files stat'ed, a new folder in it learnt
        whole, one gone dropped."""
        entries = self._listed(folder)
        if entries is None:
            self._drop_below([folder], changes)
            self.unwatched.discard(folder)
            return
        present: set[str] = set()
        for entry in entries:
            name = f"{folder}/{entry.name}" if folder else entry.name
            present.add(name)
            try:
                if entry.is_dir(follow_symlinks=False):
                    if name not in self.folders:
                        self._scan(name, changes)
                elif not self.ignores.file_left_out(name):
                    self._set(name, state_of_entry(entry.stat(follow_symlinks=False)), changes)
            except OSError:
                continue
        prefix = f"{folder}/" if folder else ""
        for path in [p for p in self.files if p.startswith(prefix) and "/" not in p[len(prefix):] and p not in present]:
            self._set(path, None, changes)
        gone = [f for f in self.folders if f.startswith(prefix) and f and "/" not in f[len(prefix):] and f not in present]
        if gone:
            self._drop_below(gone, changes)

    def _rescan_all(self, changes: dict[str, Change]) -> None:
        """After an overflow: the whole workspace learnt again and compared with what was known."""
        before, folders = self.files, self.folders
        self.files = {}
        self.folders, self.unwatched = {}, set()
        self._scan("", {}, learning=True)
        self.moved_folders = {folder: (folders.get(folder), self.folders.get(folder))
                              for folder in folders.keys() | self.folders.keys()
                              if (folder in folders) != (folder in self.folders)}
        for path in before.keys() | self.files.keys():
            was, now = before.get(path), self.files.get(path)
            if was != now:
                changes[path] = (was, now)

    # -- watches ---------------------------------------------------------------------------------

    def _watch(self, relative: str) -> None:
        if self._inotify is None:
            self.unwatched.add(relative)
            if self.why_walked is None:
                self.why_walked = "no inotify"
            return
        try:
            wd = self._inotify.add_watch(os.path.join(self.workdir, relative), _MASK)
        except OSError as exc:
            self.unwatched.add(relative)  # listed at each look instead
            if exc.errno == errno.ENOSPC:
                self.why_walked = (f"the inotify watch limit was reached ({_LIMIT_FILE} = {watch_limit()}): "
                                   "raise it (sysctl fs.inotify.max_user_watches) to watch them all")
            elif self.why_walked is None:
                self.why_walked = f"a folder could not be watched ({exc.strerror})"
            return
        old = self._wd.get(wd)
        if old is not None and old != relative and self._wd_of.get(old) == wd:
            del self._wd_of[old]  # the same folder, moved: known by its new name now
        self._wd[wd] = relative
        self._wd_of[relative] = wd
        self.unwatched.discard(relative)

    def _unwatch(self, relative: str) -> None:
        self.unwatched.discard(relative)
        wd = self._wd_of.pop(relative, None)
        if wd is None:
            return
        self._wd.pop(wd, None)
        if self._inotify is not None:
            try:
                self._inotify.rm_watch(wd)
            except OSError:
                pass

    # -- what a person is told -------------------------------------------------------------------

    def doctor_lines(self) -> list[str]:
        if not self.started:
            return [f"journal of changes: watching starts at this kernel's first shell run ({how_it_would_watch()})"]
        watched = len(self._wd)
        if self._inotify is None:
            head = (f"journal of changes: walks the workspace at each shell run ({len(self.files)} files in "
                    f"{len(self.folders)} folders): {self.why_walked}")
            return [head]
        lines = [f"journal of changes: watches the workspace with inotify ({watched} folders, {len(self.files)} "
                 f"files; limit {watch_limit()} watches for this user)"]
        if self.unwatched:
            lines.append(f"  {len(self.unwatched)} folders listed at each shell run instead: {self.why_walked}")
        if self.rescans:
            lines.append(f"  walked whole {self.rescans} time(s) after the event queue overflowed "
                         "(more changes at once than /proc/sys/fs/inotify/max_queued_events)")
        return lines


def doctor_line(journal=None) -> tuple[str, str, str]:
    """`toolkernel doctor`'s line on how a shell run's changes are found: (state, what, what to do),
    state "ok" or "note". `journal`: a kernel's, whose watch says what it does now."""
    knowledge = getattr(journal, "_knowledge", None)
    workspace = knowledge.workspace if knowledge is not None else None
    if workspace is None or not workspace.started:
        if INotify is None:
            return "note", "no inotify here: each shell run walks the workspace (a cell costs more as it grows)", ""
        return "ok", (f"a kernel watches the workspace with inotify from its first shell run on (up to "
                      f"{watch_limit()} watches for this user)"), ""
    lines = workspace.doctor_lines()
    said = "; ".join(line.strip().removeprefix("journal of changes: ") for line in lines)
    if workspace._inotify is None or workspace.unwatched:
        return "note", said, ("raise fs.inotify.max_user_watches (sysctl) to watch every folder"
                              if "limit" in (workspace.why_walked or "") else "")
    return "ok", said, ""


def _below_any(path: str, folders: Iterable[str]) -> bool:
    return any(path.startswith(f"{folder}/") for folder in folders)


def watch_limit() -> str:
    try:
        with open(_LIMIT_FILE) as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def how_it_would_watch() -> str:
    if INotify is None:
        return "no inotify here: a walk at each shell run"
    return f"inotify, up to {watch_limit()} watches for this user"

