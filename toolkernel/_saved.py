"""Saved outputs: an output the cell or an agent sees only the ends of is kept whole
in `.toolkernel/outputs/`, and deleted after 7 days (seed 002's large-output rule).

Used for a script's large output (`_runners/_outputs.py`) and for a tool result
that is cut where it is made (web-fetch over 32 KB). Sizes count characters.

The folder is opened name by name without following links (`open_folder_below`): a
cloned repository may hold a link where it goes, and the week-old clean-up would
otherwise delete files wherever that link points.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path

from ._checked_open import named_in, open_folder_below

OUTPUT_DIR = Path(".toolkernel") / "outputs"
KEEP_SECONDS = 7 * 24 * 3600


def save(workdir: Path, text: str, kind: str = "output") -> Path:
    """Write `text` to a new file under the outputs folder; returns its path relative to `workdir`."""
    from ._atomic import write_atomic

    root = os.path.realpath(workdir)
    os.close(_outputs_folder(root))  # made, and no link on the way
    relative = _new_name(kind)
    # The real path as it is named: the write opens its folder as checked, so a link put
    # there since is refused, not followed.
    write_atomic(os.path.join(root, relative), text, resolved=True)
    return relative


def _outputs_folder(root: str, create: bool = True) -> int:
    return open_folder_below(root, OUTPUT_DIR, create=create, mode=0o700)


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
        self._folder = _outputs_folder(os.path.realpath(workdir))
        try:
            self.relative, self.path, self.partial, self.file = self._open_new(workdir, kind)
        except BaseException:
            os.close(self._folder)
            raise

    def _open_new(self, workdir: Path, kind: str):
        for attempt in range(1000):
            # The clock names the file; two sessions saving in one microsecond take turns.
            relative = _new_name(kind, attempt)
            partial = f".{relative.name}.partial"
            if named_in(self._folder, relative.name):
                continue
            try:
                fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o666, dir_fd=self._folder)
            except FileExistsError:
                continue
            # newline="" keeps the text's own line ends; "replace" keeps a lone surrogate from ending the save
            file = open(fd, "w", encoding="utf-8", errors="replace", newline="")
            path = workdir / relative
            return relative, path, path.with_name(partial), file
        raise FileExistsError(f"no free name for a saved output in {workdir / OUTPUT_DIR}")

    def write(self, text: str, start: int = 0) -> None:
        """Write `text` from position `start` on."""
        for at in range(start, len(text), self.SLICE):
            self.file.write(text[at:at + self.SLICE])

    def finish(self) -> Path:
        """Close the file under its final name; returns that name relative to the workdir."""
        try:
            self.file.close()
            os.replace(self.partial.name, self.path.name, src_dir_fd=self._folder, dst_dir_fd=self._folder)
        finally:
            os.close(self._folder)
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
    folder, cheap enough for every session start; anything odd is left alone (a link where
    the folder goes, too: nothing is deleted through it)."""
    cutoff = (time.time() if now is None else now) - KEEP_SECONDS
    try:
        folder = _outputs_folder(os.path.realpath(workdir), create=False)
    except OSError:
        return 0
    removed = 0
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(info.st_mode) and info.st_mtime < cutoff:
                        os.unlink(entry.name, dir_fd=folder)
                        removed += 1
    except OSError:
        pass
    finally:
        os.close(folder)
    return removed
