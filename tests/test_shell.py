"""The `tools` command inside a real Bashkit run: every command form, input form,
output form and error code, through `Session.run_script` with real MCP servers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_helpers import (
    SEED_SCRIPT,
    FIXTURE_ALLOW, RecordingSink, error_lines, fixture_toml, github_toml, isolated_env, policy_toml,
    server_toml, write_config,
)
from toolkernel import _loop, tool
from toolkernel._session import Session

pytestmark = pytest.mark.timeout(240)


ECHO_SCHEMA = {
    "type": "object",
    "properties": {
        "repo": {"type": "string"},
        "number": {"type": "integer"},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "note": {"type": "string"},
    },
    "additionalProperties": False,
}


@tool("echo_input", description="Give the input back as JSON (a test tool).", input_schema=ECHO_SCHEMA,
      kind="read")
def echo_input(arguments, ctx):
    return arguments


@tool("blob", description="A long text with marked ends (a test tool).",
      input_schema={"type": "object", "properties": {"size": {"type": "integer"}}, "required": ["size"]},
      kind="read")
def blob(arguments, ctx):
    size = arguments["size"]
    return "HEAD-MARK" + "x" * (size - 18) + "TAIL-MARK"


def base_config() -> str:
    return (
        github_toml()
        + github_toml_as("docs", load="on-demand", description="Team documentation")
        + fixture_toml("structured")
        + server_toml("locked", script="demo.py", extra='env = {T = "${UNSET_VAR_XYZ}"}')
        + '[mcp_servers.missing]\ncommand = "/nonexistent/definitely-not-a-server"\n\n'
        + policy_toml(allow=FIXTURE_ALLOW, deny=["github create-issue"])
    )


def github_toml_as(name: str, **kw) -> str:
    return server_toml(name, script="demo.py", **kw)


def new_session(workdir: Path) -> Session:
    session = Session(workdir)
    session.register_tools([echo_input, blob])
    return session


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("shell")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in isolated_env(root).items():
            mp.setenv(key, value)
        mp.delenv("UNSET_VAR_XYZ", raising=False)
        project = root / "project"
        project.mkdir()
        write_config(project, base_config())
        yield project


@pytest.fixture(scope="module")
def session(workdir):
    session = new_session(workdir)
    yield session
    session.close()


def run(session: Session, script: str):
    sink = RecordingSink()
    result = session.run_script(script, sink)
    return result, sink


def single_error(result, sink) -> dict:
    assert result.exit_code == 1, (sink.stdout_text, sink.stderr_text)
    errors = error_lines(sink.stderr_text)
    assert len(errors) == 1, sink.stderr_text
    assert set(errors[0]) >= {"code", "message", "retryable"}
    return errors[0]


# -- the seed's example ------------------------------------------------------------


def test_seed_example_runs_unchanged(session):
    result, sink = run(session, SEED_SCRIPT)
    assert result.exit_code == 0, sink.stderr_text
    lines = [json.loads(line) for line in sink.stdout_text.splitlines()]
    assert lines == [
        {"number": 101, "title": "Add rate limiting to /search", "mergeable": True},
        {"number": 103, "title": "Fix pagination off-by-one", "mergeable": False},
        {"number": 104, "title": "Bump httpx to 0.27", "mergeable": True},
    ]


# -- help, search, names -------------------------------------------------------------


@pytest.mark.slow
def test_top_help_counts_tools_and_marks_on_demand_servers(workdir):
    fresh = new_session(workdir)
    try:
        result, sink = run(fresh, "tools --help")
    finally:
        fresh.close()
    assert result.exit_code == 0, sink.stderr_text
    text = sink.stdout_text
    assert "github (3 tools)" in text  # create-issue is denied: left out and not counted
    assert "structured (6 tools)" in text
    assert "docs (not loaded)" in text
    assert "missing (unavailable" in text
    other = text.split("Other tools:")[1]
    assert "read-file" in other and "echo-input" in other


def test_server_help_lists_its_tools(session):
    result, sink = run(session, "tools github --help")
    assert result.exit_code == 0
    for name in ("list-pulls", "get-pull", "delete-branch"):
        assert name in sink.stdout_text
    assert "create-issue" not in sink.stdout_text  # denied whatever its input


@pytest.mark.slow
@pytest.mark.parametrize("script", ["tools github get-pull --help", "tools mcp_github__get_pull --help"])
def test_mcp_tool_help_shows_the_input_schema(session, script):
    result, sink = run(session, script)
    assert result.exit_code == 0, sink.stderr_text
    text = sink.stdout_text
    assert "tools github get-pull (read-only)" in text
    schema = json.loads(text.split("Input schema:\n")[1].split("\n\nExample")[0])
    assert set(schema["required"]) == {"repo", "number"}


def test_own_tool_help_shows_the_input_schema(session):
    result, sink = run(session, "tools echo-input --help")
    assert result.exit_code == 0
    assert '"repo"' in sink.stdout_text and "Input schema:" in sink.stdout_text


@pytest.mark.slow
def test_search_ranks_name_matches_above_description_matches(session):
    result, sink = run(session, "tools search docs issue title")
    assert result.exit_code == 0, sink.stderr_text
    commands = [line.split()[0:3] for line in sink.stdout_text.splitlines()]
    ranked = [" ".join(c) for c in commands]
    assert ranked[0] == "tools docs create-issue"
    assert "tools github create-issue" not in ranked  # denied: left out
    # A description with only some of the words is not a match (issue 10: "time zone").
    assert "tools github get-pull" not in ranked
    result, sink = run(session, "tools search title")
    assert "tools github get-pull" in sink.stdout_text and "tools github list-pulls" in sink.stdout_text


@pytest.mark.slow
def test_search_that_matches_an_on_demand_server_loads_it(workdir):
    fresh = new_session(workdir)
    try:
        result, sink = run(fresh, "tools search docs")
        assert result.exit_code == 0, sink.stderr_text
        assert "tools docs list-pulls" in sink.stdout_text
        result, sink = run(fresh, "tools --help")
        assert "docs (4 tools)" in sink.stdout_text
    finally:
        fresh.close()


@pytest.mark.slow
def test_naming_an_on_demand_server_loads_it_in_the_same_run(workdir):
    fresh = new_session(workdir)
    try:
        result, sink = run(fresh, "tools docs list-pulls repo=acme/web | jq length")
        assert result.exit_code == 0, sink.stderr_text
        assert sink.stdout_text == "2\n"
    finally:
        fresh.close()


@pytest.mark.parametrize("command", [
    "tools mcp_github__list_pulls repo=acme/api",
    "tools mcp__github__list_pulls repo=acme/api",
    "tools github list_pulls repo=acme/api",
    "tools github list-pulls repo=acme/api",
])
def test_qualified_names_and_hyphen_underscore_are_the_same_tool(session, command):
    result, sink = run(session, f"{command} | jq -c '[.[].number]'")
    assert result.exit_code == 0, sink.stderr_text
    assert sink.stdout_text == "[101,102,103,104]\n"


def test_own_tools_answer_to_both_spellings(session):
    result, sink = run(session, "tools echo_input note=a | jq -r .note; tools echo-input note=b | jq -r .note")
    assert sink.stdout_text == "a\nb\n"


# -- input -----------------------------------------------------------------------------


def echo(session: Session, script: str) -> dict:
    result, sink = run(session, script)
    assert result.exit_code == 0, sink.stderr_text
    return json.loads(sink.stdout_text)


def test_json_argument(session):
    assert echo(session, """tools echo-input '{"repo": "a/b", "number": 7}'""") == {"repo": "a/b", "number": 7}


def test_pairs_merge_over_the_json_argument(session):
    value = echo(session, """tools echo-input '{"repo": "a/b", "number": 7}' number=8 --note hi --flag""")
    assert value == {"repo": "a/b", "number": 8, "note": "hi", "flag": True}


def test_schema_string_keys_stay_strings_and_numbers_are_parsed(session):
    assert echo(session, "tools echo-input repo=42 number=101") == {"repo": "42", "number": 101}
    assert echo(session, """tools echo-input --repo 42 --tags '["x","y"]'""") == {"repo": "42", "tags": ["x", "y"]}


def test_mcp_number_parsed_from_key_value(session):
    result, sink = run(session, "tools github get-pull repo=acme/api number=101 | jq -r .title")
    assert sink.stdout_text == "Add rate limiting to /search\n", sink.stderr_text


def test_stdin_is_the_input_when_no_input_arguments(session):
    result, sink = run(session, """jq -n '{repo: "acme/api", state: "closed"}' | tools github list-pulls | jq length""")
    assert sink.stdout_text == "2\n", sink.stderr_text


def test_stdin_with_dash_merges_with_pairs(session):
    value = echo(session, """echo '{"repo": "a/b", "number": 1}' | tools echo-input - number=2""")
    assert value == {"repo": "a/b", "number": 2}


def test_stdin_is_not_read_inside_a_while_read_loop(session):
    script = """printf '101\\n103\\n104\\n' | while read n; do
      tools github get-pull repo=acme/api number=$n | jq .number
    done"""
    result, sink = run(session, script)
    assert result.exit_code == 0, sink.stderr_text
    assert sink.stdout_text == "101\n103\n104\n"


# -- output ----------------------------------------------------------------------------


def test_text_result_is_printed_as_is(session):
    # MCPServer sends a str result as text and as {"result": ...}: the text wins.
    result, sink = run(session, "tools structured greet name=ana")
    assert sink.stdout_text == "hello, ana\n", sink.stderr_text


def test_structured_content_that_only_wraps_the_text_prints_as_the_text(session):
    result, sink = run(session, "tools structured listing path=/data")
    assert sink.stdout_text == "[FILE] /data/a.txt\n[DIR] /data/sub\n", sink.stderr_text


def test_a_13000_line_file_from_a_server_reads_as_its_lines(session):
    # server-filesystem's shape at size: `wc -l` counted 3 when the text arrived as escaped JSON.
    script = ("tools structured read-text-file lines=13000 | wc -l;"
              " tools structured read-text-file lines=13000 | tail -n 1;"
              " for i in 1 2; do tools structured read-text-file lines=13000 | grep -c 'of the file'; done")
    result, sink = run(session, script)
    assert result.exit_code == 0, sink.stderr_text
    assert sink.stdout_text.split()[:1] == ["13000"]
    assert sink.stdout_text.splitlines()[1:] == ["line 13000 of the file", "13000", "13000"]


def test_structured_result_is_json(session):
    result, sink = run(session, """tools structured stats '{"numbers": [1, 2, 4.5]}'""")
    assert result.exit_code == 0, sink.stderr_text
    assert json.loads(sink.stdout_text) == {"count": 3, "total": 7.5, "maximum": 4.5}


def test_mcp_list_result_pipes_into_jq(session):
    result, sink = run(session, "tools github list-pulls repo=acme/web | jq -r '.[0].title'")
    assert sink.stdout_text == "Dark mode\n"


# -- every error code ----------------------------------------------------------------------


def test_unknown_server_or_tool_suggests_names(session):
    error = single_error(*run(session, "tools githb list-pulls"))
    assert error["code"] == "unknown_command"
    assert "github" in error["message"] and "github" in error["suggestions"]
    error = single_error(*run(session, "tools github list-pull repo=acme/api"))
    assert error["code"] == "unknown_command"
    assert "list-pulls" in error["suggestions"]


def test_input_that_is_not_an_object_is_invalid(session):
    error = single_error(*run(session, "echo '[1, 2]' | tools github list-pulls"))
    assert error["code"] == "invalid_input"
    assert "object" in error["message"]


def test_input_that_breaks_the_schema_names_the_schema_path(session):
    error = single_error(*run(session, "tools github get-pull repo=acme/api number=abc"))
    assert error["code"] == "invalid_input"
    assert "number" in error["schema_path"] and "number" in error["message"]


def test_failing_tool_is_tool_error(session):
    error = single_error(*run(session, "tools github get-pull repo=acme/api number=999"))
    assert error["code"] == "tool_error"
    assert "999" in error["message"]


def test_deny_rule_is_denied(session):
    error = single_error(*run(session, "tools github create-issue title=x"))
    assert error["code"] == "denied"


def test_literal_call_that_needs_approval_stops_the_script_before_it_starts(session):
    result, sink = run(session, "echo started; tools github delete-branch branch=fix-x")
    error = single_error(result, sink)
    assert error["code"] == "needs_approval"
    assert sink.stdout_text == ""
    assert result.report["tools"]["stopped"]["before_start"] is True
    assert result.report["tools"]["done"] == []


def test_runtime_call_that_needs_approval_stops_the_loop(session):
    script = """for b in fix-x wip-auth; do
      echo "branch $b"
      tools github delete-branch branch=$b || true
      tools github list-pulls repo=acme/api | jq length
    done
    echo end"""
    result, sink = run(session, script)
    error = single_error(result, sink)
    assert error["code"] == "needs_approval"
    assert sink.stdout_text == "branch fix-x\n"  # the list-pulls after it never ran
    stopped = result.report["tools"]["stopped"]
    assert stopped["reason"] == "needs_approval"
    assert stopped["call"] == {"tool": "tools github delete-branch", "input": {"branch": "fix-x"}}
    assert result.report["tools"]["read_only_calls"] == 0


def test_a_call_after_a_stop_is_stopped(session):
    command = _loop.run(session.prepare())
    first = command.handle_sync(["github", "delete-branch", "branch=wip-auth"], None)
    assert json.loads(first.stderr)["error"]["code"] == "needs_approval"
    second = command.handle_sync(["github", "list-pulls", "repo=acme/api"], None)
    assert second.exit_code == 1
    assert json.loads(second.stderr)["error"]["code"] == "stopped"


def test_a_call_after_an_interrupt_is_stopped(session):
    command = _loop.run(session.prepare())
    command.interrupt()
    outcome = command.handle_sync(["github", "list-pulls", "repo=acme/api"], None)
    assert outcome.exit_code == 1 and outcome.stdout == ""
    assert json.loads(outcome.stderr)["error"]["code"] == "stopped"


def test_server_with_an_unset_variable_needs_a_connection(session):
    error = single_error(*run(session, "tools locked list-pulls repo=acme/api"))
    assert error["code"] == "connection_required"
    assert "UNSET_VAR_XYZ" in error["message"]


def test_the_51st_call_hits_the_call_limit(session):
    script = """for i in $(seq 1 60); do tools echo-input number=$i | jq -c .number; done; echo after"""
    result, sink = run(session, script)
    error = single_error(result, sink)
    assert error["code"] == "call_limit"
    assert sink.stdout_text.split() == [str(i) for i in range(1, 51)]
    stopped = result.report["tools"]["stopped"]
    assert stopped["reason"] == "call_limit"
    assert stopped["call"]["input"] == {"number": 51}
    assert result.report["tools"]["read_only_calls"] == 50


def test_server_whose_command_is_missing_is_unavailable_and_not_retryable(session):
    error = single_error(*run(session, "tools missing anything"))
    assert error["code"] == "unavailable"
    assert error["retryable"] is False and "command not found" in error["message"]


# -- large output ----------------------------------------------------------------------------


def test_large_output_shows_head_and_tail_and_saves_the_whole(session, workdir):
    size = 200_000
    result, sink = run(session, f"tools blob size={size} | wc -c; tools blob size={size}")
    assert result.exit_code == 0, sink.stderr_text
    shown = sink.stdout_text
    assert shown.startswith(f"{size + 1}\nHEAD-MARK")  # wc -c saw every byte (and the newline)
    assert shown.rstrip().endswith("TAIL-MARK")
    assert len(shown) < 60_000
    assert result.saved_output is not None
    assert str(result.saved_output) in shown
    assert result.saved_output.parts[:2] == (".toolkernel", "outputs")
    saved = (workdir / result.saved_output).read_text()
    assert saved == f"{size + 1}\n" + "HEAD-MARK" + "x" * (size - 18) + "TAIL-MARK\n"


# -- what servers and inputs get wrong (issue 8 items 7 and 9) --------------------------------


@pytest.fixture
def badschema_session(tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    project = tmp_path / "project"
    project.mkdir()
    write_config(project, fixture_toml("badschema") + policy_toml(allow=["mcp_badschema"]))
    session = new_session(project)
    yield session
    session.close()


@pytest.mark.slow
@pytest.mark.parametrize("tool, problem", [
    ("bad_type", "at properties/n/type: 'integr' is not valid"),
    ("bad_ref", "PointerToNowhere: '/$defs/missing'"),
    ("bad_pattern", "at properties/s/pattern: '(unclosed' is not a 'regex'"),
    ("bad_remote_ref", "Unresolvable: https://example.invalid/s.json"),
])
def test_an_invalid_input_schema_is_one_tool_error_line_blaming_the_server(badschema_session, tool, problem):
    result, sink = run(badschema_session, f"tools badschema {tool} n=1 s=x")
    error = single_error(result, sink)
    assert error["code"] == "tool_error" and not error["retryable"]
    assert problem in error["message"] and "fault of the MCP server 'badschema'" in error["message"]
    assert sink.stderr_text.count("\n") == 1, sink.stderr_text
    # Its help still shows, and the server's good tools still work.
    assert run(badschema_session, f"tools badschema {tool} --help")[0].exit_code == 0
    good, good_sink = run(badschema_session, "tools badschema good n=1")
    assert (good.exit_code, good_sink.stdout_text) == (0, "good ran with ['n']\n")


@pytest.mark.parametrize("script", [
    "tools echo_input '" + "[" * 100_000 + "]" * 100_000 + "'",
    "tools echo_input '{\"tags\": " + "[" * 150 + "]" * 150 + "}'",
    "tools echo_input tags=" + "[" * 5_000 + "]" * 5_000,
    "echo '" + "[" * 100_000 + "]" * 100_000 + "' | tools echo_input -",
])
def test_deeply_nested_input_is_one_invalid_input_line(session, script):
    result, sink = run(session, script)
    error = single_error(result, sink)
    assert error["code"] == "invalid_input" and "nested more than 100 levels deep" in error["message"]
    assert sink.stderr_text.count("\n") == 1, sink.stderr_text


@pytest.mark.slow
def test_a_server_that_hangs_at_start_gives_its_error_line_past_thirty_seconds(tmp_path, monkeypatch):
    # Bashkit's default limit (30 s) once ended the script first and the line was lost.
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    write_config(tmp_path, server_toml("hanging", script="big.py", load="on-demand")
                 .replace('big.py"]', 'big.py", "--hang-at-start"]') + policy_toml(allow=["mcp_hanging"]))
    session = new_session(tmp_path)
    session.pool.connect_timeout = 33
    try:
        result, sink = run(session, "tools hanging ping; echo after")
    finally:
        session.close()
    [error] = error_lines(sink.stderr_text)
    assert error["code"] == "unavailable" and not error["retryable"]  # held until its config changes
    assert "did not finish starting within 33 s" in error["message"]
    assert "waiting for a database that never comes" in error["message"]
    assert sink.stdout_text == "after\n"


@pytest.mark.slow
def test_tools_a_deny_rule_covers_whatever_the_input_are_left_out_of_every_list(tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    project = tmp_path / "project"
    project.mkdir()
    # delete-branch: denied whatever its input; get-pull: only for some inputs, so still listed.
    write_config(project, github_toml() + policy_toml(allow=FIXTURE_ALLOW, deny=[
        "github delete-branch", "echo_input", "github get-pull(repo=secret/*)"]))
    fresh = new_session(project)
    try:
        help_text = run(fresh, "tools --help")[1].stdout_text
        server_text = run(fresh, "tools github --help")[1].stdout_text
        found = run(fresh, "tools search branch pull input")[1].stdout_text
        searched = run(fresh, "tools search delete branch")[1].stdout_text
        called = run(fresh, "tools github delete-branch branch=x")
        tool_help = run(fresh, "tools github delete-branch --help")
        allowed_help = run(fresh, "tools github get-pull --help")
    finally:
        fresh.close()
    assert "github (3 tools)" in help_text and "echo-input" not in help_text and "blob" in help_text
    assert "delete-branch" not in server_text and "get-pull" in server_text
    assert "delete-branch" not in found + searched and "echo-input" not in found
    assert "no tools match" in searched
    # Left out of the lists, and still denied when called by name; its help shows no schema.
    assert error_lines(called[1].stderr_text)[0]["code"] == "denied"
    assert tool_help[1].stdout_text == "" and error_lines(tool_help[1].stderr_text)[0]["code"] == "denied"
    assert allowed_help[0].exit_code == 0 and "repo" in allowed_help[1].stdout_text
