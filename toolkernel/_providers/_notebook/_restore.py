"""Notebook cells changed through a Jupyter Server: recorded in the run's journal, and put back
through the same server's document (issue 38 items 1 and 3).

`notebook-edit` on a served notebook records the cell's source as the server gives it, before the
edit, and its source after. A rewind finds the server among the session's pairings, checks each
cell still holds what the run left (else it names the cell and touches nothing), and puts the old
source back as an ordinary one-cell edit of the live document: a person with the notebook open
in collaborative Lab sees it, and their other cells are untouched.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..._errors import CallError, printable
from ..._journal import CellEntry, Journal, RewindError, Rewound, RunJournal, chosen_files, rewind, source_hash
from ..._tool import ToolInputError
from ._pairing import pairings
from ._stores import CellEdit, Loaded, NotebookStore, cell_source


def served(store: NotebookStore) -> tuple[str, str] | None:
    """(server, path on it) of a notebook reached through a Jupyter Server, else None."""
    api, path = getattr(store, "api", None), getattr(store, "path", None)
    return (api.base, path) if api is not None and isinstance(path, str) else None


def record_before(journal: RunJournal | None, store: NotebookStore, loaded: Loaded, edit: CellEdit) -> None:
    """A replaced cell of a served notebook, as it is before the edit."""
    where = served(store)
    if journal is not None and where is not None and edit.mode == "replace":
        old = loaded.nb.cells[loaded.find(edit.cell_id)]
        journal.before_cell(*where, edit.cell_id, cell_source(old))


def record_after(journal: RunJournal | None, store: NotebookStore, loaded: Loaded, edit: CellEdit) -> None:
    where = served(store)
    if journal is not None and where is not None and edit.mode == "replace":
        journal.after_cell(*where, edit.cell_id, cell_source(loaded.nb.cells[loaded.find(edit.cell_id)]))


@dataclass
class _Target:
    cell: CellEntry
    store: NotebookStore
    source: str  # the source before the run


async def check_cells(state: dict[str, Any], journal: Journal, run_id: str, cells: list[CellEntry],
                      force: bool) -> list[_Target]:
    """Each cell ready to put back; a RewindError naming every one that is not (nothing touched)."""
    targets, refused, changed = [], [], []
    for cell in cells:
        pairing = next((p for p in pairings(state) if p.api is not None and p.api.base == cell.server), None)
        if pairing is None:
            refused.append(f"{printable(cell.name)}: this session is not paired with the Jupyter Server at "
                           f"{printable(cell.server)}")
            continue
        store = await pairing.document(cell.notebook)
        loaded = await store.load()
        try:
            now = cell_source(loaded.nb.cells[loaded.find(cell.cell_id)])
        except ToolInputError:
            refused.append(f"{printable(cell.name)}: the cell is no longer in the notebook")
            continue
        if not force and source_hash(now) != cell.after:
            changed.append(printable(cell.name))
        targets.append(_Target(cell, store, journal.blob(cell.before).decode()))
    if refused:
        raise RewindError("nothing was restored: " + "; ".join(refused))
    if changed:
        raise RewindError(f"changed since run {run_id}: {', '.join(changed)}. Nothing was restored; `--force` "
                          "restores anyway (the newer content is recorded, so that rewind can be undone too)")
    return targets


async def put_back(targets: list[_Target], own: RunJournal) -> list[str]:
    """Each cell's old source, as a one-cell edit of the server's document (recorded in `own`).
    A server that fails between two cells cannot be undone as one: the error names the cells
    put back (recorded, so a rewind of `own` undoes them) and the ones not."""
    done: list[str] = []
    for target in targets:
        try:
            await _put_back_one(target, own)
        except (CallError, ToolInputError) as exc:
            rest = [printable(t.cell.name) for t in targets[len(done):]]
            put = f"put back: {', '.join(printable(name) for name in done)}; " if done else "nothing was put back; "
            raise RewindError(f"{put}not put back: {', '.join(rest)} ({exc}); the ones put back are recorded as "
                              f"run {own.id}") from exc
        done.append(target.cell.name)
    return done


async def _put_back_one(target: _Target, own: RunJournal) -> None:
    loaded = await target.store.load()
    cell = copy.deepcopy(loaded.nb.cells[loaded.find(target.cell.cell_id)])
    cell.source = target.source
    scratch: dict[str, Any] = {}  # read just now: the store's own checks still refuse a cell being typed in
    target.store.record_read(scratch, loaded)
    edit = CellEdit("replace", target.cell.cell_id, cell)
    record_before(own, target.store, loaded, edit)
    record_after(own, target.store, await target.store.edit(scratch, loaded, edit), edit)


async def rewind_with_cells(state: dict[str, Any], journal: Journal, run_id: str, cells: list[CellEntry], *,
                            force: bool, paths: Iterable[str], into: RunJournal | None,
                            refuse: Callable[[str], str | None] | None = None) -> Rewound:
    """A run that changed cells through a Jupyter Server put back: every cell checked first
    (through the session's pairings in `state`), then the files (which checks them and may still
    refuse), then the cells through the server's document. Recorded `into` the caller's run, or
    as a run of its own."""
    paths = tuple(paths)
    targets = await check_cells(state, journal, run_id, cells, force)
    own = into or journal.start_run("rewind")
    done = Rewound(run_id, (), (), None)
    try:
        if chosen_files(journal.run(run_id), paths):
            done = rewind(journal, run_id, force=force, paths=paths, into=own, refuse=refuse,
                          cells_put_back_by_caller=True)
        restored = await put_back(targets, own)
        if restored and not done.restored:  # the files' rewind notes it when it put any back
            own.note_rewinds(run_id)
    finally:
        if into is None:
            own.finish()
    return Rewound(run_id, done.restored + tuple(restored), done.skipped, own.id if own.files else None)
