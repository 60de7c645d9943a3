"""Long structured content written indented as it is parsed (toolkernel/_providers/_long_json.py):
whatever the shape, the text is what `_render.to_json` writes for `json.loads` of the whole,
its values are what `json.loads` gives, and what a batch parse would read differently from
the whole parse is parsed whole instead (`NotStreamed`)."""

from __future__ import annotations

import json
import random

import pytest
from pydantic_core import to_json

from toolkernel._command._render import to_json as rendered
from toolkernel._longtext import LongJSON, LongText, Spool, whole
from toolkernel._providers._mcp import _long_json
from toolkernel._providers._mcp._long_json import NotStreamed, indented, reply

MARKER = b"\\u0000nonce:"
KEYS = ["id", "name", "é", "中", "a\"b", "\\", "", "k\n", "\U0001f600"]
SCALARS = [0, -1, 2.5, 1e-7, 3e300, -0.0, 10**30, True, False, None, "", "text", "é中\U0001f600",
           "\"\\/\b\f\n\r\t\u0001"]


def value_of(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth > 5 or roll < 0.35:
        return rng.choice(SCALARS)
    if roll < 0.65:
        return [value_of(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    return {rng.choice(KEYS) + str(rng.randint(0, 20)): value_of(rng, depth + 1) for _ in range(rng.randint(0, 6))}


def as_sent(value, rng: random.Random) -> bytes:
    """`value` as a server may write it: compact or spaced or indented, escaped or raw."""
    separators, indent = rng.choice([((",", ":"), None), ((", ", ": "), None), (None, 1), (None, "\t")])
    text = json.dumps(value, separators=separators, indent=indent, ensure_ascii=rng.random() < 0.5)
    return (" " * rng.randint(0, 2) + text).encode()


@pytest.fixture(params=[(8, 1), (40, 30), (300, 700), (1 << 16, 1 << 16)], ids=lambda p: f"big{p[0]}-batch{p[1]}")
def sizes(request, monkeypatch):
    """Small bounds walk most containers and cut runs short; the real ones, few."""
    big, batch = request.param
    monkeypatch.setattr(_long_json, "BIG", big)
    monkeypatch.setattr(_long_json, "BATCH", batch)


@pytest.mark.slow
def test_any_shape_is_written_as_the_whole_would_be(sizes):
    rng = random.Random(11)
    for _ in range(400):
        value = {"top": value_of(rng), "more": value_of(rng)}
        sent = as_sent(value, rng)
        long, end = indented(sent + b"  ", 0, MARKER)
        expected = rendered(value, plain=True)
        assert whole(long.text()) == expected
        assert "".join(long.text().pieces()) == expected
        assert len(long) == len(expected) and len(long.text()) == len(expected)
        assert end == len(sent)
        assert long.parsed() == value


@pytest.mark.slow
def test_a_wrapper_keeps_its_value_to_be_shown_alone(sizes):
    rng = random.Random(12)
    for _ in range(200):
        inner = value_of(rng)
        long, _ = indented(as_sent({"result": inner}, rng), 0, MARKER)
        assert long.wrapped
        assert whole(long.text()) == rendered({"result": inner}, plain=True)
        assert whole(long.unwrapped().text()) == rendered(inner, plain=True)
        assert long.parsed() == {"result": inner}
        assert long.unwrapped().parsed() == inner


def test_a_first_key_result_with_more_keys_is_an_object_again(sizes):
    value = {"result": list(range(50)), "count": 50, "more": {"a": [1, 2, 3] * 20}}
    long, _ = indented(json.dumps(value).encode(), 0, MARKER)
    assert not long.wrapped
    assert whole(long.text()) == rendered(value, plain=True)


@pytest.mark.parametrize("bad", [
    b'{"a": [1, 2}', b'{"a": 1,}', b'{"a" 1}', b'{"a": [1 2]}', b'{"a": {"b": 1]}', b'{"a": tru}',
    b'{"a": [1, 2]', b'{"a": "x}', b'{"a": [[1,2],[3,4}]}', b'{"a": [1,]}', b'{,}', b'{"a": 1 "b": 2}',
    b'{"a": [{"k": 1}, {"k": 2}}', b'{"a": [' + b"1," * 500 + b"]}", b'{"a": {' + b'"k": 1,' * 300 + b"}}",
    b'{"a": 01}', b'{"a": [1, 2] ] }', b'{"a": "\\x"}',
])
def test_what_is_not_json_fails_as_json_loads_does(sizes, bad):
    with pytest.raises(ValueError):
        json.loads(bad)
    with pytest.raises(ValueError):
        indented(bad, 0, MARKER)


def test_a_key_that_comes_again_is_parsed_whole(monkeypatch):
    monkeypatch.setattr(_long_json, "BATCH", 16)
    sent = b'{"a": 1, "b": [' + b"1," * 40 + b'2], "a": 2}'
    with pytest.raises(NotStreamed):
        indented(sent, 0, MARKER)
    line = b'{"jsonrpc":"2.0","id":"t-1","result":{"structuredContent":' + sent + b"}}"
    monkeypatch.setattr(_long_json, "STREAM_AT", 8)
    assert reply(line, MARKER) == json.loads(line)  # the last value, in the first one's place


def test_a_key_twice_in_one_run_reads_as_the_whole_parse():
    sent = b'{"a": 1, "a": 3, "b": 2}'
    long, _ = indented(sent, 0, MARKER)
    assert long.parsed() == json.loads(sent) and whole(long.text()) == rendered(json.loads(sent), plain=True)


def test_a_long_strings_marker_inside_is_left_to_the_whole_parse(monkeypatch):
    monkeypatch.setattr(_long_json, "BIG", 8)
    for sent in (b'{"rows": [1, 2, "\\u0000nonce:0", 4]}', b'{"rows": {"\\u0000nonce:1": [1, 2, 3, 4, 5]}}'):
        with pytest.raises(NotStreamed):
            indented(sent, 0, MARKER)


def test_nesting_past_the_recursion_limit_is_left_to_the_whole_parse():
    deep = b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    with pytest.raises(NotStreamed):
        indented(deep, 0, MARKER)


def test_a_value_pydantic_cannot_write_is_left_to_the_whole_parse():
    with pytest.raises(NotStreamed):
        indented(b'{"a": ["\\ud800"]}', 0, MARKER)  # a lone surrogate: `to_json` writes the whole by json.dumps


@pytest.mark.parametrize("sent", [b"[1, 2]", b'"text"', b"5"])
def test_only_an_object_is_walked(sent):
    with pytest.raises(NotStreamed):
        indented(sent, 0, MARKER)


def rows(count: int) -> dict:
    return {"rows": [{"id": n, "name": f"row {n}", "tags": ["a", "b"], "score": n / 2} for n in range(count)]}


def message(structured, *, id_last: bool = False) -> dict:
    result = {"content": [{"type": "text", "text": "\u0000nonce:0"}], "structuredContent": structured,
              "isError": False}
    if id_last:
        return {"result": result, "jsonrpc": "2.0", "id": "t-1"}
    return {"jsonrpc": "2.0", "id": "t-1", "result": result}


@pytest.mark.parametrize("id_last", [False, True])
def test_a_reply_keeps_its_long_structured_content_in_a_file(id_last):
    sent = message(rows(5000), id_last=id_last)
    got = reply(json.dumps(sent, separators=(",", ":")).encode(), MARKER)
    long = got["result"].pop("structuredContent")
    assert type(long) is LongJSON
    assert whole(long.text()) == rendered(rows(5000), plain=True) and long.parsed() == rows(5000)
    del sent["result"]["structuredContent"]
    assert got == sent  # the rest as json.loads gives it


def test_a_reply_with_short_structured_content_is_parsed_as_it_was():
    sent = json.dumps(message(rows(3))).encode()
    assert reply(sent, MARKER) == json.loads(sent)


@pytest.mark.parametrize("line", [
    json.dumps(message(rows(5000))).encode() + b" x",
    json.dumps(message(rows(5000))).encode()[:-1],
    json.dumps(message(rows(5000))).encode()[:-1] + b",}",
])
def test_a_reply_that_is_not_json_fails_as_json_loads_does(line):
    with pytest.raises(ValueError):
        reply(line, MARKER)


@pytest.mark.slow
def test_a_reply_with_its_structured_content_twice_keeps_the_last():
    first, second = json.dumps(rows(5000)), json.dumps(rows(4000))
    line = ('{"jsonrpc":"2.0","id":"t-1","result":{"structuredContent":%s,"content":[],"structuredContent":%s}}'
            % (first, second)).encode()
    assert reply(line, MARKER)["result"]["structuredContent"].parsed() == rows(4000)


def test_a_written_text_reads_whole_across_its_pieces(monkeypatch):
    monkeypatch.setattr(LongText, "PIECE", 7)  # cuts land inside multi-byte characters
    text = "{\n  \"é中\U0001f600\": [\n    1\n  ]\n}" * 20
    spool = Spool()
    spool.write(text.encode())
    long = LongText.written(spool, 0, spool.size, len(text), text.count("\n"), text[-1])
    assert "".join(long.pieces()) == text and len(long) == len(text)
    nested = long.nested("<", "  ", ">")
    assert str(nested) == "<" + text.replace("\n", "\n  ") + ">" and len(nested) == len(str(nested))


@pytest.mark.slow
def test_rows_are_written_a_run_at_a_time_not_one_by_one(monkeypatch):
    parsed = []
    loads = json.loads
    monkeypatch.setattr(_long_json.json, "loads", lambda data: parsed.append(len(data)) or loads(data))
    long, _ = indented(json.dumps(rows(20000)).encode(), 0, MARKER)
    assert whole(long.text()) == to_json(rows(20000), indent=2).decode()
    assert len(parsed) < 100  # runs of about BATCH bytes (1.4 MB here), not a parse per row


TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null", list: "array",
         dict: "object"}


def schema_for(value, rng: random.Random, defs: dict | None = None):
    """A schema for `value`, most often one it meets, and now and then one it breaks in one place;
    a container's now and then a union with branches of other types (narrowed to its one branch
    by `meets`) or not, or a `$ref` to `defs`, the root's `$defs`."""
    schema = _schema_for(value, rng, defs)
    if not isinstance(value, (dict, list)) or not isinstance(schema, dict):
        return schema
    roll = rng.random()
    if roll < 0.08:
        other = rng.choice([{"type": "null"}, {"type": ["string", "integer"]}, False,
                            {"type": "object" if isinstance(value, list) else "array"}])
        branches = [schema, other] if rng.random() < 0.5 else [other, schema]
        return {rng.choice(["anyOf", "oneOf"]): branches, "default": None, "title": "T"}
    if roll < 0.11:  # a branch of the same type: not narrowed, checked whole
        return {"anyOf": [schema, {"type": "object" if isinstance(value, dict) else "array"}]}
    if roll < 0.16 and defs is not None:
        name = f"D{len(defs)}"
        defs[name] = schema
        return {"$ref": f"#/$defs/{name}", "description": "a reference"}
    return schema


def _schema_for(value, rng: random.Random, defs: dict | None):
    roll = rng.random()
    if roll < 0.04:
        return {"type": "string"} if not isinstance(value, str) else {"type": "integer"}  # broken here
    if roll < 0.08:
        return rng.choice([True, {}, {"title": "any"}, {"minLength": 0}])
    if isinstance(value, dict):
        keys = list(value)
        schema = {"type": "object", "properties": {k: schema_for(value[k], rng, defs) for k in keys
                                                   if rng.random() < 0.7},
                  "required": [k for k in keys if rng.random() < 0.5] + (["missing"] if rng.random() < 0.05 else [])}
        schema["additionalProperties"] = rng.choice([True, {"title": "any"}, False if rng.random() < 0.1 else True])
        if rng.random() < 0.1:
            schema["minProperties"] = 0  # not split: checked whole
        return schema
    if isinstance(value, list):
        schema = {"type": "array"}
        if value and rng.random() < 0.8:
            schema["items"] = {"anyOf": [schema_for(item, rng, defs) for item in value[:3]]} if rng.random() < 0.2 \
                else schema_for(value[0], rng, defs) if all(type(v) is type(value[0]) for v in value) else True
        return schema
    return {"type": "number"} if type(value) in (int, float) and rng.random() < 0.5 else {"type": TYPES[type(value)]}


@pytest.mark.slow
def test_a_schema_check_a_run_at_a_time_agrees_with_the_whole(sizes):
    from jsonschema import Draft202012Validator

    from toolkernel._providers._mcp._long_json import meets

    rng = random.Random(13)
    agreed = {True: 0, False: 0}
    for _ in range(300):
        value = {"top": value_of(rng), "rows": [value_of(rng) for _ in range(rng.randint(0, 8))]}
        wrap = rng.random() < 0.25
        structured = {"result": value} if wrap else value
        defs: dict = {}
        schema = schema_for(structured, rng, defs)
        if rng.random() < 0.1 and isinstance(schema, dict):
            schema = {"$defs": {"Inner": schema, **defs}, "$ref": "#/$defs/Inner"}  # a root reference
        elif defs and isinstance(schema, dict):
            schema = {**schema, "$defs": defs}
        elif rng.random() < 0.1:
            schema = {"type": "object", "$defs": {"Inner": schema_for(value, rng)},
                      "properties": {"result": {"$ref": "#/$defs/Inner"}}}
        validator = Draft202012Validator(schema)
        long, _ = indented(json.dumps(structured).encode(), 0, MARKER)
        assert long.wrapped == wrap
        whole_says = validator.is_valid(structured)
        assert meets(long, validator) == whole_says, (schema, structured)
        agreed[whole_says] += 1
    assert min(agreed.values()) > 30  # both answers were asked for


@pytest.mark.slow
def test_a_schema_check_of_long_rows_reads_them_a_run_at_a_time(monkeypatch):
    from jsonschema import Draft202012Validator

    from toolkernel._providers._mcp._long_json import meets

    parsed = []
    loads = json.loads
    monkeypatch.setattr(_long_json.json, "loads", lambda data: parsed.append(len(data)) or loads(data))
    listed = rows(20000)["rows"]
    long, _ = indented(json.dumps({"result": listed}).encode(), 0, MARKER)
    row = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}, "required": ["id"]}
    schema = {"type": "object", "properties": {"result": {"type": "array", "items": {"$ref": "#/$defs/Row"}}},
              "required": ["result"], "$defs": {"Row": row}}
    parsed.clear()
    assert meets(long, Draft202012Validator(schema))
    assert parsed and max(parsed) < 100_000  # never the whole
    listed[7000]["id"] = "seven thousand"
    long, _ = indented(json.dumps({"result": listed}).encode(), 0, MARKER)
    assert not meets(long, Draft202012Validator(schema))


@pytest.mark.slow
def test_optional_rows_and_a_root_reference_are_checked_a_run_at_a_time(monkeypatch):
    # pydantic's schemas: `rows: Optional[list[Row]] = None`, and a model at the root as a `$ref`.
    from jsonschema import Draft202012Validator

    from toolkernel._providers._mcp._long_json import meets

    parsed = []
    loads = json.loads
    monkeypatch.setattr(_long_json.json, "loads", lambda data: parsed.append(len(data)) or loads(data))
    value = rows(20000)
    long, _ = indented(json.dumps(value).encode(), 0, MARKER)
    row = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"], "title": "Row"}
    table = {"type": "object", "title": "Table", "required": ["rows"], "properties": {"rows": {
        "anyOf": [{"type": "array", "items": {"$ref": "#/$defs/Row"}}, {"type": "null"}], "default": None}}}
    for schema in ({**table, "$defs": {"Row": row}}, {"$ref": "#/$defs/Table", "$defs": {"Row": row, "Table": table}}):
        parsed.clear()
        assert meets(long, Draft202012Validator(schema))
        assert parsed and max(parsed) < 100_000  # never the whole
    value["rows"][9000]["id"] = None
    long, _ = indented(json.dumps(value).encode(), 0, MARKER)
    assert not meets(long, Draft202012Validator({**table, "$defs": {"Row": row}}))


# --- structured content that holds long texts (`with_texts`) ---------------------------------

def long_text(text: str) -> LongText:
    """`text` as a long line's string comes: its JSON body, escaped, in a spool."""
    spool = Spool()
    body = json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8", "surrogatepass")
    spool.write(body)
    return LongText(spool, 0, len(body))


def with_long_texts(rng: random.Random, value):
    """`value` with some of its strings made `LongText`s (and longer), and the same made whole."""
    if isinstance(value, str) and rng.random() < 0.5:
        text = value * rng.randint(1, 3000)
        return long_text(text), text
    if isinstance(value, list):
        pairs = [with_long_texts(rng, item) for item in value]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    if isinstance(value, dict):
        pairs = {key: with_long_texts(rng, item) for key, item in value.items()}
        return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}
    return value, value


@pytest.mark.slow
def test_long_texts_inside_structured_content_are_written_as_the_whole_would_be(monkeypatch):
    monkeypatch.setattr(LongText, "PIECE", 97)  # pieces cut inside escapes and characters
    rng = random.Random(5)
    seen = 0
    for _ in range(70):
        value, expected = with_long_texts(rng, {"top": value_of(rng), "text": rng.choice(SCALARS[-2:]),
                                                "more": value_of(rng)})
        long = _long_json.with_texts(value)
        assert whole(long.text()) == rendered(expected, plain=True) and len(long) == len(whole(long.text()))
        assert long.parsed() == expected and not long.wrapped
        seen += type(value["text"]) is LongText
    assert seen > 15


def test_a_wrapper_around_structured_content_with_long_texts_keeps_its_value_to_be_shown_alone():
    text = "row é\n" * 10000
    long = _long_json.with_texts({"result": [{"body": long_text(text)}, 1]})
    assert long.wrapped and long.unwrapped().parsed() == [{"body": text}, 1]
    assert whole(long.text()) == rendered({"result": [{"body": text}, 1]}, plain=True)


def test_a_long_text_pydantic_cannot_write_is_left_to_the_whole():
    with pytest.raises(NotStreamed):
        _long_json.with_texts({"body": long_text("lone \ud800 surrogate " * 500)})
