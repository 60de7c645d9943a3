"""Rewinding a run: every file it changed put back as it was before it (issue 38)."""

from __future__ import annotations

import contextlib
import fnmatch
import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping

from .._atomic import write_at
from .._checked_open import LinkOnTheWay, folder_beneath, open_checked
from .._errors import RewindError, printable
from ._record import CellEntry, Entry, RunJournal, RunRecord, compared_state

if TYPE_CHECKING:
    from ._store import Journal

_NAMED = 20  # files a refusal names; the rest are counted


@dataclass(frozen=True)
class Rewound:
    run: str
    restored: tuple[str, ...]
    skipped: tuple[str, ...]  # not restorable, with the reason
    recorded_as: str | None  # the run that recorded the rewind itself
    failed: tuple[str, ...] = ()  # stopped as they were being put back, with the reason


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
    wanted = {p: e.before["hash"] for p, e in chosen.items() if _restorable(e) and e.before and not e.folder}
    stored = journal.blobs(wanted.values())
    contents = {p: stored[digest] for p, digest in wanted.items()}
    own = into or journal.start_run("rewind")
    restored, skipped, failed = [], [], []
    workspace = _Workspace(journal.workdir)
    folders = {relative: entry for relative, entry in chosen.items() if entry.folder}
    try:
        for relative, entry in sorted(folders.items(), key=lambda item: item[0].count("/")):
            if entry.before is not None:  # removed by the run: made again first, its files go in it
                _made_again(own, workspace, relative, entry, failed)
        for relative, entry in chosen.items():
            if entry.folder:
                continue
            if not _restorable(entry):
                skipped.append(f"{relative}: {entry.not_restorable}")
                continue
            try:
                _put_back(own, workspace, relative, entry, contents.get(relative))
            except LinkOnTheWay as exc:  # swapped in since the checks above: that file stops here
                failed.append(f"{relative}: {exc.strerror}")
                continue
            except OSError as exc:
                failed.append(f"{relative}: {exc.strerror or exc}")
                continue
            restored.append(relative)
        for relative, entry in sorted(folders.items(), key=lambda item: -item[0].count("/")):
            _folder_put_back(own, workspace, relative, entry, failed)
        restored += [relative for relative in folders if not any(line.startswith(f"{relative}: ") for line in failed)]
    finally:
        workspace.close()
    if restored:
        own.note_rewinds(run.id)
        os.sync()  # durable when it says so: once, not two fsyncs a file (1,000 files took seconds)
    if into is None:
        own.finish()
    return Rewound(run.id, tuple(restored), tuple(skipped), own.id if own.files else None, tuple(failed))


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
    return not entry.not_restorable and (entry.before is None or entry.folder or bool(entry.before.get("hash")))


def _refuse_changed_since(journal: Journal, run: RunRecord, chosen: Mapping[str, Entry]) -> None:
    if run.after is None:
        raise RewindError(f"run {run.id} did not end (it was killed or is still running): what it left "
                          "is unknown; `--force` restores anyway")
    moved = []
    for relative, entry in chosen.items():
        for name in (relative, entry.to) if entry.to else (relative,):
            if name in run.after and compared_state(entry, os.path.join(journal.workdir, name)) != run.after[name]:
                moved.append(name)
    if moved:
        shown = sorted(set(moved))
        names = ", ".join(printable(name) for name in shown[:_NAMED])
        names += f" and {len(shown) - _NAMED} more" if len(shown) > _NAMED else ""
        raise RewindError(f"changed since run {run.id}: {names}. Nothing was restored; `--force` restores "
                          "anyway (the newer content is recorded, so that rewind can be undone too)")


class _Workspace:
    """The workspace opened once for a rewind: every folder a file is put back in is reached from
    its descriptor, never by a path (`folder_beneath`: openat2 without links, or name by name
    without following one), so a folder swapped for a link after the checks, say to the person's
    home, stops that file with `LinkOnTheWay` instead of leading the write there. Each folder is
    swept of killed writers' leftover temporary files once (a sweep lists the folder: 1,000 files
    put back in one made 1,000,000 name matches, 1.3 s of a 3 s rewind)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.fd = open_checked(root, os.O_RDONLY | os.O_DIRECTORY)
        self.swept: set[str] = set()

    @contextlib.contextmanager
    def folder(self, relative: str, *, create: bool) -> Iterator[int]:
        fd = folder_beneath(self.fd, os.path.dirname(relative), create=create)
        try:
            yield fd
        finally:
            os.close(fd)

    def sweep(self, relative: str) -> bool:
        """Whether the folder of `relative` is still to be swept (then it counts as swept)."""
        folder = os.path.dirname(relative)
        if folder in self.swept:
            return False
        self.swept.add(folder)
        return True

    def close(self) -> None:
        os.close(self.fd)


def _made_again(own: RunJournal, workspace: _Workspace, relative: str, entry: Entry, failed: list[str]) -> None:
    """A folder the run removed, made again (its mode set once its files are back)."""
    try:
        os.close(folder_beneath(workspace.fd, relative, create=True))
    except OSError as exc:
        failed.append(f"{relative}: {exc.strerror or exc}")
        return
    own.record_known(Entry(relative, "created", None, folder=True))


def _folder_put_back(own: RunJournal, workspace: _Workspace, relative: str, entry: Entry, failed: list[str]) -> None:
    """After the files: a folder the run made removed when it is empty again (what another hand
    put in it stays, and the folder with it); one it removed given its mode bits again."""
    name = os.path.basename(relative)
    try:
        with workspace.folder(relative, create=False) as parent:
            if entry.before is None:
                try:
                    mode = stat.S_IMODE(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
                    os.rmdir(name, dir_fd=parent)
                    own.record_known(Entry(relative, "deleted", {"type": "folder", "mode": mode}, folder=True))
                except FileNotFoundError:
                    pass
                except OSError:
                    failed.append(f"{relative}: the folder the run made holds files the run did not make: kept")
                return
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            try:
                os.fchmod(fd, entry.before.get("mode", 0o755))
            finally:
                os.close(fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        failed.append(f"{relative}: {exc.strerror or exc}")


def _put_back(own: RunJournal, workspace: _Workspace, relative: str, entry: Entry, data: bytes | None) -> None:
    """One file as it was before the run: its content, mode bits and time (or gone, if the run
    made it), the name a rename gave it removed. Each step is recorded in `own` first."""
    if entry.to is not None:  # the renamed file's new name goes when the old one comes back
        with contextlib.suppress(FileNotFoundError), workspace.folder(entry.to, create=False) as folder:
            name = os.path.basename(entry.to)
            own.before_change(os.path.join(workspace.root, entry.to), "deleted", at=(folder, name))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=folder)
    full, name = os.path.join(workspace.root, relative), os.path.basename(relative)
    if entry.before is None:
        with contextlib.suppress(FileNotFoundError), workspace.folder(relative, create=False) as folder:
            own.before_change(full, at=(folder, name))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=folder)
        return
    with workspace.folder(relative, create=True) as folder:
        own.before_change(full, at=(folder, name))
        # Its time too: the file is as it was, and a rewind of an earlier run then finds it unchanged.
        mtime = entry.before.get("mtime_ns")
        write_at(folder, name, data or b"", mode=entry.before["mode"],
                 mtime_ns=mtime if isinstance(mtime, int) else None, sweep=workspace.sweep(relative))
