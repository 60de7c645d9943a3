"""The `tools` command line: which command, and the input it builds."""

import pytest

from toolkernel._command._catalog import Catalog
from toolkernel._command._cli import Command, parse_input, split_command
from toolkernel._errors import InvalidInput

SCHEMA = {
    "type": "object",
    "properties": {
        "repo": {"type": "string"},
        "number": {"type": "integer"},
        "draft": {"type": "boolean"},
        "labels": {"type": "array"},
        "state": {"enum": ["open", "closed"]},
    },
}


def is_server(word):
    return word.replace("-", "_") in {"github", "my_docs"}


@pytest.mark.parametrize("argv, expected", [
    ([], Command("help")),
    (["--help"], Command("help")),
    (["-h"], Command("help")),
    (["search", "pull", "request"], Command("search", args=("pull", "request"))),
    (["github"], Command("server_help", server="github")),
    (["github", "--help"], Command("server_help", server="github")),
    (["my-docs", "-h"], Command("server_help", server="my-docs")),
    (["github", "list-pulls", "--help"], Command("tool_help", "github", "list-pulls", ("--help",))),
    (["read-file", "--help"], Command("tool_help", None, "read-file", ("--help",))),
    (["github", "get-pull", "number=1"], Command("call", "github", "get-pull", ("number=1",))),
    (["read-file", "path=x"], Command("call", None, "read-file", ("path=x",))),
    (["mcp_github__list_pulls", "repo=a"], Command("call", "github", "list_pulls", ("repo=a",))),
    (["mcp__github__list_pulls"], Command("call", "github", "list_pulls", ())),
])
def test_split_command(argv, expected):
    assert split_command(argv, is_server, Catalog.split_qualified) == expected


def test_unknown_qualified_server_is_a_top_level_tool_name():
    cmd = split_command(["mcp_nope__x"], is_server, Catalog.split_qualified)
    assert (cmd.action, cmd.server, cmd.tool) == ("call", None, "mcp_nope__x")


def test_json_argument_then_pairs_merge_over_it():
    got = parse_input(['{"repo": "a/b", "number": 1}', "number=7", "--state", "closed"], SCHEMA, None)
    assert got == {"repo": "a/b", "number": 7, "state": "closed"}


def test_values_are_json_unless_the_schema_says_string():
    got = parse_input(["repo=42", "number=7", "labels=[\"x\"]", "other=true", "word=hello"], SCHEMA, None)
    assert got == {"repo": "42", "number": 7, "labels": ["x"], "other": True, "word": "hello"}


def test_flags():
    assert parse_input(["--draft"], SCHEMA, None) == {"draft": True}
    assert parse_input(["--draft", "repo=x"], SCHEMA, None) == {"draft": True, "repo": "x"}
    assert parse_input(["--verbose"], SCHEMA, None) == {"verbose": True}
    assert parse_input(["--verbose", "--draft"], SCHEMA, None) == {"verbose": True, "draft": True}
    assert parse_input(["--number=3", "--repo", "a/b"], SCHEMA, None) == {"number": 3, "repo": "a/b"}


def test_stdin_is_read_with_dash_and_pairs_merge_over_it():
    assert parse_input(["-", "number=2"], SCHEMA, '{"repo": "a", "number": 1}') == {"repo": "a", "number": 2}


def test_stdin_is_the_input_when_no_argument_is_given():
    assert parse_input([], SCHEMA, '{"repo": "a"}\n') == {"repo": "a"}
    assert parse_input([], SCHEMA, "") == {}
    assert parse_input([], SCHEMA, None) == {}


def test_stdin_is_never_read_when_arguments_are_given():
    # Inside `while read`, stdin holds the rest of the loop's lines.
    assert parse_input(["number=1"], SCHEMA, "2\n3\n") == {"number": 1}


@pytest.mark.parametrize("args, stdin, words", [
    (["[1, 2]"], None, "must be a JSON object, got list"),
    (['{"a": 1'], None, "not valid JSON"),
    (["-"], "[1]", "must be a JSON object"),
    (["-"], "not json", "stdin is not valid JSON"),
    (["positional"], None, "unexpected argument 'positional'"),
    (['{"a": 1}', '{"b": 2}'], None, "more than one JSON"),
])
def test_bad_input_is_invalid_input(args, stdin, words):
    with pytest.raises(InvalidInput, match=words):
        parse_input(args, SCHEMA, stdin)


@pytest.mark.parametrize("args, hint", [
    (["notes.txt"], "(did you mean repo=notes.txt?)"),
    (["repo=a/b", "7"], None),  # nothing required is missing: no guess
    (["my notes.txt"], "(did you mean 'repo=my notes.txt'?)"),  # as it would be typed in the shell
])
def test_a_bare_word_suggests_the_first_required_key_not_given(args, hint):
    with pytest.raises(InvalidInput) as caught:
        parse_input(args, {**SCHEMA, "required": ["repo"]}, None)
    message = caught.value.message
    assert (hint in message) if hint else "did you mean" not in message


@pytest.mark.parametrize("word, key", [
    ("101", "number"),  # `get-pull 101`: the integer key, not the first one
    ("true", "draft"),
    ("acme/api", "repo"),
    ("1.5", "repo"),  # no key takes a fraction: the first
])
def test_a_bare_word_suggests_the_required_key_of_its_own_type(word, key):
    schema = {**SCHEMA, "required": ["repo", "number", "draft"]}
    with pytest.raises(InvalidInput, match=f"did you mean {key}={word}"):
        parse_input([word], schema, None)


@pytest.mark.parametrize("properties", [{"repo": {"type": {"odd": 1}}}, {"repo": "nonsense"}, "nonsense"])
def test_a_guess_over_an_odd_schema_is_still_a_plain_hint(properties):
    with pytest.raises(InvalidInput, match="did you mean repo=101"):
        parse_input(["101"], {"type": "object", "properties": properties, "required": ["repo"]}, None)
