"""A long line of an MCP server's stdout, taken in as it arrives, its long strings kept on disk.

`LongLine` is fed the line's bytes in the pieces they arrive in. The line's strings of
more than `LONG` characters (a tool's text result) go to a `Spool` file; what is left,
the skeleton, has a marker string in place of each (held in memory up to `SPILL` bytes,
then in a file of its own: structured content is walked through it, not parsed whole).
A string that comes twice in a line (the Python SDK's text and its `{"result": text}`)
is kept once.
At the end of the line, `finish` parses nothing: it hands back the skeleton, to be
parsed as the line would have been, and a `LongText` for each marker.

The strings are found with two regular expressions, in C (a loop over each string in
Python cost three times the parse of the line): `_SKIP` passes over everything up to
the opening quote of a long string, `_BODY` over a string's body to its closing quote.
A marker holds a nonce of the lane's, which the server never sees, so no string a server
sends can pass for one.

A line past `LINE_CAP` (or `HELD_CAP` in memory), or one the disk cannot take, is not
kept (`failed` says why): its bytes are dropped up to its end, and the request it answers,
found by the id at either end of the line, fails with that reason, instead of the kernel
(or the disk) filling up. `placed` puts each `LongText` where its marker is in the parsed
reply.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping

from ..._longtext import LongText, Spool, whole

LONG = 4096  # characters (escapes count as one) of a string kept in the skeleton
LINE_CAP = 2 << 30  # bytes of one line taken in, at most
HELD_CAP = 512 << 20  # bytes of its skeleton (all but its long strings), at most: it may be parsed whole
SPILL = 1 << 18  # bytes of skeleton past which it goes to a file of its own, read back mapped
ENDS = 256  # bytes kept of each end of a line not kept, to find its request's id
_LANE_ID = re.compile(rb'"id"\s*:\s*"(toolkernel-\d+)"')
# Everything but strings, and strings of at most LONG characters (without escapes first: faster).
_SKIP = re.compile(rb'(?:[^"]++|"[^"\\]{0,%d}+"|"(?:[^"\\]|\\.){0,%d}+")*+' % (LONG, LONG))
_IS_LONG = re.compile(rb'"(?:[^"\\]|\\.){%d}' % (LONG + 1))  # LONG + 1 characters seen, no end yet
_BODY = re.compile(rb'(?:[^"\\]++|\\.)*+')  # a string's body up to its closing quote (or what came so far)


def long_reply(skeleton: Any, marker: bytes) -> Any:
    """The JSON-RPC message of a long line's skeleton, its long structured content a `LongJSON`."""
    from . import _long_json  # imported by the first long reply: its patterns take 6 ms to make

    return _long_json.reply(skeleton, marker)


def not_taken(line: LongLine) -> str:
    """Why the request a line not kept answers fails (`LongLine.failed`)."""
    return f"the server's reply was not taken in: {line.failed}"


def give_back_heap() -> None:
    """Hand the C heap's free memory back to the system (glibc's `malloc_trim`), after a long
    reply read on the private loop's thread: what that read freed stays in the thread's own
    arena, where the script's thread, which prints the reply, cannot reuse it, and the two
    peaks add up (2 MB of text over HTTP peaked 1.3 MB higher). Nothing without glibc."""
    global _trim
    if _trim is None:
        try:
            import ctypes

            _trim = ctypes.CDLL(None).malloc_trim
        except (AttributeError, OSError, ImportError):
            _trim = False
    if _trim:
        _trim(0)


_trim: Any = None


def lane_id(*ends: bytes) -> str | None:
    """The lane id found in one of a line's `ends` (its first and last bytes: an SDK may write
    the id last), for a line that cannot be parsed."""
    for end in ends:
        found = _LANE_ID.search(end)
        if found:
            return found[1].decode()
    return None


class LongReply(dict):
    """A request's result read from a long line, each long string of it a `LongText`;
    `structured_long`: whether one is inside its structured content."""

    structured_long = False


def placed(result: dict[str, Any], texts: Mapping[str, LongText], markers: int) -> LongReply:
    """`result` with each marker in it made its `LongText` (a key: its str), in place. The walk
    ends once the line's `markers` are all found: a server's text comes before its structured
    content, and a walk of the rows after it (copying them, as it did) cost as much as the parse."""
    left = [markers]
    reply = LongReply(result)
    for key, value in reply.items():
        if left[0] <= 0:
            break
        before = left[0]
        reply[key] = _place(value, texts, left)
        if key == "structuredContent" and left[0] != before:
            reply.structured_long = True
    return reply


def _place(value: Any, texts: Mapping[str, LongText], left: list[int]) -> Any:
    kind = type(value)
    if kind is str:
        if value[:1] == "\x00" and value in texts:
            left[0] -= 1
            return texts[value]
    elif kind is list:
        for index, item in enumerate(value):
            if left[0] <= 0:
                break
            value[index] = _place(item, texts, left)
    elif kind is dict:
        renamed = []
        for key, item in value.items():
            if left[0] <= 0:
                break
            if key[:1] == "\x00" and key in texts:  # a long key: a str again
                renamed.append(key)
                left[0] -= 1
            value[key] = _place(item, texts, left)
        for key in renamed:
            value[whole(texts[key])] = value.pop(key)
    return value


class LongLine:
    """One line, fed in pieces; see the module's docstring."""

    def __init__(self, nonce: str) -> None:
        self._marker = ("\\u0000" + nonce + ":").encode()  # as JSON writes it: "\x00<nonce>:<n>" parsed
        self._nonce = nonce
        self._kept = bytearray()  # the skeleton, or its part not yet in its file
        self._kept_file: Spool | None = None  # the skeleton's first part, once it grew past SPILL
        self._mapped: Any = None  # that file mapped, once the line ended
        self._head = b""  # the skeleton's first bytes, to find its request's id
        self._markers = 0
        self._spool = Spool()
        self._spans: list[tuple[int, int]] = []  # in the spool, per marker number
        self._seen: dict[tuple[bytes, int], int] = {}  # (digest, length) of a string → its marker number
        self._carry = b""  # a part that cannot be judged before more comes
        self._in_long: hashlib._Hash | None = None  # the long string being written (its digest so far)
        self._long_start = 0
        self.failed: str | None = None  # why the line is not kept
        self._tail = b""  # the line's last bytes, to find its request's id

    def feed(self, data: bytes) -> None:
        if self.failed is None:
            try:
                self._scan(data)
            except OSError as exc:
                self._drop(f"the disk did not take it ({exc.strerror or exc})")
            else:
                if self._size() + self._spool.size > LINE_CAP:
                    self._drop(f"it is longer than {LINE_CAP >> 30} GiB")
                elif self._size() > HELD_CAP:
                    self._drop(f"it holds more than {HELD_CAP >> 20} MiB outside its long strings")
        self._tail = (self._tail + bytes(data[-ENDS:]))[-ENDS:]

    def _drop(self, why: str) -> None:
        self.failed = why
        self._kept = bytearray()
        self._carry = b""
        self._spool.close()
        if self._kept_file is not None:
            self._kept_file.close()
            self._kept_file = None

    def _keep(self, data: bytes | memoryview) -> None:
        """More of the skeleton: in memory up to SPILL bytes, then in its file."""
        if len(self._head) < ENDS:
            self._head += bytes(data[:ENDS - len(self._head)])
        self._kept += data
        if len(self._kept) >= SPILL:
            if self._kept_file is None:
                self._kept_file = Spool()
            self._kept_file.write(self._kept)
            self._kept = bytearray()

    def _size(self) -> int:
        return len(self._kept) + (self._kept_file.size if self._kept_file is not None else 0)

    @property
    def skeleton(self) -> bytes | bytearray | Any:
        """The line, a marker in place of each long string: a buffer (`bytes` when sliced), in
        memory, or its file mapped (`mmap`) where it grew past SPILL. A walk through it can let
        go of the pages it passed (`_long_json`): the skeleton of 8 MB of rows sent as a text
        block per row (the Python SDK's list) is 13 MB, and it was held whole."""
        if self._kept_file is None:
            return self._kept
        if self._mapped is None:
            self._kept_file.write(self._kept)
            self._kept = bytearray()
            self._mapped = self._kept_file.mapped()
        return self._mapped

    def request_id(self) -> str | None:
        """The lane id at either end of the line, found without parsing it (an SDK may write the
        id last): for a line not kept, or one too long to read whole unless it is a reply."""
        return lane_id(self._head, self._tail)

    def _scan(self, data: bytes) -> None:
        buf = self._carry + data if self._carry else data
        self._carry = b""
        pos = 0
        while pos < len(buf):
            if self._in_long is not None:
                pos = self._body(buf, pos)
                continue
            end = _SKIP.match(buf, pos).end()
            self._keep(memoryview(buf)[pos:end])
            if end == len(buf):
                return
            if not _IS_LONG.match(buf, end):  # a short string cut by the piece's end: judge it with more
                self._carry = bytes(buf[end:])
                return
            self._open_long()
            pos = end + 1

    def _body(self, buf: bytes, pos: int) -> int:
        end = _BODY.match(buf, pos).end()
        self._write(memoryview(buf)[pos:end])
        if end == len(buf):
            return end
        if buf[end] == 0x5C:  # a backslash at the very end: its escape comes with the next piece
            self._carry = bytes(buf[end:])
            return len(buf)
        self._close_long()
        return end + 1

    def _open_long(self) -> None:
        self._in_long = hashlib.blake2b(digest_size=16)
        self._long_start = self._spool.size

    def _write(self, data: memoryview) -> None:
        if data:
            self._spool.write(data)
            self._in_long.update(data)  # type: ignore[union-attr]

    def _close_long(self) -> None:
        start, end = self._long_start, self._spool.size
        key = (self._in_long.digest(), end - start)  # type: ignore[union-attr]
        self._in_long = None
        number = self._seen.get(key)
        if number is None:
            number = self._seen[key] = len(self._spans)
            self._spans.append((start, end))
        else:
            self._spool.truncate(start)  # the same string again: the first copy serves
        self._keep(b'"' + self._marker + str(number).encode() + b'"')
        self._markers += 1

    def finish(self) -> dict[str, LongText]:
        """At the line's end: each marker (as parsed: a str) and its text. ValueError when
        the line broke off inside a long string, or a long string is not a valid one."""
        if self._in_long is not None or self._carry:
            self._keep(self._carry)
            self._carry = b""
            if self._in_long is not None:
                raise ValueError("the line ended inside a string")
        prefix = "\x00" + self._nonce + ":"
        return {prefix + str(n): LongText(self._spool, start, end) for n, (start, end) in enumerate(self._spans)}

    @property
    def marker(self) -> bytes:
        """How each marker starts in the skeleton (as JSON writes it)."""
        return self._marker

    def markers(self) -> int:
        """How many markers the skeleton holds (a string sent twice: twice)."""
        return self._markers

    def whole(self) -> bytes:
        """The line as it came (each marker back to its string): for a message nobody waits
        for here, which goes its usual way, or a line that did not parse."""
        marker = re.compile(rb'"' + re.escape(self._marker) + rb'(\d+)"')

        def restored(found: re.Match[bytes]) -> bytes:
            start, end = self._spans[int(found[1])]
            return b'"' + self._spool.read(start, end - start) + b'"'

        return marker.sub(restored, bytes(self.skeleton)) + (b'"' + self._spool.read(
            self._long_start, self._spool.size - self._long_start) if self._in_long is not None else b"")

    def close(self) -> None:
        self._spool.close()
        if self._kept_file is not None:
            self._kept_file.close()
