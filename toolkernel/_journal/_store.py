"""The journal of changes (issue 38): what each run changed in the workspace, and the way back.

A run (one `%%tools` or `%%bash` cell, one `serve` bash call, one direct call) records, before
it changes a workspace file, that file's prior content and mode bits; `rewind` puts them back.
The journal lives outside the workspace, in the per-user state folder an agent's OS sandbox
hides (`_runners/_sandbox_plan.hidden_places`), so no script can rewrite what it would restore:

    $XDG_STATE_HOME/toolkernel/journal/<project>/
        blobs/<sha256>       a prior content, stored once by its hash (written atomically)
        blobs/.part-<id>     a large one copied as a shell run started, until hashed and stored
                             (`.part-<id>.<sha256>` once hashed: `_parts`)
        runs/<run id>.jsonl  the run's head line, then one line per file, then its end line

`<project>` is a digest of the workspace's real path, as for pending approvals. A run's file
is appended line by line (each line whole before the change it announces), so a run killed
midway keeps every change its tools made before it; its end line holds each file's state after
the run, which a rewind compares with the file now to find files changed again since. A shell
run's own commands are found by comparing the workspace before and after (`_scan`): the
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
import fcntl
import functools
import hashlib
import json
import math
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from .._config._rewind import RewindLimits
from .._config._trust import store_path
from .._errors import RewindError
from .._process import still_running
from . import _git
from ._ignore import Ignores
from ._packs import Packs
from ._parts import PART, Ahead, checked as checked_part, copy_part, is_part, name_of, new_part, remove as remove_part
from ._record import HASH, RUN_ID, RunJournal, RunRecord, parse_run, states_after
from ._named import Named
from ._scan import UNKEPT, Comparison, Knowledge, compared_entries, walk
from ._tree import TreeRecord, write_new

FOLDER = "journal"
DROPPED = ".dropped"  # `runs/<run id>.dropped`: a run the day's limit dropped, and why
MIB = 1024 * 1024
_DAY = 24 * 3600
_CHUNK = 1 << 20
# From this size, a shell run's prior content is copied by the kernel and hashed while the run
# works (`_parts`); a smaller one costs less stored whole at once than a thread to hash it.
_COPIED_SOON = 1 * MIB


def journal_root(workdir: Path | str, environ: Mapping[str, str] | None = None) -> Path:
    """The journal folder of the workspace `workdir` in the state folder."""
    project = hashlib.sha256(os.fsencode(os.path.realpath(workdir))).hexdigest()[:16]
    return store_path(environ).parent / FOLDER / project




class Journal:
    """The journal of one workspace: its runs, their stored contents, rewinding one."""

    def __init__(self, workdir: Path | str, limits: RewindLimits = RewindLimits(),
                 environ: Mapping[str, str] | None = None) -> None:
        self.workdir = os.path.realpath(workdir)
        self.root = journal_root(self.workdir, environ)
        self._environ = environ
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
        self._for = threading.local()  # the run this thread stores for (`storing_for`)
        self._unsaid: list[dict[str, Any]] = []  # runs the day's limit dropped, not yet said by a run
        self._unsaid_lock = threading.Lock()
        self.packs = Packs(self.root)
        self.watch = True  # inotify where it can (a test turns it off to walk)
        self._knowledge: Knowledge | None = None
        self._knowledge_lock = threading.Lock()

    # -- recording -----------------------------------------------------------------------------

    def start_run(self, route: str, about: Mapping[str, Any] | None = None) -> "RunJournal":
        """`about`: where the run came from, as a person names it (see `RunRecord.about`)."""
        return RunJournal(self, route, about)

    def compared(self, run: RunJournal, skip: frozenset[str], named: Named | None = None) -> Comparison:
        """The workspace as a shell run of `run` starts, to compare with once it ends (`_scan`);
        `named`: what its script names as it writes (`_named`)."""
        return Comparison(self, run, skip, named)

    def knowledge(self) -> Knowledge:
        """What this journal knows of its workspace between runs (made at the first shell run)."""
        with self._knowledge_lock:
            if self._knowledge is None:
                self._knowledge = Knowledge(self, watch=self.watch)
            return self._knowledge

    def room_for_record(self, size: int) -> bool:
        """Whether the journal's record of the workspace (`_tree`, about `size` bytes) fits in
        the day's limit: it counts, as every byte the journal stores does (no run dropped for it)."""
        return self._room_for(size, drop=False)

    def relative(self, path: str | os.PathLike[str]) -> str | None:
        """`path` relative to the workspace when the journal records it, else None."""
        real = os.path.abspath(path)
        if not real.startswith(self.workdir + os.sep):
            return None
        return self.relative_name(real[len(self.workdir) + 1:])

    def relative_name(self, relative: str) -> str | None:
        """`relative` (a path inside the workspace) when the journal records it, else None."""
        return None if self.ignores.left_out(relative) else relative

    @property
    def limits(self) -> RewindLimits:
        return self._limits

    @limits.setter
    def limits(self, limits: RewindLimits) -> None:
        """`[rewind]` as the config says now; what is left out is decided again with it, and the
        workspace learnt again (from the tree on disk: what is kept stays kept)."""
        old = getattr(self, "_limits", None)
        self._limits = limits
        if old is not None and (old.ignore, old.default_ignores) == (limits.ignore, limits.default_ignores):
            return
        self.ignores = Ignores(self.workdir, limits, self._environ)
        knowledge, self._knowledge = getattr(self, "_knowledge", None), None
        if knowledge is not None:
            knowledge.write()
            knowledge.close()

    def _folder(self, name: str) -> Path:
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return folder

    @contextlib.contextmanager
    def storing_for(self, run_id: str) -> Iterator[None]:
        """What this thread stores within the block is for run `run_id`: a run the day's limit
        drops to make room is that run's to say (`take_dropped`)."""
        outer = getattr(self._for, "run", None)
        self._for.run = run_id
        try:
            yield
        finally:
            self._for.run = outer

    def take_dropped(self, run_id: str) -> list[dict[str, Any]]:
        """The runs dropped to make room for run `run_id`, and those dropped for no run (copies
        made after a run, for the next): said once, by the run that takes them."""
        with self._unsaid_lock:
            mine = [tomb for tomb in self._unsaid if tomb["by"] in (run_id, None)]
            self._unsaid = [tomb for tomb in self._unsaid if tomb["by"] not in (run_id, None)]
        return mine

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

    def store_bytes(self, data: bytes, *, drop: bool = True) -> str | None:
        """`data` stored by its hash (a small one in the packs, `_packs`); None when past the day's
        limit. `drop=False`: no older run is dropped to make room (a content kept on the chance a
        run changes its file, not one a run is about to change)."""
        digest = hashlib.sha256(data).hexdigest()
        if not self._holds(digest):
            if not self._room_for(len(data), drop=drop):
                return None
            if len(data) < _COPIED_SOON:
                self.packs.put(digest, data)
            else:
                _write_blob(self._folder("blobs"), digest, data)
        return self._kept(digest)

    def _holds(self, digest: str) -> bool:
        return self.packs.has(digest) or (self.root / "blobs" / digest).exists()

    def store(self, path: str, state: Mapping[str, Any], at: tuple[int, str] | None = None, *,
              drop: bool = True) -> tuple[str | None, str | None]:
        """The file's content stored by its hash: (hash, None), or (None, why it is not restorable).
        `at`: the file as (an open folder, its name there), opened without its path."""
        if state["type"] == "link":
            return None, "a symbolic link (its target is not recorded)"
        if state["type"] != "file":
            return None, "not a regular file"
        fd, why = self._opened(path, state, at)
        if fd is None:
            return None, why
        try:
            data = _small_content(fd, state["size"]) if state["size"] < _COPIED_SOON else None
            if data is None:
                return self._copied(fd)
            # Whole in memory: a content stored before (a file written again the same) is not
            # written again, where a copy made on the way was made only to be removed.
            digest = self.store_bytes(data, drop=drop)
            return (digest, None) if digest else (None, self._past_the_day())
        finally:
            os.close(fd)

    def copy_soon(self, path: str, state: Mapping[str, Any], *,
                  drop: bool = True) -> tuple[str | None, str | None] | Path:
        """As `store`, for a file a shell run is about to start with: a large one is only copied
        into a part of the store (returned), for a thread to hash while the run works and
        `file_part` to make a stored content of; a smaller one is stored now."""
        if state["type"] != "file" or state["size"] < _COPIED_SOON:
            return self.store(path, state, drop=drop)
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
        limit = self.limits.max_file_mb * MIB
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
        with self._knowledge_lock:
            knowledge, self._knowledge = self._knowledge, None
        if knowledge is not None:
            knowledge.close()
        self.packs.close()

    def _opened(self, path: str, state: Mapping[str, Any],
                at: tuple[int, str] | None = None) -> tuple[int | None, str | None]:
        """The file opened to be stored, or why it is not restorable."""
        if state["size"] > self.limits.max_file_mb * MIB:
            return None, f"larger than the {self.limits.max_file_mb} MiB limit ([rewind] max_file_mb)"
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            return (os.open(path, flags) if at is None else os.open(at[1], flags, dir_fd=at[0])), None
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

    def _room_for(self, size: int, drop: bool = True) -> bool:
        """Whether `size` more bytes fit in the day's limit, the oldest runs dropped to make room
        (unless not to `drop`)."""
        with self._lock:
            if not self._made_room(size, -math.inf if not drop else math.inf):
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
        budget = self.limits.max_day_mb * MIB
        if size > budget:
            return False
        used = self._used_today()
        while used + size > budget and self._drop_oldest(before):
            used = self._used_today(again=True)
        return used + size <= budget

    def _used_today(self, again: bool = False) -> int:
        """The bytes stored in the last day, whatever holds them (a run, the index of contents
        kept ahead of shell runs, the workspace's record for a dead run: `_scan`): read once (or
        `again`), then counted as contents are stored, each out of the count once a day old.
        (Summed again at each store, a day of many small files made each store slower than the
        last: 1,000 took 3.7 s, not 0.2.)"""
        if self._day is None or again:
            self._day = collections.deque(sorted(self._stored_today()))
            self._day_bytes = sum(size for _, size in self._day)
        cutoff = time.time() - _DAY
        while self._day and self._day[0][0] < cutoff:
            self._day_bytes -= self._day.popleft()[1]
        return self._day_bytes

    def _stored_today(self) -> list[tuple[float, int]]:
        """(time, bytes) of each content stored in the last day, and of the workspace's records."""
        cutoff = time.time() - _DAY
        day = [(when, size) for when, size in self.packs.stored_since(cutoff)]
        for folder in ("blobs", "tree"):
            try:
                names = os.listdir(self.root / folder)
            except FileNotFoundError:
                continue
            for name in names:
                with contextlib.suppress(OSError):
                    info = os.lstat(self.root / folder / name)
                    if info.st_mtime >= cutoff and (folder == "tree" or HASH.fullmatch(name)):
                        day.append((info.st_mtime, info.st_size))
        return day

    def _drop_oldest(self, before: float = math.inf) -> bool:
        """Remove the oldest ended run (begun `before`) and the contents no other run holds; False
        when none is left."""
        ended = [run for run in reversed(self.runs(settle=False)) if run.after is not None and run.time < before]
        if not ended:
            return False
        self._dropped_for_room(ended[0])
        return True

    def _dropped_for_room(self, run: RunRecord) -> None:
        """`run` dropped for the day's limit, never in silence: a record of it stays (`dropped_runs`,
        as long as runs are kept) and the run it made room for says so (`take_dropped`)."""
        tomb = {"run": run.id, "time": run.time, "route": run.route, "files": len(run.files()),
                "cells": len(run.cells), "dropped": time.time(), "by": getattr(self._for, "run", None),
                "why": f"the day's limit of {self.limits.max_day_mb} MiB ([rewind] max_day_mb)"}
        fd = os.open(self.root / "runs" / f"{run.id}{DROPPED}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, json.dumps(tomb).encode())
        finally:
            os.close(fd)
        self.drop(run.id)
        with self._unsaid_lock:
            self._unsaid.append(tomb)

    def dropped_runs(self) -> list[RunRecord]:
        """The runs the day's limit dropped (kept as long as runs are), newest first: no entries,
        their record in `dropped`."""
        try:
            names = [name for name in os.listdir(self.root / "runs") if name.endswith(DROPPED)]
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            tomb = self._tomb(name.removesuffix(DROPPED))
            if tomb is not None:
                found.append(RunRecord(tomb["run"], float(tomb["time"]), str(tomb["route"]), after={}, dropped=tomb))
        return sorted(found, key=lambda run: (run.time, run.id), reverse=True)

    def _tomb(self, run_id: str) -> dict[str, Any] | None:
        if not RUN_ID.fullmatch(run_id):
            return None
        try:
            tomb = json.loads((self.root / "runs" / f"{run_id}{DROPPED}").read_bytes())
            if tomb["run"] == run_id and isinstance(tomb["time"], (int, float)) and isinstance(tomb["route"], str):
                return tomb
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

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
            if name.endswith(".jsonl") and RUN_ID.fullmatch(run_id):
                with contextlib.suppress(RewindError):
                    found.append(self.run(run_id, settle=settle))
        return sorted(found, key=lambda run: (run.time, run.id), reverse=True)

    def run(self, run_id: str, *, settle: bool = True) -> RunRecord:
        """Run `run_id`; one whose process died before its end is settled first (`_settled`),
        unless `settle` is False: the journal's own keeping reads runs so, as settling may store a
        content, which takes the lock that keeping holds."""
        if not RUN_ID.fullmatch(run_id):
            raise RewindError(f"no run {run_id!r} in the journal (`toolkernel changes` lists them)")
        try:
            lines = (self.root / "runs" / f"{run_id}.jsonl").read_bytes().splitlines()
        except FileNotFoundError:
            tomb = self._tomb(run_id)
            if tomb is not None:
                by = f" to make room for run {tomb['by']}" if tomb.get("by") else ""
                raise RewindError(f"run {run_id} was dropped at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(tomb['dropped']))}"
                                  f"{by}: past {tomb['why']}. It can no longer be rewound") from None
            raise RewindError(f"no run {run_id} in the journal (`toolkernel changes` lists them)") from None
        try:
            run = parse_run(run_id, lines)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise RewindError(f"the journal's record of run {run_id} is damaged; nothing was restored") from None
        if settle and run.after is None and (run.scan or run.tree) is not None and not still_running(run.owner):
            return self._settled(run)
        return run

    def _settled(self, run: RunRecord) -> RunRecord:
        """A shell run whose process died before its end: what its commands changed, found now by
        comparing the workspace with the one stored as it started, and its end written. Another
        reader doing the same holds the file's lock: this one reads the run as it stands."""
        path = self.root / "runs" / f"{run.id}.jsonl"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return run
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            again = parse_run(run.id, path.read_bytes().splitlines())
            if again.after is not None:
                return again
            scan = self._scan_of(run)
            skip, known = set(scan["skip"]), {entry.path for entry in again.entries}
            files = self._with_parts(scan["files"], scan.get("parts", {}))
            now = {name: seen for name, seen in walk(self.workdir, self.ignores).items() if name not in skip}
            found = [e for e in compared_entries(files, now) if e.path not in known]
            lines = [entry.to_json() for entry in found]
            lines.append({"end": states_after([*again.entries, *found], self.workdir), "settled": time.time()})
            os.write(fd, b"".join(json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in lines))
            for part in scan.get("parts", {}).values():
                remove_part(self.root / "blobs", part)  # its content is stored, or the reason it is not
            return parse_run(run.id, path.read_bytes().splitlines())
        except (OSError, RewindError, ValueError, KeyError, TypeError, AttributeError):
            return run  # being settled by another reader, or a damaged scan: shown as not ended
        finally:
            os.close(fd)

    def _scan_of(self, run: RunRecord) -> dict[str, Any]:
        """The workspace as a shell run started: from the tree on disk (`_tree`), or the whole
        stored scan of a run from before issue 44."""
        if run.tree is not None:
            files = TreeRecord(self.root).load(run.tree["generation"], run.tree["offset"])
            for line in files.values():
                if not line[3] and not line[5]:
                    line[5] = UNKEPT
            return {"files": files, "skip": run.tree["skip"], "parts": run.tree["parts"]}
        return json.loads(self.blob(run.scan))

    def _with_parts(self, files: dict[str, list[Any]], parts: Mapping[str, str]) -> dict[str, list[Any]]:
        """A dead run's scan with each file it copied but had not stored yet as it started (its
        `parts`) made a stored content, or given the reason it cannot be (`_parts`)."""
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

    def blobs(self, digests: Iterable[str]) -> dict[str, bytes]:
        """Several stored contents, each checked (those in git read at once, `_git`)."""
        digests = list(digests)
        found: dict[str, bytes] = {}
        refs = [digest for digest in digests if _git.is_ref(digest)]
        if refs:
            for reference, data in _git.read(refs).items():
                if isinstance(data, str):
                    raise RewindError(f"the content {reference.split(':')[1][:12]} kept by git is {data}")
                found[reference] = data
            missing = [reference for reference in refs if reference not in found]
            if missing:
                raise RewindError(f"a damaged journal entry (a bad git reference {missing[0][:60]!r})")
        for digest in digests:
            if digest not in found:
                found[digest] = self.blob(digest)
        return found

    def blob(self, digest: str) -> bytes:
        """A stored content, checked against its hash (or its blob id, kept by git)."""
        if _git.is_ref(digest):
            return self.blobs([digest])[digest]
        if not isinstance(digest, str) or not HASH.fullmatch(digest):
            raise RewindError("a damaged journal entry (a bad content hash)")
        try:
            data = self._read_blob(digest)
        except OSError:
            raise RewindError(f"the stored content {digest[:12]} is missing from the journal") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise RewindError(f"the stored content {digest[:12]} is damaged (its hash does not match)")
        return data

    def _read_blob(self, digest: str) -> bytes:
        data = self.packs.get(digest)
        if data is not None:
            return data
        return (self.root / "blobs" / digest).read_bytes()

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
                if name.endswith(DROPPED) and os.lstat(self.root / "runs" / name).st_mtime < cutoff:
                    os.unlink(self.root / "runs" / name)
                elif name.endswith(".jsonl") and os.lstat(self.root / "runs" / name).st_mtime < cutoff:
                    old.append(name.removesuffix(".jsonl"))
        for run_id in old:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.root / "runs" / f"{run_id}.jsonl")
        if old:
            self._collect()
        return len(old)

    def _collect(self) -> None:
        """Remove the contents neither a run nor the workspace's index (`_scan`) holds."""
        runs = self.runs(settle=False)  # a dead run not settled yet holds its scan's contents and parts
        held = {(e.before or {}).get("hash") for run in runs for e in run.entries}
        held |= {cell.before for run in runs for cell in run.cells}
        held |= self._held_by_scans(runs)
        held |= self._indexed()
        with self._pins_lock:
            held |= set(self._pins)
        self.packs.remove(digest for digest in self.packs.hashes() if digest not in held)
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
        if not HASH.fullmatch(name) or name in held:
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
            if run.after is None and (run.scan or run.tree) is not None:
                if run.scan is not None:
                    held.add(run.scan)
                with contextlib.suppress(RewindError, OSError, ValueError, TypeError, AttributeError, KeyError):
                    scan = self._scan_of(run)
                    held |= {line[3] for line in scan["files"].values() if line[3]}
                    held |= {part for part in scan.get("parts", {}).values() if isinstance(part, str)}
        return held

    def _indexed(self) -> set[str]:
        """The contents kept ahead of the next shell run: this kernel's, and what the tree on disk
        names (another process's kernel keeps them too)."""
        if self._knowledge is not None:  # this kernel's, fresher than its tree on disk
            return self._knowledge.hashes()
        held: set[str] = set()
        tree = TreeRecord(self.root)
        latest = tree.latest()
        if latest is not None:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                held |= {line[3] for line in tree.load(*latest).values() if line[3]}
        return held


def _write_blob(blobs: Path, digest: str, data: bytes) -> None:
    """`data` stored as `blobs/<digest>` in one step: written to a part, then renamed (not
    fsynced: a content a crash cut short fails its hash when read back, a clear error)."""
    part = new_part(blobs)
    try:
        write_new(part, data)
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


def read_all(fd: int) -> bytes:
    parts = []
    while chunk := os.read(fd, _CHUNK * 8):
        parts.append(chunk)
    return b"".join(parts)

