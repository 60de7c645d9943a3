"""Python modules a script leaves at the workspace's top in place of installed ones: moved aside.

A Python started in the workspace puts that folder first on `sys.path` (a kernel does, for
the notebook's imports), so a `pandas.py` or `json/__init__.py` a script wrote there is what
the person's next `import pandas` runs, on the host, often at the next kernel start before
toolkernel is even loaded. Read-only mounts cannot refuse these names up front: there are
hundreds, and a stand-in for a name that does not exist shows in the script's `ls` as a
folder. So the end of a run catches them instead:

- before the run, the top is listed (one `listdir`, one set lookup per name), and the
  identity (kind, inode, ctime, mtime, size; a package folder's `__init__` too) of the few
  entries whose names could shadow an installed module is noted;
- when the run ends, however it ends, an entry at the top that the run created or changed,
  whose name makes it a top-level module Python's `PathFinder` would take from the folder
  (`NAME.py`, `.pyc`, an extension module, `NAME/__init__.*`; a bare `NAME/` where the
  installed `NAME` is a namespace package, which the folder then joins, first), and which
  shadows a module importable from outside the workspace, is moved, never deleted, into
  `.toolkernel/quarantine/<time>-<random>/`. `ctime` is in the identity because a script
  can set a file's mtime back (`touch -d`) but not its ctime.

The listing is skipped while the top's own times have not moved and had settled (two
seconds old) when it was last listed: no entry was made, removed or renamed there since, so
looking again at the few candidates suffices. With it, a run in a workspace of thousands of
entries pays a few `stat`s at each end, not two listings.

A `.git` made at the top where there was none is moved aside the same way: git run there
reads its config and runs what it names, and no read-only mount can hold a name that does not
exist yet. A repository that was there is the person's (and read-only to a sandboxed run).

A module that shadows nothing (a person's `helpers.py`) is left alone, and so is any entry
the run did not touch. Files deeper than the top (`pkg/mod.py` of a package that is the
person's) are not looked at: a name deeper down shadows nothing installed unless its
top-level folder does. What "installed" means is `_shadowing.installed()`.

A watch may be told more (`folders`, `guarded`, `deep`): the folders of the workspace Python
imports from first (`src/` on the PYTHONPATH) are watched as the top is; a protected path that
did not exist as the run began (a `toolkernel.toml`, a hooks folder `core.hooksPath` names, a
program a server's PATH lookup would find, `~/bin`) and exists when it ends is moved aside
whatever it is, since no mount could hold a name that was not there; and so is a `.git` (a
folder, a gitdir file or a link) made anywhere below the top, where git would run what it says.

An empty read-only folder the OS sandbox shows in place of a missing top-level `.git`
(`stand_in`) is made on the host as its mount point; it is no repository (git passes over an
empty `.git`), and it is removed when the process ends if it is still empty.
"""

from __future__ import annotations

import atexit
import dataclasses
import errno
import os
import secrets
import stat
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

from .._checked_open import open_checked, open_folder_below
from .._errors import printable
from .._shadowing import BYTECODE, FOLD, SUFFIXES, Installed, installed, module_of

QUARANTINE = ".toolkernel/quarantine"
# A repository made at the top where there was none: git, run here by the person or by
# JupyterLab's git panel, reads its config and runs what it names (`core.fsmonitor`, hooks).
GIT = ".git"
HEAD = "HEAD"  # what makes a folder a gitdir to git's discovery, beside `objects` and `refs`
_SAY_EACH = 3  # moves named one a line; past that, one line for all


# -- one run ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Moved:
    """One entry taken out of the workspace's top (`to` None: the move failed, `problem` says why)."""

    name: str
    module: str  # the installed module it shadows (folded where importlib folds case)
    # "module", "package", "bytecode", "git" (a new `.git`), "folder": a bare folder a
    # namespace package takes in, "protected": a protected name that was not there; "home": a new
    # dot entry at the top of a home folder; "unlisted":
    # the top could not be looked at, so nothing was moved
    kind: str
    to: str | None
    problem: str | None = None
    folder: bool | None = None  # None: as its kind says (all but a module are folders)

    @property
    def is_folder(self) -> bool:
        return self.kind != "module" if self.folder is None else self.folder

    @property
    def shown(self) -> str:
        return printable(self.name) + ("/" if self.is_folder else "")


class Watch:
    """The workspace's top from before a run (`start`) to its end (`end`, on every way out).

    `end` may be called more than once: when the cell returns while the run goes on after an
    interrupt (`last=False`), at the run's own end, and at the interpreter's exit. Each call
    moves what is there to move now and returns only that. Thread-safe."""

    def __init__(self, workdir: str | os.PathLike[str], cancel: Callable[[], None] = lambda: None, *,
                 folders: Iterable[str] = (), guarded: Iterable[str] = (), deep: Iterable[str] | None = None,
                 workspace: str | None = None, by_a_call: Callable[[str], bool] = lambda path: False,
                 held: Iterable[str] = (), home: Iterable[str] | None = None, worktrees: Iterable[str] = (),
                 installed_at: str | None = None) -> None:
        self.root = os.fspath(workdir)  # a real path (the session resolved it)
        self.workspace = workspace or self.root  # where the quarantine is (a watched folder's is its workspace's)
        self.cancel = cancel  # ends the run: at the interpreter's exit, before the last look
        self.installed = Installed(frozenset(), frozenset())
        self.before: dict[str, tuple | None] | None = None  # identities of the entries that may shadow
        # The folders Python imports from first (`src/`), and the top of each repository below: git
        # runs a filter or driver there (nbstripout's `python -m nbstripout`, which imports a
        # `nbstripout.py` of that folder first) as the person adds a file. Those import what the
        # workspace's top would (`installed_at`); an import folder is left out of its own.
        self.folders = [Watch(folder, workspace=self.root) for folder in folders if folder != self.root]
        self.folders += [Watch(folder, workspace=self.root, installed_at=self.root) for folder in worktrees
                         if folder != self.root and folder not in folders]
        self.installed_at = installed_at or self.root
        self.guarded = tuple(guarded)  # real paths in the workspace no run may make
        self.missing: list[str] = []  # those that were not there as the run began
        self.deep = None if deep is None else tuple(deep)  # walk below the top, not into these folders
        # Every repository below the top as the run began (a `.git`; a bare one's HEAD), by identity:
        # a folder that holds one can be renamed away, and one made anew at its path is no
        # person's (the `.git` that moved with its folder still is).
        self.repositories: set[tuple[int, int]] = set()
        # Protected paths held by a mount of their own (an inner repository's hooks folder), whose
        # folder can be renamed: their identities as the run began, against one made anew there.
        self.held = {path: None for path in held}
        # The workspace is the home folder: every dot entry at its top is config some program of
        # the host reads (Debian's .bashrc sources a new ~/.bash_aliases), so a new one is moved;
        # `home` names those that are not (where toolkernel's own cache and state folders lie).
        self.home = home is not None
        self.inert = _INERT_DOTS | frozenset(home or ())
        self.dots: set[str] = set()  # the top's dot entries as the run began
        self.by_a_call = by_a_call  # a tool call wrote it: a person allowed that write (it was asked)
        self.made_by_calls: set[str] = set()  # guarded paths that came while a call ran: the call's
        self._early: list[Moved] = []  # moved before a call, said at the end
        self._parents: dict[str, tuple | None] = {}  # the folders of `missing`, as last looked at
        self._lock = threading.Lock()

    def start(self) -> None:
        """Note the top before the run; raises OSError when the workspace cannot be listed."""
        self.installed = installed(self.installed_at)
        self.before = dict(self._candidates())
        for folder in self.folders:
            try:
                folder.start()
            except OSError:
                folder.before = None  # gone, or no folder: nothing there to import from
        self.missing = [path for path in self.guarded if not os.path.lexists(path)]
        self._parents = {parent: _folder_status(parent) for parent in {os.path.dirname(p) for p in self.missing}}
        if self.deep is not None:
            self.repositories = {found for path in _git_below(self.root, self.deep) if (found := _inode(path))}
        self.held = {path: _inode(path) for path in self.held}
        if self.home:
            self.dots = set(_dot_entries(self.root, self.inert))
        _running.add(self)

    def end(self, *, last: bool = True) -> list[Moved]:
        """Move aside what the run left that shadows an installed module: what moved (or failed to)."""
        with self._lock:
            try:
                if self.before is None:
                    return []
                try:
                    after = self._after()
                except OSError as exc:  # the workspace is gone, or a link now: said, not raised
                    return [Moved(".", "", "unlisted", None, _reason(exc))]
                planted = [(name, module, kind) for name, module, kind, identity in after
                           if self._planted(name, module, kind, identity)]
                moved, self._early = self._early + (_move_aside(self.root, planted, self.workspace) if planted
                                                    else []), []
                for folder in self.folders:
                    where = os.path.relpath(folder.root, self.root)
                    moved += [dataclasses.replace(m, name=os.path.join(where, m.name)) for m in folder.end(last=last)]
                return moved + self._beyond()
            finally:
                if last:
                    _running.discard(self)

    def before_call(self) -> None:
        """Before a tool call (a hook, a server's start, a command tool may run what lies at a
        protected name): what the script made there since the last look is moved aside now.
        A few `stat`s: only a folder of those names whose times moved is looked into."""
        with self._lock:
            if self.before is not None and self._changed_parents():
                self._early += self._beyond(deep=False)

    def after_call(self) -> None:
        """What came at a protected name while a call ran is the call's (a command tool's output
        file the config names), not the script's."""
        with self._lock:
            if self.before is not None and self._changed_parents():
                self.made_by_calls.update(path for path in self.missing if os.path.lexists(path))

    def _changed_parents(self) -> bool:
        changed = False
        for parent, status in self._parents.items():
            now = _folder_status(parent)
            if now != status:
                self._parents[parent], changed = now, True
        return changed

    def _beyond(self, deep: bool = True) -> list[Moved]:
        """What the run made at a guarded name, and the `.git`s it made below the top."""
        made = [(os.path.relpath(path, self.root), "protected") for path in self.missing
                if os.path.lexists(path) and path not in self.made_by_calls and not is_stand_in(path)
                and not self.by_a_call(path)]
        if deep and self.deep is not None:
            made += [(os.path.relpath(path, self.root), "git") for path in _git_below(self.root, self.deep)
                     if _inode(path) not in self.repositories]
        made += [(os.path.relpath(path, self.root), "protected") for path, was in self.held.items()
                 if was is not None and _inode(path) not in (was, None) and not self.by_a_call(path)]
        if self.home:
            made += [(name, "home") for name in _dot_entries(self.root, self.inert) if name not in self.dots
                     and not is_stand_in(os.path.join(self.root, name))
                     and not self.by_a_call(os.path.join(self.root, name))]
        kinds: dict[str, str] = {}
        for relative, kind in made:
            kinds.setdefault(relative, kind)  # a new `.git` at a held path is said as a repository
        made = [(relative, kind) for relative, kind in kinds.items()
                if relative != GIT and not any(relative.startswith(other + os.sep) for other in kinds)]
        return _move_deep(self.root, made) if made else []

    def _planted(self, name: str, module: str, kind: str, identity: tuple) -> bool:
        assert self.before is not None
        if kind == "git":
            # One that was there is the person's (and read-only); the sandbox's stand-in is no repository.
            return self.before.get(GIT) is None and not is_stand_in(os.path.join(self.root, GIT))
        return identity != self.before.get(name, ()) and (kind == "bytecode" or self.installed.shadowed_by(module, kind))

    def _candidates(self) -> list[tuple[str, tuple | None]]:
        """(name, identity) of each top-level entry whose name may shadow an installed module,
        of the top's `__pycache__` (its files' identities: see `_cache_identity`) and of `.git`."""
        top = _open_top(self.root)
        try:
            found = [(name, _identity(top, name)) for name in _module_names(top, self.root, self.installed)]
            return found + [(BYTECODE, _cache_identity(top)), (GIT, _identity(top, GIT))]
        finally:
            os.close(top)

    def _after(self) -> list[tuple[str, str, str, tuple]]:
        """(name, module, kind, identity) of each entry at the top now that may shadow."""
        found = []
        for name, identity in self._candidates():
            if name in (BYTECODE, GIT):
                if identity is not None:
                    found.append((name, "", "bytecode" if name == BYTECODE else "git", identity))
                continue
            module = None if identity is None else module_of(name, identity[0] == stat.S_IFDIR)
            if module is not None:  # else gone meanwhile, or by its kind no module (`json.py/`, a file `json`)
                found.append((name, module, _kind(identity), identity))
        return sorted(found)


# Changes this recent may not show in a folder's times (FAT stamps to 2 s, others to a clock tick).
_SETTLED_NS = 2_000_000_000
# Per workspace: the top's status when it was last listed, whether its times had settled then,
# what was installed, and the names found that may shadow.
_listed: dict[str, tuple[tuple, bool, Installed, tuple[str, ...]]] = {}
_listed_lock = threading.Lock()


def _module_names(top: int, root: str, found: Installed) -> tuple[str, ...]:
    """The names at the top (the open folder `top`) that may be modules shadowing `found`: one
    listing, one set lookup per entry. The listing is skipped while the top's own status is what
    it was at the last one and its times had settled by then: no entry was made, removed or
    renamed there since (a change in place is seen by the identities of these names)."""
    status = _status(os.fstat(top))
    with _listed_lock:
        kept = _listed.get(root)
    if kept is not None and kept[0] == status and kept[1] and kept[2] is found:
        return kept[3]
    since = time.time_ns() - _SETTLED_NS
    heads = found.heads
    if FOLD:
        names = [name for name in os.listdir(top) if name.partition(".")[0].lower() in heads]
    else:  # the usual case: one partition and one set lookup per entry, no stat
        names = [name for name in os.listdir(top) if name.partition(".")[0] in heads]
    kept = (status, status[2] < since and status[3] < since, found,
            tuple(name for name in names if _module_form(name, found)))
    with _listed_lock:
        _listed[root] = kept
    return kept[3]


def _status(info: os.stat_result) -> tuple:
    return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)


def _open_top(root: str) -> int:
    return open_checked(root, os.O_RDONLY | os.O_DIRECTORY)


def _module_form(name: str, found: Installed) -> bool:
    """Whether the entry `name`, whose head is an installed name, may be a module by its name:
    with no dot a folder may (its kind is looked at next), with one only a module file's suffix."""
    return "." not in name or found.may_shadow(module_of(name, False))


def _identity(top: int, name: str) -> tuple | None:
    """What says the entry `name` changed (None: it is gone): its kind, inode, ctime, mtime and
    size. A folder's own times move with every entry made in it, so for a package (a folder with
    an `__init__`) its `__init__`'s identity stands in for them: a file added deeper in the
    person's own package is no new shadow. A bare folder keeps its times: what a namespace
    package takes in from it is the entries made in it."""
    try:
        info = os.stat(name, dir_fd=top, follow_symlinks=False)
    except OSError:
        return None
    kind = stat.S_IFMT(info.st_mode)
    if kind != stat.S_IFDIR:
        return (kind, info.st_dev, info.st_ino, info.st_ctime_ns, info.st_mtime_ns, info.st_size)
    init = _init_identity(top, name)
    times = (info.st_ctime_ns, info.st_mtime_ns) if init is None else ()
    return (kind, info.st_dev, info.st_ino, *times, init)


# Bytecode beside the top's own modules (`BYTECODE`): the folder is only a cache, so one the run
# changed is moved aside whole, and Python makes it again from the sources.


def _cache_identity(top: int) -> tuple | None:
    """The top's `__pycache__` (None: there is none): the identity of the folder and of each
    entry in it, as a file rewritten in place moves no time of the folder's."""
    try:
        folder = os.open(BYTECODE, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=top)
    except FileNotFoundError:
        return None
    except OSError:  # a file or a link holds the name: Python takes no bytecode from it
        return _identity(top, BYTECODE)
    try:
        own = _status(os.fstat(folder))
        entries = []
        for name in sorted(os.listdir(folder)):
            try:
                info = os.stat(name, dir_fd=folder, follow_symlinks=False)
            except OSError:
                continue
            entries.append((name, info.st_ino, info.st_ctime_ns, info.st_mtime_ns, info.st_size))
        return (stat.S_IFDIR, own, tuple(entries))
    finally:
        os.close(folder)


def _init_identity(top: int, name: str) -> tuple | None:
    """The `__init__` that makes the folder `name` a package, the one Python takes; None if none."""
    try:
        folder = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=top)
    except OSError:
        return None
    try:
        for suffix in SUFFIXES:
            try:
                info = os.stat("__init__" + suffix, dir_fd=folder, follow_symlinks=False)
            except OSError:
                continue
            return (suffix, stat.S_IFMT(info.st_mode), info.st_ino, info.st_ctime_ns, info.st_mtime_ns, info.st_size)
        return None
    finally:
        os.close(folder)


def _kind(identity: tuple) -> str:
    if identity[0] != stat.S_IFDIR:
        return "module"
    return "folder" if identity[-1] is None else "package"


def _move_aside(root: str, planted: list[tuple[str, str, str]], workspace: str | None = None) -> list[Moved]:
    """Move each planted entry into a new quarantine folder (in `workspace`, when `root` is one
    of its folders); a failure is said, never raised."""
    try:
        top = _open_top(root)
    except OSError as exc:
        return [Moved(*item, None, _reason(exc)) for item in planted]
    try:
        try:
            folder, where = _new_quarantine(workspace or root)
        except OSError as exc:
            return [Moved(*item, None, _reason(exc)) for item in planted]
        try:
            moved = [_move(top, folder, where, *item) for item in planted]
            return [m for m in moved if m is not None]
        finally:
            os.close(folder)
    finally:
        os.close(top)


def _new_quarantine(root: str) -> tuple[int, str]:
    """A new folder of its own under `.toolkernel/quarantine/` (no link followed on the way: a
    cloned repository may hold one there), and its path relative to `root`."""
    parent = open_folder_below(root, QUARANTINE, mode=0o700)
    try:
        for _ in range(100):
            name = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
            try:
                os.mkdir(name, 0o700, dir_fd=parent)
            except FileExistsError:
                continue
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            return fd, f"{QUARANTINE}/{name}"
        raise FileExistsError(errno.EEXIST, "no free name for a quarantine folder", os.path.join(root, QUARANTINE))
    finally:
        os.close(parent)


def _move(top: int, folder: int, where: str, name: str, module: str, kind: str) -> Moved | None:
    """The move of one entry; None when it is gone already (another run's look took it)."""
    try:
        # Both ends named in open folders: the entry itself moves (a link as a link), and a
        # workspace or quarantine path swapped for a link meanwhile leads nowhere else.
        os.rename(name, name, src_dir_fd=top, dst_dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return Moved(name, module, kind, None, _reason(exc))
    return Moved(name, module, kind, f"{where}/{name}")


def _move_deep(root: str, made: list[tuple[str, str]]) -> list[Moved]:
    """Move each path (relative to `root`) into a new quarantine folder, under the same
    relative path there; the folders on the way are opened without following a link."""
    try:
        quarantine, where = _new_quarantine(root)
    except OSError as exc:
        return [Moved(relative, "", kind, None, _reason(exc)) for relative, kind in made]
    os.close(quarantine)
    moved = []
    for relative, kind in made:
        parent, name = os.path.split(relative)
        folder = None
        try:
            source = open_folder_below(root, parent, create=False) if parent else _open_top(root)
            try:
                folder = stat.S_ISDIR(os.stat(name, dir_fd=source, follow_symlinks=False).st_mode)
                target = open_folder_below(root, f"{where}/{parent}" if parent else where, mode=0o700)
                try:
                    os.rename(name, name, src_dir_fd=source, dst_dir_fd=target)
                finally:
                    os.close(target)
            finally:
                os.close(source)
        except FileNotFoundError:
            continue
        except OSError as exc:
            moved.append(Moved(relative, "", kind, None, _reason(exc), folder))
            continue
        moved.append(Moved(relative, "", kind, f"{where}/{relative}", folder=folder))
    return moved


def _folder_status(folder: str) -> tuple | None:
    """What moves when an entry is made in `folder` (None: it is not there)."""
    try:
        info = os.stat(folder)
    except OSError:
        return None
    return (info.st_ino, info.st_mtime_ns, info.st_ctime_ns)


def _git_below(root: str, skip: Iterable[str]) -> list[str]:
    """Every `.git` below the top of `root` (folders, gitdir files and links of that name), and
    the `HEAD` of every folder that is a gitdir by its entries (the top's too: git run in a
    folder with no `.git` takes the folder itself for a bare repository), but in the folders
    `skip` names (read-only to the run: the same the guard's walk skips, whose listings it
    keeps) and in the quarantine. A HEAD moved aside is enough: without it no git finds one."""
    from .._approval._links import found_in, is_gitdir

    links, repositories = found_in(Path(root), [Path(path) for path in (*skip, os.path.join(root, ".toolkernel"))])
    found = {str(git) if git.name == GIT else str(git / HEAD) for git in repositories}
    if os.path.lexists(os.path.join(root, HEAD)) and is_gitdir(_names(root)):
        found.add(os.path.join(root, HEAD))
    return sorted(found | {str(link) for link, _ in links if link.name == GIT})


# Dot entries at a home folder's top that no program runs: toolkernel's state, the notebook server's checkpoints.
_INERT_DOTS = frozenset({".toolkernel", ".ipynb_checkpoints"})


def _dot_entries(folder: str, inert: frozenset[str]) -> list[str]:
    return [name for name in _names(folder) if name.startswith(".") and name not in inert]


def _names(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _inode(path: str) -> tuple[int, int] | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


# -- stand-ins ---------------------------------------------------------------------------

_stand_ins: dict[str, tuple[int, int]] = {}  # path: (device, inode) of the empty folder made there
_stand_ins_lock = threading.Lock()


def stand_in(path: str | os.PathLike[str]) -> None:
    """An empty folder at `path`, where nothing is, for the OS sandbox to mount an empty
    read-only folder on (it would make one there itself, a moment later)."""
    try:
        os.mkdir(path, 0o755)
        info = os.lstat(path)
    except OSError:
        return  # something is there (then it is no stand-in), or the folder cannot be written
    with _stand_ins_lock:
        _stand_ins[os.fspath(path)] = (info.st_dev, info.st_ino)


def is_stand_in(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is still the folder `stand_in` made (the host may have filled it since:
    then it is the person's, as the sandbox could not write it)."""
    with _stand_ins_lock:
        kept = _stand_ins.get(os.fspath(path))
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return kept == (info.st_dev, info.st_ino) and stat.S_ISDIR(info.st_mode)


@atexit.register
def remove_stand_ins() -> None:
    """The stand-ins still empty, removed (a sandbox still waiting loses its mount there)."""
    with _stand_ins_lock:
        kept = list(_stand_ins)
    for path in kept:
        if is_stand_in(path):
            try:
                os.rmdir(path)
            except OSError:
                pass  # filled by the person meanwhile: theirs


def _reason(exc: OSError) -> str:
    return printable(exc.strerror if exc.strerror else str(exc))


# -- what the cell is told ---------------------------------------------------------------------


def moved_notice(moved: list[Moved]) -> str:
    """The lines that end the run's stderr: what was moved, where to, and why; what could not be."""
    unlisted = [m for m in moved if m.kind == "unlisted"]
    done = [m for m in moved if m.to is not None]
    failed = [m for m in moved if m.to is None and m.kind != "unlisted"]
    lines = [_unlisted_line(m) for m in unlisted] + _moved_lines(done) + ([_failed_line(failed)] if failed else [])
    return "".join(line + "\n" for line in lines)


def _unlisted_line(m: Moved) -> str:
    return (f"toolkernel: could not look at the workspace's top after this script ran ({m.problem}): a NAME.py"
            " or NAME/ it left there would be imported by a Python started in this folder instead of the"
            " installed NAME; look before Python runs here.")


def _moved_lines(done: list[Moved]) -> list[str]:
    if len(done) <= _SAY_EACH:
        return [f"toolkernel: moved {'the folder ' if m.is_folder else ''}{m.shown}, written while this"
                f" script ran, to {printable(m.to)}: {_consequence(m)}. Move it back if you meant it." for m in done]
    return [f"toolkernel: moved {len(done)} entries written while this script ran ({_few(done)}) to"
            f" {printable(_quarantine_of(done))}/, under the same paths: each would run on the host later (a"
            " Python started in this folder imports a module instead of the installed one of its name, git run"
            " here reads a new repository's config, the host runs what lies at a name toolkernel protects)."
            " Move back any you meant."]


def _quarantine_of(done: list[Moved]) -> str:
    """The quarantine folder the moves went to (`.toolkernel/quarantine/<time>-<random>`)."""
    return "/".join(str(done[0].to).split("/")[:3])


def _failed_line(failed: list[Moved]) -> str:
    reasons = "; ".join(sorted({m.problem or "unknown" for m in failed}))
    if len(failed) == 1:
        what, it = _consequence(failed[0]), "it"
    else:
        what, it = "a Python started in this folder imports them instead of the installed modules of their names", \
            "them"
    return (f"toolkernel: could not move {_few(failed)}, written while this script ran, out of the way"
            f" ({reasons}): {what}. Remove {it}.")


def _consequence(m: Moved) -> str:
    if m.kind == "home":
        return ("in a home folder a dot entry is config that the host's programs read as they start (bash"
                " sources ~/.bash_aliases, R runs ~/.Rprofile)")
    if m.kind == "protected":
        return ("toolkernel protects that name (it decides policy, or the host runs it), and no mount could hold"
                " it while it did not exist")
    if m.kind == "git":
        return "git run in this folder (by you, or JupyterLab's git panel) reads its config and runs what it names"
    return f"a Python started in this folder imports {_instead(m)}"


def _instead(m: Moved) -> str:
    if m.kind == "bytecode":
        return "the bytecode there in place of the sources beside it (it is only a cache: Python makes it again)"
    if m.kind == "folder":
        return f"what it holds ahead of the installed namespace package {printable(m.module)}"
    return f"it instead of the installed {printable(m.module)}"


def _few(moved: list[Moved]) -> str:
    names = ", ".join(m.shown for m in moved[:_SAY_EACH])
    return names + (f" and {len(moved) - _SAY_EACH} more" if len(moved) > _SAY_EACH else "")


# -- the interpreter's exit ---------------------------------------------------------------------

# Runs that have not ended yet. A kernel restarted while a script runs exits normally (atexit
# runs), and the script's thread with it: the last look at the top is made here, after the run
# is cancelled, so that the next kernel's first `import` does not find what the script wrote.
_running: set[Watch] = set()


@atexit.register
def _at_exit() -> None:
    for watch in list(_running):
        try:
            watch.cancel()
            watch.end()
        except Exception:  # noqa: BLE001 - the interpreter is going: each watch gets its turn
            pass
