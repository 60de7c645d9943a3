"""Fuzz: random argv and stdin for the `tools` builtin, each through a real Bashkit run.

Every run must either succeed (exit 0, nothing on stderr) or fail with exactly one
documented JSON error line on stderr and exit 1. The vectors lean on what the
parser treats specially (tool and server names, key=value, --key value, JSON
arguments, `-` for stdin, --help) and mix in arbitrary text.

CI runs a fixed seed (0, or TOOLKERNEL_FUZZ_SEED). The number of examples is
TOOLKERNEL_FUZZ_EXAMPLES: 500 by default, which CI runs in about 2 minutes (a run
costs 0.1-0.2 s on a shared 2-core machine, so 10,000 take 20-30 minutes);
`TOOLKERNEL_FUZZ_EXAMPLES=10000` runs the full count; another TOOLKERNEL_FUZZ_SEED
draws another fixed sequence (to spread a long run over processes).
"""

from __future__ import annotations

import json
import os
import shlex

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from kernel_helpers import RecordingSink, github_toml, isolated_env, policy_toml, write_config
from toolkernel import tool
from toolkernel._errors import ERROR_CODES
from toolkernel._session import Session

EXAMPLES = int(os.environ.get("TOOLKERNEL_FUZZ_EXAMPLES", "500"))
SEED = int(os.environ.get("TOOLKERNEL_FUZZ_SEED", "0"))

pytestmark = pytest.mark.timeout(max(600, EXAMPLES))  # about 0.2 s a run, with room

SCHEMA = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "pattern": "^[^!]*$"},
        "count": {"type": "integer", "minimum": 0},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "nested": {"$ref": "#/$defs/node"},
    },
    "$defs": {"node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}}},
    "additionalProperties": False,
}


@tool("fuzz_echo", description="Give the input back (fuzz test tool).", input_schema=SCHEMA, kind="read")
def fuzz_echo(arguments, ctx):
    return arguments


@tool("fuzz_fail", description="Always fail (fuzz test tool).", input_schema={"type": "object"}, kind="read")
def fuzz_fail(arguments, ctx):
    raise ValueError(f"failing on purpose with {sorted(arguments)}")


HEADS = ["fuzz_echo", "fuzz-echo", "fuzz_fail", "github", "mcp_github__get_pull", "github get-pull",
         "github list-pulls", "search", "help", "--help", "-h", "read-file", "glob", "todo-write",
         "web-fetch", "write-file", "no-such-tool", "notebook-read", "notebook-run"]
KEYS = ["text", "count", "flag", "tags", "nested", "repo", "number", "state", "path", "file_path",
        "pattern", "url", "todos", "Text", "", "=", "-"]
SPECIAL = ["-", "--help", "-h", "--", "--=", "=", "{", "[", "{}", "[]", "null", "'", '"', "\\", "--flag",
           "--count", "true", "{\"a\":", "[1,2", "1e999", "NaN", "-1"]

printable = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
text = st.text(printable, max_size=24)
# Inside JSON any code point can be written as an escape, NUL and half a surrogate pair too
# (json.dumps writes them as \u0000 and \ud800): input no file name or argv can carry.
json_string = st.text(st.characters() | st.sampled_from(["\x00", "\ud800", "\udfff", "/", "."]), max_size=24)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | json_string,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS) | json_string, inner, max_size=3),
    max_leaves=8,
)
json_text = json_value.map(json.dumps)
deep_json = st.integers(1, 400).map(lambda depth: '{"nested": ' + '{"child": ' * depth + "{}" + "}" * depth + "}")
word = st.one_of(
    st.sampled_from(HEADS),
    st.sampled_from(SPECIAL),
    text,
    st.builds("{}={}".format, st.sampled_from(KEYS) | text, text | json_text),
    st.builds("--{}".format, st.sampled_from(KEYS) | text),
    json_text,
    deep_json,
)
# A path tool given a path of any code points: what reaches the system calls.
PATH_CALLS = {"read-file": {}, "write-file": {"content": ""}, "notebook-read": {},
              "glob-search": {"pattern": "*"}, "grep-search": {"pattern": "x"}}
path_call = st.tuples(st.sampled_from(sorted(PATH_CALLS)), json_string).map(
    lambda call: [call[0], json.dumps({"notebook_path" if call[0] == "notebook-read" else "path": call[1],
                                       **PATH_CALLS[call[0]]})])
argv = st.lists(word, max_size=6) | path_call
stdin = st.none() | text | json_text | deep_json


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in isolated_env(root).items():
            mp.setenv(key, value)
        project = root / "project"
        project.mkdir()
        # web-fetch is denied: a random URL must not reach the network.
        write_config(project, github_toml() + policy_toml(allow=["mcp_github"], deny=["web-fetch"]))
        session = Session(project)
        session.extra_tools = [fuzz_echo, fuzz_fail]
        yield session
        session.close()


def script_for(words: list[str], data: str | None) -> str:
    command = "tools " + " ".join(shlex.quote(w) for w in words)
    if data is None:
        return command
    return f"printf '%s' {shlex.quote(data)} | {command}"


@pytest.mark.slow
@settings(max_examples=EXAMPLES, derandomize=False, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@seed(SEED)
@given(words=argv, data=stdin)
def test_every_tools_failure_is_one_documented_json_line(session, words, data):
    script = script_for(words, data)
    sink = RecordingSink()
    result = session.run_script(script, sink)
    stderr = sink.stderr_text
    if result.exit_code == 0:
        assert stderr == "", script
        return
    assert result.exit_code == 1, (script, result.exit_code, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1 and stderr.endswith("\n"), (script, stderr)
    error = json.loads(lines[0])["error"]
    assert error["code"] in ERROR_CODES, (script, stderr)
    assert isinstance(error["message"], str) and isinstance(error["retryable"], bool), (script, stderr)
