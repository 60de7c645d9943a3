"""What one run records, and a run as read back from its file (issue 38).

A run's file (`runs/<run id>.jsonl` in the journal's folder, `_store`) is appended line by line,
each line whole before the change it announces: a head line (the run, its time, its route, the
process that runs it), then one line per file before its first change (`Entry`), a notebook
cell's source before and after (`CellEntry`), a shell run's stored workspace as it started
(`scan`), and an end line with each file's state after the run, which a rewind compares with the
file now to find files changed again since.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import secrets
import stat
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from .._errors import RewindError
from .._process import own_start

if TYPE_CHECKING:
    from ._store import Journal

KINDS = ("created", "changed", "deleted", "renamed")
RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6}")
HASH = re.compile(r"[0-9a-f]{64}")
_VERSION = 1


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
    folder: bool = False  # a folder the run made or removed (its files are entries of their own)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"path": self.path, "kind": self.kind, "before": self.before}
        if self.folder:
            body["folder"] = True
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
    scan: str | None = None  # the stored workspace as the run started (a shell run's, before issue 44)
    # The workspace as the run started, in the tree on disk: generation, offset, skip, parts (`_tree`).
    tree: Mapping[str, Any] | None = None
    settled: float | None = None  # when a reader ended the run its dead process left open
    owner: tuple[int, str | None] | None = None  # the pid that ran it, and that process's start
    cells: list[CellEntry] = field(default_factory=list)  # each cell once: first before, last after
    # A run the day's limit dropped: when, for which run, why (`Journal.dropped_runs`); no entries.
    dropped: Mapping[str, Any] | None = None
    # Where the run came from, for a person (a notebook cell: notebook, cell_id, count, first_line, who).
    about: dict[str, Any] = field(default_factory=dict)
    rewinds: list[str] = field(default_factory=list)  # the runs this one put back (a rewind's)

    def files(self) -> dict[str, Entry]:
        """The first entry of each path: the state before the run."""
        first: dict[str, Entry] = {}
        for entry in self.entries:
            first.setdefault(entry.path, entry)
        return first


def state_of(path: str, at: tuple[int, str] | None = None) -> dict[str, Any] | None:
    """size, mtime and mode of the file at `path` (not through a link), None when absent; `at`:
    the file as (an open folder, its name there), reached without its path."""
    try:
        info = os.lstat(path) if at is None else os.stat(at[1], dir_fd=at[0], follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "mode": stat.S_IMODE(info.st_mode),
            "type": "file" if stat.S_ISREG(info.st_mode) else "link" if stat.S_ISLNK(info.st_mode)
            else "folder" if stat.S_ISDIR(info.st_mode) else "other"}


def compared_state(entry: "Entry", path: str) -> dict[str, Any] | None:
    """What a rewind compares of `path` now with the run's end: a folder's being there, as a
    folder (its time moves with every file made in it), else the file's whole state."""
    now = state_of(path)
    if entry.folder and now is not None and now["type"] == "folder":
        return {"type": "folder"}
    return now


def _counted_files(tomb: Mapping[str, Any]) -> str:
    files = tomb.get("files", 0)
    return f"{files} file{'s' if files != 1 else ''}"


def parse_run(run_id: str, lines: list[bytes]) -> RunRecord:
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
            if not HASH.fullmatch(item["scan"]):
                raise ValueError("bad scan")
            run.scan = item["scan"]
            continue
        if "tree" in item:
            generation, offset = item["tree"]
            if not isinstance(generation, str) or not isinstance(offset, int):
                raise ValueError("bad tree")
            run.tree = {"generation": generation, "offset": offset, "skip": list(item.get("skip", [])),
                        "parts": dict(item.get("parts", {}))}
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
                                 item.get("not_restorable"), bool(item.get("after_the_fact")), bool(item.get("folder"))))
    if run.after is not None:
        run.entries = [_as_ended(e, run.after) for e in run.entries if not unchanged(e, run.after)]
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
        if not HASH.fullmatch(body["before"]):
            raise ValueError("bad cell entry")
        cells.setdefault(key, CellEntry(*key, before=body["before"]))
    elif key in cells:
        if not HASH.fullmatch(body["hash"]):
            raise ValueError("bad cell entry")
        cells[key] = dataclasses.replace(cells[key], after=body["hash"])


def _plain_relative(path: Any) -> bool:
    """A path below the workspace, as the journal writes them: a forged run file naming
    `../../.bashrc` or `/etc/x` must not lead a rewind outside."""
    if not isinstance(path, str) or not path or "\0" in path or path.startswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def unchanged(entry: Entry, after: Mapping[str, Any]) -> bool:
    """A file recorded before a change that did not happen (a refused edit), or created and gone again."""
    if entry.path not in after or entry.to is not None:
        return False
    now, before = after[entry.path], entry.before
    if before is None or now is None:
        return before is None and now is None
    if entry.folder:
        return now.get("type") == "folder"
    return all(before.get(key) == now.get(key) for key in ("size", "mtime_ns", "mode", "type"))


def states_after(entries: Iterable[Entry], workdir: str) -> dict[str, Any]:
    """Each file's state now, and where a renamed one went: what a later rewind compares with."""
    after: dict[str, Any] = {}
    for entry in entries:
        after[entry.path] = compared_state(entry, os.path.join(workdir, entry.path))
        if entry.to is not None:
            after.setdefault(entry.to, state_of(os.path.join(workdir, entry.to)))
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
        self.dropped: list[Mapping[str, Any]] = []  # runs the day's limit dropped for this one (`finish`)
        self.unrestorable: list[tuple[str, str]] = []  # (path, why) of what it changed, once finished

    @property
    def files(self) -> int:
        return len(self._seen) + len(self._cells)

    def before_cell(self, server: str, notebook: str, cell_id: str, source: str) -> None:
        """Record a notebook cell on a Jupyter Server before this run first changes its source."""
        key = (server, notebook, cell_id)
        with self._lock, self.journal.storing_for(self.id):
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
                      to: str | os.PathLike[str] | None = None, after_the_fact: bool = False,
                      at: tuple[int, str] | None = None) -> None:
        """Record `path` before this run first changes it (later changes in the run add nothing:
        a rewind goes back to the state before the run). `kind`: worked out when not given
        (created when the file is absent, else changed); `to`: where a rename takes it; `at`: the
        file read as (an open folder, its name there), not by its path (a rewind's own record)."""
        relative = self.journal.relative(path)
        if relative is None:
            return
        with self._lock, self.journal.storing_for(self.id):
            if relative in self._seen:
                return
            self._record(self._entry(relative, kind, to, after_the_fact, at))

    def written_by_a_call(self, path: str | os.PathLike[str]) -> bool:
        """Whether a tool call of this run recorded `path` before changing it (a script's own
        writes are found after the fact)."""
        relative = self.journal.relative(path)
        with self._lock:
            entry = self._seen.get(relative) if relative is not None else None
        return entry is not None and not entry.after_the_fact

    def _entry(self, relative: str, kind: str | None, to: Any, after_the_fact: bool,
               at: tuple[int, str] | None = None) -> Entry:
        full = os.path.join(self.journal.workdir, relative)
        state = state_of(full, at)
        if state is None:
            return Entry(relative, "created", None, after_the_fact=after_the_fact)
        digest, why = self.journal.store(full, state, at)
        before = {**state, "hash": digest}
        moved = self.journal.relative(to) if to is not None else None
        return Entry(relative, kind or "changed", before, moved, why, after_the_fact)

    def note_scan(self, before: Mapping[str, Any], skip: Iterable[str] = (),
                  parts: Mapping[str, str] | None = None) -> None:
        """The workspace as this shell run starts (see `compared_entries`), and the files its
        comparison leaves out, stored, so that a run whose process dies can still be compared with
        it. `parts`: the files whose content is copied but not yet stored (`_parts`), by the
        part that holds it, for a reader settling the run to store (kept until its end is written).
        Past the day's limit: not noted (a killed run then keeps only what its tools recorded)."""
        scan: dict[str, Any] = {"files": before, "skip": sorted(skip)}
        if parts:
            scan["parts"] = dict(parts)
        with self.journal.storing_for(self.id):
            digest = self.journal.store_bytes(json.dumps(scan, separators=(",", ":"), sort_keys=True).encode())
        if digest is None:
            return
        with self._lock:
            self._open()
            self._write({"scan": digest})

    def before_shell(self, script: str | None, skip: frozenset[str], *,
                     builtins_only: bool = False) -> Callable[[], None]:
        """A shell run is about to start: what it must find stored is stored (`_scan`), and the
        workspace as it starts noted. `builtins_only`: its commands are the shell's own (Bashkit),
        which write only what they name. Returns what records the run's own changes once its
        writers are done."""
        from ._named import Named, named

        said = named(script) if script is not None else None
        if said is not None and not builtins_only:  # a host program writes where it likes
            said = Named(said.paths, False, said.folders)
        with self.journal.storing_for(self.id):
            compared = self.journal.compared(self, skip, said)

        def recorded() -> None:
            with self.journal.storing_for(self.id):
                compared.record(self)

        return recorded

    def said(self) -> list[str]:
        """What the run's cell says about the journal once the run ended (see `_tool.Recorder`):
        the files it changed that cannot be put back, and why; each run the day's limit dropped to
        make room for it. Never in silence."""
        limit = self.journal.limits.max_day_mb
        by_reason: dict[str, list[str]] = {}
        for path, why in self.unrestorable:
            by_reason.setdefault(why, []).append(path)
        lines = []
        for why, paths in by_reason.items():
            shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
            lines.append(f"toolkernel: {len(paths)} file{'s' if len(paths) != 1 else ''} this run changed "
                         f"{'are' if len(paths) != 1 else 'is'} not restorable ({why}): {shown}\n")
        return lines + [f"toolkernel: the journal's limit of {limit} MiB a day ([rewind] max_day_mb) dropped run "
                f"{tomb['run']} ({tomb['route']}, {_counted_files(tomb)}, begun "
                f"{time.strftime('%H:%M:%S', time.localtime(tomb['time']))}) to make room for this run: it can no "
                "longer be rewound (`%tools changes` lists it as dropped)\n" for tomb in self.dropped]

    def note_tree(self, where: tuple[str, int] | None, skip: Iterable[str] = (),
                  parts: Mapping[str, str] | None = None) -> None:
        """The workspace as this shell run starts, as the tree on disk holds it (`_tree`: its
        generation and log length), the files its comparison leaves out, and the files whose
        content is copied but not yet stored (`_parts`), by part: so that a run whose process dies
        can still be compared, by the next reader. None: past the day's limit, not noted (a killed
        run then keeps only what its tools recorded)."""
        if where is None:
            return
        line: dict[str, Any] = {"tree": list(where), "skip": sorted(skip)}
        if parts:
            line["parts"] = dict(parts)
        with self._lock:
            self._open()
            self._write(line)

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
                    "pid": os.getpid(), "started": own_start()}
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
        self.dropped = self.journal.take_dropped(self.id)
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
        after = states_after(self._seen.values(), self.journal.workdir)
        self._write({"end": after})
        self.unrestorable = [(entry.path, entry.not_restorable) for entry in self._seen.values()
                             if entry.not_restorable and not unchanged(entry, after)]
        self._file.close()
        self._file = None
        cells = sum(after_cell not in (None, before) for before, after_cell in self._cells.values())
        return sum(not unchanged(entry, after) for entry in self._seen.values()) + cells

