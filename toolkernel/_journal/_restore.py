"""Rewinding a run: every file it changed put back as it was before it (issue 38)."""

from __future__ import annotations

import contextlib
import fnmatch
import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from .._atomic import write_atomic
from .._errors import RewindError, printable
from ._record import CellEntry, Entry, RunJournal, RunRecord, state_of

if TYPE_CHECKING:
    from ._store import Journal

_NAMED = 20  # files a refusal names; the rest are counted


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
               for why in [leads_out(journal, p, e.to) or (refuse(p) if refuse else None)] if why]
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


def leads_out(journal: Journal, relative: str, to: str | None) -> str | None:
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
            if name in run.after and state_of(os.path.join(journal.workdir, name)) != run.after[name]:
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
