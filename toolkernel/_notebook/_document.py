"""A notebook file on disk: loading, the stale-write check, and saving.

Cell ids (nbformat 4.5) are the handle callers use. A notebook written before
4.5 has none, so ids are made up in memory; they are derived from the file's
hash and the cell's position, so the ids a caller saw in a read still name the
same cells in the edit that follows (the stale check guarantees the file is
byte-for-byte the one that was read). They reach the disk with the next write.

The stale check: an edit (or a run that writes outputs) is refused unless this
session has read the file and it is unchanged since — byte-identical, by
SHA-256. A notebook this session never read is refused too: whoever edits it
has not seen what they would overwrite.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode

from .._atomic import write_atomic
from .._tool import ToolInputError

READS_KEY = "notebook_reads"
NBFORMAT_MINOR_WITH_IDS = 5


@dataclass(frozen=True)
class Fingerprint:
    sha256: str
    mtime_ns: int


@dataclass
class NotebookFile:
    path: Path
    nb: NotebookNode
    fingerprint: Fingerprint | None  # None: the file does not exist yet
    ids_added: bool = False

    def find(self, cell_id: str) -> int:
        for index, cell in enumerate(self.nb.cells):
            if cell.get("id") == cell_id:
                return index
        known = ", ".join(cell.get("id", "?") for cell in self.nb.cells[:20]) or "none"
        raise ToolInputError(f"{self.path.name} has no cell with id {cell_id!r} (ids: {known})")


def load(path: Path, *, missing_ok: bool = False) -> NotebookFile:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if missing_ok:
            return NotebookFile(path, nbformat.v4.new_notebook(), None)
        raise ToolInputError(f"no notebook at {path}") from None
    except IsADirectoryError:
        raise ToolInputError(f"{path} is a directory, not a notebook") from None
    fingerprint = Fingerprint(hashlib.sha256(data).hexdigest(), path.stat().st_mtime_ns)
    nb = _parse(path, data)
    ids_added = _give_cells_ids(nb, fingerprint.sha256)
    return NotebookFile(path, nb, fingerprint, ids_added)


def _parse(path: Path, data: bytes) -> NotebookNode:
    try:
        # as_version=4 converts nbformat 3 notebooks; validation problems are warnings only.
        return nbformat.reads(data.decode("utf-8"), as_version=4)
    except (ValueError, UnicodeDecodeError, KeyError) as exc:
        raise ToolInputError(f"{path.name} is not a readable notebook: {exc}") from exc


def _give_cells_ids(nb: NotebookNode, file_hash: str) -> bool:
    missing = [i for i, cell in enumerate(nb.cells) if not cell.get("id")]
    for index in missing:
        nb.cells[index]["id"] = hashlib.sha256(f"{file_hash}:{index}".encode()).hexdigest()[:8]
    if nb.get("nbformat_minor", 0) < NBFORMAT_MINOR_WITH_IDS:
        nb.metadata.setdefault("orig_nbformat_minor", nb.get("nbformat_minor", 0))
        nb.nbformat_minor = NBFORMAT_MINOR_WITH_IDS
    return bool(missing)


def record_read(state: dict[str, Any], notebook: NotebookFile) -> None:
    if notebook.fingerprint is not None:
        state.setdefault(READS_KEY, {})[_key(notebook.path)] = notebook.fingerprint


def require_unchanged(state: dict[str, Any], notebook: NotebookFile) -> None:
    """Refuse to write over a notebook the caller has not seen as it is now."""
    if notebook.fingerprint is None:
        return  # a new notebook: nothing to overwrite
    seen = state.get(READS_KEY, {}).get(_key(notebook.path))
    name = notebook.path.name
    if seen is None:
        raise ToolInputError(
            f"{name} has not been read in this session; read it first "
            f"(tools notebook-read notebook_path={name}) and then edit it"
        )
    if seen.sha256 != notebook.fingerprint.sha256:
        raise ToolInputError(
            f"{name} changed on disk since you last read it (someone may have edited it in JupyterLab); "
            f"read it again (tools notebook-read notebook_path={name}) before editing, so their work is not overwritten"
        )


def is_unchanged_since(notebook: NotebookFile) -> bool:
    """Whether the file on disk is still the one `notebook` was loaded from."""
    try:
        data = notebook.path.read_bytes()
    except FileNotFoundError:
        return notebook.fingerprint is None
    return notebook.fingerprint is not None and hashlib.sha256(data).hexdigest() == notebook.fingerprint.sha256


def _require_still_on_disk(notebook: NotebookFile) -> None:
    if not is_unchanged_since(notebook):
        raise ToolInputError(
            f"{notebook.path.name} changed on disk while this edit was being saved (someone else saved it); "
            f"nothing was written. Read it again (tools notebook-read notebook_path={notebook.path.name}) and redo the edit"
        )


def save(state: dict[str, Any], notebook: NotebookFile) -> None:
    """Validate, write atomically, and count what was written as read."""
    nb = notebook.nb
    nb.nbformat, nb.nbformat_minor = 4, max(nb.get("nbformat_minor", 0), NBFORMAT_MINOR_WITH_IDS)
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        raise ToolInputError(f"the edit would make {notebook.path.name} invalid: {exc.message}") from exc
    data = (nbformat.writes(nb) + "\n").encode("utf-8")
    # Checked again right before the rename: a save from outside since the stale check is not lost.
    write_atomic(notebook.path, data, check=lambda: _require_still_on_disk(notebook))
    notebook.fingerprint = Fingerprint(hashlib.sha256(data).hexdigest(), notebook.path.stat().st_mtime_ns)
    notebook.ids_added = False
    record_read(state, notebook)


def _key(path: Path) -> str:
    return str(path.resolve())
