"""A long line of an MCP server's reply taken in as it arrives (toolkernel/_providers/_spool.py),
its long strings kept in a file and read back in pieces (toolkernel/_longtext.py): whatever
the pieces the line arrives in and the text is read in, it is the text `json.loads` gives."""

from __future__ import annotations

import json
import random

import pytest

from toolkernel._longtext import LongText, Spool, pieces, whole
from toolkernel._providers._mcp._spool import LONG, LongLine

NONCE = "0123abcd"
# Every kind of character a JSON string writes differently: escapes, a pair of surrogates written
# as two escapes or raw, multi-byte UTF-8, a quote, backslashes.
ODD = ['"', "\\", "\\\\", "\n", "\t", "\u0001", "é", "中", "\U0001f600", "/", "\u2028", "a"]


def odd_text(length: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(ODD) for _ in range(length))


def encoded(value, ascii_only: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":")).encode("utf-8", "surrogatepass")


def fed(line: bytes, sizes: list[int]) -> LongLine:
    long = LongLine(NONCE)
    at = 0
    for size in sizes:
        long.feed(line[at:at + size])
        at += size
    long.feed(line[at:])
    return long


def placed(value, texts):
    """What the lane hands on: each marker its text (as the lane's `_placed`, made whole here)."""
    if isinstance(value, str):
        return whole(texts[value]) if value in texts else value
    if isinstance(value, list):
        return [placed(item, texts) for item in value]
    if isinstance(value, dict):
        return {key: placed(item, texts) for key, item in value.items()}
    return value


def spooled(text_bytes: bytes, piece: int) -> LongText:
    spool = Spool()
    spool.write(b"xx" + text_bytes)
    long = LongText.__new__(LongText)
    long.PIECE = piece  # small pieces: every cut lands somewhere odd
    LongText.__init__(long, spool, 2, 2 + len(text_bytes))
    return long


@pytest.mark.parametrize("ascii_only", [False, True])
@pytest.mark.parametrize("piece", [7, 8, 13, 64, 1 << 18])
def test_a_long_text_reads_back_as_json_decodes_it_whatever_the_pieces(ascii_only, piece):
    text = odd_text(3000, seed=piece)
    body = encoded(text, ascii_only)[1:-1]
    long = spooled(body, piece)
    assert str(long) == text
    assert len(long) == len(text)
    assert "".join(long.pieces()) == text
    assert long.endswith(text[-1]) and not long.endswith("\x00")


def test_a_suffix_comes_after_the_text_and_counts():
    long = spooled(b"abc", 1 << 18)
    lined = long.with_suffix("\n")
    assert str(lined) == "abc\n" and len(lined) == 4 and lined.endswith("\n")
    assert str(long) == "abc"  # the text itself is unchanged


@pytest.mark.parametrize("body", [b"a\\x", b"bad \x01 control", b"\\ud83", b"a\\", b"\xff\xfe", b'a"b'])
def test_a_body_that_is_no_json_string_is_refused_when_made(body):
    with pytest.raises(ValueError):
        spooled(body * 50, 16)


def test_pieces_and_whole_take_a_str_too():
    assert whole("abc") == "abc"
    assert list(pieces("abcdefg", 3)) == ["abc", "def", "g"]


def reply(text: str, extra=None) -> dict:
    result = {"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}}
    return {"jsonrpc": "2.0", "id": "toolkernel-1", "result": result | (extra or {})}


@pytest.mark.parametrize("ascii_only", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_a_long_line_fed_in_any_pieces_parses_to_the_same_message(ascii_only, seed):
    rng = random.Random(seed)
    shorts = [odd_text(rng.choice([0, 5, LONG - 1, LONG]), seed + n) for n in range(20)]
    message = reply(odd_text(LONG * 3, seed), {"shorts": shorts, "n": [1, 2.5, None, True]})
    line = encoded(message, ascii_only)
    sizes = [rng.choice([1, 2, 3, 50, 4096, 70_000]) for _ in range(200)]
    long = fed(line, sizes)
    texts = long.finish()
    assert placed(json.loads(long.skeleton), texts) == message
    assert long.whole() == line  # a line for the session goes on as it came
    assert len(long.skeleton) < len(line) // 3  # the long text is in the file, not the skeleton


def test_a_string_sent_twice_is_kept_once():
    text = odd_text(LONG * 10, seed=1)
    long = fed(encoded(reply(text), False), [1000] * 100)
    texts = long.finish()
    assert len(texts) == 1  # the text and {"result": text}: one marker for both
    (only,) = texts.values()
    assert long._spool.size == len(encoded(text, False)) - 2
    assert str(only) == text


def test_strings_up_to_long_stay_in_the_skeleton():
    message = reply("x" * LONG)
    long = fed(encoded(message, True), [10] * 1000)
    assert long.finish() == {}
    assert json.loads(long.skeleton) == message


def test_a_line_that_ends_inside_a_long_string_is_refused_and_kept_as_it_came():
    line = encoded(reply("y" * (LONG * 2)), True)[:LONG + 100]
    long = fed(line, [999] * 5)
    with pytest.raises(ValueError):
        long.finish()
    assert long.whole() == line


def test_a_string_shaped_like_a_marker_without_the_nonce_stays_a_string():
    # The nonce is the lane's secret (`Lane._nonce`, never sent): a server cannot name a marker.
    message = reply("z" * (LONG + 1), {"other": "\x00elsewhere:0"})
    long = fed(encoded(message, True), [333] * 100)
    texts = long.finish()
    value = placed(json.loads(long.skeleton), texts)
    assert value["result"]["other"] == "\x00elsewhere:0"
    assert value["result"]["content"][0]["text"] == "z" * (LONG + 1)


def test_a_line_past_the_cap_is_dropped_and_names_its_request(monkeypatch):
    import toolkernel._providers._mcp._spool as spool_module

    monkeypatch.setattr(spool_module, "LINE_CAP", LONG * 8)
    line = encoded(reply("w" * (LONG * 20)), True)
    long = fed(line, [LONG] * 30)
    assert long.failed == "it is longer than 0 GiB"
    assert long.request_id() == "toolkernel-1"
    assert len(long.skeleton) <= 256


def test_the_id_is_found_at_the_end_of_a_line_too(monkeypatch):
    import toolkernel._providers._mcp._spool as spool_module

    monkeypatch.setattr(spool_module, "LINE_CAP", LONG * 8)
    message = {"result": reply("v" * (LONG * 20))["result"], "jsonrpc": "2.0", "id": "toolkernel-7"}
    long = fed(encoded(message, True), [LONG] * 30)
    assert long.failed is not None
    assert long.request_id() == "toolkernel-7"


def test_a_disk_that_refuses_the_text_drops_the_line_saying_so(monkeypatch):
    def full(self, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Spool, "write", full)
    long = fed(encoded(reply("u" * (LONG * 3)), True), [LONG] * 10)
    assert long.failed == "the disk did not take it (No space left on device)"
    assert long.request_id() == "toolkernel-1"


def test_a_text_sent_twice_escaped_two_ways_is_still_the_result():
    from toolkernel._providers._mcp._pool import _converted, _long_text_kept

    text = odd_text(LONG * 2, seed=9)
    raw, escaped = spooled(encoded(text, False)[1:-1], 1 << 18), spooled(encoded(text, True)[1:-1], 1 << 18)
    texts, structured, checked = _long_text_kept([raw], {"result": escaped})
    assert checked == {"result": raw} and structured["result"] is raw
    result = _converted(texts, [], structured, False, True)
    assert result.structured is None and result.texts == [raw]  # printed as the text it is

    other = spooled(encoded(text[:-1] + "!", True)[1:-1], 1 << 18)
    texts, structured, checked = _long_text_kept([raw], {"result": other})
    assert checked is None and structured == {"result": text[:-1] + "!"}  # made a str: printed as JSON


def test_a_line_that_holds_too_much_outside_strings_is_dropped(monkeypatch):
    import toolkernel._providers._mcp._spool as spool_module

    monkeypatch.setattr(spool_module, "HELD_CAP", 10_000)
    long = fed(encoded({"jsonrpc": "2.0", "id": "toolkernel-3", "result": {"n": list(range(5000))}}, True),
               [1000] * 40)
    assert long.failed == "it holds more than 0 MiB outside its long strings"
    assert long.request_id() == "toolkernel-3"


def test_the_reply_gets_each_long_text_in_its_places_and_says_if_structured_content_has_one():
    from toolkernel._providers._mcp._spool import placed

    text, key = odd_text(LONG * 2, seed=3), "k" * (LONG + 1)
    rows = [{"id": n} for n in range(3)]
    for structured, inside in (({"result": text}, True), ({"rows": rows}, False), ({key: 1}, True)):
        message = {"jsonrpc": "2.0", "id": "toolkernel-1",
                   "result": {"content": [{"type": "text", "text": text}], "structuredContent": structured}}
        long = fed(encoded(message, True), [5000] * 40)
        texts = long.finish()
        reply = placed(json.loads(long.skeleton)["result"], texts, long.markers())
        (only,) = [t for t in texts.values() if len(t) == len(text)]
        assert reply["content"][0]["text"] is only
        assert reply.structured_long is inside
        expected = {"result": only} if "result" in structured else structured
        assert reply["structuredContent"] == expected
