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
restorable" in the index, and so in any run that changes it).

Not looked at: `.toolkernel/`, `tool-images/`, `[rewind] ignore` globs, `.git/` (a repository's
own store, which git already keeps), and what lies behind a link to a folder.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ._atomic import write_atomic
from ._rewind import INDEX as _INDEX, Journal, RunJournal, Seen, compared_entries, walk

_INDEX_VERSION = 1


def _walk(journal: Journal) -> Seen:
    return walk(journal.workdir, journal.relative_name)


def _load_index(journal: Journal) -> dict[str, Any]:
    try:
        data = json.loads((journal.root / _INDEX).read_bytes())
        if data.get("version") == _INDEX_VERSION and isinstance(data.get("files"), dict):
            return data["files"]
    except (OSError, ValueError, AttributeError):
        pass  # none yet, or damaged: every file is read again
    return {}


def _save_index(journal: Journal, files: dict[str, Any]) -> None:
    journal.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Not fsynced (20-30 ms a run on a busy disk): the contents it names are not either, and an
    # index a crash cut short is read as none (every file is stored again).
    write_atomic(journal.root / _INDEX, json.dumps({"version": _INDEX_VERSION, "files": files},
                                                    separators=(",", ":")), durable=False)


def _same(seen: tuple, indexed: Any) -> bool:
    return isinstance(indexed, list) and len(indexed) == 6 and tuple(indexed[:3]) == seen[:3] and indexed[4] == seen[4]


class Comparison:
    """The workspace before a shell run, and afterwards the run's entries from what moved."""

    def __init__(self, journal: Journal, run: RunJournal | None = None, skip: frozenset[str] = frozenset()) -> None:
        self.journal = journal
        self.skip = skip  # files the server saves meanwhile (the notebook the cell runs in): not the run's
        self.before = self._walk()
        self.index = _load_index(journal)
        moved = False
        for name, seen in self.before.items():
            if not _same(seen, self.index.get(name)):
                self.index[name] = self._stored(name, seen)
                moved = True
        gone = [name for name in self.index if name not in self.before]
        for name in gone:
            del self.index[name]
        if moved or gone:
            _save_index(journal, self.index)
        # Each file before the run: its index line (state, stored hash, why not) and its inode.
        self.lines = {name: [*self.index[name][:6], seen[3]] for name, seen in self.before.items()}
        if run is not None:  # kept with the run: a run whose process dies is compared with it later
            run.note_scan(self.lines, skip)

    def _walk(self) -> Seen:
        return {name: seen for name, seen in _walk(self.journal).items() if name not in self.skip}

    def _stored(self, name: str, seen: tuple) -> list[Any]:
        """The index line of a file that moved: its state, and its content stored (or why not)."""
        size, mtime_ns, mode, _, kind = seen
        state = {"size": size, "mtime_ns": mtime_ns, "mode": mode, "type": kind}
        digest, why = self.journal.store(os.path.join(self.journal.workdir, name), state)
        return [size, mtime_ns, mode, digest, kind, why]

    def record(self, run: RunJournal) -> None:
        """After the run: each file that was created, changed, deleted or renamed, as an entry."""
        for entry in compared_entries(self.lines, self._walk()):
            run.record_known(entry)
