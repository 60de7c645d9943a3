"""Large outputs: the cell shows the beginning and the end, a file keeps it all.

Only what reaches the cell is cut. Inside the script a pipe (`tools x | jq`)
still gets the full result, because this sits at the end of the script's
stdout, not between commands. The file is kept 7 days (`_saved`).

Memory stays proportional to what is shown, not to the output: once an output
passes LIMIT it goes to its saved file as it arrives, and only the head and the
last TAIL characters stay in memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .._saved import SavingStream, omission_note

LIMIT = 50_000
HEAD = LIMIT // 2
TAIL = LIMIT // 2


class OutputLimiter:
    def __init__(self, workdir: Path, emit: Callable[[str], None]) -> None:
        self.workdir = workdir
        self.emit = emit
        self.head: list[str] = []  # what was shown at once
        self.size = 0
        self.held: list[str] = []  # after the head: until we know whether to cut, then the tail
        self.held_size = 0
        self.saving: SavingStream | None = None  # the whole output, once it is cut
        self.saved: Path | None = None

    @property
    def cutting(self) -> bool:
        return self.saving is not None or self.saved is not None

    def write(self, text: str) -> None:
        head_room = HEAD - self.size
        self.size += len(text)
        if head_room > 0:
            shown = text[:head_room]
            self.head.append(shown)
            self.emit(shown)
            text = text[head_room:]
        if text:
            self._hold(text)

    def _hold(self, text: str) -> None:
        if self.saving is not None:
            self.saving.write(text)
        elif self.held_size + len(text) > LIMIT - HEAD:
            self._start_saving(text)
        self._keep_tail(text)

    def _start_saving(self, text: str) -> None:
        self.saving = SavingStream(self.workdir)
        for part in (*self.head, *self.held, text):
            self.saving.write(part)

    def _keep_tail(self, text: str) -> None:
        if len(text) >= TAIL and self.saving is not None:
            # A chunk can be the whole output (Bashkit hands one command's output at once):
            # only its end is kept, no joined copy of it is made.
            self.held, self.held_size = [text[-TAIL:]], TAIL
            return
        self.held.append(text)
        self.held_size += len(text)
        if self.saving is not None and self.held_size > 2 * TAIL:
            tail = "".join(self.held)[-TAIL:]
            self.held, self.held_size = [tail], len(tail)

    def text(self) -> str:
        """The whole output (read back from its file when it was saved)."""
        if self.saved is not None:
            return (self.workdir / self.saved).read_text(encoding="utf-8", errors="replace")
        return "".join((*self.head, *self.held))

    def close(self, *, cut: bool = False) -> Path | None:
        """Emit what was held back; returns the file holding the output, if the cell shows only part.

        `cut`: the runner stopped the output at a hard cap, so the file holds only what came."""
        held = "".join(self.held)
        if self.saving is None:
            if held:
                self.emit(held)
            return None
        self.saved, self.saving = self.saving.finish(), None
        omitted = self.size - HEAD - TAIL
        what = (f"the output up to the cap ({self.size} characters; the rest is lost)" if cut
                else f"the whole output ({self.size} characters)")
        self.emit(omission_note(omitted, what, self.saved))
        self.emit(held[-TAIL:])
        return self.saved
