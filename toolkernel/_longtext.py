"""Text too long to hold in memory: kept in a file as it arrived, read back in pieces.

An MCP server's tool result is one JSON line on its stdout. Read whole, 8 MB of text
peaked at 10x its size in the kernel: the Python SDK sends a text twice (as text and
as `{"result": text}`), the line was held, then decoded to a str, then parsed into
both strings. A long line's long strings now go to an unnamed temporary file as the
line arrives (`_providers._mcp._spool`), each one a `LongText`, and the text reaches the
script from that file a piece at a time (`LongText.pieces`). `LongText` is not a str
on purpose: code that needs the whole text says so (`str(text)`, `whole(text)`), and
code that forgets fails loudly instead of holding the copy it was meant to avoid.

Long structured content is kept the same way, as the indented JSON `tools` prints
(`LongJSON`, written by `_providers._mcp._long_json`): the script reads its text in pieces,
and who needs Python values asks for them (`LongJSON.parsed`).
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Iterator

_HIGH_SURROGATES = ("\ud800", "\udbff")


class Spool:
    """An unnamed temporary file (gone with its last reader), written once, then read by offset."""

    def __init__(self) -> None:
        import tempfile  # here, not at toolkernel's import: only a long reply needs it (5 ms)

        self._file = tempfile.TemporaryFile(buffering=0)  # O_TMPFILE where there is one; mode 0600
        self.size = 0

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._file.fileno(), view):]
        self.size += len(data)

    def truncate(self, size: int) -> None:
        """Drop what was written after `size` (a long string sent twice is kept once)."""
        os.ftruncate(self._file.fileno(), size)
        os.lseek(self._file.fileno(), size, os.SEEK_SET)
        self.size = size

    def read(self, start: int, count: int) -> bytes:
        return os.pread(self._file.fileno(), count, start)

    def mapped(self) -> Any:
        """The file mapped read-only (an `mmap`: it holds its own descriptor; not empty)."""
        import mmap

        return mmap.mmap(self._file.fileno(), self.size, access=mmap.ACCESS_READ)

    def close(self) -> None:
        self._file.close()


class LongText:
    """The text of a JSON string whose body (escaped UTF-8, as sent) lies in `spool` from
    `start` to `end`, and `suffix` after it. Checked when made: a body that is not a valid
    JSON string raises ValueError then, not later in a reader's hands."""

    PIECE = 1 << 18  # bytes of the file decoded at once
    prefix = ""  # before the text: its wrapper's start (`nested`)
    _indent = ""  # after each newline of a written text nested in a wrapper
    _newlines = 0  # of a written text
    _written = False  # plain UTF-8 the kernel wrote itself (`written`), not a body as sent

    def __init__(self, spool: Spool, start: int, end: int, suffix: str = "") -> None:
        self._spool, self._start, self._end, self.suffix = spool, start, end, suffix
        chars, last = 0, ""
        for piece in self._decoded():
            chars += len(piece)
            last = piece[-1]
        self._chars, self._last = chars, last

    @classmethod
    def written(cls, spool: Spool, start: int, end: int, chars: int, newlines: int, last: str) -> LongText:
        """Plain UTF-8 that the kernel wrote to `spool` itself (indented JSON, `_providers._mcp._long_json`):
        `chars` characters, `newlines` of them newlines, ending in `last`. Not checked again."""
        text = cls.__new__(cls)
        text._spool, text._start, text._end, text.suffix = spool, start, end, ""
        text._chars, text._newlines, text._last, text._written = chars, newlines, last, True
        return text

    def nested(self, prefix: str, indent: str, suffix: str) -> LongText:
        """A written text inside a wrapper: `prefix` before it, `indent` after each of its
        newlines, `suffix` after it (a JSON value, as the value of an object's one key)."""
        assert self._written and not self.prefix and not self._indent and not self.suffix
        twin = copy.copy(self)
        twin.prefix, twin._indent, twin.suffix = prefix, indent, suffix
        return twin

    def __len__(self) -> int:
        return len(self.prefix) + self._chars + self._newlines * len(self._indent) + len(self.suffix)

    def __str__(self) -> str:
        return "".join(self.pieces())

    def __repr__(self) -> str:
        return f"<LongText of {len(self):,} characters>"

    def endswith(self, suffix: str) -> bool:
        """For one character or none: what `result_text` asks."""
        assert len(suffix) <= 1
        return not suffix or (self.suffix or self._last).endswith(suffix)

    def with_suffix(self, suffix: str) -> LongText:
        """The same text with `suffix` after it (nothing is read again)."""
        twin = copy.copy(self)
        twin.suffix = self.suffix + suffix
        return twin

    def pieces(self) -> Iterator[str]:
        """The text in order, in pieces of at most about `PIECE` characters."""
        if self.prefix:
            yield self.prefix
        if self._indent:
            indented = "\n" + self._indent
            for piece in self._decoded():
                yield piece.replace("\n", indented)
        else:
            yield from self._decoded()
        if self.suffix:
            yield self.suffix

    def _next_piece(self, at: int, end: int) -> tuple[bytes, int]:
        """The bytes from `at`, and how many of them decode as a whole (more is read when a
        piece held nothing but the start of an escape or a character)."""
        size = self.PIECE
        while True:
            raw = self._spool.read(at, min(size, end - at))
            if not raw:
                raise ValueError("the spooled text ended early")
            cut = len(raw) if at + len(raw) >= end else _utf8_cut(raw) if self._written else _safe_cut(raw)
            if cut:
                return raw, cut
            size *= 2

    def _decoded(self) -> Iterator[str]:
        if self._written:
            yield from self._utf8()
            return
        at, end = self._start, self._end
        held = ""  # a high surrogate whose low half comes with the next piece
        while at < end:
            raw, cut = self._next_piece(at, end)
            text = json.loads(b'"' + raw[:cut] + b'"')
            at += cut
            if held:
                text = _paired(held, text)
            held = ""
            if at < end and text and _HIGH_SURROGATES[0] <= text[-1] <= _HIGH_SURROGATES[1]:
                held, text = text[-1], text[:-1]
            if text:
                yield text
        if held:
            yield held


    def _utf8(self) -> Iterator[str]:
        at, end = self._start, self._end
        while at < end:
            raw, cut = self._next_piece(at, end)
            at += cut
            yield raw[:cut].decode()

class LongJSON:
    """Structured content (a JSON object) too long to hold as Python values: its indented JSON,
    as `_command._render.to_json` writes it, in a file (`_providers._mcp._long_json` writes it as the
    reply is parsed), made Python values only when asked (`parsed`). `wrapped`: the object is
    `{"result": X}` and the file holds X, ready to be shown alone (an SDK's wrapper)."""

    def __init__(self, text: LongText, wrapped: bool = False) -> None:
        assert text._written
        self._text, self.wrapped = text, wrapped

    def text(self) -> LongText:
        """The object's indented JSON."""
        return self._text.nested('{\n  "result": ', "  ", "\n}") if self.wrapped else self._text

    def unwrapped(self) -> LongJSON:
        """X of a wrapper `{"result": X}`."""
        assert self.wrapped
        return LongJSON(self._text)

    def parsed(self) -> Any:
        """As Python values: the whole file read and parsed, for who needs them."""
        value = json.loads(self.utf8())
        return {"result": value} if self.wrapped else value

    def utf8(self) -> bytes:
        """The file read whole (X's JSON of a wrapper)."""
        text = self._text
        return text._spool.read(text._start, text._end - text._start)

    def mapped(self) -> Any:
        """The file mapped (an `mmap`), to be walked, not held (`_providers._mcp._long_json.meets`)."""
        text = self._text
        assert text._start == 0 and text._end == text._spool.size
        return text._spool.mapped()

    def __len__(self) -> int:
        return len(self.text())

    def __repr__(self) -> str:
        return f"<LongJSON of {len(self):,} characters>"

def whole(text: str | LongText) -> str:
    """The text as one str: for a reader that cannot take pieces."""
    return text if type(text) is str else str(text)


def pieces(text: str | LongText, size: int) -> Iterator[str]:
    """`text` in pieces of at most about `size` characters, whichever kind it is."""
    if type(text) is str:
        for at in range(0, len(text), size):
            yield text[at:at + size]
    else:
        yield from text.pieces()


def _safe_cut(raw: bytes) -> int:
    """Where `raw`, a part of an escaped JSON string's body, may be cut: not inside an escape
    (at most 6 bytes: \\uXXXX) and not inside a UTF-8 character."""
    cut = len(raw)
    slash = raw.rfind(b"\\", max(0, cut - 6))
    if slash >= 0:
        run = len(raw[:slash + 1].rstrip(b"\\"))  # where the run of backslashes ending there starts
        cut = run + (slash - run) // 2 * 2  # escapes pair up from the run's start: cut before the last
    return _utf8_cut(raw, cut)


def _utf8_cut(raw: bytes, cut: int | None = None) -> int:
    """Where `raw[:cut]` may be cut, not inside a UTF-8 character."""
    cut = len(raw) if cut is None else cut
    lead = cut
    while lead > 0 and 0x80 <= raw[lead - 1] < 0xC0:
        lead -= 1
    if lead > 0 and raw[lead - 1] >= 0xC0:
        first = raw[lead - 1]
        size = 2 if first < 0xE0 else 3 if first < 0xF0 else 4
        if cut - (lead - 1) < size:
            cut = lead - 1
    return cut


def _paired(high: str, text: str) -> str:
    """A high surrogate from the end of one piece before the next piece's text: a pair that JSON
    wrote as two escapes (`\\ud83d\\ude00`) is one character again."""
    if text and "\udc00" <= text[0] <= "\udfff":
        return (high + text[0]).encode("utf-16-le", "surrogatepass").decode("utf-16-le") + text[1:]
    return high + text
