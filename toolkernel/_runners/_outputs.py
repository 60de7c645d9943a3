"""Large outputs: the cell shows the beginning and the end, a file keeps it all.

Only what reaches the cell is cut. Inside the script a pipe (`tools x | jq`)
still gets the full result, because this sits at the end of the script's
stdout, not between commands. The file is kept 7 days (`_saved`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .._saved import omission_note, save

LIMIT = 50_000
HEAD = LIMIT // 2
TAIL = LIMIT // 2


class OutputLimiter:
    def __init__(self, workdir: Path, emit: Callable[[str], None]) -> None:
        self.workdir = workdir
        self.emit = emit
        self.parts: list[str] = []
        self.size = 0
        self.held: list[str] = []  # after the head, until we know whether to cut
        self.held_size = 0
        self.cutting = False

    def write(self, text: str) -> None:
        self.parts.append(text)
        head_room = HEAD - self.size
        self.size += len(text)
        if head_room > 0:
            self.emit(text[:head_room])
            text = text[head_room:]
        if text:
            self._hold(text)

    def _hold(self, text: str) -> None:
        self.held.append(text)
        self.held_size += len(text)
        if self.held_size > LIMIT - HEAD:
            self.cutting = True
        if self.cutting and self.held_size > 2 * TAIL:
            tail = "".join(self.held)[-TAIL:]
            self.held, self.held_size = [tail], len(tail)

    def text(self) -> str:
        return "".join(self.parts)

    def close(self, *, cut: bool = False) -> Path | None:
        """Emit what was held back; returns the file holding the output, if the cell shows only part.

        `cut`: the runner stopped the output at a hard cap, so the file holds only what came."""
        held = "".join(self.held)
        if not self.cutting:
            if held:
                self.emit(held)
            return None
        path = save(self.workdir, self.text())
        omitted = self.size - HEAD - TAIL
        what = (f"the output up to the cap ({self.size} characters; the rest is lost)" if cut
                else f"the whole output ({self.size} characters)")
        self.emit(omission_note(omitted, what, path))
        self.emit(held[-TAIL:])
        return path
