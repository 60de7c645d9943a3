"""What a shell run changed, found by comparing the workspace before and after it (issue 38).

A script's own commands (Bashkit's `rm`, `mv`, `>` through the workspace mount; any program of a
host `%%bash` cell) change files without telling anyone: Bashkit's Python API gives a mount no
per-write hook (`FileSystem.real` is Rust's), and a host process writes where it likes. So the
workspace is looked at before the run and after it (size, mtime, mode and inode of each file:
one `stat` a file), and what moved becomes the run's entries, marked "after the fact": a
process may have changed a file more than once, and only the state before the run is known.

A rewind needs the content from before the run. The journal keeps an index of the workspace
(`index.json`: each file's size, mtime, mode and stored content hash); before a run, only the
files that moved since the index was written are read and stored (`Journal.store`, by hash,
within `[rewind]`'s limits), so a run pays for what changed, not for the whole workspace. The
first run in a workspace stores every file once (a file past the limits is marked "not
restorable" in the index, and so in any run that changes it). A large file is only copied before
the run (by the kernel), and hashed on a thread while the run works (`_parts`): its hash
is needed only when the run's entries and the index are written, after the run. And a large file
a run left changed is copied right after it, while its output is read (`Journal.copy_after`):
the next run takes that copy when the file is still as it was, and copies nothing as it starts.

Not looked at: `.toolkernel/`, `tool-images/`, `[rewind] ignore` globs, `.git/` (a repository's
own store, which git already keeps), and what lies behind a link to a folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import stat
from typing import TYPE_CHECKING, Any, Mapping

from .._atomic import write_atomic
from ._ignore import Ignores
from ._parts import Hashing, identity_of
from ._record import Entry, RunJournal

if TYPE_CHECKING:
    from ._store import Journal

INDEX = "index.json"  # the workspace as the last shell run's comparison saw it

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


_INDEX_VERSION = 1
# A scan line's reason while its content is being hashed: replaced once it is (here, or by the
# reader settling the run), and what a reader that knows no parts (an older toolkernel) says.
_BEING_STORED = "its copy from before the run was still being stored when its process died"


def _walk(journal: Journal) -> Seen:
    return walk(journal.workdir, journal.ignores)


def _load_index(journal: Journal) -> dict[str, Any]:
    try:
        data = json.loads((journal.root / INDEX).read_bytes())
        if data.get("version") == _INDEX_VERSION and isinstance(data.get("files"), dict):
            return data["files"]
    except (OSError, ValueError, AttributeError):
        pass  # none yet, or damaged: every file is read again
    return {}


def _save_index(journal: Journal, files: dict[str, Any]) -> None:
    journal.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Not fsynced (20-30 ms a run on a busy disk): the contents it names are not either, and an
    # index a crash cut short is read as none (every file is stored again).
    write_atomic(journal.root / INDEX, json.dumps({"version": _INDEX_VERSION, "files": files},
                                                    separators=(",", ":")), durable=False)


def _same(seen: tuple, indexed: Any) -> bool:
    return isinstance(indexed, list) and len(indexed) == 6 and tuple(indexed[:3]) == seen[:3] and indexed[4] == seen[4]


class Comparison:
    """The workspace before a shell run, and afterwards the run's entries from what moved."""

    def __init__(self, journal: Journal, run: RunJournal, skip: frozenset[str] = frozenset()) -> None:
        self.journal = journal
        self.skip = skip  # files the server saves meanwhile (the notebook the cell runs in): not the run's
        self.before = self._walk()
        self.index = _load_index(journal)
        self.parts: dict[str, Path] = {}  # file -> the part holding its content, hashed while the run works
        self.ahead = journal.take_copies()  # large files copied after the run before this one
        self.taken: set[str] = set()  # the files whose part is one of those
        with journal.pinned():  # what is stored here is named only once the index is written
            changed = False
            for name, seen in self.before.items():
                if not _same(seen, self.index.get(name)):
                    changed |= self._store(name, seen)
            gone = [name for name in self.index if name not in self.before]
            for name in gone:
                del self.index[name]
            if self.ahead is not None:
                self.ahead.discard()  # what moved since it was copied, or is gone
            own = [part for name, part in self.parts.items() if name not in self.taken]
            self.hashing = Hashing(own) if own else None
            if changed or gone:
                _save_index(journal, self.index)
        # Each file before the run: its index line (state, stored hash, why not) and its inode.
        self.lines = {name: self._line(name, seen) for name, seen in self.before.items()}
        # Kept with the run: a run whose process dies is compared with it later.
        run.note_scan(self.lines, skip, {name: part.name for name, part in self.parts.items()})
        if self.parts:
            run.when_ended(self._remove_parts)

    def _walk(self) -> Seen:
        return {name: seen for name, seen in _walk(self.journal).items() if name not in self.skip}

    def _store(self, name: str, seen: tuple) -> bool:
        """A file that moved: its content stored and its index line made, or (a large one) its
        content copied into a part, for `record` to name once hashed, and its old line dropped
        (a state gone). Whether the index changed."""
        size, mtime_ns, mode, _, kind = seen
        state = {"size": size, "mtime_ns": mtime_ns, "mode": mode, "type": kind}
        stored = self._taken(name, seen) or self.journal.copy_soon(os.path.join(self.journal.workdir, name), state)
        if isinstance(stored, Path):
            self.parts[name] = stored
            return self.index.pop(name, None) is not None
        digest, why = stored
        self.index[name] = [size, mtime_ns, mode, digest, kind, why]
        return True

    def _taken(self, name: str, seen: tuple) -> Path | None:
        """The part copied after the run before, when the file is still as it was then."""
        if self.ahead is None:
            return None
        part = self.ahead.take(name, seen, identity_of(os.path.join(self.journal.workdir, name)))
        if part is not None:
            self.taken.add(name)
        return part

    def _line(self, name: str, seen: tuple) -> list[Any]:
        if name in self.parts:  # its hash (or why none) once worked out: `_named_parts`
            size, mtime_ns, mode, inode, kind = seen
            return [size, mtime_ns, mode, None, kind, _BEING_STORED, inode]
        return [*self.index[name][:6], seen[3]]

    def record(self, run: RunJournal) -> None:
        """After the run: each file that was created, changed, deleted or renamed, as an entry."""
        after = self._walk()
        if self.parts:
            self._named_parts(after)  # waits for the thread, if the run was quicker
        for entry in compared_entries(self.lines, after):
            run.record_known(entry)
        # What the next run would copy before it starts, copied now (a large file the run wrote).
        moved = {name: seen for name, seen in after.items() if not _same(seen, self.index.get(name))}
        self.journal.copy_after(moved, run.time)

    def _named_parts(self, after: Seen) -> None:
        """The contents hashed while the run worked, made stored contents (or given the reason
        they are not), in the lines, and in the index for a file the run left as it was. Their
        parts go when the run's end is written."""
        hashes = self._hashes()
        for name, part in self.parts.items():
            hashed, said = hashes[part.name]
            digest, why = self.journal.file_part(hashed, said) if hashed else (None, said)
            self.lines[name][3], self.lines[name][5] = digest, why
            self.index[name] = self.lines[name][:6]
        # A file the run changed is stored again before the next run: its line here would be
        # of no use, and replacing the index right after a large write waits for it (ext4 flushes
        # a file renamed over another: 25 ms after a 50 MB write).
        if any(name in after and _same(after[name], self.index[name]) for name in self.parts):
            _save_index(self.journal, self.index)

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
