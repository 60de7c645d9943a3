"""What a person or an agent reads of the journal: the runs, a file's diff, a rewind's outcome."""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

from .._errors import RewindError, printable
from ._record import Entry, RunRecord, state_of
from ._restore import Rewound, chosen_cells, leads_out
from ._store import MIB, read_all

if TYPE_CHECKING:
    from ._store import Journal


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
    if not run_id and not path_glob:  # a dropped run names no files: listed as dropped, among the rest
        runs = sorted([*runs, *journal.dropped_runs()], key=lambda run: (run.time, run.id), reverse=True)
    for run in runs:
        if path_glob:
            run.entries = [e for e in run.entries if fnmatch.fnmatch(e.path, path_glob)]
            run.cells = chosen_cells(run, [path_glob])
        if run.entries or run.cells or run.dropped:
            yield run



_DIFF_MAX = 1 * MIB  # each side of a diff: a larger file is summed up, not shown


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
        state_of(os.path.join(journal.workdir, now_name)) != run.after[now_name]
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
    if leads_out(journal, relative, None):
        return "(not shown: a folder on its way leads outside the workspace)\n"
    state = state_of(os.path.join(journal.workdir, relative))
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
        return _diff_side(read_all(fd))
    finally:
        os.close(fd)



def describe_runs(runs: Iterable[RunRecord], rewound: Mapping[str, str] | None = None) -> str:
    """`changes`: each run, newest first, where it came from, with its files and the kind of each
    change; `rewound`: the runs a later rewind put back (`rewound_by`), marked so; a run the day's
    limit dropped, as dropped."""
    lines = []
    for run in runs:
        ended_by = f"  (rewound by run {rewound[run.id]})" if rewound and run.id in rewound else ""
        files = run.files()
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.time))
        if run.dropped is not None:
            lines.append(f"run {run.id}  {when}  {run.route}  DROPPED {_dropped(run.dropped)}")
            continue
        ended = "" if run.after is not None else "  (did not end: killed or still running)"
        if run.settled is not None:
            ended = ("  (its process died before the end: what its commands changed was found at "
                     f"{time.strftime('%H:%M:%S', time.localtime(run.settled))})")
        folders = sum(entry.folder for entry in files.values())
        lines.append(f"run {run.id}  {when}  {run.route}  {_counted(len(files) - folders, len(run.cells), folders)}"
                     f"{ended}{ended_by}")
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
    said = f' "{printable(str(about["description"]))}"' if about.get("description") else ""
    return f"{where}{who}{said}{first}"


def _dropped(tomb) -> str:
    """When and why the day's limit dropped a run, for a listing."""
    by = f" to make room for run {tomb['by']}" if tomb.get("by") else ""
    count = _counted(int(tomb.get("files", 0)), int(tomb.get("cells", 0)))
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(tomb.get("dropped", 0))))
    return f"at {when}{by} (past {tomb.get('why', 'the day limit')}): its {count} can no longer be rewound"


def _counted(files: int, cells: int, folders: int = 0) -> str:
    said = [f"{n} {what}{'s' if n != 1 else ''}" for n, what in ((files, "file"), (folders, "folder"), (cells, "cell"))
            if n]
    return ", ".join(said) or "0 files"


def _describe_entry(entry: Entry) -> str:
    name = printable(entry.path) + ("/" if entry.folder else "") + (f" -> {printable(entry.to)}" if entry.to else "")
    notes = [note for note in ("after the fact" if entry.after_the_fact else "",
                               f"not restorable: {entry.not_restorable}" if entry.not_restorable else "") if note]
    return f"{entry.kind:<8}  {name}" + (f"  ({'; '.join(notes)})" if notes else "")


def describe_rewind(done: Rewound, undo: str = "rewind {run}") -> str:
    """What a rewind did; `undo`: the command that rewinds a run where this is read (`%tools rewind
    {run}` in a notebook, `toolkernel rewind {run}` in a terminal, `tools rewind run={run}` in a script)."""
    lines = [f"rewound run {done.run}: {len(done.restored)} file{'s' if len(done.restored) != 1 else ''} put back"]
    lines += [f"  {printable(name)}" for name in done.restored]
    lines += [f"  not restored: {printable(line)}" for line in done.skipped]
    lines += [f"  NOT restored, stopped: {printable(line)}" for line in done.failed]
    if done.recorded_as:
        lines.append(f"(recorded as run {done.recorded_as}: `{undo.format(run=done.recorded_as)}` undoes this)")
    return "\n".join(lines)
