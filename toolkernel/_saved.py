"""Saved outputs: an output the cell or an agent sees only the ends of is kept whole
in `.toolkernel/outputs/`, and deleted after 7 days (seed 002's large-output rule).

Used for a script's large output (`_runners/_outputs.py`) and for a tool result
that is cut where it is made (web-fetch over 32 KB). Sizes count characters.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

OUTPUT_DIR = Path(".toolkernel") / "outputs"
KEEP_SECONDS = 7 * 24 * 3600


def save(workdir: Path, text: str, kind: str = "output") -> Path:
    """Write `text` to a new file under the outputs folder; returns its path relative to `workdir`."""
    from ._atomic import write_atomic

    relative = _new_name(kind)
    write_atomic(workdir / relative, text)
    return relative


def _new_name(kind: str, attempt: int = 0) -> Path:
    again = f"-{attempt}" if attempt else ""
    return OUTPUT_DIR / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 1_000_000:06d}{again}.txt"


class SavingStream:
    """An output written to its saved file as it arrives, so it is never held whole.

    The text goes to a hidden partial file that appears under its final name only at
    `finish()` (a reader never takes half an output for the whole). Writes go in slices:
    encoding one large string at once would hold a second whole copy as bytes.
    """

    SLICE = 1 << 20  # characters encoded at once

    def __init__(self, workdir: Path, kind: str = "output") -> None:
        (workdir / OUTPUT_DIR).mkdir(parents=True, exist_ok=True)
        for attempt in range(1000):
            # The clock names the file; two sessions saving in one microsecond take turns.
            self.relative = _new_name(kind, attempt)
            self.path = workdir / self.relative
            self.partial = self.path.with_name(f".{self.path.name}.partial")
            if self.path.exists():
                continue
            try:
                # newline="" keeps the text's own line ends; "replace" keeps a lone surrogate from ending the save
                self.file = open(self.partial, "x", encoding="utf-8", errors="replace", newline="")
                return
            except FileExistsError:
                continue
        raise FileExistsError(f"no free name for a saved output in {workdir / OUTPUT_DIR}")

    def write(self, text: str, start: int = 0) -> None:
        """Write `text` from position `start` on."""
        for at in range(start, len(text), self.SLICE):
            self.file.write(text[at:at + self.SLICE])

    def finish(self) -> Path:
        """Close the file under its final name; returns that name relative to the workdir."""
        self.file.close()
        os.replace(self.partial, self.path)
        return self.relative


def omission_note(omitted: int, what: str, path: Path) -> str:
    """The line between the head and the tail of a cut output."""
    return f"\n... [{omitted} characters omitted; {what} is in {path}] ...\n"


def head_and_tail(text: str, limit: int, workdir: Path, kind: str) -> str:
    """`text` itself when it is at most `limit` long; else its first and last `limit // 2`
    characters around a note naming the file that keeps it whole."""
    if len(text) <= limit:
        return text
    half = limit // 2
    path = save(workdir, text, kind)
    return (text[:half] + omission_note(len(text) - 2 * half, f"the whole of it ({len(text)} characters)", path)
            + text[-half:])


def remove_old(workdir: Path, *, now: float | None = None) -> int:
    """Delete saved outputs older than 7 days; returns how many went. One pass over one
    folder, cheap enough for every session start; anything odd is left alone."""
    cutoff = (time.time() if now is None else now) - KEEP_SECONDS
    removed = 0
    with contextlib.suppress(OSError), os.scandir(workdir / OUTPUT_DIR) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(entry.path)
                    removed += 1
    return removed
