"""The workspace as the journal knows it, on disk (issue 44, item 1): what a reader compares the
workspace with to settle a shell run whose process died before the run's end.

Writing the whole workspace at each run cost 13.8 MB of JSON a run at 100,000 files. So it is
written whole once (a base: zlib-compressed JSON, `tree/<generation>.base`), then only what
moved, a line a run (`tree/<generation>.log`); a run's head names the generation and the log's
length as it started (`RunJournal.note_tree`), which is the workspace as it started. When the log
outgrows its base, a new generation is written whole; the one before is kept for a run that may
still name it, older ones go. Each line: [size, mtime_ns, mode, stored hash or None, kind, why
not stored or None, inode]. Every byte written here counts toward the day's limit.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
import zlib
from pathlib import Path
from typing import Any, Mapping

FOLDER = "tree"
_VERSION = 1
_SMALL_LOG = 1 << 20  # a log below this never makes a new generation


class TreeRecord:
    """One journal's record of its workspace: the newest generation, appended to."""

    def __init__(self, root: Path) -> None:
        self.folder = root / FOLDER
        self.generation: str | None = None
        self.offset = 0
        self._base_size = 0

    def write(self, lines: Mapping[str, list[Any]]) -> tuple[str, int]:
        """A new generation with `lines` whole; the older ones but the last go."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        generation = f"{time.time_ns():020d}-{secrets.token_hex(4)}"
        body = zlib.compress(json.dumps({"version": _VERSION, "files": lines}, separators=(",", ":")).encode(), 1)
        write_new(self.folder / f"{generation}.base", body)
        write_new(self.folder / f"{generation}.log", b"")
        previous, self.generation, self.offset, self._base_size = self.generation, generation, 0, len(body)
        self._remove_older_than(previous or generation)
        return generation, 0

    def append(self, delta: Mapping[str, list[Any] | None]) -> tuple[str, int] | None:
        """`delta` (a path's new line, or None: gone) added; None when a new generation is due."""
        if self.generation is None:
            return None
        if self.offset > max(_SMALL_LOG, self._base_size):
            return None
        line = json.dumps({"set": delta}, separators=(",", ":")).encode() + b"\n"
        fd = os.open(self.folder / f"{self.generation}.log", os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        self.offset += len(line)
        return self.generation, self.offset

    def latest(self) -> tuple[str, int] | None:
        """The newest generation on disk and its log's length (another process's, a kernel before)."""
        try:
            bases = sorted(name.removesuffix(".base") for name in os.listdir(self.folder) if name.endswith(".base"))
        except FileNotFoundError:
            return None
        for generation in reversed(bases):
            try:
                return generation, os.lstat(self.folder / f"{generation}.log").st_size
            except OSError:
                continue
        return None

    def adopt(self, generation: str, offset: int) -> None:
        """Go on appending to `generation` (found on disk, read up to `offset`)."""
        self.generation, self.offset = generation, offset
        with contextlib.suppress(OSError):
            self._base_size = os.lstat(self.folder / f"{generation}.base").st_size

    def load(self, generation: str, offset: int) -> dict[str, list[Any]]:
        """The workspace as generation `generation` held it with its log `offset` bytes long.
        Raises ValueError (or OSError) for a generation missing or damaged."""
        if not _plain(generation):
            raise ValueError("a bad generation")
        data = json.loads(zlib.decompress((self.folder / f"{generation}.base").read_bytes()))
        if data.get("version") != _VERSION or not isinstance(data.get("files"), dict):
            raise ValueError("not a base this journal wrote")
        files = data["files"]
        with open(self.folder / f"{generation}.log", "rb") as log:
            text = log.read(offset)
        for raw in text.splitlines():
            for path, line in json.loads(raw)["set"].items():
                if line is None:
                    files.pop(path, None)
                else:
                    files[path] = line
        return files

    def _remove_older_than(self, keep: str) -> None:
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return
        for name in names:
            generation = name.rpartition(".")[0]
            if generation < keep and generation != self.generation:
                with contextlib.suppress(OSError):
                    os.unlink(self.folder / name)


def _plain(generation: Any) -> bool:
    return isinstance(generation, str) and len(generation) == 29 and all(c.isalnum() or c == "-" for c in generation)


def write_new(path: Path, body: bytes) -> None:
    """`body` as the new file `path` (never one that is there, nor through a link)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
