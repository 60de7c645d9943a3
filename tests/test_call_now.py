"""A call of a tool of plain sync code, made in a script with no event loop (`Dispatcher.call_now`):
the same checks as every other call (limit, schema, policy, the person asked), the same errors.
Real scripts in Bashkit through a Session; the policy comes from a real project config."""

from __future__ import annotations

import asyncio
import json

import pytest

from approval_helpers import Answering
from kernel_helpers import RecordingSink
from toolkernel._approval import _dispatch
from toolkernel._approval._approver import Answer
from toolkernel._errors import Unavailable
from toolkernel._providers._tools.files import read_file, write_file
from toolkernel._session import Session
from toolkernel._tool import ToolContext, ToolInputError, tool

# Built at run time, so the check before the start (which asks about literal calls) does not see it.
READ_AT_RUN_TIME = "t=read-file; tools $t path=a.txt"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("TOOLKERNEL_ADMIN_CONFIG", str(tmp_path / "no-admin.toml"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("first line\nsecond line\n")
    return work


@pytest.fixture
def session(project):
    opened = Session(project)
    yield opened
    opened.close()


def with_policy(project, policy: str) -> Session:
    (project / "toolkernel.toml").write_text(f"[policy]\n{policy}\n")
    return Session(project)


def run(session: Session, script: str, approver=None):
    sink = RecordingSink()
    result = session.run_script(script, sink, approver=approver)
    return result, "".join(sink.out), [json.loads(line)["error"] for line in "".join(sink.err).splitlines()
                                       if line.startswith("{")]


# -- the call is made at once --------------------------------------------------------------


def test_a_sync_tool_in_a_script_runs_with_no_event_loop_and_an_async_one_on_its_own(session):
    loops = []

    @tool("probe_sync", description="Say whether an event loop runs.", input_schema={"type": "object"}, kind="read")
    def probe_sync(arguments, ctx):
        loops.append(asyncio._get_running_loop())
        return "sync"

    @tool("probe_async", description="Say whether an event loop runs.", input_schema={"type": "object"}, kind="read")
    async def probe_async(arguments, ctx):
        loops.append(asyncio.get_running_loop())
        return "async"

    session.register_tools([probe_sync, probe_async])
    result, out, errors = run(session, "tools probe-sync; tools probe-async; tools probe-sync")
    assert result.exit_code == 0 and errors == [] and out == "sync\nasync\nsync\n"
    assert loops[0] is None and loops[2] is None
    assert loops[1] is not None


def test_read_file_in_a_script_reads_the_file(session):
    result, out, errors = run(session, "tools read-file path=a.txt")
    assert result.exit_code == 0 and errors == []
    assert out == "     1\tfirst line\n     2\tsecond line\n"


# -- the same checks ----------------------------------------------------------------------


@pytest.mark.parametrize("bad, where, says", [
    ('{"path": "a.txt", "offset": true}', "input['offset']", "is not of type 'integer'"),
    ('{"path": "a.txt", "offset": "1"}', "input['offset']", "is not of type 'integer'"),
    ('{"path": "a.txt", "offset": -1}', "input['offset']", "less than the minimum of 0"),
    ('{"path": ""}', "input['path']", "should be non-empty"),
    ('{"path": "a.txt", "extra": 1}', "input", "Additional properties are not allowed"),
])
def test_an_invalid_input_is_refused_after_a_valid_one_like_it(session, bad, where, says):
    """A valid input's verdict is kept; one that differs only in a value's type is not it."""
    script = f"tools read-file path=a.txt offset=1 >/dev/null; tools read-file '{bad}'; echo after"
    result, out, errors = run(session, script)
    assert out == "after\n"
    assert [e["code"] for e in errors] == ["invalid_input"]
    assert errors[0]["message"].startswith(f"{where}: ") and says in errors[0]["message"]
    assert "(schema path: " in errors[0]["message"] and "`tools read-file --help`" in errors[0]["message"]


@pytest.mark.parametrize("script, where", [
    ("""tools read-file '{"path": "a\\ud800.txt"}'""", "input['path']"),
    ("""echo '{"path": "a.txt", "x": ["\\udfff"]}' | tools read-file""", "input['x'][0]"),
    ("""tools todo-write '{"todos": [], "\\udc00": 1}'""", "input (a key)"),
])
def test_half_a_surrogate_pair_is_invalid_input(session, script, where):
    # JSON can write one alone; it is no character: no file name or program argument holds it,
    # and the MCP SDK's encoder failed on it, which dropped a server's connection.
    result, out, errors = run(session, f"{script}; echo after")
    assert out == "after\n" and [e["code"] for e in errors] == ["invalid_input"], errors
    assert errors[0]["message"].startswith(f"{where}: holds half a surrogate pair")


def test_a_whole_surrogate_pair_is_a_character(session):
    result, out, errors = run(session, """tools write-file '{"path": "b.txt", "content": "\\ud83d\\ude00"}'""",
                              approver=Answering(Answer.ONCE))
    assert errors == [] and (session.workdir / "b.txt").read_text() == "\U0001f600"


def test_the_call_limit_counts_calls_made_at_once(project):
    session = with_policy(project, "")
    try:
        script = "for i in $(seq 1 60); do tools read-file path=a.txt >/dev/null || break; done; echo done"
        result, out, errors = run(session, script)
        assert [e["code"] for e in errors] == ["call_limit"]
        assert result.report["tools"]["stopped"]["reason"] == "call_limit"
    finally:
        session.close()


@pytest.mark.parametrize("rule, code, out", [
    ('deny = ["read_file"]', "denied", "after\n"),  # the call is refused, the script goes on
    ('ask = ["read_file"]', "needs_approval", ""),  # nobody answers: the script stops there
])
def test_a_rule_decides_a_call_made_at_once(project, rule, code, out):
    session = with_policy(project, rule)
    try:
        result, printed, errors = run(session, READ_AT_RUN_TIME + "; echo after")
        assert [e["code"] for e in errors] == [code] and printed == out
    finally:
        session.close()


@pytest.mark.parametrize("answer, made", [(Answer.ONCE, True), (Answer.DENY, False)])
def test_a_person_asked_mid_script_decides_a_call_made_at_once(project, answer, made):
    session = with_policy(project, 'ask = ["read_file"]')
    try:
        approver = Answering(answer)
        result, out, errors = run(session, READ_AT_RUN_TIME + "; echo after", approver=approver)
        assert len(approver.requests) == 1 and approver.requests[0].call.input == {"path": "a.txt"}
        assert ("first line" in out) is made and out.endswith("after\n")
        assert [e["code"] for e in errors] == ([] if made else ["denied"])
    finally:
        session.close()


def test_a_pre_call_hook_still_runs_for_a_sync_tool(session):
    seen = []

    @session.hooks.before_call("read_file")
    def look(call):
        seen.append(dict(call.input))

    result, out, errors = run(session, "tools read-file path=a.txt")
    assert result.exit_code == 0 and "first line" in out and seen == [{"path": "a.txt"}]


# -- the tool's own call_now ---------------------------------------------------------------


def test_tool_call_now_turns_failures_into_results_as_call_does(tmp_path):
    @tool("fails", description="Fail as asked.", input_schema={"type": "object"})
    def fails(arguments, ctx):
        if arguments["how"] == "input":
            raise ToolInputError("the input was wrong")
        if arguments["how"] == "unavailable":
            raise Unavailable("not reachable")
        raise ValueError("broken")

    ctx = ToolContext(tmp_path)
    for how, text in (("input", "the input was wrong"), ("value", "ValueError: broken")):
        now = fails.call_now({"how": how}, ctx)
        awaited = asyncio.run(fails.call({"how": how}, ctx))
        assert now == awaited and now.is_error and now.texts == [text]
    with pytest.raises(Unavailable):
        fails.call_now({"how": "unavailable"}, ctx)
    with pytest.raises(Unavailable):
        asyncio.run(fails.call({"how": "unavailable"}, ctx))


def test_only_a_sync_tool_has_call_now():
    @tool("waits", description="Wait.", input_schema={"type": "object"})
    async def waits(arguments, ctx):
        return "done"

    assert waits.call_now is None and read_file.call_now is not None


# -- what the schema check keeps ------------------------------------------------------------


def test_kept_verdicts_tell_types_apart_and_keep_no_long_text():
    key = _dispatch._repeatable
    assert key({"n": 1}) != key({"n": True}) and key({"n": 1}) != key({"n": 1.0})
    assert key({"n": "1"}) != key({"n": 1})
    assert key({"n": [1]}) is None and key({"n": {"a": 1}}) is None
    assert key({"text": "x" * 10_000}) is None


def test_a_long_content_is_checked_and_not_kept(tmp_path):
    dispatcher = _dispatch.Dispatcher(env=None)  # validate needs no environment
    dispatcher.validate(write_file, {"path": "big.txt", "content": "x" * 100_000})
    kept = _dispatch._VALIDATORS[id(write_file.input_schema)][1]
    assert all(len(str(value)) < 1_000 for entry in kept.valid for _, _, value in entry)
    with pytest.raises(Exception, match="is not of type 'string'"):
        dispatcher.validate(write_file, {"path": "big.txt", "content": 5})


# -- a line parsed before (a loop's body) ----------------------------------------------------
# Scripts with a loop keyword run `tools` as the sync builtin (`ToolsCommand.handle_sync`), which
# keeps each line it parsed; every call of it still goes through all of the dispatcher's checks.


def _echo_input():
    @tool("echo_input", description="Give back the input.", input_schema={"type": "object"}, kind="read")
    def echo_input(arguments, ctx):
        shown = dict(arguments)
        arguments["n"] = "changed by the tool"  # what a careless tool may do to what it is handed
        return shown

    return echo_input


def test_a_line_parsed_before_reads_its_input_from_stdin_again(session):
    session.register_tools([_echo_input()])
    script = "for i in 1; do tools echo-input; echo '{\"n\": 2}' | tools echo-input; tools echo-input; done"
    result, out, errors = run(session, script)
    assert result.exit_code == 0 and errors == []
    assert [json.loads(part) for part in out.replace("}\n{", "}\n\n{").split("\n\n")] == [{}, {"n": 2}, {}]


def test_a_line_parsed_before_is_handed_its_own_input_each_time(session):
    session.register_tools([_echo_input()])
    result, out, errors = run(session, "for i in 1 2 3; do tools echo-input n=1; done")
    assert result.exit_code == 0 and errors == []
    assert out == '{\n  "n": 1\n}\n' * 3


def test_a_line_parsed_before_has_its_path_resolved_and_judged_again(project, tmp_path):
    """The second call of the same line reads a link that now leads out of the workspace: it is
    resolved again, and the call asks (nobody answers: the script stops there)."""
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    (project / "link.txt").symlink_to(project / "a.txt")

    @tool("relink", description="Point link.txt out of the workspace.", input_schema={"type": "object"}, kind="read")
    def relink(arguments, ctx):
        (project / "link.txt").unlink()
        (project / "link.txt").symlink_to(outside)
        return "relinked"

    session = Session(project)
    try:
        session.register_tools([relink])
        result, out, errors = run(session, "for i in 1 2; do tools read-file path=link.txt; tools relink; done")
        assert "first line" in out and "secret" not in out
        assert [e["code"] for e in errors] == ["needs_approval"]
    finally:
        session.close()


def test_a_line_parsed_before_is_checked_against_the_schema_each_time(session):
    """An input the schema refuses is refused on every call of the line, never kept as valid."""
    script = "for i in 1 2; do tools read-file path=a.txt offset=-1; done; echo after"
    result, out, errors = run(session, script)
    assert out == "after\n" and [e["code"] for e in errors] == ["invalid_input", "invalid_input"]
