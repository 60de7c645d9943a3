"""read_file, write_file and edit_file."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any, Callable

from ..._atomic import write_atomic
from ..._checked_open import NotAFile, PathChanged, read_checked, regular_checked
from ..._longtext import LongText, pieces
from ..._tool import Image, ToolContext, ToolInputError, tool
from ._paths import display_path

DEFAULT_LIMIT = 2000
_MOST_LINES = sys.maxsize // 4
MAX_LINE_BYTES = 2000
MAX_IMAGE_BYTES = 20 * 1024 * 1024
SNIFF_BYTES = 8192
PLAIN_TEXT_BYTES = 4 * 1024 * 1024  # read whole to number at once; larger files are read line by line
# A file of more bytes than this per line of the window goes by lines (`_numbered_whole` would
# find too late that it has more lines than the window, having made its template in vain).
_WHOLE_LINE_BYTES = 128

_IMAGE_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)

# The first byte of each signature above and of WebP's RIFF (a bytes of length 1 or 0 is "in" this).
_IMAGE_FIRST_BYTES = b"\x89\xffGR"

_PATH_PROPERTY = {
    "type": "string",
    "minLength": 1,
    "description": "File path, absolute or relative to the working directory.",
}


@tool(
    "read_file",
    description=(
        "Read a text file with line numbers (`cat -n` style), optionally a window of lines. "
        "Lines longer than 2000 bytes are cut and marked `(line truncated)`. PNG, JPEG, GIF "
        "and WebP files come back as images. Other binary files and files inside a git "
        "object store are refused (use `git show` for those)."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": _PATH_PROPERTY,
            "offset": {
                "type": "integer",
                "minimum": 0,
                "default": 0,
                "description": "First line to read, 0-based. Default 0.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "default": DEFAULT_LIMIT,
                "description": f"Maximum number of lines to read. Default {DEFAULT_LIMIT}.",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    kind="read",
    path_keys=("path",),
)
def read_file(arguments: dict[str, Any], ctx: ToolContext) -> Any:
    path = ctx.real_name(arguments, "path")
    shown = display_path(path, ctx.workdir)
    fd, size = _open_readable(path, shown)
    try:
        # A file small enough to number at once is read in one call; the sniff looks at its head.
        whole = size <= PLAIN_TEXT_BYTES
        data = _read_whole(fd, size) if whole else os.read(fd, SNIFF_BYTES)
        mime = image_type(data)
        if mime is not None:
            return _read_image(_file(fd), size, shown, mime)
        if _looks_utf16(data):
            raise ToolInputError(f"{shown} is UTF-16 text, which read_file does not decode; convert it to UTF-8 first")
        if data.find(b"\0", 0, SNIFF_BYTES) >= 0:
            raise ToolInputError(f"{shown} is a binary file (it contains NUL bytes); read_file shows text files and images only")
        # No file has this many lines; past it the numbering's C sizes overflow.
        offset = min(int(arguments.get("offset", 0)), _MOST_LINES)
        limit = min(int(arguments.get("limit", DEFAULT_LIMIT)), _MOST_LINES)
        numbered = _numbered_text(data, shown, offset, limit) if whole and _plain(data) else None
        if numbered is not None:
            return numbered
        file = _file(fd)
        file.seek(0)
        return _numbered_window(io.BufferedReader(file), shown, offset, limit, ctx.check_cancelled)
    finally:
        os.close(fd)


def _open_readable(path: str, shown: str) -> tuple[int, int]:
    """`path` (a real path) opened for reading (a descriptor the caller closes), and its size;
    what it cannot be read as is said in words."""
    if in_git_object_store(path, real=True):
        raise ToolInputError(f"{shown} is inside a git object store; use `git show` or `git cat-file` instead")
    try:
        # One system call where exists() and is_dir() took two more. A bare descriptor: a file
        # object costs a system call more (a second fstat), a buffer four (a terminal test, a
        # size, two seeks), and each is microseconds.
        return regular_checked(path)
    except (FileNotFoundError, IsADirectoryError, NotAFile, PathChanged) as exc:
        raise _unopenable(exc, shown, "read_file") from None


def _file(fd: int) -> io.FileIO:
    """The open descriptor as a file, for the readers that read it in steps; it stays open."""
    return io.FileIO(fd, "rb", closefd=False)


def _unopenable(exc: OSError, shown: str, tool_name: str) -> ToolInputError:
    """Why `shown` cannot be opened for `tool_name`, in words."""
    if isinstance(exc, FileNotFoundError):
        hint = " (use write_file to create it)" if tool_name == "edit_file" else ""
        return ToolInputError(f"File not found: {shown}{hint}")
    if isinstance(exc, IsADirectoryError):
        return ToolInputError(f"{shown} is a directory, not a file; use glob_search to list files")
    if isinstance(exc, NotAFile):
        return ToolInputError(f"{shown} is not a regular file (a pipe, device or socket); "
                              f"{tool_name} works on files")
    return ToolInputError(f"{shown} changed while it was being opened (a folder on the way was "
                          "replaced); nothing was read or changed")


def _read_whole(fd: int, size: int) -> bytes:
    """The whole of a file that fstat says has `size` bytes: one read, and the rest to the end
    only when there is more (a file that grew meanwhile, or one of /proc that says 0)."""
    data = os.read(fd, size + 1)
    return data if len(data) <= size else data + _file(fd).readall()


def in_git_object_store(path: str | Path, *, real: bool = False) -> bool:
    """True for files under `<gitdir>/objects`, loose or packed, bare repos included
    (`real`: `path` is resolved already)."""
    real_path = os.fspath(path) if real else os.path.realpath(path)
    if "/objects/" not in real_path:  # no folder of that name: most calls end here
        return False
    for folder in Path(real_path).parents:
        if folder.name != "objects":
            continue
        gitdir = folder.parent
        if gitdir.name == ".git" or ((gitdir / "HEAD").is_file() and (gitdir / "refs").is_dir()):
            return True
    return False


def image_type(head: bytes) -> str | None:
    if head[:1] not in _IMAGE_FIRST_BYTES:  # most files: one look, not five
        return None
    for signature, mime in _IMAGE_SIGNATURES:
        if head.startswith(signature):
            return mime
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def _looks_utf16(head: bytes) -> bool:
    return head.startswith((b"\xff\xfe", b"\xfe\xff"))


def _read_image(file: io.FileIO, size: int, shown: str, mime: str) -> Image:
    if size > MAX_IMAGE_BYTES:
        raise ToolInputError(f"{shown} is a {size} byte image, over the {MAX_IMAGE_BYTES} byte limit")
    file.seek(0)  # from the file opened and checked, not by its name again
    return Image(file.readall(), mime)


def _plain(data: bytes) -> bool:
    """Whether no line of `data` needs a second look for what it holds (a NUL, a carriage
    return): such files go through `_numbered_window`."""
    return b"\0" not in data and b"\r" not in data


def _numbered_text_in_c(data: bytes, shown: str, offset: int, limit: int) -> str | None:
    """The same as `_numbered_window` gives for `_plain` data, made in one pass of C (`_numbering.c`)
    over the whole file; None when that reader has to do it: a line of the window over the cut, or
    a window that is not UTF-8 (it says where)."""
    made = _number_in_c(data, offset, limit, MAX_LINE_BYTES)
    if made is None:
        return None
    numbered, count, total = made
    if not isinstance(numbered, str):  # a window of ASCII comes as a str already
        try:
            # One decode of the window, not of the file: a line outside it is not read, as there.
            numbered = numbered.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return _with_note(numbered, count, shown, offset, total)


def _numbered_text_in_python(data: bytes, shown: str, offset: int, limit: int) -> str | None:
    """`_numbered_text_in_c` where the package was built without a C compiler: the same from passes
    of CPython's own C over the whole file (a replace, a formatting), with no Python step per line."""
    may_be_long = len(data) > MAX_LINE_BYTES and _may_hold_a_long_line(data)  # (no room for one)
    whole = _numbered_whole(data, limit) if offset == 0 and not may_be_long else None
    if whole is not None:
        return _with_note(whole[0], whole[1], shown, 0, whole[1])
    # BytesIO finds each newline with memchr; str.split and bytes.split look at each character
    # in turn, which made splitting 2,000 lines twice as slow.
    lines = io.BytesIO(data).readlines()
    total = len(lines)
    window = lines if offset == 0 and total <= limit else lines[offset:offset + limit]
    if window and may_be_long and max(map(len, window)) > MAX_LINE_BYTES and _over_the_cut(window):
        return None
    try:
        # One decode of the window, not of the file: a line outside it is not read, as there.
        return _with_note(_number(window, offset + 1).decode("utf-8"), len(window), shown, offset, total)
    except UnicodeDecodeError:
        return None


try:  # built with the package where a C compiler was at hand (hatch_build.py)
    from ._numbering import number as _number_in_c
except ImportError:
    _number_in_c = None
_numbered_text = _numbered_text_in_python if _number_in_c is None else _numbered_text_in_c


def _numbered_whole(data: bytes, limit: int) -> tuple[str, int] | None:
    """The whole of `data` numbered, and its count of lines, when it has some, at most `limit`;
    None when it has none or more, or is not UTF-8. Its lines must be `_plain` and none over the cut.

    Without a bytes object per line: each newline becomes a newline and `%b`, and one `%`
    formatting lays the prefixes made before into those places. Both are C passes over the file
    (the replace finds each newline with memchr, the formatting each `%`), where splitting into
    lines and joining them with their prefixes made and copied an object per line."""
    if not data or len(data) > limit * _WHOLE_LINE_BYTES:
        return None
    if data.startswith(_BOM):
        data = data[len(_BOM):]  # the mark is no part of the first line's text
    escaped = data.replace(b"%", b"%%")  # the file's own `%` are text (the same object when none)
    # Each newline with the place of the next line's prefix; one more than the window takes
    # tells a longer file, and stops the count there.
    marked = escaped.replace(b"\n", b"\n%b", limit + 1)
    newlines = (len(marked) - len(escaped)) // 2  # two bytes more for each
    ends = escaped.endswith(b"\n")  # the last line's newline: no line follows it
    count = newlines if ends else newlines + 1
    if count > limit:
        return None
    template = b"".join((b"%b", memoryview(marked)[:-3] if ends else marked))  # the first line's place
    try:
        return (template % _prefixes(1, count)).decode("utf-8"), count
    except UnicodeDecodeError:
        return None


def _may_hold_a_long_line(data: bytes) -> bool:
    """Whether a line of `data` is over the cut, found without a step per line: from a line's
    start, C's rfind gives the last newline in the next MAX_LINE_BYTES + 1 bytes, where the next
    line starts; none there means the line from here is longer than the cut."""
    start, end, rfind = 0, len(data) - MAX_LINE_BYTES, data.rfind
    while start < end:  # the rest is longer than a line may be
        newline = rfind(b"\n", start, start + MAX_LINE_BYTES + 1)
        if newline < 0:
            return True
        start = newline + 1
    return False


def _over_the_cut(lines: list[bytes]) -> bool:
    """Whether a line, without its newline, is longer than the cut (which that reader makes)."""
    return any(len(line) - line.endswith(b"\n") > MAX_LINE_BYTES for line in lines)


# b"     1\t", b"     2\t", ...: made once, laid before the lines in C, so no line is copied
# into a numbered line of its own first.
_PREFIXES: tuple[bytes, ...] = ()
_MAX_PREFIXES = 20_000
_BOM = "\ufeff".encode()


def _prefixes(first: int, last: int) -> tuple[bytes, ...]:
    """The prefixes of lines `first` to `last`."""
    global _PREFIXES
    if last > _MAX_PREFIXES:
        return tuple(b"%6d\t" % n for n in range(first, last + 1))
    made = _PREFIXES
    if len(made) < last:  # grown, never changed: a thread that reads the table meanwhile sees a whole one
        made += tuple(b"%6d\t" % n for n in range(len(made) + 1, last + 1))
        _PREFIXES = made
    return made[first - 1:last]


def _number(lines: list[bytes], first: int) -> bytes:
    """`lines` (each ending in its newline but maybe the last) numbered from `first` (`cat -n`
    style), without a last newline; a byte order mark before the first line of the file is left out."""
    if not lines:
        return b""
    pieces: list[bytes | None] = [None] * (2 * len(lines))
    pieces[0::2] = _prefixes(first, first + len(lines) - 1)
    pieces[1::2] = lines
    if first == 1 and lines[0].startswith(_BOM):
        pieces[1] = lines[0][len(_BOM):]
    if pieces[-1].endswith(b"\n"):  # type: ignore[union-attr]
        pieces[-1] = pieces[-1][:-1]  # type: ignore[index]
    return b"".join(pieces)  # type: ignore[arg-type]


def _numbered_window(file: Any, shown: str, offset: int, limit: int,
                     check_cancelled: Callable[[], None] = lambda: None) -> str:
    """The window, read line by line; every line is counted (a log of gigabytes takes a while:
    `check_cancelled` is asked now and then)."""
    lines: list[str] = []
    total = 0
    for total, raw in enumerate(file, start=1):
        if not total % 65536:
            check_cancelled()
        index = total - 1
        if offset <= index < offset + limit:
            lines.append(_numbered_line(index + 1, raw, shown))
    return _with_note("\n".join(lines), len(lines), shown, offset, total)


def _with_note(numbered: str, count: int, shown: str, offset: int, total: int) -> str:
    """The `count` numbered lines, and where they lie in the file when that is not the whole of it."""
    if total == 0:
        return f"({shown} is empty)"
    if not count:
        return f"({shown} has {total} lines; offset {offset} is past the end)"
    last = offset + count
    if offset > 0 or last < total:
        note = (f"(lines {offset + 1}-{last} of {total}; use offset={last} to read on)" if last < total
                else f"(lines {offset + 1}-{last} of {total})")
        return f"{numbered}\n{note}"
    return numbered


def _numbered_line(number: int, raw: bytes, shown: str) -> str:
    body = raw.rstrip(b"\n").rstrip(b"\r")
    if b"\0" in body:
        raise ToolInputError(f"{shown} is a binary file (line {number} contains NUL bytes)")
    truncated = len(body) > MAX_LINE_BYTES
    if truncated:
        body = body[:MAX_LINE_BYTES]
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not (truncated and exc.start >= len(body) - 3):
            raise ToolInputError(
                f"{shown} is not UTF-8 text (undecodable byte on line {number}); read_file shows text files and images only"
            ) from exc
        text = body[: exc.start].decode("utf-8")  # the cut fell inside a character
    if number == 1:
        text = text.removeprefix("\ufeff")
    return f"{number:>6}\t{text}" + (" (line truncated)" if truncated else "")


@tool(
    "write_file",
    description=(
        "Create or overwrite a file with the given content. Missing parent folders are created. "
        "The write is atomic and an existing file keeps its permission bits."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": _PATH_PROPERTY,
            "content": {"type": "string", "description": "The complete new content of the file (UTF-8)."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    kind="edit",
    path_keys=("path",),
)
def write_file(arguments: dict[str, Any], ctx: ToolContext) -> str:
    path = ctx.real(arguments, "path")
    shown = display_path(path, ctx.workdir)
    if path.is_dir():
        raise ToolInputError(f"{shown} is a directory; give a file path")
    content: str | LongText = arguments["content"]  # a LongText: a long MCP result `--save` writes
    existed = path.exists()
    _write_checked(path, content, shown, ctx)
    verb = "Overwrote" if existed else "Created"
    lines, size = _counts(content)
    return f"{verb} {shown} ({lines} lines, {size} bytes)"


_PIECE = 1 << 20  # characters counted at once


def _counts(content: str | LongText) -> tuple[int, int]:
    """Lines and UTF-8 bytes, a piece at a time (a whole encoded copy of a 256 MB text is 256 MB
    more); a last line without its newline counts too."""
    newlines = size = 0
    last = ""
    for piece in pieces(content, _PIECE):
        newlines += piece.count("\n")
        size += len(piece.encode("utf-8"))
        last = piece[-1]
    return newlines + (last not in ("", "\n")), size


def _write_checked(path: Path, content: str | LongText, shown: str, ctx: ToolContext) -> None:
    """The atomic write of a path the dispatcher checked, into the very folder it checked; the
    run's journal records the file as it was first (issue 38)."""
    _refuse_served_notebook(path, shown, ctx)
    if ctx.journal is not None:
        ctx.journal.before_change(path)
    try:
        write_atomic(path, content, resolved=True)
    except PathChanged:
        raise ToolInputError(f"{shown} changed while it was being written (a folder on the way was "
                             "replaced); nothing was written") from None


def _refuse_served_notebook(path: Path, shown: str, ctx: ToolContext) -> None:
    """A notebook that a paired Jupyter Server serves changes only through the server's document:
    a write of the file lands behind its back, and the open notebook loses one side's work."""
    if path.suffix != ".ipynb":
        return
    from .._notebook._pairing import served_by  # only for notebooks: it imports the server client

    server = served_by(ctx.state, str(path))
    if server is not None:
        raise ToolInputError(f"{shown} is served by the Jupyter Server at {server}, paired in this session; "
                             "change it with notebook-edit, which goes through the server's document")


@tool(
    "edit_file",
    description=(
        "Replace an exact string in a file. `old_string` must occur exactly once unless "
        "`replace_all` is true; include surrounding lines to make it unique. The write is "
        "atomic and keeps the file's permission bits."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": _PATH_PROPERTY,
            "old_string": {
                "type": "string",
                "minLength": 1,
                "description": "The exact text to replace, whitespace and indentation included.",
            },
            "new_string": {"type": "string", "description": "The text to put in its place."},
            "replace_all": {
                "type": "boolean",
                "default": False,
                "description": "Replace every occurrence instead of requiring exactly one. Default false.",
            },
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    },
    kind="edit",
    path_keys=("path",),
)
def edit_file(arguments: dict[str, Any], ctx: ToolContext) -> str:
    path = ctx.real(arguments, "path")
    shown = display_path(path, ctx.workdir)
    old, new = arguments["old_string"], arguments["new_string"]
    replace_all = bool(arguments.get("replace_all", False))
    if not old:
        raise ToolInputError("old_string is empty; use write_file to create or overwrite a file")
    if old == new:
        raise ToolInputError("old_string and new_string are the same; nothing to change")
    # Before the content is looked at: the answer for a served notebook must not depend on it.
    _refuse_served_notebook(path, shown, ctx)
    text = _read_text_for_edit(path, shown)
    count = text.count(old)
    if count == 0:
        raise ToolInputError(f"old_string not found in {shown}")
    if count > 1 and not replace_all:
        raise ToolInputError(
            f"old_string occurs {count} times in {shown}; add surrounding text to make it unique, "
            "or set replace_all=true"
        )
    _write_checked(path, text.replace(old, new), shown, ctx)
    first_line = text[: text.index(old)].count("\n") + 1
    noun = "occurrence" if count == 1 else "occurrences"
    return f"Replaced {count} {noun} in {shown} (first at line {first_line})"


def _read_text_for_edit(path: Path, shown: str) -> str:
    try:
        data = read_checked(str(path))
    except (FileNotFoundError, IsADirectoryError, NotAFile, PathChanged) as exc:
        raise _unopenable(exc, shown, "edit_file") from None
    if b"\0" in data:
        raise ToolInputError(f"{shown} is a binary file; edit_file edits UTF-8 text only")
    try:
        # newline="" semantics: bytes are decoded as is, so CRLF files keep CRLF
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolInputError(f"{shown} is not UTF-8 text; edit_file edits UTF-8 text only") from exc
