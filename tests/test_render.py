"""How a result becomes the text a script sees (`_command/_render.py`)."""

from __future__ import annotations

import datetime
import json

import pytest

from toolkernel._command._render import result_text, to_json
from toolkernel._providers._mcp._pool import _converted
from toolkernel._tool import ToolResult

PLAIN_VALUES = [
    {"number": 101, "title": "Add rate limiting to /search", "draft": False, "author": None},
    [{"id": i, "score": i * 0.5, "tags": ["a", "b"], "nested": {"x": [[], {}]}} for i in range(50)],
    {"text": 'quotes " and \\ and \n, \x00 \x1f \u2028 é 😀', "big": 2**70, "neg": -0.0, "exp": 1e22},
    [], {}, "just a string", 3, 0.1, True, None,
]


@pytest.mark.parametrize("value", PLAIN_VALUES)
def test_plain_json_is_written_as_json_dumps_writes_it(value):
    assert to_json(value, plain=True) == json.dumps(value, indent=2, ensure_ascii=False)


def test_an_mcp_servers_structured_result_is_plain_json_and_printed_indented():
    result = _converted(["ignored text"], [], {"b": [1, 2], "a": "x"}, False, False)
    assert result.plain_json
    assert result_text(result) == '{\n  "b": [\n    1,\n    2\n  ],\n  "a": "x"\n}\n'


def test_a_lone_surrogate_is_written_as_json_dumps_writes_it():
    value = {"half": "\ud800"}
    assert to_json(value, plain=True) == json.dumps(value, indent=2, ensure_ascii=False)


def test_an_own_tools_python_values_keep_their_str_form():
    # What is not JSON (a date, a set) is written as its str, as before: not pydantic's forms.
    value = {"when": datetime.date(2026, 12, 5), "set": {1}}
    result = ToolResult.json(value)
    assert not result.plain_json
    assert json.loads(result_text(result)) == {"when": "2026-12-05", "set": "{1}"}
