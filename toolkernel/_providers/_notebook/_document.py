"""A notebook file on disk: loading, the stale-write check, and saving.

Cell ids (nbformat 4.5) are the handle callers use. A notebook written before
4.5 has none, so ids are made up in memory; they are derived from the file's
hash and the cell's position, so the ids a caller saw in a read still name the
same cells in the edit that follows (the stale check guarantees the file is
byte-for-byte the one that was read). They reach the disk with the next write.

The SHA-256 of the bytes is the fingerprint the stale check (in `_stores`)
compares: a write is refused unless the file is byte-identical to the one read.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from ..._atomic import write_atomic
from ..._checked_open import NotAFile, PathChanged, file_checked
from ..._tool import ToolInputError

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


def load(path: Path, *, missing_ok: bool = False) -> NotebookFile:
    """The notebook at `path`, a real path (the one the dispatcher checked): opened as it is,
    never through a link that a folder on the way became since (see `_checked_open`)."""
    try:
        data, mtime_ns = _read(path)
    except FileNotFoundError:
        if missing_ok:
            return NotebookFile(path, nbformat.v4.new_notebook(), None)
        raise ToolInputError(f"no notebook at {path}") from None
    except IsADirectoryError:
        raise ToolInputError(f"{path} is a directory, not a notebook") from None
    except NotAFile:
        raise ToolInputError(f"{path} is not a regular file (a pipe, device or socket), not a notebook") from None
    except PathChanged:
        raise ToolInputError(f"{path} changed while it was being opened (a folder on the way was replaced); "
                             "nothing was read or changed") from None
    fingerprint = Fingerprint(hashlib.sha256(data).hexdigest(), mtime_ns)
    nb = _parse(path, data)
    ids_added = give_cells_ids(nb, fingerprint.sha256)
    return NotebookFile(path, nb, fingerprint, ids_added)


def _read(path: Path) -> tuple[bytes, int]:
    """The bytes of the file at the real path `path`, and its modification time, from one open file."""
    file, _ = file_checked(str(path))
    with file:
        return file.readall(), os.fstat(file.fileno()).st_mtime_ns


def _parse(path: Path, data: bytes) -> NotebookNode:
    try:
        # as_version=4 converts nbformat 3 notebooks; validation problems are warnings only.
        return nbformat.reads(data.decode("utf-8"), as_version=4)
    except (ValueError, UnicodeDecodeError, KeyError) as exc:
        raise ToolInputError(f"{path.name} is not a readable notebook: {exc}") from exc


def give_cells_ids(nb: NotebookNode, file_hash: str) -> bool:
    missing = [i for i, cell in enumerate(nb.cells) if not cell.get("id")]
    for index in missing:
        nb.cells[index]["id"] = hashlib.sha256(f"{file_hash}:{index}".encode()).hexdigest()[:8]
    if nb.get("nbformat_minor", 0) < NBFORMAT_MINOR_WITH_IDS:
        nb.metadata.setdefault("orig_nbformat_minor", nb.get("nbformat_minor", 0))
        nb.nbformat_minor = NBFORMAT_MINOR_WITH_IDS
    return bool(missing)


def is_unchanged_since(notebook: NotebookFile, path: Path | None = None) -> bool:
    """Whether the file on disk (at `path`, default the notebook's) is still the one
    `notebook` was loaded from."""
    return _verified_identity(notebook, path or notebook.path) is not _CHANGED


_CHANGED = object()


def _verified_identity(notebook: NotebookFile, path: Path) -> object:
    """The (inode, size, mtime) of the file at `path` when its bytes are the ones
    `notebook` was loaded from (None when both are absent); else `_CHANGED`. The
    identity and the bytes come from one open file, so they belong together."""
    try:
        file, _ = file_checked(str(path))
        with file:
            info = os.fstat(file.fileno())
            data = file.readall()
    except FileNotFoundError:
        return None if notebook.fingerprint is None else _CHANGED
    if notebook.fingerprint is None or hashlib.sha256(data).hexdigest() != notebook.fingerprint.sha256:
        return _CHANGED
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def read_hint(name: str) -> str:
    """How to read a notebook again, in words for both routes: `serve` lists the tool as
    `notebook_read`, and `tools` takes that name too (hyphens and underscores fold alike)."""
    return f"notebook_read with notebook_path={name}"


class _SaveGuard:
    """The checks of one save: right before the swap, the file must still be the one read;
    right after it, what the swap took out must be that file. The second check compares
    the identity the first one saw, a stat instead of a read and a hash, so the moment in
    which an outside save is out of place (and put back) stays short for big notebooks."""

    def __init__(self, notebook: NotebookFile) -> None:
        self.notebook = notebook
        self.identity: object = _CHANGED

    def still_on_disk(self) -> None:
        self.identity = _verified_identity(self.notebook, self.notebook.path)
        if self.identity is _CHANGED:
            raise ToolInputError(
                f"{self.notebook.path.name} changed on disk while this edit was being saved (someone else saved"
                f" it); nothing was written. Read it again ({read_hint(self.notebook.path.name)}) and redo the edit"
            )

    def replaces(self, swapped_out: Path) -> bool:
        info = os.lstat(swapped_out)
        if self.identity not in (None, _CHANGED) and self.identity == (info.st_ino, info.st_size, info.st_mtime_ns):
            return True
        return is_unchanged_since(self.notebook, swapped_out)


def save(notebook: NotebookFile) -> None:
    """Write atomically (validated by the caller); the fingerprint becomes the written file's."""
    data = (nbformat.writes(notebook.nb) + "\n").encode("utf-8")
    # Checked again right before the rename: a save from outside since the stale check is not lost.
    guard = _SaveGuard(notebook)
    try:
        # Into the very folder that was checked: a folder on the way that is a link now fails the write.
        write_atomic(notebook.path, data, check=guard.still_on_disk, replaces=guard.replaces, resolved=True)
    except (PathChanged, NotAFile):
        raise ToolInputError(f"{notebook.path} changed while it was being written (a folder on the way was "
                             "replaced, or the notebook is no regular file now); nothing was written") from None
    notebook.fingerprint = Fingerprint(hashlib.sha256(data).hexdigest(), notebook.path.stat().st_mtime_ns)
    notebook.ids_added = False
