"""The journal of changes (issue 38): what each run changed in the workspace, and the way back.

A run (one `%%tools` or `%%bash` cell, one `serve` bash call, one direct call) records, before
it changes a workspace file, that file's prior content and mode bits; `rewind` puts them back.
The journal lives outside the workspace, in the per-user state folder an agent's OS sandbox
hides (`_runners/_sandbox_plan.hidden_places`), so no script can rewrite what it would restore:

    $XDG_STATE_HOME/toolkernel/journal/<project>/
        blobs/<sha256>       a prior content, stored once by its hash (written atomically)
        blobs/.part-<id>     a large one copied as a shell run started, until hashed and stored
                             (`.part-<id>.<sha256>` once hashed: `_rewind_parts`)
        runs/<run id>.jsonl  the run's head line, then one line per file, then its end line

`<project>` is a digest of the workspace's real path, as for pending approvals. A run's file
is appended line by line (each line whole before the change it announces), so a run killed
midway keeps every change its tools made before it; its end line holds each file's state after
the run, which a rewind compares with the file now to find files changed again since. A shell
run's own commands are found by comparing the workspace before and after (`_rewind_scan`): the
"before" is stored as the run starts (its `scan` line), so when the run's process died without
an end line, the next reader of the run compares the workspace with it then (`settled`).

Limits (`[rewind]`, `RewindLimits`): a file past `max_file_mb`, or content past the day's
`max_day_mb` once the oldest runs are dropped, is recorded "not restorable" with the reason,
never skipped in silence. Runs are kept `keep_days` days. `.toolkernel/`, `tool-images/` and the
`ignore` globs are not recorded.

A notebook cell changed through a paired Jupyter Server (its document, not a file here) is
recorded as a cell entry: the server, the notebook's path on it, the cell's id, its source
before (stored as a content) and after. Only the session paired with that server can put it
back, through the server's document (`_providers/_tools/rewind.py`); `rewind` here refuses a
run holding one unless its caller does that part.

Everything read back is checked: a run file must parse, a blob must hash to its name. A restore
checks every file first and writes nothing when one check fails.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import difflib
import fnmatch
import functools
import hashlib
import json
import math
import os
import re
import secrets
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from ._atomic import write_atomic
from ._config._rewind import RewindLimits
from ._config._trust import store_path
from ._errors import ToolkernelError, printable
from ._rewind_parts import PART, Ahead, checked as checked_part, copy_part, is_part, name_of, new_part, remove as remove_part

FOLDER = "journal"
INDEX = "index.json"  # the workspace as the last shell run's comparison saw it (`_rewind_scan`)
KINDS = ("created", "changed", "deleted", "renamed")
NEVER_RECORDED = (".toolkernel", "tool-images")
# A Jupyter Server's own state, written while any cell runs: put back, it would be written behind
# the server's back (its collaboration store, its checkpoints).
SERVERS_OWN = (".jupyter_ystore.db*", ".ipynb_checkpoints")
_RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6}")
_HASH = re.compile(r"[0-9a-f]{64}")
_VERSION = 1
_MIB = 1024 * 1024
_DAY = 24 * 3600
_CHUNK = 1 << 20
# From this size, a shell run's prior content is copied by the kernel and hashed while the run
# works (`_rewind_parts`); a smaller one costs less stored whole at once than a thread to hash it.
_COPIED_SOON = 1 * _MIB
_NAMED = 20  # files a refusal names; the rest are counted


class RewindError(ToolkernelError):
    """A rewind that cannot be done (no such run, files changed since, a damaged entry)."""


def journal_root(workdir: Path | str, environ: Mapping[str, str] | None = None) -> Path:
    """The journal folder of the workspace `workdir` in the state folder."""
    project = hashlib.sha256(os.fsencode(os.path.realpath(workdir))).hexdigest()[:16]
    return store_path(environ).parent / FOLDER / project


@dataclass(frozen=True)
class Entry:
    """One file of a run: its path (relative to the workspace), the kind of change, its state
    before the run (None: it did not exist), and where it went (`renamed`)."""

    path: str
    kind: str
    before: Mapping[str, Any] | None = None
    to: str | None = None
    not_restorable: str | None = None
    after_the_fact: bool = False

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"path": self.path, "kind": self.kind, "before": self.before}
        if self.to is not None:
            body["to"] = self.to
        if self.not_restorable:
            body["not_restorable"] = self.not_restorable
        if self.after_the_fact:
            body["after_the_fact"] = True
        return body


@dataclass(frozen=True)
class CellEntry:
    """A notebook cell changed through a Jupyter Server: its source before the run (a stored
    content's hash) and after it (None: the edit did not complete)."""

    server: str  # the server's base URL, without a token
    notebook: str  # the notebook's path from the server's root
    cell_id: str
    before: str
    after: str | None = None

    @property
    def name(self) -> str:
        return f"{self.notebook}#{self.cell_id}"

    def key(self) -> tuple[str, str, str]:
        return self.server, self.notebook, self.cell_id


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


@dataclass
class RunRecord:
    """A run as read back from its file."""

    id: str
    time: float
    route: str
    entries: list[Entry] = field(default_factory=list)
    after: dict[str, Any] | None = None  # path -> state after the run; None: the run never ended
    scan: str | None = None  # the stored workspace as the run started (a shell run's)
    settled: float | None = None  # when a reader ended the run its dead process left open
    owner: tuple[int, str | None] | None = None  # the pid that ran it, and that process's start
    cells: list[CellEntry] = field(default_factory=list)  # each cell once: first before, last after
    # Where the run came from, for a person (a notebook cell: notebook, cell_id, count, first_line, who).
    about: dict[str, Any] = field(default_factory=dict)
    rewinds: list[str] = field(default_factory=list)  # the runs this one put back (a rewind's)

    def files(self) -> dict[str, Entry]:
        """The first entry of each path: the state before the run."""
        first: dict[str, Entry] = {}
        for entry in self.entries:
            first.setdefault(entry.path, entry)
        return first


def _state_of(path: str) -> dict[str, Any] | None:
    """size, mtime and mode of the file at `path` (not through a link), None when absent."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "mode": stat.S_IMODE(info.st_mode),
            "type": "file" if stat.S_ISREG(info.st_mode) else "link" if stat.S_ISLNK(info.st_mode) else "other"}


def _hash_file(fd: int) -> str:
    digest = hashlib.sha256()
    while chunk := os.read(fd, _CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


# path -> (size, mtime_ns, mode, inode, kind) as one walk saw it
Seen = dict[str, tuple[int, int, int, int, str]]
_SKIPPED_FOLDERS = (".git",)  # a repository's own store, which git already keeps


def walk(workdir: str, recorded: Callable[[str], str | None]) -> Seen:
    """Every file (and link) of the workspace that `recorded` keeps, by relative path (one
    `stat` a file; not behind a link to a folder)."""
    seen: Seen = {}
    folders = [""]
    while folders:
        relative = folders.pop()
        try:
            entries = list(os.scandir(os.path.join(workdir, relative)))
        except OSError:
            continue
        for entry in entries:
            name = f"{relative}/{entry.name}" if relative else entry.name
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if entry.name not in _SKIPPED_FOLDERS and recorded(name) is not None:
                    folders.append(name)
            elif recorded(name) is not None:
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


def _process_start(pid: int) -> str | None:
    """What tells this process from a later one given the same pid: its start time (Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _still_running(owner: tuple[int, str | None] | None) -> bool:
    if owner is None:
        return False
    pid, started = owner
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return started is None or _process_start(pid) in (None, started)


class Journal:
    """The journal of one workspace: its runs, their stored contents, rewinding one."""

    def __init__(self, workdir: Path | str, limits: RewindLimits = RewindLimits(),
                 environ: Mapping[str, str] | None = None) -> None:
        self.workdir = os.path.realpath(workdir)
        self.root = journal_root(self.workdir, environ)
        self.limits = limits
        self._lock = threading.Lock()
        self._day: collections.deque[tuple[float, int]] | None = None  # (time, bytes) stored in the last day, oldest first
        self._day_bytes = 0
        # Contents stored within `pinned()` blocks still open, kept from collection (see there).
        self._pins: dict[str, int] = {}
        self._pins_lock = threading.Lock()
        self._pinning = threading.local()
        self._ahead: Ahead | None = None  # large files the last shell run left changed, being copied
        self._ahead_lock = threading.Lock()

    # -- recording -----------------------------------------------------------------------------

    def start_run(self, route: str, about: Mapping[str, Any] | None = None) -> "RunJournal":
        """`about`: where the run came from, as a person names it (see `RunRecord.about`)."""
        return RunJournal(self, route, about)

    def relative(self, path: str | os.PathLike[str]) -> str | None:
        """`path` relative to the workspace when the journal records it, else None."""
        real = os.path.abspath(path)
        if not real.startswith(self.workdir + os.sep):
            return None
        return self.relative_name(real[len(self.workdir) + 1:])

    def relative_name(self, relative: str) -> str | None:
        """`relative` (a path inside the workspace) when the journal records it, else None."""
        parts = relative.split(os.sep)
        if parts[0] in NEVER_RECORDED or any(fnmatch.fnmatch(part, own) for part in parts for own in SERVERS_OWN):
            return None
        if any(fnmatch.fnmatch(relative, glob) for glob in self.limits.ignore):
            return None
        return relative

    def _folder(self, name: str) -> Path:
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return folder

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """Contents this thread stores within the block are not collected until it ends: a caller
        that stores several before it writes what names them (the workspace's index, after its
        last file) would otherwise lose the first ones when a later one's room drops older runs."""
        mine: list[str] = []
        self._pinning.stored = mine
        try:
            yield
        finally:
            self._pinning.stored = None
            with self._pins_lock:
                for digest in mine:
                    self._pins[digest] -= 1
                    if not self._pins[digest]:
                        del self._pins[digest]

    def _kept(self, digest: str) -> str:
        """`digest`, stored or found just now; pinned when the thread is within `pinned()`."""
        mine = getattr(self._pinning, "stored", None)
        if mine is not None:
            with self._pins_lock:
                self._pins[digest] = self._pins.get(digest, 0) + 1
            mine.append(digest)
        return digest

    def store_bytes(self, data: bytes) -> str | None:
        """`data` stored by its hash; None when past the day's limit."""
        digest = hashlib.sha256(data).hexdigest()
        blobs = self._folder("blobs")
        if not (blobs / digest).exists():
            if not self._room_for(len(data)):
                return None
            _write_blob(blobs, digest, data)
        return self._kept(digest)

    def store(self, path: str, state: Mapping[str, Any]) -> tuple[str | None, str | None]:
        """The file's content stored by its hash: (hash, None), or (None, why it is not restorable)."""
        if state["type"] == "link":
            return None, "a symbolic link (its target is not recorded)"
        if state["type"] != "file":
            return None, "not a regular file"
        fd, why = self._opened(path, state)
        if fd is None:
            return None, why
        try:
            data = _small_content(fd, state["size"]) if state["size"] < _COPIED_SOON else None
            if data is None:
                return self._copied(fd)
            # Whole in memory: a content stored before (a file written again the same) is not
            # written again, where a copy made on the way was made only to be removed.
            digest = self.store_bytes(data)
            return (digest, None) if digest else (None, self._past_the_day())
        finally:
            os.close(fd)

    def copy_soon(self, path: str, state: Mapping[str, Any]) -> tuple[str | None, str | None] | Path:
        """As `store`, for a file a shell run is about to start with: a large one is only copied
        into a part of the store (returned), for a thread to hash while the run works and
        `file_part` to make a stored content of; a smaller one is stored now."""
        if state["type"] != "file" or state["size"] < _COPIED_SOON:
            return self.store(path, state)
        fd, why = self._opened(path, state)
        if fd is None:
            return None, why
        try:
            return copy_part(self._folder("blobs"), fd)
        finally:
            os.close(fd)

    def copy_after(self, files: Mapping[str, tuple], run_time: float) -> None:
        """Large files a shell run (begun at `run_time`) left changed (name -> a walk's state),
        copied into parts of the store now, while the run's output is read, for the next run to
        take (`take_copies`) instead of copying them before it starts. Those of the run before that
        no run took go."""
        limit = self.limits.max_file_mb * _MIB
        chosen = {name: (os.path.join(self.workdir, name), seen) for name, seen in files.items()
                  if seen[4] == "file" and _COPIED_SOON <= seen[0] <= limit}
        make_room = functools.partial(self.make_room, before=run_time)
        ahead = Ahead(self._folder("blobs"), chosen, make_room) if chosen else None
        with self._ahead_lock:
            older, self._ahead = self._ahead, ahead
        if older is not None:
            older.discard()

    def take_copies(self) -> Ahead | None:
        """The copies made after the last shell run, for one run to take from (`Ahead.take`)
        before it discards the rest; None when there are none."""
        with self._ahead_lock:
            ahead, self._ahead = self._ahead, None
        return ahead

    def wait_for_copies(self) -> None:
        """Until the copies made after the last shell run are done (a benchmark's or a test's pause)."""
        with self._ahead_lock:
            ahead = self._ahead
        if ahead is not None:
            ahead.wait()

    def close(self) -> None:
        """The copies made after the last shell run removed: no run of this journal comes now."""
        ahead = self.take_copies()
        if ahead is not None:
            ahead.discard()
            ahead.wait()  # the file being copied, at most: a daemon thread would leave its part

    def _opened(self, path: str, state: Mapping[str, Any]) -> tuple[int | None, str | None]:
        """The file opened to be stored, or why it is not restorable."""
        if state["size"] > self.limits.max_file_mb * _MIB:
            return None, f"larger than the {self.limits.max_file_mb} MiB limit ([rewind] max_file_mb)"
        try:
            return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), None
        except OSError as exc:
            return None, f"could not be read ({exc.strerror})"

    def file_part(self, part: Path, digest: str) -> tuple[str | None, str | None]:
        """A part hashed to `digest` made that stored content, within the day's limit: a second
        name for it (the part itself stays until its run's end is written)."""
        blob = part.parent / digest
        if blob.exists():
            return digest, None
        try:
            if not self._room_for(os.lstat(part).st_size):
                return None, self._past_the_day()
            os.link(part, blob)
        except FileExistsError:
            pass  # stored meanwhile: the same content
        except FileNotFoundError:
            return None, "its copy from before the run is missing from the journal"
        return digest, None

    def _past_the_day(self) -> str:
        return f"past the day's limit of {self.limits.max_day_mb} MiB ([rewind] max_day_mb)"

    def _copied(self, fd: int) -> tuple[str | None, str | None]:
        """The open file copied into the stored contents a piece at a time, hashed as it goes: a
        whole copy in memory stayed in the kernel's heap after the run (8 MB for one data file).
        The copy is renamed to its hash only when whole. Not fsynced: a content a crash cut short
        fails its hash when read back, a clear error, and an fsync a file made a run of many small
        writes a third dearer."""
        blobs = self._folder("blobs")
        part = blobs / f".part-{secrets.token_hex(8)}"
        digest, size = hashlib.sha256(), 0
        try:
            with open(part, "xb") as out:
                while chunk := os.read(fd, _CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
            blob = blobs / digest.hexdigest()
            if blob.exists():
                return self._kept(blob.name), None
            if not self._room_for(size):
                return None, self._past_the_day()
            os.chmod(part, 0o600)
            os.replace(part, blob)
            return self._kept(blob.name), None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part)

    def _room_for(self, size: int) -> bool:
        """Whether `size` more bytes fit in the day's limit, the oldest runs dropped to make room."""
        with self._lock:
            if not self._made_room(size):
                return False
            self._day.append((time.time(), size))
            self._day_bytes += size
            return True

    def make_room(self, size: int, before: float) -> None:
        """The oldest runs begun `before` dropped until `size` more bytes fit in the day's limit
        (counted when they are stored): for copies made after the run begun then, so that storing
        them in the next run drops none. The run that made them, and any later, are kept."""
        with self._lock:
            self._made_room(size, before)

    def _made_room(self, size: int, before: float = math.inf) -> bool:
        budget = self.limits.max_day_mb * _MIB
        if size > budget:
            return False
        used = self._used_today()
        while used + size > budget and self._drop_oldest(before):
            used = self._used_today(again=True)
        return used + size <= budget

    def _used_today(self, again: bool = False) -> int:
        """The bytes stored in the last day: read from the runs once (or `again`), then counted as
        contents are stored, each out of the count once a day old. (Summed again at each store, a
        day of many small files made each store slower than the last: 1,000 took 3.7 s, not 0.2.)"""
        if self._day is None or again:
            self._day = collections.deque(sorted(self._stored_in_runs()))
            self._day_bytes = sum(size for _, size in self._day)
        cutoff = time.time() - _DAY
        while self._day and self._day[0][0] < cutoff:
            self._day_bytes -= self._day.popleft()[1]
        return self._day_bytes

    def _stored_in_runs(self) -> list[tuple[float, int]]:
        """(time, bytes) of each content the last day's runs hold, once each."""
        cutoff = time.time() - _DAY
        seen: set[str] = set()
        day = []
        for run in self.runs(settle=False):  # (settling one may store a content: `_room_for`)
            if run.time < cutoff:
                continue
            for entry in run.entries:
                digest = (entry.before or {}).get("hash")
                if digest and digest not in seen:
                    seen.add(digest)
                    day.append((run.time, (entry.before or {}).get("size", 0)))
        return day

    def _drop_oldest(self, before: float = math.inf) -> bool:
        """Remove the oldest ended run (begun `before`) and the contents no other run holds; False
        when none is left."""
        ended = [run for run in reversed(self.runs(settle=False)) if run.after is not None and run.time < before]
        if not ended:
            return False
        self.drop(ended[0].id)
        return True

    # -- reading -------------------------------------------------------------------------------

    def runs(self, *, settle: bool = True) -> list[RunRecord]:
        """Every readable run, newest first (a damaged run file is skipped). `settle=False`: a run
        whose process died is read as it stands (see `run`)."""
        try:
            names = os.listdir(self.root / "runs")
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            run_id = name.removesuffix(".jsonl")
            if name.endswith(".jsonl") and _RUN_ID.fullmatch(run_id):
                with contextlib.suppress(RewindError):
                    found.append(self.run(run_id, settle=settle))
        return sorted(found, key=lambda run: (run.time, run.id), reverse=True)

    def run(self, run_id: str, *, settle: bool = True) -> RunRecord:
        """Run `run_id`; one whose process died before its end is settled first (`_settled`),
        unless `settle` is False: the journal's own keeping reads runs so, as settling may store a
        content, which takes the lock that keeping holds."""
        if not _RUN_ID.fullmatch(run_id):
            raise RewindError(f"no run {run_id!r} in the journal (`toolkernel changes` lists them)")
        try:
            lines = (self.root / "runs" / f"{run_id}.jsonl").read_bytes().splitlines()
        except FileNotFoundError:
            raise RewindError(f"no run {run_id} in the journal (`toolkernel changes` lists them)") from None
        try:
            run = _parse_run(run_id, lines)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise RewindError(f"the journal's record of run {run_id} is damaged; nothing was restored") from None
        if settle and run.after is None and run.scan is not None and not _still_running(run.owner):
            return self._settled(run)
        return run

    def _settled(self, run: RunRecord) -> RunRecord:
        """A shell run whose process died before its end: what its commands changed, found now by
        comparing the workspace with the one stored as it started, and its end written. Another
        reader doing the same holds the file's lock: this one reads the run as it stands."""
        import fcntl

        path = self.root / "runs" / f"{run.id}.jsonl"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return run
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            again = _parse_run(run.id, path.read_bytes().splitlines())
            if again.after is not None:
                return again
            scan = json.loads(self.blob(run.scan))
            skip, known = set(scan["skip"]), {entry.path for entry in again.entries}
            files = self._with_parts(scan["files"], scan.get("parts", {}))
            now = {name: seen for name, seen in walk(self.workdir, self.relative_name).items() if name not in skip}
            found = [e for e in compared_entries(files, now) if e.path not in known]
            lines = [entry.to_json() for entry in found]
            lines.append({"end": _states_after([*again.entries, *found], self.workdir), "settled": time.time()})
            os.write(fd, b"".join(json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in lines))
            for part in scan.get("parts", {}).values():
                remove_part(self.root / "blobs", part)  # its content is stored, or the reason it is not
            return _parse_run(run.id, path.read_bytes().splitlines())
        except (OSError, RewindError, ValueError, KeyError, TypeError, AttributeError):
            return run  # being settled by another reader, or a damaged scan: shown as not ended
        finally:
            os.close(fd)

    def _with_parts(self, files: dict[str, list[Any]], parts: Mapping[str, str]) -> dict[str, list[Any]]:
        """A dead run's scan with each file it copied but had not stored yet as it started (its
        `parts`) made a stored content, or given the reason it cannot be (`_rewind_parts`)."""
        for name, part in parts.items():
            if not isinstance(part, str) or not PART.fullmatch(part) or not isinstance(files.get(name), list):
                raise ValueError("bad part")
            hashed, said = checked_part(self._folder("blobs"), part)
            digest, why = self.file_part(hashed, said) if hashed else (None, said)
            files[name][3], files[name][5] = digest, why
        return files

    def last(self) -> RunRecord:
        runs = [run for run in self.runs() if run.entries or run.cells]
        if not runs:
            raise RewindError("the journal holds no run that changed files")
        return runs[0]

    def blob(self, digest: str) -> bytes:
        """A stored content, checked against its hash."""
        if not isinstance(digest, str) or not _HASH.fullmatch(digest):
            raise RewindError("a damaged journal entry (a bad content hash)")
        try:
            data = (self.root / "blobs" / digest).read_bytes()
        except OSError:
            raise RewindError(f"the stored content {digest[:12]} is missing from the journal") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise RewindError(f"the stored content {digest[:12]} is damaged (its hash does not match)")
        return data

    # -- keeping -------------------------------------------------------------------------------

    def drop(self, run_id: str) -> None:
        """Remove a run, and the contents no remaining run holds."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.root / "runs" / f"{run_id}.jsonl")
        self._collect()

    def remove_old(self, now: float | None = None) -> int:
        """Drop runs older than `keep_days` (by their file's last write: no run file is read); returns
        how many went."""
        cutoff = (time.time() if now is None else now) - self.limits.keep_days * _DAY
        try:
            names = os.listdir(self.root / "runs")
        except FileNotFoundError:
            return 0
        old = []
        for name in names:
            with contextlib.suppress(OSError):
                if name.endswith(".jsonl") and os.lstat(self.root / "runs" / name).st_mtime < cutoff:
                    old.append(name.removesuffix(".jsonl"))
        for run_id in old:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.root / "runs" / f"{run_id}.jsonl")
        if old:
            self._collect()
        return len(old)

    def _collect(self) -> None:
        """Remove the contents neither a run nor the workspace's index (`_rewind_scan`) holds."""
        runs = self.runs(settle=False)  # a dead run not settled yet holds its scan's contents and parts
        held = {(e.before or {}).get("hash") for run in runs for e in run.entries}
        held |= {cell.before for run in runs for cell in run.cells}
        held |= self._held_by_scans(runs)
        held |= self._indexed()
        with self._pins_lock:
            held |= set(self._pins)
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self.root / "blobs"):
                if self._unheld(name, held) or self._stale_part(name, held):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.root / "blobs" / name)
        self._day = None

    def _unheld(self, name: str, held: set[str]) -> bool:
        """A stored content nothing holds. One that is a second name of a part belongs to a run
        still going, whose lines name it once written (`file_part`: a run storing two large
        contents may drop old runs for the second after storing the first)."""
        if not _HASH.fullmatch(name) or name in held:
            return False
        with contextlib.suppress(FileNotFoundError):
            return os.lstat(self.root / "blobs" / name).st_nlink == 1
        return False

    def _stale_part(self, name: str, held: set[str]) -> bool:
        """A part no run still going names, left `keep_days` ago (its process died before its
        scan was written, or while a reader settled its run): a live run's is never that old."""
        if not is_part(name) or name_of(name) in held:
            return False
        with contextlib.suppress(FileNotFoundError):
            return os.lstat(self.root / "blobs" / name).st_mtime < time.time() - self.limits.keep_days * _DAY
        return False


    def _held_by_scans(self, runs: list[RunRecord]) -> set[str]:
        """What a run not ended yet may still need: its stored workspace, the contents in it, and
        its parts (contents still being stored as it started)."""
        held: set[str] = set()
        for run in runs:
            if run.after is None and run.scan is not None:
                held.add(run.scan)
                with contextlib.suppress(RewindError, ValueError, TypeError, AttributeError):
                    scan = json.loads(self.blob(run.scan))
                    held |= {line[3] for line in scan["files"].values() if line[3]}
                    held |= {part for part in scan.get("parts", {}).values() if isinstance(part, str)}
        return held

    def _indexed(self) -> set[str]:
        """The hashes of the workspace's index: the contents before the next shell run."""
        try:
            files = json.loads((self.root / INDEX).read_bytes()).get("files", {})
            return {line[3] for line in files.values() if isinstance(line, list) and len(line) > 3 and line[3]}
        except (OSError, ValueError, AttributeError):
            return set()


def _write_blob(blobs: Path, digest: str, data: bytes) -> None:
    """`data` stored as `blobs/<digest>` in one step: written to a part, then renamed (not
    fsynced: a content a crash cut short fails its hash when read back, a clear error)."""
    part = new_part(blobs)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(part, blobs / digest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)
        raise


def _small_content(fd: int, size: int) -> bytes | None:
    """The open file's content when it is below `_COPIED_SOON` (it may have grown since its
    `stat` said `size`): else None, read from the start again. Read `size` and one byte more, not
    a whole `_COPIED_SOON` each time; only an empty read says the end came."""
    data = b""
    while len(data) < _COPIED_SOON:
        want = size + 1 - len(data) if len(data) <= size else _CHUNK
        more = os.read(fd, min(want, _COPIED_SOON - len(data)))
        if not more:
            return data
        data += more
    os.lseek(fd, 0, os.SEEK_SET)
    return None


def _read_all(fd: int) -> bytes:
    parts = []
    while chunk := os.read(fd, _CHUNK * 8):
        parts.append(chunk)
    return b"".join(parts)


def _parse_run(run_id: str, lines: list[bytes]) -> RunRecord:
    if not lines:  # made a moment ago, its head line not written yet (or emptied): not a run yet
        raise ValueError("an empty run file")
    head = json.loads(lines[0])
    if head.get("version") != _VERSION or head["run"] != run_id:
        raise ValueError("not this run")
    run = RunRecord(run_id, float(head["time"]), str(head["route"]))
    if isinstance(head.get("about"), dict):
        run.about = {k: v for k, v in head["about"].items() if isinstance(v, (str, int)) and not isinstance(v, bool)}
    if isinstance(head.get("pid"), int):
        run.owner = (head["pid"], head.get("started") if isinstance(head.get("started"), str) else None)
    cells: dict[tuple[str, str, str], CellEntry] = {}
    for line in lines[1:]:
        if not line.strip():
            continue
        item = json.loads(line)
        if "end" in item:
            run.after = dict(item["end"])
            run.settled = float(item["settled"]) if "settled" in item else None
            continue
        if "rewinds" in item:
            if isinstance(item["rewinds"], str):
                run.rewinds.append(item["rewinds"])
            continue
        if "scan" in item:
            if not _HASH.fullmatch(item["scan"]):
                raise ValueError("bad scan")
            run.scan = item["scan"]
            continue
        if "cell" in item or "cell_after" in item:
            _parse_cell(item, cells)
            continue
        if item["kind"] not in KINDS or not _plain_relative(item["path"]):
            raise ValueError("bad entry")
        if item.get("to") is not None and not _plain_relative(item["to"]):
            raise ValueError("bad entry")
        before = item.get("before")
        if before is not None and not isinstance(before, dict):
            raise ValueError("bad entry")
        run.entries.append(Entry(item["path"], item["kind"], before, item.get("to"),
                                 item.get("not_restorable"), bool(item.get("after_the_fact"))))
    if run.after is not None:
        run.entries = [_as_ended(e, run.after) for e in run.entries if not _unchanged(e, run.after)]
    # An edit that never completed in a run that ended changed nothing; one that changed nothing either.
    run.cells = [c for c in cells.values() if run.after is None or c.after not in (None, c.before)]
    return run


def _parse_cell(item: Mapping[str, Any], cells: dict[tuple[str, str, str], CellEntry]) -> None:
    """A cell's line: its source before the run (the first for that cell counts), or after an edit (the last)."""
    body = item.get("cell") or item["cell_after"]
    key = (body["server"], body["notebook"], body["cell_id"])
    if not all(isinstance(part, str) and part for part in key):
        raise ValueError("bad cell entry")
    if "cell" in item:
        if not _HASH.fullmatch(body["before"]):
            raise ValueError("bad cell entry")
        cells.setdefault(key, CellEntry(*key, before=body["before"]))
    elif key in cells:
        if not _HASH.fullmatch(body["hash"]):
            raise ValueError("bad cell entry")
        cells[key] = dataclasses.replace(cells[key], after=body["hash"])


def _plain_relative(path: Any) -> bool:
    """A path below the workspace, as the journal writes them: a forged run file naming
    `../../.bashrc` or `/etc/x` must not lead a rewind outside."""
    if not isinstance(path, str) or not path or "\0" in path or path.startswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def _unchanged(entry: Entry, after: Mapping[str, Any]) -> bool:
    """A file recorded before a change that did not happen (a refused edit), or created and gone again."""
    if entry.path not in after or entry.to is not None:
        return False
    now, before = after[entry.path], entry.before
    if before is None or now is None:
        return before is None and now is None
    return all(before.get(key) == now.get(key) for key in ("size", "mtime_ns", "mode", "type"))


def _states_after(entries: Iterable[Entry], workdir: str) -> dict[str, Any]:
    """Each file's state now, and where a renamed one went: what a later rewind compares with."""
    after: dict[str, Any] = {}
    for entry in entries:
        after[entry.path] = _state_of(os.path.join(workdir, entry.path))
        if entry.to is not None:
            after.setdefault(entry.to, _state_of(os.path.join(workdir, entry.to)))
    return after


def _as_ended(entry: Entry, after: Mapping[str, Any]) -> Entry:
    """A file recorded before a change and absent after the run was deleted."""
    if entry.kind == "changed" and entry.path in after and after[entry.path] is None:
        return dataclasses.replace(entry, kind="deleted")
    return entry


class RunJournal:
    """What one run records: each workspace file before its first change in the run."""

    def __init__(self, journal: Journal, route: str, about: Mapping[str, Any] | None = None) -> None:
        self.journal = journal
        self.route = route
        self.about = dict(about or {})
        self.id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        self.time = time.time()
        self._seen: dict[str, Entry] = {}
        self._cells: dict[tuple[str, str, str], tuple[str, str | None]] = {}  # key -> (before, after)
        self._lock = threading.Lock()
        self._file: Any = None
        self._at_end: list[Callable[[], None]] = []

    @property
    def files(self) -> int:
        return len(self._seen) + len(self._cells)

    def before_cell(self, server: str, notebook: str, cell_id: str, source: str) -> None:
        """Record a notebook cell on a Jupyter Server before this run first changes its source."""
        key = (server, notebook, cell_id)
        with self._lock:
            if key in self._cells:
                return
            digest = self.journal.store_bytes(source.encode())
            if digest is None:
                raise RewindError(f"the cell {cell_id} of {notebook} was not changed: its source would pass "
                                  f"the day's limit of {self.journal.limits.max_day_mb} MiB ([rewind] max_day_mb)")
            self._open()
            self._write({"cell": {"server": server, "notebook": notebook, "cell_id": cell_id, "before": digest}})
            self._cells[key] = (digest, None)

    def after_cell(self, server: str, notebook: str, cell_id: str, source: str) -> None:
        """The cell's source once the change was made (a rewind compares the cell now with it)."""
        key = (server, notebook, cell_id)
        with self._lock:
            if key not in self._cells:
                return
            digest = source_hash(source)
            self._write({"cell_after": {"server": server, "notebook": notebook, "cell_id": cell_id,
                                        "hash": digest}})
            self._cells[key] = (self._cells[key][0], digest)

    def before_change(self, path: str | os.PathLike[str], kind: str | None = None, *,
                      to: str | os.PathLike[str] | None = None, after_the_fact: bool = False) -> None:
        """Record `path` before this run first changes it (later changes in the run add nothing:
        a rewind goes back to the state before the run). `kind`: worked out when not given
        (created when the file is absent, else changed); `to`: where a rename takes it."""
        relative = self.journal.relative(path)
        if relative is None:
            return
        with self._lock:
            if relative in self._seen:
                return
            self._record(self._entry(relative, kind, to, after_the_fact))

    def written_by_a_call(self, path: str | os.PathLike[str]) -> bool:
        """Whether a tool call of this run recorded `path` before changing it (a script's own
        writes are found after the fact)."""
        relative = self.journal.relative(path)
        with self._lock:
            entry = self._seen.get(relative) if relative is not None else None
        return entry is not None and not entry.after_the_fact

    def _entry(self, relative: str, kind: str | None, to: Any, after_the_fact: bool) -> Entry:
        full = os.path.join(self.journal.workdir, relative)
        state = _state_of(full)
        if state is None:
            return Entry(relative, "created", None, after_the_fact=after_the_fact)
        digest, why = self.journal.store(full, state)
        before = {**state, "hash": digest}
        moved = self.journal.relative(to) if to is not None else None
        return Entry(relative, kind or "changed", before, moved, why, after_the_fact)

    def note_scan(self, before: Mapping[str, Any], skip: Iterable[str] = (),
                  parts: Mapping[str, str] | None = None) -> None:
        """The workspace as this shell run starts (see `compared_entries`), and the files its
        comparison leaves out, stored, so that a run whose process dies can still be compared with
        it. `parts`: the files whose content is copied but not yet stored (`_rewind_parts`), by the
        part that holds it, for a reader settling the run to store (kept until its end is written).
        Past the day's limit: not noted (a killed run then keeps only what its tools recorded)."""
        scan: dict[str, Any] = {"files": before, "skip": sorted(skip)}
        if parts:
            scan["parts"] = dict(parts)
        digest = self.journal.store_bytes(json.dumps(scan, separators=(",", ":"), sort_keys=True).encode())
        if digest is None:
            return
        with self._lock:
            self._open()
            self._write({"scan": digest})

    def note_rewinds(self, run_id: str) -> None:
        """This run put back what run `run_id` changed (a listing marks that run rewound)."""
        with self._lock:
            self._open()
            self._write({"rewinds": run_id})

    def when_ended(self, done: Callable[[], None]) -> None:
        """`done()` once the run's end is written (or its file removed: it changed nothing)."""
        self._at_end.append(done)

    def record_known(self, entry: Entry) -> None:
        """An entry worked out elsewhere (the workspace compared before and after a shell run)."""
        with self._lock:
            if entry.path not in self._seen:
                self._record(entry)

    def _record(self, entry: Entry) -> None:
        self._open()
        self._write(entry.to_json())
        self._seen[entry.path] = entry

    def _open(self) -> None:
        if self._file is None:
            folder = self.journal._folder("runs")
            fd = os.open(folder / f"{self.id}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
                         | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            self._file = os.fdopen(fd, "ab", buffering=0)
            head = {"version": _VERSION, "run": self.id, "time": self.time, "route": self.route,
                    "pid": os.getpid(), "started": _process_start(os.getpid())}
            if self.about:
                head["about"] = self.about
            self._write(head)

    def _write(self, item: Mapping[str, Any]) -> None:
        # One write per line, unbuffered: a kill after it leaves the line whole in the file.
        self._file.write(json.dumps(item, separators=(",", ":")).encode() + b"\n")

    def finish(self) -> int:
        """End the run: each recorded file's state now, for a later rewind to compare; returns how
        many files the run changed."""
        with self._lock:
            changed = self._finished()
        for done in self._at_end:
            done()
        self._at_end = []
        return changed

    def _finished(self) -> int:
        if self._file is None:
            return 0
        if not self._seen and not self._cells:  # only its scan: nothing to keep
            self._file.close()
            self._file = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.journal.root / "runs" / f"{self.id}.jsonl")
            return 0
        after = _states_after(self._seen.values(), self.journal.workdir)
        self._write({"end": after})
        self._file.close()
        self._file = None
        cells = sum(after_cell not in (None, before) for before, after_cell in self._cells.values())
        return sum(not _unchanged(entry, after) for entry in self._seen.values()) + cells


# -- rewinding -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rewound:
    run: str
    restored: tuple[str, ...]
    skipped: tuple[str, ...]  # not restorable, with the reason
    recorded_as: str | None  # the run that recorded the rewind itself


def rewind(journal: Journal, run_id: str | None, *, force: bool = False,
           paths: Iterable[str] = (), into: RunJournal | None = None,
           refuse: Callable[[str], str | None] | None = None, cells_put_back_by_caller: bool = False) -> Rewound:
    """Put back every file run `run_id` (None: the last run that changed files) changed, as it
    was before that run; `paths`: globs naming only some. Refuses, touching nothing, when a file
    changed again since (unless `force`), when the run never ended, or when an entry is damaged.
    The rewind is itself recorded, so it can be rewound: as a run of its own, or `into` the run
    that makes it (a script's `tools rewind`). `refuse(path)`: why this caller may not restore a
    file (checked for every file before any is touched). Notebook cells on a server
    (`chosen_cells`) are refused unless `cells_put_back_by_caller`: only a session paired with that
    server reaches its document; the caller checks and restores them (files are done here first)."""
    run = journal.last() if run_id is None else journal.run(run_id)
    globs = tuple(paths)
    chosen = chosen_files(run, globs)
    cells = chosen_cells(run, globs)
    if not chosen and not cells:
        raise RewindError(f"run {run.id} changed no file matching {', '.join(globs)}")
    if cells and not cells_put_back_by_caller:
        raise RewindError(f"nothing was restored: run {run.id} changed notebook cells through a Jupyter Server "
                          f"({', '.join(printable(c.name) for c in cells[:_NAMED])}); a session paired with that "
                          "server puts them back (`%tools rewind` in a kernel paired with it, `tools rewind` in a "
                          "paired `serve`), or `--path` leaves them out")
    refused = [f"{p}: {why}" for p, e in chosen.items()
               for why in [_leads_out(journal, p, e.to) or (refuse(p) if refuse else None)] if why]
    if refused:
        raise RewindError("nothing was restored: " + "; ".join(refused))
    if not force:
        _refuse_changed_since(journal, run, chosen)
    contents = {p: journal.blob(e.before["hash"]) for p, e in chosen.items() if _restorable(e) and e.before}
    own = into or journal.start_run("rewind")
    restored, skipped = [], []
    swept: set[str] = set()  # folders whose killed writers' leftovers were looked for
    for relative, entry in chosen.items():
        if not _restorable(entry):
            skipped.append(f"{relative}: {entry.not_restorable}")
            continue
        _put_back(journal, own, relative, entry, contents.get(relative), swept)
        restored.append(relative)
    if restored:
        own.note_rewinds(run.id)
        os.sync()  # durable when it says so: once, not two fsyncs a file (1,000 files took seconds)
    if into is None:
        own.finish()
    return Rewound(run.id, tuple(restored), tuple(skipped), own.id if own.files else None)


def chosen_files(run: RunRecord, globs: Iterable[str]) -> dict[str, Entry]:
    """The run's files a rewind's globs name (all, without globs)."""
    globs = tuple(globs)
    return {p: e for p, e in run.files().items() if not globs or any(fnmatch.fnmatch(p, g) for g in globs)}


def chosen_cells(run: RunRecord, globs: Iterable[str]) -> list[CellEntry]:
    """The run's cells a rewind's globs name (by `notebook#cell_id`, or by the notebook's path)."""
    globs = tuple(globs)
    return [cell for cell in run.cells
            if not globs or any(fnmatch.fnmatch(cell.name, g) or fnmatch.fnmatch(cell.notebook, g) for g in globs)]


def _leads_out(journal: Journal, relative: str, to: str | None) -> str | None:
    """Why restoring `relative` (and removing `to`, where it was renamed) would reach outside the
    workspace: a folder on the way is a link that leads out now (a script may have put one there)."""
    for name in (relative, to) if to else (relative,):
        folder = os.path.realpath(os.path.dirname(os.path.join(journal.workdir, name)))
        if folder != journal.workdir and not folder.startswith(journal.workdir + os.sep):
            return "a folder on its way now leads outside the workspace (a link)"
    return None


def _restorable(entry: Entry) -> bool:
    return not entry.not_restorable and (entry.before is None or bool(entry.before.get("hash")))


def _refuse_changed_since(journal: Journal, run: RunRecord, chosen: Mapping[str, Entry]) -> None:
    if run.after is None:
        raise RewindError(f"run {run.id} did not end (it was killed or is still running): what it left "
                          "is unknown; `--force` restores anyway")
    moved = []
    for relative, entry in chosen.items():
        for name in (relative, entry.to) if entry.to else (relative,):
            if name in run.after and _state_of(os.path.join(journal.workdir, name)) != run.after[name]:
                moved.append(name)
    if moved:
        shown = sorted(set(moved))
        names = ", ".join(printable(name) for name in shown[:_NAMED])
        names += f" and {len(shown) - _NAMED} more" if len(shown) > _NAMED else ""
        raise RewindError(f"changed since run {run.id}: {names}. Nothing was restored; `--force` restores "
                          "anyway (the newer content is recorded, so that rewind can be undone too)")


def _put_back(journal: Journal, own: RunJournal, relative: str, entry: Entry, data: bytes | None,
              swept: set[str]) -> None:
    full = os.path.join(journal.workdir, relative)
    if entry.to is not None:  # the renamed file's new name goes when the old one comes back
        target = os.path.join(journal.workdir, entry.to)
        own.before_change(target, "deleted")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
    own.before_change(full)
    if entry.before is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(full)
        return
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        if stat.S_ISLNK(os.lstat(full).st_mode):
            os.unlink(full)  # a link put there since: replaced, not written through
    # One sync for the whole rewind (`rewind`), and one sweep a folder: each lists the folder, so
    # 1,000 files put back in one took 1,000,000 name matches (1.3 s of a 3 s rewind).
    folder = os.path.dirname(full)
    write_atomic(full, data or b"", durable=False, sweep=folder not in swept)
    swept.add(folder)
    os.chmod(full, entry.before["mode"])
    # Its time too: the file is as it was, and a rewind of an earlier run then finds it unchanged.
    with contextlib.suppress(KeyError, TypeError, OSError):
        os.utime(full, ns=(entry.before["mtime_ns"], entry.before["mtime_ns"]), follow_symlinks=False)


def rewound_by(runs: Iterable[RunRecord]) -> dict[str, str]:
    """Each run whose changes a later rewind put back, and that rewind, while it stands: a rewind
    that was itself rewound gives its runs' changes back to them."""
    by: dict[str, str] = {}
    for run in sorted(runs, key=lambda r: (r.time, r.id)):
        for target in run.rewinds:
            for undone in [name for name, rewind in by.items() if rewind == target]:
                del by[undone]
            by[target] = run.id
    return by


def iter_changes(journal: Journal, run_id: str | None = None, path_glob: str | None = None) -> Iterator[RunRecord]:
    """The runs that changed files, newest first, filtered as `changes` asks."""
    runs = [journal.run(run_id)] if run_id else journal.runs()
    for run in runs:
        if path_glob:
            run.entries = [e for e in run.entries if fnmatch.fnmatch(e.path, path_glob)]
            run.cells = chosen_cells(run, [path_glob])
        if run.entries or run.cells:
            yield run


# -- what a person or an agent reads ---------------------------------------------------------------

_DIFF_MAX = 1 * _MIB  # each side of a diff: a larger file is summed up, not shown


def diff_of(journal: Journal, run_id: str, relative: str,
            notebook: Callable[[str, str], str | None] | None = None) -> str:
    """One file of a run, old against new: a unified diff of its content before run `run_id` and
    its content now (what a rewind would replace), for a person to look at before restoring.
    `notebook(old, new)`: a notebook's diff cell by cell (None where a side is no notebook).
    Raises `RewindError` for an unknown run or file, or a stored content that is damaged."""
    run = journal.run(run_id)
    entry = run.files().get(relative)
    if entry is None:
        raise RewindError(f"run {run.id} did not change {printable(relative)}")
    now_name = entry.to or relative
    old = _old_side(journal, entry)
    new = _current_side(journal, now_name)
    moved = run.after is not None and now_name in run.after and \
        _state_of(os.path.join(journal.workdir, now_name)) != run.after[now_name]
    note = [f"(changed again since run {run.id}: a rewind refuses it)"] if moved else []
    cells = notebook(old, new) if notebook is not None and now_name.endswith(".ipynb") else None
    if cells is not None:
        return "\n".join(note + [cells or f"{printable(relative)}: no difference in its cells"])
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 f"a/{relative} (before run {run.id})", f"b/{now_name} (now)")
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return "\n".join(note + [text or f"{printable(relative)}: no difference in content"])


def _old_side(journal: Journal, entry: Entry) -> str:
    if entry.not_restorable:
        return f"(its content before the run was not kept: {entry.not_restorable})\n"
    if not entry.before:
        return ""
    if not isinstance(entry.before.get("size"), int) or entry.before["size"] > _DIFF_MAX:
        return f"({entry.before.get('size')} bytes: too large to show)\n"  # not read into memory to say so
    return _diff_side(journal.blob(entry.before["hash"]))


def _diff_side(data: bytes) -> str:
    if len(data) > _DIFF_MAX:
        return f"({len(data)} bytes: too large to show)\n"
    if b"\0" in data:
        return f"(binary, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:12]})\n"
    return data.decode("utf-8", errors="replace")


def _current_side(journal: Journal, relative: str) -> str:
    """The file as it is now, read without following a link (a script may have left one leading
    to a file the person never meant to show), nor through a folder that leads out."""
    if _leads_out(journal, relative, None):
        return "(not shown: a folder on its way leads outside the workspace)\n"
    state = _state_of(os.path.join(journal.workdir, relative))
    if state is None:
        return ""
    if state["type"] != "file":
        return f"(not a regular file now: a {state['type']})\n"
    if state["size"] > _DIFF_MAX:
        return f"({state['size']} bytes: too large to show)\n"
    try:
        fd = os.open(os.path.join(journal.workdir, relative), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return f"(cannot be read: {exc.strerror})\n"
    try:
        return _diff_side(_read_all(fd))
    finally:
        os.close(fd)



def describe_runs(runs: Iterable[RunRecord], rewound: Mapping[str, str] | None = None) -> str:
    """`changes`: each run, newest first, where it came from, with its files and the kind of each
    change; `rewound`: the runs a later rewind put back (`rewound_by`), marked so."""
    lines = []
    for run in runs:
        if rewound and run.id in rewound:
            ended_by = f"  (rewound by run {rewound[run.id]})"
        else:
            ended_by = ""
        files = run.files()
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.time))
        ended = "" if run.after is not None else "  (did not end: killed or still running)"
        if run.settled is not None:
            ended = ("  (its process died before the end: what its commands changed was found at "
                     f"{time.strftime('%H:%M:%S', time.localtime(run.settled))})")
        lines.append(f"run {run.id}  {when}  {run.route}  {_counted(len(files), len(run.cells))}{ended}{ended_by}")
        if run.about:
            lines.append(f"  from {describe_about(run.about)}")
        for entry in files.values():
            lines.append("  " + _describe_entry(entry))
        for cell in run.cells:
            lines.append(f"  {'cell':<8}  {printable(cell.name)}  (on {printable(cell.server)})")
    return "\n".join(lines) if lines else "no changes recorded"


def describe_about(about: Mapping[str, Any]) -> str:
    """Where a run came from, in a line: `analysis.ipynb [4] by a person: tools write-file ...`."""
    where = " ".join(part for part in (printable(str(about.get("notebook", ""))),
                                        f"[{about['count']}]" if "count" in about else "") if part) or "a cell"
    who = {"person": " by a person", "agent": " by an agent"}.get(str(about.get("who")), "")
    first = f": {printable(str(about['first_line']))}" if about.get("first_line") else ""
    return f"{where}{who}{first}"


def _counted(files: int, cells: int) -> str:
    said = [f"{n} {what}{'s' if n != 1 else ''}" for n, what in ((files, "file"), (cells, "cell")) if n]
    return ", ".join(said) or "0 files"


def _describe_entry(entry: Entry) -> str:
    name = printable(entry.path) + (f" -> {printable(entry.to)}" if entry.to else "")
    notes = [note for note in ("after the fact" if entry.after_the_fact else "",
                               f"not restorable: {entry.not_restorable}" if entry.not_restorable else "") if note]
    return f"{entry.kind:<8}  {name}" + (f"  ({'; '.join(notes)})" if notes else "")


def describe_rewind(done: Rewound, undo: str = "rewind {run}") -> str:
    """What a rewind did; `undo`: the command that rewinds a run where this is read (`%tools rewind
    {run}` in a notebook, `toolkernel rewind {run}` in a terminal, `tools rewind run={run}` in a script)."""
    lines = [f"rewound run {done.run}: {len(done.restored)} file{'s' if len(done.restored) != 1 else ''} put back"]
    lines += [f"  {printable(name)}" for name in done.restored]
    lines += [f"  not restored: {printable(line)}" for line in done.skipped]
    if done.recorded_as:
        lines.append(f"(recorded as run {done.recorded_as}: `{undo.format(run=done.recorded_as)}` undoes this)")
    return "\n".join(lines)
