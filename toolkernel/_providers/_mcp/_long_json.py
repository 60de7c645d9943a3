"""Long structured content written indented as it is parsed, a part at a time.

Parsed whole, a tool's structured content (rows of a table) took about 3.5 times the
size of its indented JSON as Python values, and printing it took that JSON again, as
bytes and then as a str: 8 MB of rows peaked at 5.5x in the kernel. `indented` walks
the object's JSON text instead and writes it, indented as `_command._render.to_json`
writes it, to a `Spool` as it goes: small values (a row) are parsed a batch at a
time and written with pydantic's encoder, as the whole would have been; only the
containers too large or too deep for that are walked, member by member. What it
returns is a `LongJSON`, read by the script from its file in pieces and parsed
whole only for who asks for Python values.

Structured content that is small but for a long string in it (a `LongText`, `_spool`)
is written by `with_texts`: its encoding with a placeholder for each text, and each text
escaped into its place a piece at a time.

Regular expressions (in C) find where small values end: a run of members (or items),
each at most `_DEPTH` containers deep, that fits in `BATCH` bytes, is one match (the
match may not look past its bound, so a container of 8 MB is not read to its end to
learn that it is large); a container that does not fit is walked. Whatever is not
valid JSON fails as `json.loads` would (`ValueError`). Whatever a batch parse would
read differently from a parse of the whole raises `NotStreamed` (a `ValueError`), and
the caller parses the whole as before: a key that comes again in another batch
(`json.loads` keeps the last value, in the first one's place), a value pydantic cannot
write (`to_json` then writes the whole with `json.dumps`), `forbidden` bytes (a long
string's marker, `_spool`), nesting past Python's recursion limit, and anything but an
object at the top.
"""

from __future__ import annotations

import json
import mmap
import re
import secrets
from typing import Any, Callable, Generator

from pydantic_core import to_json

from ..._longtext import LongJSON, LongText, Spool

BIG = 1 << 16  # bytes of a member or item past which it is walked, not parsed whole
BATCH = 1 << 16  # bytes of small members or items parsed and written at once, at most
STREAM_AT = 1 << 18  # bytes of a reply's structured content past which it is written by `indented`
_FLUSH = 1 << 18  # bytes written to the spool at once
_RELEASE = 1 << 18  # bytes of a mapped file walked between letting go of its pages
_DEPTH = 6  # containers nested in a value that its regular expression still takes whole
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)  # where there is `madvise` (not on Windows)

_WS = rb"[ \t\n\r]*+"
_STRING = rb'"(?:[^"\\]++|\\.)*+"'


def _nested(depth: int) -> bytes:
    """A container with at most `depth` levels of containers in it (brackets unmatched: the
    parse checks them)."""
    inside = rb'(?:[^"\[\]{}]++|' + _STRING + rb")*+"
    for _ in range(depth):
        container = rb"[\[{]" + inside + rb"[\]}]"
        inside = rb'(?:[^"\[\]{}]++|' + _STRING + rb"|" + container + rb")*+"
    return container


_SMALL = rb"(?:" + _nested(_DEPTH) + rb"|" + _STRING + rb'|[^"\[\]{}\s,:]++)'
_PAIR = _WS + _STRING + _WS + rb":" + _WS
_CONTAINER = re.compile(_nested(_DEPTH))
_VALUE = re.compile(_WS + rb"(" + _SMALL + rb")")
_ITEMS = re.compile(rb"(?:" + _WS + _SMALL + _WS + rb",)*+")  # each followed by its comma: none is cut short
_MEMBERS = re.compile(rb"(?:" + _PAIR + _SMALL + _WS + rb",)*+")
_ITEM = re.compile(_WS + _SMALL + rb"()" + _WS + rb"([,\]])")
_MEMBER = re.compile(_PAIR + _SMALL + rb"()" + _WS + rb"([,}])")
_KEY = re.compile(_WS + rb"(" + _STRING + rb")" + _WS + rb":")
_OPEN = re.compile(_WS + rb"([\[{])")
_EMPTY = re.compile(_WS + rb"([\]}])")
_NEXT = re.compile(_WS + rb"([,\]}])")
_WS_ONLY = re.compile(_WS)


class NotStreamed(ValueError):
    """The value is to be parsed whole: a batch parse would not read it as that parse does."""


def reply(line: bytes | bytearray, forbidden: bytes) -> Any:
    """The JSON-RPC message of a long line, as `json.loads` parses it, but for its result's
    structured content: a `LongJSON` when longer than `STREAM_AT`. Parsed whole by `json.loads`
    where `indented` cannot take it (an error then is the line's own)."""
    try:
        message, end = _object(line, 0, lambda key, at: _result(line, at, forbidden) if key == "result"
                               else _small(line, at))
    except ValueError:
        return json.loads(bytes(line))
    if _WS_ONLY.fullmatch(line, end) is None:
        return json.loads(bytes(line))  # and fails
    return message


def _result(buf: bytes | bytearray, at: int, forbidden: bytes) -> tuple[Any, int]:
    def member(key: str, at: int) -> tuple[Any, int]:
        if key not in ("structuredContent", "content") or _small_value(buf, at, STREAM_AT)[1] is not None:
            return _small(buf, at)
        if key == "content":  # parsed once it is known whether the structured content is long
            start = _OPEN.match(buf, at).start(1)  # type: ignore[union-attr]
            return _Later(start), _end_of(buf, start)
        return indented(buf, at, forbidden)

    if not _is_object(buf, at):
        return _small(buf, at)
    result, end = _object(buf, at, member)
    if type(result.get("content")) is _Later:
        result["content"] = _blocks(buf, result["content"].start, type(result.get("structuredContent")) is LongJSON)
    return result, end


class _Later:
    def __init__(self, start: int) -> None:
        self.start = start


def _small_value(buf: Any, at: int, bound: int | None = None) -> tuple[int, re.Match[bytes] | None]:
    """Where the value at `at` starts, and its match when it is small: a scalar, a string, or a
    container that ends within `bound` bytes (`BIG`); None for a larger (or deeper) container."""
    opened = _OPEN.match(buf, at)
    if opened is None:
        small = _VALUE.match(buf, at)
        if small is None:
            raise ValueError("not a JSON value")
        return at, small
    start = opened.start(1)
    return start, _CONTAINER.match(buf, start, start + (bound or BIG))


def _blocks(buf: bytes | bytearray, at: int, beside_long: bool) -> Any:
    """A long reply's content. `beside_long`: beside long structured content, whose serialized
    copy its text blocks are (as the MCP spec asks of a server; the Python SDK writes a list as
    a text block per item): they are dropped, not parsed, and any other block kept."""
    if not beside_long:
        return _small(buf, at)[0]
    kept: list[Any] = []

    def run(start: int, end: int) -> None:
        kept.extend(block for block in json.loads(b"[" + buf[start:end] + b"]") if not _is_text(block))

    def one(start: int) -> int:
        block, end = _small(buf, start)
        if not _is_text(block):
            kept.append(block)
        return end

    _each(buf, at, run, one)
    return kept


def _is_text(block: Any) -> bool:
    return type(block) is dict and block.get("type") == "text"


def _end_of(buf: bytes | bytearray, at: int) -> int:
    """Where the value at `at` ends: only looked through (the regular expressions), not parsed."""
    opened = _OPEN.match(buf, at)
    if opened is None:
        return _small(buf, at)[1]
    start = opened.start(1)

    def one(member: int) -> int:
        if buf[start] == 0x7B:
            key = _KEY.match(buf, member)
            if key is None:
                raise ValueError("expected a key")
            member = key.end()
        return _end_of(buf, member)

    return _each(buf, start, lambda start, end: None, one)[0]


def _object(buf: bytes | bytearray, at: int, member: Any) -> tuple[dict[str, Any], int]:
    """The object at `at`, each member's value made by `member(key, where it starts)`."""
    if not _is_object(buf, at):
        raise ValueError("not an object")
    at = _OPEN.match(buf, at).end()  # type: ignore[union-attr]
    members: dict[str, Any] = {}
    empty = _EMPTY.match(buf, at)
    if empty is not None:
        return members, empty.end()
    while True:
        key = _KEY.match(buf, at)
        if key is None:
            raise ValueError("expected a key")
        name = json.loads(key[1])
        members[name], at = member(name, key.end())
        after = _NEXT.match(buf, at)
        if after is None or after[1] == b"]":
            raise ValueError("expected a comma or a closing brace")
        if after[1] == b"}":
            return members, after.end()
        at = after.end()


def _is_object(buf: bytes | bytearray, at: int) -> bool:
    opened = _OPEN.match(buf, at)
    return opened is not None and opened[1] == b"{"


def _small(buf: bytes | bytearray, at: int) -> tuple[Any, int]:
    small = _VALUE.match(buf, at)
    if small is None:
        raise NotStreamed("nested too deep for a pattern")
    return json.loads(small[1]), small.end()


def indented(buf: bytes | bytearray, start: int, forbidden: bytes) -> tuple[LongJSON, int]:
    """The JSON object at `start` in `buf` (after any whitespace), written indented to a new
    spool, and where it ends in `buf`. A wrapper `{"result": X}` is kept as X (`LongJSON.wrapped`)."""
    if not _is_object(buf, start):
        raise NotStreamed("not an object")
    opened = _OPEN.match(buf, start).start(1)  # type: ignore[union-attr]
    walk = _Walk(buf, forbidden)
    try:
        try:
            wrapped = walk.wrapped(opened + 1)
            if wrapped is not None:
                return LongJSON(walk.text(), wrapped=True), wrapped
            end = walk.container(opened, 0)
            return LongJSON(walk.text()), end
        except RecursionError:
            raise NotStreamed("nested too deep") from None
    except BaseException:
        walk.spool.close()
        raise


def with_texts(value: dict[str, Any]) -> LongJSON:
    """Structured content that holds `LongText`s (the rest of it small: a reply's skeleton
    parsed), written indented as `_command._render.to_json` writes it made whole, each text
    escaped a piece at a time, so none is held whole. A wrapper `{"result": X}` is kept as X;
    NotStreamed where pydantic cannot write it (a lone surrogate)."""
    token = "\x00" + secrets.token_hex(8) + ":"  # in no string of a server's: it is made here
    texts: list[LongText] = []

    def stand_in(item: Any) -> Any:
        if type(item) is LongText:
            texts.append(item)
            return f"{token}{len(texts) - 1}"
        if type(item) is dict:
            return {key: stand_in(each) for key, each in item.items()}
        if type(item) is list:
            return [stand_in(each) for each in item]
        return item

    wrapped = value.keys() == {"result"}
    skeleton = _Writer.dumps(stand_in(value["result"] if wrapped else value))
    placeholder = re.compile(rb'"\\u0000' + token[1:].encode() + rb'(\d+)"')
    writer, at = _Writer(), 0
    for found in placeholder.finditer(skeleton):
        writer.write(skeleton[at:found.start()] + b'"')
        for piece in texts[int(found[1])].pieces():
            writer.write(_Writer.dumps(piece)[1:-1])
        writer.write(b'"')
        at = found.end()
    writer.write(skeleton[at:])
    return LongJSON(writer.text(), wrapped=wrapped)


class _Writer:
    """Indented JSON written to a new spool as it comes, a `LongText` of it at the end."""

    def __init__(self) -> None:
        self.spool = Spool()
        self._parts: list[bytes] = []
        self._held = self._chars = self._newlines = 0
        self._last = b""

    def text(self) -> LongText:
        self._flush()
        last = self._last[-1:].decode()
        return LongText.written(self.spool, 0, self.spool.size, self._chars, self._newlines, last)

    @staticmethod
    def dumps(value: Any) -> bytes:
        try:
            return to_json(value, indent=2)
        except (ValueError, RecursionError) as exc:  # as `to_json` of the whole would fail
            raise NotStreamed("pydantic cannot write it") from exc

    def write(self, data: bytes) -> None:
        self._parts.append(data)
        self._held += len(data)
        if self._held >= _FLUSH:
            self._flush()

    def _flush(self) -> None:
        if not self._parts:
            return
        data = b"".join(self._parts)
        self._parts.clear()
        self._held = 0
        self.spool.write(data)
        self._chars += len(data) if data.isascii() else len(data.decode())
        self._newlines += data.count(b"\n")
        self._last = data[-4:]

    def restart(self) -> None:
        self._parts.clear()
        self._held = self._chars = self._newlines = 0
        self.spool.truncate(0)


class _Walk(_Writer):
    def __init__(self, buf: bytes | bytearray, forbidden: bytes) -> None:
        super().__init__()
        self.buf, self.forbidden = buf, forbidden

    def wrapped(self, at: int) -> int | None:
        """Where the object ends when it is `{"result": X}`, X written alone; else None, nothing
        written. A first key "result" is taken for a wrapper until a second key comes."""
        key = _KEY.match(self.buf, at)
        if key is None or self._loads(key[1]) != "result":
            return None
        end = _NEXT.match(self.buf, self.value(key.end(), 0))
        if end is not None and end[1] == b"}":
            return end.end()
        self.restart()
        return None

    def value(self, at: int, depth: int) -> int:
        """The value at `at` written at `depth`; where it ends."""
        start, small = _small_value(self.buf, at)
        if small is None:
            return self.container(start, depth)
        self.write(_indent(self.dumps(self._loads(self.buf[start:small.end()])), depth))
        return small.end()

    def container(self, at: int, depth: int) -> int:
        """The array or object opening at `at` written at `depth`, its small members (or items)
        a run at a time, a large one walked in turn; where it ends."""
        members = _Members(self.buf[at] == 0x7B, depth + 1)
        end, count = _each(self.buf, at, lambda start, end: self._write_run(members, start, end),
                           lambda start: self._alone(start, members))
        if count == 0:
            self.write(b"{}" if members.is_object else b"[]")
        else:
            self.write(b"\n" + b"  " * depth + (b"}" if members.is_object else b"]"))
        return end

    def _alone(self, at: int, members: _Members) -> int:
        """One member (or item) too large or deep for a run, walked; where its value ends."""
        self.write(members.separator() + b"  " * members.depth)
        if members.is_object:
            key = _KEY.match(self.buf, at)
            if key is None:
                raise ValueError("expected a key")
            name = self._loads(key[1])
            members.check_keys([name])
            self.write(self.dumps(name) + b": ")
            at = key.end()
        return self.value(at, members.depth)

    def _write_run(self, members: _Members, start: int, end: int) -> None:
        body = self.buf[start:end]
        value = self._loads(b"{" + body + b"}" if members.is_object else b"[" + body + b"]")
        if members.is_object:
            members.check_keys(value)
        inner = self.dumps(value)[2:-2]  # its members, without the brackets and their newlines
        self.write(members.separator() + _indent(inner, members.depth - 1, first=True))

    def _loads(self, data: bytes | bytearray) -> Any:
        if self.forbidden in data:
            raise NotStreamed("a long string's marker")
        return json.loads(data)



class _Members:
    """What a container's walk keeps: the separator due, and its keys' hashes so far."""

    def __init__(self, is_object: bool, depth: int) -> None:
        self.is_object, self.depth = is_object, depth
        self._first = True
        self._keys: set[int] = set()  # hashes: a big object's keys are not kept twice

    def separator(self) -> bytes:
        """What comes before a member: after the container's opening bracket, or another member."""
        first, self._first = self._first, False
        return (b"{\n" if self.is_object else b"[\n") if first else b",\n"

    def check_keys(self, keys: Any) -> None:
        hashes = {hash(key) for key in keys}
        if not hashes.isdisjoint(self._keys):
            raise NotStreamed("a key that came before")  # or a hash's twin: parsed whole all the same
        self._keys |= hashes


# Words that check nothing (annotations): a schema of these alone takes any value.
_NOTHING = frozenset({"title", "description", "$comment", "default", "examples", "deprecated", "readOnly",
                      "writeOnly"})
_HOLDERS = frozenset({"$defs", "definitions", "$schema"})  # what a root holds beside what it checks
_OBJECT_KEYS = _NOTHING | _HOLDERS | {"type", "properties", "required", "additionalProperties"}
_ARRAY_KEYS = _NOTHING | _HOLDERS | {"type", "items"}
_UNIONS = frozenset({"anyOf", "oneOf"})


def meets(long: LongJSON, validator: Any) -> bool:
    """Whether the structured content `long` holds meets `validator`'s schema, walked through its
    file mapped and checked a run of values at a time where the schema is made of parts that check
    each value alone (`_Split`: an object's properties, an array's items), or comes to such a
    schema (`_Check._narrowed`: a local `$ref`, a union with one branch of the value's type); a
    value whose schema is not is checked whole. True only where the whole is valid; a caller that gets False checks
    the whole to say why (a key sent twice: its earlier value fails here, not there)."""
    check = _Check(long.mapped(), validator)
    if not long.wrapped:
        schema = validator.schema
    else:
        split = _Split.of(validator.schema)
        if split is None or not split.is_object:
            return bool(validator.is_valid(long.parsed()))
        if not set(split.required) <= {"result"}:
            return False
        schema = split.member("result")
    try:
        check.value(0, schema)
    except _Fails:
        return False
    return True


class _Fails(Exception):
    pass


class _Split:
    """A schema that checks an object member by member, or an array item by item: nothing in it
    but its parts' schemas, `required`, and words that check nothing."""

    def __init__(self, is_object: bool, parts: dict[str, Any], required: list[str], rest: Any) -> None:
        self.is_object, self._parts, self.required, self._rest = is_object, parts, required, rest

    @classmethod
    def of(cls, schema: Any) -> _Split | None:
        if type(schema) is not dict:
            return None
        if schema.get("type") == "object" and schema.keys() <= _OBJECT_KEYS:
            parts, required = schema.get("properties", {}), schema.get("required", [])
            rest = schema.get("additionalProperties", True)
            if (type(parts) is dict and type(required) is list and all(type(k) is str for k in required)
                    and type(rest) in (bool, dict)):
                return cls(True, parts, required, rest)
        elif schema.get("type") == "array" and schema.keys() <= _ARRAY_KEYS:
            items = schema.get("items", True)
            if type(items) in (bool, dict):
                return cls(False, {}, [], items)
        return None

    def member(self, key: str) -> Any:
        """The schema of an object's member `key`, or of an array's items."""
        return self._parts[key] if key in self._parts else self._rest


class _Check:
    """`meets`'s walk: `None` for a schema is a value only passed over (inside one checked whole)."""

    def __init__(self, buf: Any, validator: Any) -> None:
        self.buf, self._root = buf, validator
        self._made: dict[int, Any] = {}  # a validator per part's schema (the root's: `$ref`s resolve)
        # A local `$ref` points into the root document, unless an `$id` somewhere makes another base.
        self._plain_refs = '"$id"' not in json.dumps(validator.schema, default=repr)
        self.end = 0  # where the value `value` went through ends

    def fits(self, value: Any, schema: Any) -> None:
        if schema is None or schema is True:
            return
        made = self._made.get(id(schema))
        if made is None:
            made = self._made[id(schema)] = self._root.evolve(schema=schema)
        if not made.is_valid(value):
            raise _Fails

    def value(self, at: int, schema: Any) -> None:
        """`_Fails` unless the value at `at` meets `schema`; `self.end`: where it ends."""
        buf = self.buf
        if schema is False:
            raise _Fails
        if schema is True or (type(schema) is dict and schema.keys() <= _NOTHING):
            schema = None
        start, small = _small_value(buf, at)
        if small is not None:
            if schema is not None:
                self.fits(json.loads(buf[start:small.end()]), schema)
            self.end = small.end()
            return
        schema = self._narrowed(schema, "object" if buf[start] == 0x7B else "array")
        split = _Split.of(schema)
        if schema is not None and split is None:  # checked whole, its values made for the check alone
            self._walk(start, None)
            self.fits(json.loads(buf[start:self.end]), schema)
        elif split is not None and split.is_object != (buf[start] == 0x7B):
            raise _Fails
        else:
            self._walk(start, split)

    def _narrowed(self, schema: Any, kind: str) -> Any:
        """For a container of JSON type `kind`: `schema`, or what it comes to. A local `$ref` alone
        is its target; a union (`anyOf`, `oneOf`) whose other branches all refuse `kind` by their
        `type` is its one branch left (pydantic's `Optional[list[Row]]`, its `Optional[Row]`)."""
        for _ in range(8):  # a `$ref` may lead to another, or to itself
            if type(schema) is not dict:
                return schema
            words = schema.keys() - _NOTHING - _HOLDERS
            if words == {"$ref"}:
                target = _local(self._root.schema, schema["$ref"]) if self._plain_refs else None
                if target is None:
                    return schema
                schema = target
            elif len(words) == 1 and words <= _UNIONS and type(branches := schema[next(iter(words))]) is list:
                left = [branch for branch in branches if not _refuses(branch, kind)]
                if len(left) != 1:
                    return schema
                schema = left[0]
            else:
                return schema
        return schema

    def _walk(self, at: int, split: _Split | None) -> None:
        seen: set[str] = set()
        is_object = self.buf[at] == 0x7B

        def run(start: int, end: int) -> None:
            if split is None:
                return
            body = self.buf[start:end]
            values = json.loads(b"{" + body + b"}" if is_object else b"[" + body + b"]")
            for key, value in values.items() if is_object else ((None, v) for v in values):
                self.fits(value, split.member(key))
            seen.update(values if is_object else ())

        def one(start: int) -> int:
            key = None
            if is_object:
                found = _KEY.match(self.buf, start)
                if found is None:
                    raise ValueError("expected a key")
                key, start = json.loads(found[1]), found.end()
                seen.add(key)
            self.value(start, None if split is None else split.member(key))  # type: ignore[arg-type]
            return self.end

        self.end, _ = _each(self.buf, at, run, one)
        if split is not None and is_object and not set(split.required) <= seen:
            raise _Fails


def _refuses(branch: Any, kind: str) -> bool:
    """Whether a schema refuses every value of JSON type `kind` by its `type` (or by being false)."""
    if branch is False:
        return True
    kinds = branch.get("type") if type(branch) is dict else None
    return kind not in ([kinds] if type(kinds) is str else kinds if type(kinds) is list else [kind])


def _local(root: Any, ref: Any) -> Any:
    """The part of the schema `root` that a local `$ref` ("#/$defs/Row") points at; None for any other."""
    if type(ref) is not str or not ref.startswith("#/"):
        return None
    part = root
    for step in ref[2:].split("/"):
        step = step.replace("~1", "/").replace("~0", "~")
        if type(part) is dict and step in part:
            part = part[step]
        elif type(part) is list and step.isdigit() and int(step) < len(part):
            part = part[int(step)]
        else:
            return None
    return part


def _each(buf: bytes | bytearray, at: int, run: Callable[[int, int], None],
          one: Callable[[int], int]) -> tuple[int, int]:
    """Go through the container opening at `at`: `run(start, end)` for each run of small members
    (or items), to be parsed together; `one(start)` for each one to be walked, which returns where
    its value ends. Returns where the container ends, and how many calls were made."""
    parts = _parts(buf, at)
    sent: int | None = None
    count = 0
    try:
        while True:
            start, end = parts.send(sent)
            count += 1
            if end is None:
                sent = one(start)
            else:
                run(start, end)
                sent = None
    except StopIteration as done:
        return done.value, count


def _parts(buf: bytes | bytearray, at: int) -> Generator[tuple[int, int | None], int | None, int]:
    """For `_each`: (start, end) of each run, (start, None) of each member to walk (sent back:
    where its value ends); returns where the container ends."""
    is_object = buf[at] == 0x7B
    closing, wrong = (b"}", b"]") if is_object else (b"]", b"}")
    empty = _EMPTY.match(buf, at + 1)
    if empty is not None:
        if empty[1] != closing:
            raise ValueError("unmatched brackets")
        return empty.end()
    many, one = (_MEMBERS, _MEMBER) if is_object else (_ITEMS, _ITEM)
    at += 1
    passed = at
    while True:
        if at - passed > _RELEASE:
            _release(buf)
            passed = at
        run = many.match(buf, at, at + BATCH)  # not past its bound: a large one fails early
        if run.end() > at:
            yield at, run.end() - 1  # without its last comma
            at = run.end()
            continue
        single = one.match(buf, at, at + BIG)
        if single is not None:
            yield at, single.end(1)
            at, last = single.end(), single[2] != b","
        else:
            walked = yield at, None
            after = _NEXT.match(buf, walked)  # type: ignore[arg-type]
            if after is None or after[1] == wrong:
                raise ValueError("expected a comma or the container's end")
            at, last = after.end(), after[1] != b","
        if last:
            return at


def _release(buf: Any) -> None:
    """Let go of the pages of a mapped file read so far: they are read again from the file if
    touched again, and the walk's memory stays its runs'."""
    if type(buf) is mmap.mmap and _DONTNEED is not None:
        buf.madvise(_DONTNEED)


def _indent(data: bytes, depth: int, first: bool = False) -> bytes:
    """`data`, written as at depth 0, moved to `depth` (`first`: its first line too). JSON
    strings hold no newline, so each newline starts a line."""
    if depth <= 0:
        return data
    pad = b"  " * depth
    return (pad if first else b"") + data.replace(b"\n", b"\n" + pad)
