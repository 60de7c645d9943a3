"""What a shell run changed, and what must be kept before it starts (issues 38, 44).

A script's own commands (Bashkit's `rm`, `mv`, `>` through the workspace mount; any program of a
host `%%bash` cell) change files without telling anyone: Bashkit's Python API gives a mount no
per-write hook, and a host process writes where it likes. So the kernel keeps what it knows of
the workspace between runs (`_watch.Workspace`: inotify, else a walk), and what moved during a
run becomes the run's entries, marked "after the fact": a process may have changed a file more
than once, and only the state before the run is known.

A rewind needs each file's content from before the run, stored before the run can touch it
(`Knowledge`, one per journal): an index of the contents kept ahead of shell runs, by path,
valid while the file's state (size, mtime, mode, kind) is the one stored. Before a shell run the
journal stores, and only these:
- the files that changed since their content was kept (between runs: the person's own edits;
  in the run before: its output);
- what the script names as it writes (`_named`: the targets of `rm`, `mv`, `>`, `sed -i`...,
  a folder with all it holds);
- for a run whose writes cannot all be named (a host `%%bash` cell, a script with a variable
  target or a program that writes where it likes), the most recently changed files, newest
  first, up to `[rewind] shell_mb` (the index keeps no more than that: its oldest go first).
A file such a run changes that none of these kept is recorded "not restorable", with the reason,
and the cell says so. Small contents go in the packs (`_packs`), a large one (1 MiB and up) is
copied by the kernel and hashed on a thread while the run works (`_parts`), and a large file a
run left changed is copied right after it (`Journal.copy_after`).

For a run whose process dies before its end, the workspace as the run started is on disk
(`_tree`): the next reader walks the workspace then and compares.
"""

from __future__ import annotations

import heapq
import os
import stat
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from . import _git
from ._ignore import Ignores
from ._named import Named
from ._parts import Hashing, identity_of
from ._record import Entry, RunJournal
from ._tree import TreeRecord
from ._watch import Change, Workspace

if TYPE_CHECKING:
    from ._store import Journal

# path -> (size, mtime_ns, mode, inode, kind) as one walk saw it
Seen = dict[str, tuple[int, int, int, int, str]]


def walk(workdir: str, ignores: Ignores, below: str = "") -> Seen:
    """Every file (and link) of the workspace (or of its folder `below`) the journal records, by
    relative path, in one pass: a folder's decision once, from its listing (`Ignores`), a `stat`
    a file and none a folder; not behind a link to a folder."""
    seen: Seen = {}
    folders = [below]
    while folders:
        relative = folders.pop()
        try:
            entries = list(os.scandir(os.path.join(workdir, relative)))
        except OSError:
            continue
        if relative and ignores.folder_left_out(relative, [entry.name for entry in entries]):
            continue
        for entry in entries:
            name = f"{relative}/{entry.name}" if relative else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(name)
                    continue
                if ignores.file_left_out(name):
                    continue
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            kind = "file" if stat.S_ISREG(info.st_mode) else "link" if stat.S_ISLNK(info.st_mode) else "other"
            seen[name] = (info.st_size, info.st_mtime_ns, stat.S_IMODE(info.st_mode), info.st_ino, kind)
    return seen


def compared_entries(before: Mapping[str, Any], after: Seen) -> list[Entry]:
    """What moved between the workspace `before` a shell run (path -> [size, mtime_ns, mode,
    stored hash, kind, why not stored, inode]) and `after` it: each an entry "after the fact"."""
    # A rename keeps the inode, the size and the mtime; a new file may reuse a deleted one's inode.
    by_inode = {(seen[3], seen[0], seen[1]): name for name, seen in after.items() if name not in before}
    entries = []
    for name, line in before.items():
        size, mtime_ns, mode, digest, kind, why, inode = line
        now = after.get(name)
        if now is not None and now[:3] == (size, mtime_ns, mode) and now[4] == kind:
            continue
        to = by_inode.get((inode, size, mtime_ns)) if now is None else None
        change = "renamed" if to else "deleted" if now is None else "changed"
        state = {"size": size, "mtime_ns": mtime_ns, "mode": mode, "type": kind, "hash": digest}
        entries.append(Entry(name, change, state, to, why, after_the_fact=True))
    entries += [Entry(name, "created", None, after_the_fact=True) for name in after if name not in before]
    return entries


# Why a file of the tree on disk has no content kept (a reader settling a dead run says it).
UNKEPT = ("its content before the run was not kept: the run could write files it does not name, and this one was "
          "not among those kept ahead of it ([rewind] shell_mb)")
# A line's reason while its content is being hashed: replaced once it is (here, or by the reader
# settling the run), and what a reader that knows no parts (an older toolkernel) says.
_BEING_STORED = "its copy from before the run was still being stored when its process died"
_MIB = 1024 * 1024
# The newest files kept ahead of the first run whose writes cannot all be named, at most: within
# `[rewind] shell_mb`, and this many (small files: 32 MiB of 200-byte files is 160,000 of them).
AHEAD_FILES = 10_000


def _same(seen: tuple, indexed: Any) -> bool:
    return isinstance(indexed, list) and len(indexed) >= 6 and tuple(indexed[:3]) == tuple(seen[:3]) and \
        indexed[4] == seen[4]


class Knowledge:
    """What one journal knows of its workspace between runs: every file's state (`workspace`),
    the contents kept ahead of shell runs (`index`: path -> [size, mtime_ns, mode, hash, kind,
    why not]), the files changed since their content was kept (`pending`), and the record of it
    all on disk for a dead run's reader (`tree`)."""

    def __init__(self, journal: Journal, *, watch: bool = True) -> None:
        self.journal = journal
        # The journal's own folder made before the workspace is learnt: when it lies in the
        # workspace (Lab started in ~), its making is no run's.
        journal.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.workspace = Workspace(journal.workdir, journal.ignores, watch=watch)
        self.tree = TreeRecord(journal.root)
        self.index: dict[str, list[Any]] = {}
        self.pending: set[str] = set()
        self.unkept: dict[str, str] = {}  # why a file wanted before a run was not kept, when not the budget
        self.unwritten: set[str] = set()  # paths whose line moved since the tree on disk
        self.kept_bytes = 0  # the sizes of the contents the index holds (within `[rewind] shell_mb`)
        self.baseline = False  # the most recent files kept ahead (once a run that needs it came)
        self.lock = threading.RLock()  # runs at once (`serve`, a background cell) share what is known
        self._runs: list[RunChanges] = []

    @property
    def budget(self) -> int:
        return self.journal.limits.shell_mb * _MIB

    def look(self) -> dict[str, Change]:
        """What changed since the last look, handed to every run going on (runs at once, a
        background cell beside a person's, each see what changed while they ran); the first look
        learns the workspace, and takes the index a kernel before this one left (the contents
        of files that did not change since)."""
        with self.lock:
            fresh = not self.workspace.started
            changes = self.workspace.look()
            if fresh:
                self._adopt()
            for run in self._runs:
                run.add(changes, self.workspace.moved_folders, self.index)
            self.moved(changes)
            return changes

    def run_started(self) -> "RunChanges":
        """What changes from now on, gathered for one run (call with `lock` held, after a look)."""
        watched = RunChanges()
        self._runs.append(watched)
        return watched

    def run_ended(self, watched: "RunChanges") -> "RunChanges":
        """The run's writers are done: a last look (the barrier), and what changed while it ran."""
        with self.lock:
            self.look()
            self._runs.remove(watched)
            return watched

    def _adopt(self) -> None:
        """The contents a kernel before this one kept, for the files that did not change since."""
        files = self.workspace.files
        latest = self.tree.latest()
        lines: dict[str, list[Any]] = {}
        if latest is not None:
            try:
                lines = self.tree.load(*latest)
                self.tree.adopt(*latest)
            except (OSError, ValueError, KeyError, TypeError):
                lines = {}
        for path, line in lines.items():
            if path in files and line[3] and _same(files[path], line):
                self.index[path] = line[:6]
                self.kept_bytes += 0 if _git.is_ref(line[3]) else line[0]
        # Kept once and changed since: recent, wanted again. Every line that moved is written again.
        self.pending = {path for path, line in lines.items() if line[3] and path in files and path not in self.index}
        self.unwritten = {path for path in files if path not in lines or not _same(files[path], lines[path])}
        self.unwritten |= {path for path in lines if path not in files}

    def moved(self, changes: Mapping[str, Change]) -> None:
        """Files that changed: their kept content no longer theirs, to be kept again before a run."""
        for path, (_, now) in changes.items():
            self._unindex(path)
            if now is not None:
                self.pending.add(path)
            else:
                self.pending.discard(path)
            self.unwritten.add(path)

    def _unindex(self, path: str) -> None:
        line = self.index.pop(path, None)
        if line is not None and line[3] and not _git.is_ref(line[3]):
            self.kept_bytes -= line[0]

    def kept(self, path: str, line: list[Any]) -> None:
        """A file's content kept (stored, or in git: free) as its state is now."""
        self.unkept.pop(path, None)
        self._unindex(path)
        self.index[path] = line
        if line[3] and not _git.is_ref(line[3]):
            self.kept_bytes += line[0]
        self.pending.discard(path)
        self.unwritten.add(path)

    def wanted(self, named: Named | None) -> tuple[list[str], set[str], bool]:
        """The files to keep before a shell run, most wanted first; those the run named; whether
        the most recently changed files of the workspace are among them (the first run that may
        write what it does not name)."""
        files = self.workspace.files
        chosen = _expanded(named, files) if named is not None else set()
        wants = [path for path in chosen if path in files and not _same(files[path], self.index.get(path))]
        recent = sorted((path for path in self.pending if path in files and path not in chosen),
                        key=lambda path: -files[path][1])
        wants += recent
        baseline = (named is None or not named.complete) and not self.baseline
        if baseline:
            self.baseline = True
            for path, reference in self.in_git().items():  # git keeps them: named, not copied, all
                size, mtime_ns, mode, _, kind = files[path]
                self.kept(path, [size, mtime_ns, mode, reference, kind, None])
            seen = set(wants)
            wants += heapq.nlargest(AHEAD_FILES, (path for path in files if path not in self.index and path not in seen),
                                    key=lambda path: files[path][1])
        return wants, chosen, baseline

    def in_git(self) -> dict[str, str]:
        """The files git's index holds as they are now, by path: their blob references (`_git`)."""
        workdir = self.journal.workdir
        repositories = {os.path.join(workdir, folder) if folder else workdir for folder in self.workspace.repositories}
        above = _git.repository_above(workdir)
        if above is not None:
            repositories.add(above)
        found: dict[str, str] = {}
        for repository in sorted(repositories):  # a nested repository's files are its own
            found.update(_git.unmodified(repository, workdir, self.workspace.files))
        return found

    def within_budget(self, keep: set[str]) -> None:
        """The oldest contents out of the index until it holds no more than `[rewind] shell_mb`
        (what a run named stays: it is about to be changed)."""
        if self.kept_bytes <= self.budget:
            return
        files = self.workspace.files
        for path in sorted((p for p in self.index if p not in keep), key=lambda p: files.get(p, (0, 0))[1]):
            if self.kept_bytes <= self.budget:
                break
            self._unindex(path)
            self.unwritten.add(path)

    def line(self, path: str, state: tuple, why: bool = True) -> list[Any]:
        """A file's line: its kept content's, or its state with none and why (`why=False`, as the
        tree on disk holds it: a reader says why then, `UNKEPT`)."""
        indexed = self.index.get(path)
        if indexed is not None and _same(state, indexed):
            return [*indexed[:6], state[3]]
        size, mtime_ns, mode, inode, kind = state
        return [size, mtime_ns, mode, None, kind, (self.unkept.get(path) or self.unkept_why()) if why else None, inode]

    def unkept_why(self) -> str:
        return (f"its content before the run was not kept: the run could write files it does not name, and this one "
                f"was past the {self.journal.limits.shell_mb} MiB of recently changed files kept ahead of such runs "
                "([rewind] shell_mb)")

    def write(self) -> tuple[str, int] | None:
        """The tree on disk brought up to now; its generation and the log's length (None: past
        the day's limit, so a run whose process dies keeps only what its tools recorded)."""
        files = self.workspace.files
        if self.tree.generation is not None and not self.unwritten:
            return self.tree.generation, self.tree.offset
        if self.tree.generation is not None:
            delta = {path: (self.line(path, files[path], False) if path in files else None) for path in self.unwritten}
            if self.journal.room_for_record(len(delta) * 80):
                done = self.tree.append(delta)
                if done is not None:
                    self.unwritten = set()
                    return done
            else:
                return None
        index = self.index
        lines = {path: ([*index[path][:6], state[3]] if path in index and _same(state, index[path])
                        else [state[0], state[1], state[2], None, state[4], None, state[3]])
                 for path, state in files.items()}
        if not self.journal.room_for_record(len(lines) * 20):
            return None
        done = self.tree.write(lines)
        self.unwritten = set()
        return done

    def hashes(self) -> set[str]:
        """The contents the index holds. Read without the lock (the day's limit, on another thread,
        asks while a run that holds the lock waits for it): `list()` of a dict's values is one
        step of C, which no other Python thread interrupts."""
        return {line[3] for line in list(self.index.values()) if line[3] and not _git.is_ref(line[3])}

    def close(self) -> None:
        self.workspace.close()


class RunChanges:
    """What changed while one run went on: each path's state before and after, its index line as
    the run began (its content kept ahead, if it was), and the folders made or removed."""

    def __init__(self) -> None:
        self.changes: dict[str, Change] = {}
        self.lines: dict[str, list[Any] | None] = {}
        self.folders: dict[str, tuple[int | None, int | None]] = {}

    def add(self, changes: Mapping[str, Change], folders: Mapping[str, tuple], index: Mapping[str, Any]) -> None:
        for path, (was, now) in changes.items():
            if path not in self.changes:
                self.lines[path] = index.get(path)
                self.changes[path] = (was, now)
            elif self.changes[path][0] == now:
                del self.changes[path]
            else:
                self.changes[path] = (self.changes[path][0], now)
        for folder, (was, now) in folders.items():
            first = self.folders[folder][0] if folder in self.folders else was
            if (first is None) == (now is None):
                self.folders.pop(folder, None)
            else:
                self.folders[folder] = (first, now)


def _expanded(named: Named, files: Mapping[str, Any]) -> set[str]:
    """The workspace's files a script's named paths cover: a file, all a folder holds, what a
    glob matches; each also below every folder the script `cd`s to."""
    import fnmatch

    found: set[str] = set()
    bases = [""] + sorted(_normal(folder) for folder in named.folders if _normal(folder) is not None)
    for written in named.paths:
        for base in bases:
            path = _normal(f"{base}/{written}" if base else written)
            if path is None:
                continue
            if path in files:
                found.add(path)
            elif any(ch in path for ch in "*?["):  # as the shell globs (a `*` stays within a name),
                parts = path.split("/")          # a folder it matches with all it holds
                found |= {name for name in files if name.count("/") >= len(parts) - 1 and
                          all(fnmatch.fnmatchcase(a, b) for a, b in zip(name.split("/"), parts))}
            else:
                prefix = f"{path}/" if path else ""
                found |= {name for name in files if name.startswith(prefix)}
    return found


def _normal(path: str) -> str | None:
    """A path as the script wrote it, relative to the workspace (None: outside it)."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts) if not path.startswith("/") else None


class Comparison:
    """The workspace before a shell run (what must be kept stored), and afterwards the run's
    entries from what moved during it."""

    def __init__(self, journal: Journal, run: RunJournal, skip: frozenset[str] = frozenset(),
                 named: Named | None = None) -> None:
        self.journal = journal
        self.skip = skip  # files the server saves meanwhile (the notebook the cell runs in): not the run's
        self.known = journal.knowledge()
        self.known.lock.acquire()  # what is known, and the contents kept, are one run's at a time here
        try:
            self._before_run(run, skip, named)
        finally:
            self.known.lock.release()
        if self.parts:
            run.when_ended(self._remove_parts)

    def _before_run(self, run: RunJournal, skip: frozenset[str], named: Named | None) -> None:
        journal = self.journal
        self.known.look()
        self.watched = self.known.run_started()
        self.parts: dict[str, Path] = {}  # file -> the part holding its content, hashed while the run works
        self.part_states: dict[str, tuple] = {}  # file -> its state as its part was made
        self.ahead = journal.take_copies()  # large files copied after the run before this one
        self.taken: set[str] = set()  # the files whose part is one of those
        files = self.known.workspace.files
        with journal.pinned(), journal.packs.batch():  # what is stored here is named only once the tree is written
            wants, chosen, _ = self.known.wanted(named)
            for path in wants:
                if path in skip:
                    continue
                if path not in chosen and self.known.kept_bytes + files[path][0] > self.known.budget:
                    self.known.pending.discard(path)  # the most recent first: past the budget, not kept
                    continue
                # Only what the run names may drop an older run to make room in the day's limit.
                self._store(path, files[path], drop=path in chosen)
            self.known.within_budget(chosen)
            if self.ahead is not None:
                self.ahead.discard()  # what moved since it was copied, or is gone
            own = [part for name, part in self.parts.items() if name not in self.taken]
            self.hashing = Hashing(own) if own else None
            where = self.known.write()
        # Kept with the run: a run whose process dies is compared with the workspace then.
        run.note_tree(where, skip, {name: part.name for name, part in self.parts.items()})

    def _store(self, name: str, seen: tuple, drop: bool) -> None:
        """A file's content stored and its index line made, or (a large one) its content copied
        into a part, for `record` to name once hashed."""
        size, mtime_ns, mode, _, kind = seen
        state = {"size": size, "mtime_ns": mtime_ns, "mode": mode, "type": kind}
        full = os.path.join(self.journal.workdir, name)
        stored = self._taken(name, seen) or self.journal.copy_soon(full, state, drop=drop)
        if isinstance(stored, Path):
            self.parts[name] = stored
            self.part_states[name] = seen
            return
        digest, why = stored
        if digest is None and not drop and "day's limit" in (why or ""):
            self.known.unkept[name] = f"its content before the run was not kept: {why}"  # no run dropped for it
            return
        self.known.kept(name, [size, mtime_ns, mode, digest, kind, why])

    def _taken(self, name: str, seen: tuple) -> Path | None:
        """The part copied after the run before, when the file is still as it was then."""
        if self.ahead is None:
            return None
        part = self.ahead.take(name, seen, identity_of(os.path.join(self.journal.workdir, name)))
        if part is not None:
            self.taken.add(name)
        return part

    def record(self, run: RunJournal) -> None:
        """After the run: each file that was created, changed, deleted or renamed, as an entry."""
        watched = self.known.run_ended(self.watched)
        hashed = self._named_parts() if self.parts else {}
        with self.known.lock:
            self._record(run, watched, hashed)

    def _record(self, run: RunJournal, watched: RunChanges, hashed: Mapping[str, tuple]) -> None:
        changes = {path: change for path, change in watched.changes.items() if path not in self.skip}
        lines = {}
        for path, (was, _) in changes.items():
            if was is None:
                continue
            kept = watched.lines.get(path)
            if path in hashed:
                digest, why = hashed[path]
                lines[path] = [was[0], was[1], was[2], digest, was[4], why, was[3]]
            elif kept is not None and _same(was, kept):
                lines[path] = [*kept[:6], was[3]]
            else:
                lines[path] = self.known.line(path, was)
        after = {path: now for path, (_, now) in changes.items() if now is not None}
        for entry in compared_entries(lines, after):
            run.record_known(entry)
        workspace = self.known.workspace
        for folder, (was, now) in watched.folders.items():  # made or removed whole
            if folder not in self.skip and not (was is None and workspace.holds_left_out(folder)):
                before = None if was is None else {"type": "folder", "mode": was}
                run.record_known(Entry(folder, "created" if was is None else "deleted", before,
                                       after_the_fact=True, folder=True))
        for path, (digest, why) in hashed.items():  # a large file the run left as it was: kept still
            state = self.part_states[path]
            if path not in changes and workspace.files.get(path) == state:
                self.known.kept(path, [state[0], state[1], state[2], digest, state[4], why])
        # What the next run would copy before it starts, copied now (a large file the run wrote).
        self.journal.copy_after(after, run.time)

    def _named_parts(self) -> dict[str, tuple[str | None, str | None]]:
        """The contents hashed while the run worked, made stored contents (or given the reason
        they are not), and in the index for a file the run left as it was. Their parts go when
        the run's end is written."""
        hashes = self._hashes()
        found = {}
        for name, part in self.parts.items():
            hashed, said = hashes[part.name]
            digest, why = self.journal.file_part(hashed, said) if hashed else (None, said)
            found[name] = (digest, why)
        return found

    def _remove_parts(self) -> None:
        """Once the run's end is written: each content is stored by now, or said not to be. (The
        stored content is a second name of its part: removing the part frees nothing then.)"""
        self._hashes()
        for name, part in self.parts.items():
            (self.ahead if name in self.taken else self.hashing).remove(part)

    def _hashes(self) -> dict[str, tuple[Path | None, str]]:
        """Each part's hashed file and hash, or why none (waiting for the threads at work)."""
        hashes = {}
        for source in (self.hashing, self.ahead if self.taken else None):
            if source is not None:
                hashes.update(source.hashes())
        return hashes
