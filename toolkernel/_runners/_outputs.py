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
        self.unsaved: str | None = None  # why the whole output could not be saved

    def write(self, text: str) -> None:
        # Positions, not slices, past the head: a chunk can be the whole output (execute_sync
        # hands one command's output at once), and a slice of it would be a second whole copy.
        start = max(0, min(len(text), HEAD - self.size))
        self.size += len(text)
        if start:
            shown = text[:start]
            self.head.append(shown)
            self.emit(shown)
        if start < len(text):
            self._hold(text, start)

    def _hold(self, text: str, start: int) -> None:
        if self.saving is not None:
            self.saving.write(text, start)
        elif self.held_size + len(text) - start > LIMIT - HEAD and self.unsaved is None:
            try:
                self.saving = SavingStream(self.workdir)
            except OSError as exc:  # a full disk, or a link where the outputs folder goes
                self.unsaved = str(exc)
            else:
                for part in (*self.head, *self.held):
                    self.saving.write(part)
                self.saving.write(text, start)
        self._keep_tail(text, start)

    def _keep_tail(self, text: str, start: int) -> None:
        if len(text) - start >= TAIL:
            self.held, self.held_size = [text[-TAIL:]], TAIL
            return
        self.held.append(text[start:])
        self.held_size += len(text) - start
        if (self.saving is not None or self.unsaved is not None) and self.held_size > 2 * TAIL:
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
        if self.unsaved is not None:  # what the cell shows is all there is (`text` too), and says so
            note = (f"\n... [{self.size - HEAD - TAIL} characters omitted; the whole output could not be"
                    f" saved: {self.unsaved}] ...\n")
            self.head.append(note)
            self.held = [held[-TAIL:]]
            self.emit(note)
            self.emit(self.held[0])
            return None
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
