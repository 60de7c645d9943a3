"""The live shared document of a notebook on a Jupyter Server with jupyter-collaboration.

The Y.js document is held with `pycrdt` (its sync protocol runs in
`pycrdt.Provider`) and read and changed through `jupyter_ydoc.YNotebook`, the
model jupyter-collaboration itself uses. Everyone with the notebook open sees
each change at once, and the server saves the document to the file.

An edit touches only the cell it names, inside one transaction, after checking
that this cell is still what the session read and that nobody is editing it
now (`_editors`: the collaborative awareness): a person's typing in that cell
refuses the edit, their typing in any other cell is merged untouched. An edit
counts as made once the room has acknowledged it.

A dropped connection (the server restarted, the network cut) is opened again
by the next call, on a fresh copy of the document: the room may have been made
anew, with a history of its own that an old copy would be merged into twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any, Callable
from urllib.parse import quote, urlencode

import nbformat
import websockets
from jupyter_ydoc import YNotebook
from nbformat import NotebookNode
from pycrdt import Array, Doc, Map, Provider, Text, YMessageType, YSyncMessageType, create_update_message
from websockets.asyncio.client import ClientConnection

from ..._errors import Unavailable
from ..._tool import ToolInputError
from ._connection import Execution, ack_at_once
from ._editors import CellEditors, Editor
from ._stores import (CellEdit, Loaded, NotebookStore, Read, cell_digest, cell_source, find_cell, notebook_digest,
                      validated)

SYNC_TIMEOUT_SECONDS = 30.0
ACK_TIMEOUT_SECONDS = 30.0  # an unanswered ping means the connection is gone, even if it looks open
CLOSE_TIMEOUT_SECONDS = 2.0  # a dropped connection is not waited on for its closing handshake
HEARD_RECENTLY_SECONDS = 1.0  # a connection that spoke this recently is taken as open without a ping


class _WebsocketChannel:
    """A websocket as the `pycrdt.Channel` the provider syncs through. The provider only speaks
    the sync protocol: awareness messages go to `editors` instead.

    `synced` is set as the room's answer to the provider's first sync message (its SYNC_STEP2)
    goes to the provider, which applies it before it next waits, so before anyone woken by the
    event runs: the document then holds the room's content (pycrdt's own `Provider.synced`
    came only with 0.14.10, and jupyter-collaboration 4 runs on 0.12 and 0.13)."""

    def __init__(self, ws: ClientConnection, path: str, editors: CellEditors | None = None) -> None:
        self._ws = ws
        self._path = path
        self._editors = editors
        self._socket = ws.transport.get_extra_info("socket")
        self.closed = False
        self.heard_at = time.monotonic()  # when the room last sent anything
        self.synced = asyncio.Event()

    @property
    def path(self) -> str:
        return self._path

    def __aiter__(self) -> _WebsocketChannel:
        return self

    async def __anext__(self) -> bytes:
        try:
            while True:
                message = await self.recv()
                if message[:2] == bytes([YMessageType.SYNC, YSyncMessageType.SYNC_STEP2]):
                    self.synced.set()
                if message[:1] != bytes([YMessageType.AWARENESS]) or self._editors is None:
                    return message
                self._editors.apply(message[1:])
        except websockets.ConnectionClosed:
            self.closed = True
            if self._editors is not None:
                self._editors.heard.set()  # a wait for an echo ends now
            raise StopAsyncIteration from None

    async def send(self, message: bytes) -> None:
        try:
            await self._ws.send(message)
        except websockets.ConnectionClosed:
            self.closed = True
            raise

    async def recv(self) -> bytes:
        message = await self._ws.recv()
        ack_at_once(self._socket)  # the room's small frames would otherwise wait 40 ms each (see ack_at_once)
        self.heard_at = time.monotonic()
        return message.encode() if isinstance(message, str) else message


class SharedStore(NotebookStore):
    def __init__(self, api: Any, path: str, file_id: str, session_id: str) -> None:
        self.api = api
        self.path = self.name = path
        self.key = f"{api.base}#{path}"
        self._room = f"json:notebook:{file_id}"
        self._session_id = session_id
        self._ws: ClientConnection | None = None
        self._channel: _WebsocketChannel | None = None
        self._provider: Provider | None = None
        self._task: asyncio.Task[None] | None = None
        self._fresh_document()

    def _fresh_document(self) -> None:
        self._ynb = YNotebook(Doc())
        self.editors = CellEditors(self._ynb.ydoc)
        self._watch = self._ynb.ycells.observe_deep(self._on_cells_changed)

    def _on_cells_changed(self, events: list[Any]) -> None:
        for event in events:
            path = getattr(event, "path", None) or []
            if len(path) == 2 and path[1] == "source":
                self.editors.text_changed(self._ynb.ycells[path[0]].get("id"))

    def describe(self) -> str:
        return f"{self.path} in the shared document (jupyter-collaboration) of {self.api.base}"

    async def open(self) -> None:
        url = self.api.ws_url("api/collaboration/room", quote(self._room, safe=":"),
                              query=urlencode({"sessionId": self._session_id}))
        try:
            self._ws = await websockets.connect(url, additional_headers=self.api.auth_headers(), max_size=None,
                                                open_timeout=SYNC_TIMEOUT_SECONDS, close_timeout=CLOSE_TIMEOUT_SECONDS)
        except (OSError, websockets.WebSocketException, asyncio.TimeoutError) as exc:
            raise Unavailable(f"could not open the shared document of {self.path} on {self.api.base}: "
                              f"{type(exc).__name__}", retryable=True) from exc
        self._channel = _WebsocketChannel(self._ws, self._room, self.editors)
        self._provider = Provider(self._ynb.ydoc, self._channel)
        self._task = asyncio.create_task(self._provider.start())
        try:
            await asyncio.wait_for(self._channel.synced.wait(), SYNC_TIMEOUT_SECONDS)
        except asyncio.TimeoutError:
            await self.close()
            raise Unavailable(f"the shared document of {self.path} on {self.api.base} did not sync",
                              retryable=True) from None

    async def close(self) -> None:
        if self._provider is not None and self._task is not None and not self._task.done():
            await asyncio.sleep(0.2)  # let the last updates leave (the provider sends them from its own task)
            await self._provider.stop()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._ws is not None:
            await self._ws.close()
        self._provider = self._task = self._ws = self._channel = None

    def _connected(self) -> bool:
        return self._task is not None and not self._task.done() and self._channel is not None \
            and not self._channel.closed

    async def _ensure_open(self, *, ping: bool = False) -> None:
        """Open the connection again when it dropped, on a fresh copy of the room's document. A
        connection cut without a word from the other side looks open until something is sent over
        it: a ping tells (before a read only when the room has been quiet for a moment)."""
        if self._connected():
            assert self._channel is not None
            if not ping and time.monotonic() - self._channel.heard_at < HEARD_RECENTLY_SECONDS:
                return
            message, clock = self.editors.ping()
            if await self._sent_and_echoed([message], clock):
                return
        await self.close()
        session = await self.api.request("PUT", "api/collaboration/session", quote(self.path),
                                          body={"format": "json", "type": "notebook"}, missing_ok=True)
        if session is None:
            raise Unavailable(f"the Jupyter Server at {self.api.base} no longer offers a shared document for "
                              f"{self.path}; pair the notebook again", retryable=True)
        self._room, self._session_id = f"json:notebook:{session['fileId']}", session["sessionId"]
        self._fresh_document()
        await self.open()

    async def _commit(self, change: Callable[[], object]) -> None:
        """Make `change` (a function that checks and changes the document) in one transaction, and
        wait until the room acknowledges it: an edit that may not have reached the server is an error."""
        await self._ensure_open(ping=True)  # a change is not made into a connection that is already gone
        before = self._ynb.ydoc.get_state()
        self.editors.own_edit = True
        try:
            with self._ynb.ydoc.transaction():
                change()
        finally:
            self.editors.own_edit = False
        await self._acknowledged(self._ynb.ydoc.get_update(before))

    async def _acknowledged(self, update: bytes) -> None:
        # Sent here as well as by the provider (Y.js merges a repeated update), so that the awareness
        # ping follows it on the same connection: the ping's echo proves the room applied it.
        ping, clock = self.editors.ping()
        if not await self._sent_and_echoed([create_update_message(update), ping], clock):
            await self.close()
            raise Unavailable(
                f"the connection to the shared document of {self.path} on {self.api.base} dropped before the "
                f"server confirmed the change, so it may not have been made; read the notebook again (the next "
                f"call reconnects)", retryable=True)

    async def _sent_and_echoed(self, messages: list[bytes], clock: int) -> bool:
        assert self._ws is not None and self._channel is not None
        deadline = time.monotonic() + ACK_TIMEOUT_SECONDS
        try:
            for message in messages:
                await self._ws.send(message)
        except websockets.ConnectionClosed:
            return False
        while self.editors.echoed < clock:
            remaining = deadline - time.monotonic()
            if self._channel.closed or remaining <= 0:
                return False
            self.editors.heard.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.editors.heard.wait(), min(remaining, 0.5))
        return True

    # -- reading -------------------------------------------------------------

    async def load(self, *, missing_ok: bool = False) -> Loaded:
        await self._ensure_open()
        content = self._ynb.get()
        for cell, ycell in zip(content["cells"], self._ynb.ycells):
            # jupyter_ydoc leaves ids out for notebooks older than nbformat 4.5; the shared cells have them.
            cell.setdefault("id", ycell.get("id"))
        return Loaded(self.name, nbformat.from_dict(content), notebook_digest(content))

    # -- editing: one cell, one transaction ------------------------------------

    async def edit(self, state: dict[str, Any], loaded: Loaded, edit: CellEdit) -> Loaded:
        seen = self.last_read(state)

        def change() -> None:
            cells = self._ynb.ycells
            if edit.mode == "insert":
                position = find_cell(cells, edit.cell_id, self.name) + 1 if edit.cell_id else 0
                cells.insert(position, self._ynb.create_ycell(validated_cell(edit.cell, self.name)))
                return
            index = find_cell(cells, edit.cell_id, self.name)
            self._require_cell_untouched(seen, cells[index], edit.cell_id)
            if edit.mode == "delete":
                del cells[index]
            else:
                self._replace(index, edit.cell)

        await self._commit(change)
        self._note_edit(seen, edit)
        return await self.load()

    def _replace(self, index: int, cell: NotebookNode) -> None:
        ycell = self._ynb.ycells[index]
        if ycell.get("cell_type") != cell.cell_type:
            self._ynb.set_cell(index, validated_cell(cell, self.name))
            return
        # The same cell object stays: its text changes by the difference only, metadata stays.
        _set_source(ycell, cell.source)
        if cell.cell_type == "code":
            _set_outputs(ycell, [], None)

    def _require_cell_untouched(self, seen: Read, ycell: Map, cell_id: str) -> None:
        """Refuse when the cell changed since the read, or someone is editing it right now (their
        cursor is in it, and they typed or moved it a moment ago) even if its text is still the same."""
        if seen.cells.get(cell_id) != cell_digest(ycell.to_py()):
            raise self.stale_error(f"cell {cell_id} of {self.name}")
        editor = self.editors.editing(ycell)
        if editor is not None:
            raise _being_edited(editor, cell_id, self.name)

    def _note_edit(self, seen: Read, edit: CellEdit) -> None:
        """The cells this session wrote count as read; cells others changed do not."""
        if edit.mode == "delete":
            seen.cells.pop(edit.cell_id, None)
            seen.sources.pop(edit.cell_id, None)
        else:
            assert edit.cell is not None
            seen.cells[str(edit.cell.id)] = cell_digest(edit.cell)
            seen.sources.pop(str(edit.cell.id), None)
            if edit.cell.cell_type == "code":
                seen.sources[str(edit.cell.id)] = cell_source(edit.cell)

    # -- running: outputs appear live ---------------------------------------------

    async def check_runnable(self, state: dict[str, Any], loaded: Loaded, cell_id: str) -> None:
        seen = self.last_read(state)

        def start() -> None:
            cells = self._ynb.ycells
            self._require_cell_untouched(seen, cells[find_cell(cells, cell_id, self.name)], cell_id)
            self._set_cell_outputs(cell_id, [], None, "running")

        await self._commit(start)

    async def output_changed(self, cell_id: str, execution: Execution) -> None:
        # No count while it runs: JupyterLab takes a count for the end of the run and shows `[2]:`
        # instead of `[*]:`, as it shows for a person's cell; the count comes with the last write.
        self._set_cell_outputs(cell_id, execution.outputs, None, "running")

    async def run_stopped(self, cell_id: str) -> None:
        with contextlib.suppress(Exception):  # the outputs so far stay; the cell no longer shows [*]
            self._set_execution_state(cell_id, "idle")

    async def write_outputs(self, state: dict[str, Any], loaded: Loaded, cell_id: str,
                            execution: Execution) -> str:
        written: list[bool] = []
        await self._commit(lambda: written.append(
            self._set_cell_outputs(cell_id, execution.outputs, execution.execution_count, "idle")))
        if not written[0]:
            return f"[outputs NOT written: cell {cell_id} was deleted from {self.name} while it ran]"
        return (f"[cell {cell_id} ran as [{execution.execution_count}]; its outputs are in the shared document "
                f"of {self.name}]")

    def _set_cell_outputs(self, cell_id: str, outputs: list[NotebookNode], count: int | None, state: str) -> bool:
        ycell = self._live_cell(cell_id)
        if ycell is None:
            return False
        with self._ynb.ydoc.transaction():
            _set_outputs(ycell, outputs, count)
            ycell["execution_state"] = state
        return True

    def _set_execution_state(self, cell_id: str, state: str) -> None:
        ycell = self._live_cell(cell_id)
        if ycell is not None:
            ycell["execution_state"] = state

    def _live_cell(self, cell_id: str) -> Map | None:
        cells = self._ynb.ycells
        try:
            return cells[find_cell(cells, cell_id, self.name)]
        except ToolInputError:
            return None  # deleted by someone while it ran


def _being_edited(editor: Editor, cell_id: str, name: str) -> ToolInputError:
    return ToolInputError(
        f"{editor.name} is editing cell {cell_id} of {name} right now (their cursor is in it; they last typed or "
        f"moved it {editor.seconds_ago:.0f} s ago), so it was not changed. Edit another cell, or try again once "
        f"they have left it (read it again first)")


def _set_source(ycell: Map, source: str) -> None:
    """Make the cell's shared text `source` by replacing only the part between the first and the
    last character that differ, so that the text object stays and a person's cursor or typing
    outside that part survives (as jupyter-ydoc 4.2's `set_cell(index, source=...)` does; the 3.x
    that jupyter-collaboration 4 runs on has no such way). pycrdt counts a text's offsets in UTF-8 bytes."""
    text = ycell["source"]
    old = str(text)
    if old == source:
        return
    shorter = min(len(old), len(source))
    head = 0
    while head < shorter and old[head] == source[head]:
        head += 1
    tail = 0
    while tail < shorter - head and old[len(old) - 1 - tail] == source[len(source) - 1 - tail]:
        tail += 1
    start, end = len(old[:head].encode()), len(old[:len(old) - tail].encode())
    if end > start:
        del text[start:end]
    if new := source[head:len(source) - tail]:
        text.insert(start, new)


def _set_outputs(ycell: Map, outputs: list[NotebookNode], count: int | None) -> None:
    youtputs = ycell.get("outputs")
    if not isinstance(youtputs, Array):
        youtputs = ycell["outputs"] = Array()
    youtputs.clear()
    youtputs.extend([_youtput(output) for output in outputs])
    ycell["execution_count"] = count


def _youtput(output: NotebookNode) -> Map:
    # jupyter_ydoc keeps stream text as shared text and everything else as plain values.
    value = json.loads(json.dumps(output))  # plain values, no NotebookNode
    if value.get("output_type") == "stream":
        value["text"] = Text("".join(value.get("text", "")))
    return Map(value)


def validated_cell(cell: NotebookNode | None, name: str) -> dict[str, Any]:
    assert cell is not None
    nb = nbformat.v4.new_notebook(cells=[cell])
    return dict(validated(nb, name).cells[0])


async def open_shared(api: Any, path: str) -> SharedStore | None:
    """The shared document of `path`, or None when the server has no collaboration extension."""
    session = await api.request("PUT", "api/collaboration/session", quote(path),
                                body={"format": "json", "type": "notebook"}, missing_ok=True)
    if session is None:
        return None
    store = SharedStore(api, path, session["fileId"], session["sessionId"])
    await store.open()
    return store
