"""Where a notebook lives, and how an edit or a cell's outputs reach it.

Three stores, one contract (`NotebookStore`):
- `FileStore`: a local .ipynb file (a notebook not paired through a server, or
  paired with a local kernel).
- `ContentsStore`: a notebook on a Jupyter Server without a collaboration
  extension, through the Contents API. The whole document is written back, so
  an edit is refused when anything in it changed since the read. A browser that
  has the notebook open keeps its own copy and saves it over the file, so an
  edit is refused while the notebook is open in a session, and an edit a later
  save overwrote is reported by the next call.
- `SharedStore` (in `_shared`): the live Y.js document of a Jupyter Server with
  jupyter-collaboration. Edits change only the cell they name, so a person's
  typing in other cells is never overwritten; an edit is refused when the named
  cell changed since the read (their typing in that cell included).

The stale check works on what the session last read (`record_read`), kept in
the session's state under the store's key.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

import nbformat
from nbformat import NotebookNode

from ..._errors import NotReadYet
from ..._tool import ToolInputError
from . import _document as doc
from ._connection import Execution

READS_KEY = "notebook_reads"


@dataclass(frozen=True)
class CellEdit:
    mode: str  # replace | insert | delete
    cell_id: str  # the cell replaced or deleted; for insert the cell to insert after ("" = at the top)
    cell: NotebookNode | None = None  # the new cell (replace, insert)


@dataclass(frozen=True)
class Read:
    """What the session saw: the whole document's digest and each cell's, and each code cell's
    source (a person asked to run a cell by its id is shown what the run checks it still is)."""

    digest: str
    cells: dict[str, str]
    sources: dict[str, str] = field(default_factory=dict)


def cell_source(cell: Any) -> str:
    source = cell.get("source", "")
    return source if isinstance(source, str) else "".join(source)


@dataclass
class Loaded:
    name: str
    nb: NotebookNode
    digest: str | None  # None: the notebook does not exist yet
    ids_added: bool = False
    overwritten: str | None = None  # what a save by someone else undid of this session's edits, said once

    def find(self, cell_id: str) -> int:
        return find_cell(self.nb.cells, cell_id, self.name)


def find_cell(cells: list[Any], cell_id: str, name: str) -> int:
    for index, cell in enumerate(cells):
        if cell.get("id") == cell_id:
            return index
    known = ", ".join(str(cell.get("id", "?")) for cell in cells[:20]) or "none"
    raise ToolInputError(f"{name} has no cell with id {cell_id!r} (ids: {known})")


def cell_digest(cell: Any) -> str:
    source = cell.get("source", "")
    text = source if isinstance(source, str) else "".join(source)
    return hashlib.sha256(f"{cell.get('cell_type')}\0{text}".encode()).hexdigest()


def notebook_digest(nb: Any) -> str:
    return hashlib.sha256(json.dumps(nb, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def apply_edit(cells: list[Any], edit: CellEdit, name: str) -> None:
    """Apply `edit` to a list of cells (nbformat nodes)."""
    if edit.mode == "insert":
        position = find_cell(cells, edit.cell_id, name) + 1 if edit.cell_id else 0
        cells.insert(position, edit.cell)
    elif edit.mode == "delete":
        del cells[find_cell(cells, edit.cell_id, name)]
    else:
        cells[find_cell(cells, edit.cell_id, name)] = edit.cell


def validated(nb: NotebookNode, name: str) -> NotebookNode:
    nb.nbformat, nb.nbformat_minor = 4, max(nb.get("nbformat_minor", 0), doc.NBFORMAT_MINOR_WITH_IDS)
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        raise ToolInputError(f"the edit would make {name} invalid: {exc.message}") from exc
    return nb


class NotebookStore(ABC):
    name: str  # the notebook as the caller named it
    key: str  # reads are recorded under this key

    def describe(self) -> str:
        return self.name

    @property
    def location(self) -> str:
        """The notebook's full path where it lives (on this machine, or on the server)."""
        return self.name

    @abstractmethod
    async def load(self, *, missing_ok: bool = False) -> Loaded: ...

    @abstractmethod
    async def edit(self, state: dict[str, Any], loaded: Loaded, edit: CellEdit) -> Loaded:
        """Refuse if what `edit` would overwrite changed since the session's read; apply it to the notebook
        (`loaded` is what the edit was built from); count what this session wrote as read."""

    @abstractmethod
    async def check_runnable(self, state: dict[str, Any], loaded: Loaded, cell_id: str) -> None:
        """Refuse to run a cell whose source the session has not seen as it is now."""

    async def output_changed(self, cell_id: str, execution: Execution) -> None:
        """Outputs arrived while the cell runs (a live document shows them at once)."""

    async def run_stopped(self, cell_id: str) -> None:
        """The run ended without a result (stopped, kernel lost): nothing is written."""

    @abstractmethod
    async def write_outputs(self, state: dict[str, Any], loaded: Loaded, cell_id: str,
                            execution: Execution) -> str:
        """Store the finished run's outputs in the cell; returns a note for the caller."""

    async def close(self) -> None:
        """Let go of the connection, if any."""

    # -- the stale check -----------------------------------------------------

    def record_read(self, state: dict[str, Any], loaded: Loaded) -> None:
        if loaded.digest is not None:
            cells = {str(cell.get("id")): cell_digest(cell) for cell in loaded.nb.cells}
            sources = {str(cell.get("id")): cell_source(cell) for cell in loaded.nb.cells
                       if cell.get("cell_type") == "code"}
            state.setdefault(READS_KEY, {})[self.key] = Read(loaded.digest, cells, sources)

    def last_read(self, state: dict[str, Any]) -> Read:
        seen = state.get(READS_KEY, {}).get(self.key)
        if seen is None:
            raise NotReadYet(f"{self.name} has not been read in this session; read it first "
                             f"({doc.read_hint(self.name)}) and then edit it", self.name)
        return seen

    def stale_error(self, what: str) -> ToolInputError:
        return ToolInputError(
            f"{what} changed since you last read it (someone may be editing it in JupyterLab); read it again "
            f"({doc.read_hint(self.name)}) before editing, so their work is not overwritten")


class WholeDocumentStore(NotebookStore):
    """A store written as a whole: any change since the read refuses the write."""

    @abstractmethod
    async def _write(self, nb: NotebookNode, expected: str | None) -> str:
        """Write the whole notebook over the one whose digest is `expected` (None: no notebook
        yet); returns the digest of what was written."""

    async def edit(self, state: dict[str, Any], loaded: Loaded, edit: CellEdit) -> Loaded:
        self.require_unchanged(state, loaded)
        apply_edit(loaded.nb.cells, edit, self.name)
        loaded.digest = await self._write(validated(loaded.nb, self.name), loaded.digest)
        loaded.ids_added = False
        self.record_read(state, loaded)
        return loaded

    def require_unchanged(self, state: dict[str, Any], loaded: Loaded) -> None:
        if loaded.digest is None:
            return  # a new notebook: nothing to overwrite
        if self.last_read(state).digest != loaded.digest:
            raise self.stale_error(self.name)

    async def check_runnable(self, state: dict[str, Any], loaded: Loaded, cell_id: str) -> None:
        self.require_unchanged(state, loaded)

    async def write_outputs(self, state: dict[str, Any], loaded: Loaded, cell_id: str,
                            execution: Execution) -> str:
        current = await self.load(missing_ok=True)
        if current.digest != loaded.digest:
            return f"[outputs NOT written: {self.name} changed while the cell ran; read it again]"
        cell = loaded.nb.cells[loaded.find(cell_id)]
        cell.outputs = execution.outputs
        cell.execution_count = execution.execution_count
        loaded.digest = await self._write(validated(loaded.nb, self.name), loaded.digest)
        self.record_read(state, loaded)
        return f"[cell {cell_id} ran as [{execution.execution_count}]; its outputs are written to {self.name}]"


class FileStore(WholeDocumentStore):
    def __init__(self, path: Path, name: str | None = None) -> None:
        self.path = path
        self.name = name or path.name
        self.key = str(path.resolve())

    @property
    def location(self) -> str:
        return str(self.path)

    async def load(self, *, missing_ok: bool = False) -> Loaded:
        notebook = doc.load(self.path, missing_ok=missing_ok)
        digest = notebook.fingerprint.sha256 if notebook.fingerprint else None
        return Loaded(self.path.name, notebook.nb, digest, notebook.ids_added)

    async def _write(self, nb: NotebookNode, expected: str | None) -> str:
        # `save` checks right before its rename that the file is still the one read.
        notebook = doc.NotebookFile(self.path, nb, doc.Fingerprint(expected, 0) if expected else None)
        doc.save(notebook)
        assert notebook.fingerprint is not None
        return notebook.fingerprint.sha256


LIVE_EDITS_NEED = ("live edits of a notebook someone has open need jupyter-collaboration on that server "
                   "(`pip install jupyter-collaboration`, then restart it), or the notebook closed there")


@dataclass
class ContentsStore(WholeDocumentStore):
    """A notebook on a Jupyter Server, through GET/PUT /api/contents/<path>."""

    api: Any  # _server.ServerApi
    path: str  # relative to the server's root
    name: str = ""
    key: str = field(init=False)
    # How many kernel channels this session itself holds open to a kernel (its pairing's): those
    # are no person's.
    own_channels: Callable[[str], int] = field(default=lambda kernel_id: 0, repr=False)
    # This session's edits since its last write, until a save by someone else is seen: the server's
    # modification time of that write, and each edited cell's digest (None: deleted).
    _written_at: str | None = field(default=None, init=False, repr=False)
    _edits: dict[str, str | None] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.name = self.name or self.path
        self.key = f"{self.api.base}#{self.path}"

    def describe(self) -> str:
        return f"{self.path} through the Contents API of {self.api.base}"

    async def load(self, *, missing_ok: bool = False) -> Loaded:
        model = await self._get()
        if model is None:
            if missing_ok:
                return Loaded(self.name, nbformat.v4.new_notebook(), None)
            raise ToolInputError(f"no notebook {self.path} under the root of the Jupyter Server at {self.api.base}")
        nb = nbformat.from_dict(model["content"])
        digest = notebook_digest(model["content"])
        ids_added = doc.give_cells_ids(nb, digest)
        return Loaded(self.name, nb, digest, ids_added, self._overwritten(model))

    async def _get(self) -> dict[str, Any] | None:
        return await self.api.request("GET", "api/contents", quote(self.path), missing_ok=True,
                                      params={"type": "notebook", "content": "1"})

    async def edit(self, state: dict[str, Any], loaded: Loaded, edit: CellEdit) -> Loaded:
        if loaded.overwritten:
            raise ToolInputError(f"{loaded.overwritten}; read it again ({doc.read_hint(self.name)}) before editing")
        loaded = await super().edit(state, loaded, edit)
        if edit.mode == "delete":
            self._edits[edit.cell_id] = None
        else:
            assert edit.cell is not None
            self._edits[str(edit.cell.id)] = cell_digest(edit.cell)
        return loaded

    async def check_runnable(self, state: dict[str, Any], loaded: Loaded, cell_id: str) -> None:
        if loaded.overwritten:
            raise ToolInputError(f"{loaded.overwritten}; read it again ({doc.read_hint(self.name)}) before running")
        await super().check_runnable(state, loaded, cell_id)
        await self.require_not_open()  # its outputs are written back when it ends

    async def _write(self, nb: NotebookNode, expected: str | None) -> str:
        await self.require_not_open()
        written = await self.api.request("PUT", "api/contents", quote(self.path),  # a name may hold `?` or `#`
                                         body={"type": "notebook", "format": "json", "content": nb})
        # The server normalises what it stores; its copy is what the next stale check compares with. If
        # someone saved in between (another modification time), nothing counts as read: fail closed.
        model = await self._get()
        self._written_at = (written or {}).get("last_modified")
        if model is None or model.get("last_modified") != self._written_at:
            return "changed-since-written"
        return notebook_digest(model["content"])

    # -- a browser's copy -----------------------------------------------------------

    async def require_not_open(self) -> None:
        """Refuse to write while someone has the notebook open: JupyterLab without collaboration shows
        its own copy, never this write, and its next save (or autosave) puts that copy back."""
        sessions = await self.api.request("GET", "api/sessions") or []
        for session in sessions:
            if _session_path(session) == self.path and self._someone_else_in(session):
                raise ToolInputError(
                    f"{self.path} is open in a session on the Jupyter Server at {self.api.base} (JupyterLab or "
                    f"another client), which keeps its own copy and would save it over this change, so nothing was "
                    f"written: {LIVE_EDITS_NEED}")

    def _someone_else_in(self, session: dict[str, Any]) -> bool:
        kernel = session.get("kernel") or {}
        connections = kernel.get("connections")
        if not isinstance(connections, int):
            return True  # the server does not say who is connected: fail closed
        return connections > self.own_channels(str(kernel.get("id")))

    async def overwritten_since_write(self) -> str | None:
        """What a save by someone else undid of this session's edits, asked of the server without
        loading the notebook unless it changed since this session's last write (said once)."""
        if self._written_at is None:
            return None
        model = await self.api.request("GET", "api/contents", quote(self.path), params={"content": "0"},
                                       missing_ok=True)
        if model is None or model.get("last_modified") == self._written_at:
            return None
        loaded = await self._get()
        return self._overwritten(loaded) if loaded is not None else None

    def _overwritten(self, model: dict[str, Any]) -> str | None:
        """Which of this session's edits a save by someone else undid, once, when the notebook changed
        since this session's last write."""
        if self._written_at is None or model.get("last_modified") == self._written_at:
            return None
        cells = {str(cell.get("id")): cell_digest(cell) for cell in model["content"].get("cells", [])}
        lost = sorted(cell_id for cell_id, digest in self._edits.items() if cells.get(cell_id) != digest)
        self._written_at, self._edits = None, {}
        if not lost:
            return None
        return (f"a later save of {self.path} on {self.api.base} (at {model.get('last_modified')}, from a copy "
                f"opened before this session's edit, such as JupyterLab's) overwrote this session's edit of "
                f"cell(s) {', '.join(lost)}: the notebook no longer holds it; make it again once the notebook is "
                f"closed there ({LIVE_EDITS_NEED})")


def _session_path(session: dict[str, Any]) -> str:
    path = session.get("path") or (session.get("notebook") or {}).get("path") or ""
    return posixpath.normpath(str(path).replace("\\", "/").lstrip("/"))
