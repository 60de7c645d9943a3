"""Who is editing which cell of a shared notebook, from the collaborative awareness.

jupyter-collaboration relays every client's awareness state to everyone in the
room. JupyterLab's editor puts the person's cursor there, while its editor has
the focus: `cursors`, a list of Y.js relative positions whose `type` is the id
of the shared text (a cell's source) the cursor is in. The extension
jupyterlab-notebook-awareness adds `activeCellId`. JupyterLab leaves the last
cursor in place when the person moves on, and sends nothing new while they type
at the end of a line, so a cell counts as being edited when someone's cursor is
in it AND, within the last `EDITING_WINDOW_SECONDS`, their awareness changed or
the cell's text changed by someone other than this session.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from pycrdt import Assoc, Awareness, Decoder, Doc, Map, StickyIndex, Text, create_awareness_message, read_message

EDITING_WINDOW_SECONDS = 20.0


@dataclass(frozen=True)
class Editor:
    name: str
    seconds_ago: float


class CellEditors:
    """The awareness states of a shared notebook's other clients, and when each last acted."""

    def __init__(self, doc: Doc) -> None:
        self.awareness = Awareness(doc)
        self._changed_at: dict[int, float] = {}  # client -> when its awareness last changed
        self._typed_at: dict[str, float] = {}  # cell id -> when its text last changed by others
        self.own_edit = False  # set while this session changes the document itself
        self.echoed = -1  # the newest clock of this session's own state the room sent back
        self.heard = asyncio.Event()  # set when an echo arrives (or the connection closes)
        self.awareness.observe(self._on_awareness)

    def apply(self, payload: bytes) -> None:
        """An awareness message from the room (without its message-type byte)."""
        update = read_message(payload)
        self._note_echo(update)
        self.awareness.apply_awareness_update(update, "room")

    def ping(self) -> tuple[bytes, int]:
        """An awareness message of this session's own (empty) state, and its clock. The room echoes
        it back after handling everything sent before it on the same connection: an acknowledgement.
        JupyterLab shows nothing for an empty state, and the room's autosave vote skips it."""
        self.awareness.set_local_state({})
        own = self.awareness.client_id
        return create_awareness_message(self.awareness.encode_awareness_update([own])), \
            self.awareness.meta[own]["clock"]

    def _note_echo(self, update: bytes) -> None:
        decoder = Decoder(update)
        for _ in range(decoder.read_var_uint()):
            client, clock = decoder.read_var_uint(), decoder.read_var_uint()
            decoder.read_var_string()
            if client == self.awareness.client_id:
                self.echoed = max(self.echoed, clock)
                self.heard.set()

    def _on_awareness(self, topic: str, changes: tuple[dict[str, list[int]], Any]) -> None:
        if topic != "change":  # "update" also fires for the 15-second renewals of an unchanged state
            return
        clients, _origin = changes
        now = time.monotonic()
        for client in clients["added"] + clients["updated"]:
            self._changed_at[client] = now
        for client in clients["removed"]:
            self._changed_at.pop(client, None)

    def text_changed(self, cell_id: str | None) -> None:
        if cell_id and not self.own_edit:
            self._typed_at[cell_id] = time.monotonic()

    def editing(self, ycell: Map) -> Editor | None:
        """Someone other than this session who is editing `ycell` now, if anyone."""
        cell_id = ycell.get("id")
        source = ycell.get("source")
        text_id = _text_id(source) if isinstance(source, Text) else None
        now = time.monotonic()
        typed = now - self._typed_at.get(cell_id, float("-inf"))
        for client, state in list(self.awareness.states.items()):
            if client == self.awareness.client_id or not state or not _points_into(state, text_id, cell_id):
                continue
            moved = now - self._changed_at.get(client, float("-inf"))
            last = min(moved, typed)
            if last <= EDITING_WINDOW_SECONDS:
                return Editor(_name(state), max(last, 0.0))
        return None


def _text_id(text: Text) -> dict[str, int] | None:
    # A position before the first character is stored against the text itself: its id is what
    # Y.js writes as `type` in every relative position inside that text.
    return StickyIndex.new(text, 0, Assoc.BEFORE).to_json().get("type")


def _points_into(state: dict[str, Any], text_id: dict[str, int] | None, cell_id: str | None) -> bool:
    if cell_id is not None and state.get("activeCellId") == cell_id:
        return True
    if text_id is None:
        return False
    for cursor in state.get("cursors") or []:
        for end in ("anchor", "head"):
            position = cursor.get(end) if isinstance(cursor, dict) else None
            if isinstance(position, dict) and _same_id(position.get("type"), text_id):
                return True
    return False


def _same_id(found: Any, wanted: dict[str, int]) -> bool:
    return isinstance(found, dict) and found.get("client") == wanted.get("client") \
        and found.get("clock") == wanted.get("clock")


def _name(state: dict[str, Any]) -> str:
    user = state.get("user") if isinstance(state.get("user"), dict) else {}
    return str(user.get("display_name") or user.get("name") or user.get("username") or "someone")
