"""`tools` in a script with many calls (`_bashkit._Relay`): quick calls made in place, a
large result, a call that must wait and the first call after a while handed to the live
command; what the script sees is the same as anywhere else. Real Bashkit, real sessions."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from approval_helpers import Answering
from kernel_helpers import RecordingSink, error_lines, github_toml, isolated_env, write_config
from toolkernel import tool
from toolkernel._approval._approver import Answer
from toolkernel._runners._bashkit import _analyze, _Relay, _way, streams_to_a_file
from toolkernel._session import Session

pytestmark = pytest.mark.timeout(600)


@tool("sized", description="A result of `size` characters.", kind="read",
      input_schema={"type": "object", "properties": {"size": {"type": "integer"}, "code": {"type": "integer"}}})
def sized(arguments, ctx):
    return "z" * arguments["size"] + "\n"


@tool("fails", description="Always fails.", kind="read", input_schema={"type": "object"})
def fails(arguments, ctx):
    raise RuntimeError("it broke")


@tool("lines", description="Three lines.", kind="read", input_schema={"type": "object"})
async def lines(arguments, ctx):
    return "a\nb\nc\n"


@tool("echo-input", description="Its input back, as JSON.", kind="read",
      input_schema={"type": "object", "properties": {"n": {"type": "integer"}}})
def echo_input(arguments, ctx):
    return arguments


@pytest.fixture
def session(tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "work"
    work.mkdir()
    s = Session(work)
    s.register_tools([sized, fails, lines, echo_input])
    yield s
    s.close()


def run(session: Session, script: str, **kwargs):
    sink = RecordingSink()
    return session.run_script(script, sink, **kwargs), sink


@pytest.mark.parametrize("script, way", [
    ("tools sized size=3", "live"),
    ("for i in 1 2; do tools sized size=3; done", "relayed"),
    ("\n".join(["tools sized size=3"] * 11), "relayed"),
    ("tools lines | while read n; do tools sized size=3; done", "live"),
    ("tools lines | while read n; do f() { echo $1; }; f $n | cat; done", "sync"),
    ("tools lines | for i in 1 2; do head -1; tools sized size=1; done", "live"),  # a loop a pipe feeds
    ("for i in 1 2; do head -1; tools sized size=1; done < data.txt", "live"),
    ("for i in 1; do tools read-file path=x; done", "relayed"),  # read-file is not `read`
    ("for i in 1 2; do tools sized size=3 & done; wait", "live"),  # background jobs run at once
    ("for i in 1 2; do tools sized size=3 2>&1 >/dev/null && echo |& cat &>/dev/null; done", "relayed"),
    ("echo no tool; x=1; [ $x = 1 ] && mkdir -p d; cd d; pwd", "sync"),  # quick commands only (`_QUICK`)
    ("echo no tool; sleep 1", "streamed"),  # a cancel lands in `sleep` only under the async execute
    ("for i in 1 2; do echo no tool; done", "streamed"),  # the byte sinks join a loop's lines
    ("echo no tool | cat", "streamed"),  # `cat` is handed on in chunks
    ("f() { echo; }; f", "streamed"),
    ("eval echo no tool", "streamed"),
    ("$cmd", "streamed"),
    ("echo 'no tool", "streamed"),  # Bashkit cannot parse it: it fails as it starts, either way
])
def test_which_way_a_script_runs(script, way):
    assert _way(script, _analyze(script)) == way


@pytest.mark.parametrize("script, way", [
    ("cat big.txt > copy.txt", "sync"),  # Bashkit streams `cat` into a file 4 KiB at a time
    ("seq 1 10 | grep 1 >> hits.txt", "sync"),
    ("tools sized size=3 > out.txt", "sync"),
    ("for i in 1 2; do tools sized size=3; done > out.txt", "sync"),
    ("tools sized size=3 &>> log.txt", "sync"),
    ("cat x >& out.txt", "sync"),
    ("$cmd x > out.txt", "sync"),  # a command the analysis cannot name
    ("for i in 1 2; do tools sized size=3 > $i.txt & done; wait", "live"),  # jobs' calls at once
    ("cat big.txt | wc -c", "streamed"),
    ("echo hi > note.txt; sed -i s/a/b/ x; jq . a.json > b.json", "streamed"),  # none of them streams
    ("find . -name '*.txt' | xargs cat > all.txt", "sync"),  # `xargs` runs `cat`
    ("cat x > /dev/null; tools sized size=3 2>&1 >/dev/stderr", "live"),
])
def test_a_script_that_may_stream_into_a_file_runs_whole(script, way):
    assert _way(script, _analyze(script)) == way


@pytest.mark.slow
@pytest.mark.parametrize("body", ["tools sized size=5", "echo '{\"n\": 7}' | tools echo-input -",
                                  "command tools sized size=5", "t=tools; $t sized size=5",
                                  "tools sized size=200000 | wc -c", "x=$(tools sized size=100000); echo ${#x}",
                                  "tools sized size=5 > out.txt; tools sized size=300000 >> out.txt; wc -c < out.txt",
                                  "tools sized size=5 >/dev/null; tools sized size=300000 2>&1 >/dev/null"])
def test_a_call_in_a_loop_gives_what_it_gives_outside_one(session, body):
    alone, alone_sink = run(session, body)
    looped, looped_sink = run(session, f"for i in 1 2 3; do {body}; done")
    assert alone.exit_code == looped.exit_code == 0, looped_sink.stderr_text
    assert looped_sink.stdout_text == alone_sink.stdout_text * 3
    assert looped_sink.stderr_text == ""


def test_exit_codes_and_set_e_see_the_call_as_one_command(session):
    result, sink = run(session, "for i in 1; do tools fails; echo rc=$?; tools fails || echo caught;"
                                " type tools | head -1; done; set -e; for i in 1; do tools fails; echo not reached; done")
    assert sink.stdout_text == "rc=1\ncaught\ntools is a function\n"
    assert result.exit_code == 1
    assert [e["code"] for e in error_lines(sink.stderr_text)] == ["tool_error"] * 3


def test_a_loop_that_reads_its_input_and_pipes_a_function_runs_every_turn(session):
    # Bashkit gives such a function the whole loop's input when a live command feeds the
    # loop: these scripts keep execute_sync (`_way`).
    result, sink = run(session, "tools lines | while read n; do f() { echo \"<$1>\"; }; f $n | cat; done")
    assert result.exit_code == 0, sink.stderr_text
    assert sink.stdout_text == "<a>\n<b>\n<c>\n"


def test_the_seed_pattern_runs_every_turn_of_a_loop_that_reads(session):
    result, sink = run(session, "tools lines | jq -R . | jq -r . | while read n; do"
                                " tools sized size=2 | jq -R -c '{z: .}'; done")
    assert result.exit_code == 0, sink.stderr_text
    assert sink.stdout_text == '{"z":"zz"}\n' * 3


def test_what_a_loop_printed_reaches_the_cell_before_a_slow_call_ends(session):
    # A call in place holds back what Bashkit has not handed on; after a slow call (longer
    # than FLUSH_EVERY) the next goes by the live command, which lets it through first.
    shown_before_end: list[bool] = []
    sink_lines: list[str] = []

    class Watching(RecordingSink):
        def stdout(self, text: str) -> None:
            super().stdout(text)
            sink_lines.append(text)

    @tool("slow", description="Takes a while, then notes whether its step was shown.", kind="read",
          input_schema={"type": "object", "properties": {"step": {"type": "integer"}}})
    def slow(arguments, ctx):
        time.sleep(_Relay.FLUSH_EVERY * 2)
        deadline = time.monotonic() + 30
        while f"step {arguments['step']}\n" not in "".join(sink_lines) and time.monotonic() < deadline:
            time.sleep(0.01)
        shown_before_end.append(f"step {arguments['step']}\n" in "".join(sink_lines))
        return "done\n"

    session.register_tools([slow])
    result = session.run_script("for i in 1 2 3 4; do echo step $i; tools slow step=$i; done", Watching())
    assert result.exit_code == 0
    assert shown_before_end == [True] * 4


def test_a_large_result_in_a_loop_stops_the_script_with_what_came_before_then_its_error(session):
    write_config(session.workdir, "[shell]\nmax_result_mb = 1\n")
    result, sink = run(session, "for i in 1 2; do echo turn $i; tools sized size=1500000; echo after $i; done")
    assert result.exit_code != 0
    assert result.run_report.stopped.reason == "result_too_large"
    assert sink.stdout_text == "turn 1\n"
    assert error_lines(sink.stderr_text)[-1]["code"] == "stopped"


def test_a_call_that_asks_in_a_loop_is_counted_once(session, monkeypatch):
    # A call the policy does not simply allow goes to the live command, which counts it:
    # the try in place must not have counted it already.
    monkeypatch.setattr(_Relay, "FLUSH_EVERY", 600.0)  # every call after the first is tried in place
    write_config(session.workdir, "[shell]\ncall_limit = 3\n")
    approver = Answering(Answer.ONCE)
    result, sink = run(session, "for i in 1 2 3; do tools write-file path=f$i.txt content=x; done",
                       approver=approver)
    assert result.exit_code == 0, sink.stderr_text
    assert len(approver.requests) == 3
    assert (session.workdir / "f3.txt").read_text() == "x"
    result, sink = run(session, "for i in 1 2 3 4; do tools sized size=1; done")
    assert result.exit_code != 0 and result.run_report.stopped.reason == "call_limit"
    assert sink.stdout_text == "z\nz\nz\n"


def test_the_relays_commands_reach_no_tool_on_their_own(session):
    # `_tools_now` is `tools` (every check runs in the command); `_tools_rest` only hands on
    # what a `_tools_now` left, and a call that finds that slot taken is made in place (as a
    # background job's is), so a script calling either by name mixes up no calls: `tools sized`
    # gives its own result, and the `_tools_rest` written out makes the call `_tools_now` left.
    result, sink = run(session, "for i in 1; do _tools_rest; echo rc=$?; _tools_now fails; echo rc=$?;"
                                " tools sized size=2; _tools_rest; echo rc=$?; done")
    assert sink.stdout_text == f"rc={_Relay.LATER}\nrc={_Relay.LATER}\nzz\nrc=1\n"
    assert [e["code"] for e in error_lines(sink.stderr_text)] == ["tool_error"]


def test_calls_piped_one_into_the_next_in_a_loop_each_give_their_own(session):
    result, sink = run(session, "for i in 1 2; do tools sized size=100000 | tools lines | tools echo-input n=$i; done")
    assert result.exit_code == 0, sink.stderr_text
    assert [json.loads(x) for x in sink.stdout_text.replace("}\n{", "}\0{").split("\0")] == [{"n": 1}, {"n": 2}]


def test_an_interrupt_in_a_relayed_loop_ends_the_call_in_place(session, python_sigint, monkeypatch):
    import _thread

    monkeypatch.setattr(_Relay, "FLUSH_EVERY", 600.0)

    started = threading.Event()

    @tool("spin", description="Runs until cancelled.", kind="read", input_schema={"type": "object"})
    def spin(arguments, ctx):
        started.set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ctx.check_cancelled()
            time.sleep(0.01)
        return "never\n"

    session.register_tools([spin])
    threading.Thread(target=lambda: started.wait(60) and _thread.interrupt_main(), daemon=True).start()
    began = time.monotonic()
    # The first call of a run goes by the live command; the next is made in place.
    result, _ = run(session, "for i in 1 2; do tools sized size=1 > /dev/null; tools spin; done")
    assert result.interrupted and result.exit_code == 130
    assert time.monotonic() - began < 50  # far less than the tool's minute


@pytest.mark.slow
def test_mcp_calls_in_a_loop_are_made_in_place_and_one_that_asks_goes_by_the_live_command(
        tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(_Relay, "FLUSH_EVERY", 600.0)  # every call after the first is tried in place
    work = tmp_path / "work"
    work.mkdir()
    write_config(work, github_toml())
    session = Session(work)
    try:
        result, sink = run(session, "for n in 101 101; do tools github get-pull repo=acme/api number=$n"
                                    " | jq -r .title; done")
        assert result.exit_code == 0, sink.stderr_text
        assert sink.stdout_text == "Add rate limiting to /search\n" * 2
        # The person is asked once what the loop printed before the call is on the screen.
        sink = RecordingSink()
        shown_when_asked = []

        class Looking(Answering):
            async def __call__(self, request):
                deadline = time.monotonic() + 30
                while "turn " + request.call.input["branch"] not in sink.stdout_text and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                shown_when_asked.append(sink.stdout_text)
                return await super().__call__(request)

        approver = Looking(Answer.ONCE)
        result = session.run_script("for b in fix-x wip-auth; do echo turn $b; tools github delete-branch branch=$b;"
                                    " done", sink, approver=approver)
        assert result.exit_code == 0, sink.stderr_text
        assert [r.call.input for r in approver.requests] == [{"branch": "fix-x"}, {"branch": "wip-auth"}]
        assert shown_when_asked == ["turn fix-x\n", "turn fix-x\ndeleted branch fix-x\nturn wip-auth\n"]
        assert sink.stdout_text == "turn fix-x\ndeleted branch fix-x\nturn wip-auth\ndeleted branch wip-auth\n"
    finally:
        session.close()


def test_an_interrupt_cancels_an_async_call_made_in_place(session, python_sigint, monkeypatch):
    import _thread

    monkeypatch.setattr(_Relay, "FLUSH_EVERY", 600.0)
    started, cancelled = threading.Event(), threading.Event()

    @tool("hang", description="Waits a minute.", kind="read", input_schema={"type": "object"})
    async def hang(arguments, ctx):
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "woke\n"

    session.register_tools([hang])
    threading.Thread(target=lambda: started.wait(60) and _thread.interrupt_main(), daemon=True).start()
    began = time.monotonic()
    result, sink = run(session, "for i in 1 2; do tools sized size=1; tools hang; echo after; done")
    assert result.interrupted and result.exit_code == 130
    assert time.monotonic() - began < 50 and cancelled.is_set()
    assert "after" not in sink.stdout_text


def test_an_interrupt_ends_the_script_before_the_call_it_cancels_lets_it_go_on(session, python_sigint, monkeypatch):
    # The call in flight was cancelled first and the script second: the script's thread ran on
    # past the call (here a whole turn of the loop) until the cancel landed. A slow cancel (the
    # interrupted thread losing the CPU between the two) shows it every time.
    import _thread

    from toolkernel._runners._bashkit import BashkitRunner

    monkeypatch.setattr(_Relay, "FLUSH_EVERY", 600.0)
    real_cancel = BashkitRunner.cancel

    def slow_cancel(self):
        time.sleep(0.5)
        real_cancel(self)

    monkeypatch.setattr(BashkitRunner, "cancel", slow_cancel)
    started = threading.Event()

    @tool("hang", description="Waits a minute.", kind="read", input_schema={"type": "object"})
    async def hang(arguments, ctx):
        started.set()
        await asyncio.sleep(60)
        return "woke\n"

    session.register_tools([hang])
    threading.Thread(target=lambda: started.wait(60) and _thread.interrupt_main(), daemon=True).start()
    result, sink = run(session, "for i in 1 2; do tools sized size=1; tools hang; echo after; done")
    assert result.interrupted and result.exit_code == 130
    assert "after" not in sink.stdout_text


@pytest.fixture
def github_session(tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(_Relay, "FLUSH_EVERY", 600.0)  # every call after the first is tried in place
    work = tmp_path / "work"
    work.mkdir()
    sessions: list[Session] = []

    def open_with(config: str) -> Session:
        write_config(work, github_toml() + config)
        opened = Session(work)
        sessions.append(opened)
        return opened

    yield open_with
    for opened in sessions:
        opened.close()


@pytest.mark.slow
def test_an_mcp_line_repeated_in_a_loop_is_parsed_once_and_its_result_is_the_same(github_session, monkeypatch):
    from toolkernel._command._catalog import Catalog

    looked_up = []
    find_tool = Catalog.find_tool

    async def counted(self, server, name):
        looked_up.append((server, name))
        return await find_tool(self, server, name)

    monkeypatch.setattr(Catalog, "find_tool", counted)
    session = github_session("")
    result, sink = run(session, "for i in 1 2 3 4 5; do tools github get-pull repo=acme/api number=101; done")
    assert result.exit_code == 0, sink.stderr_text
    # Looked up by the check before the start and by the first call (the live command's); the
    # first call made in place takes the tool the run has listed, and the rest the line as parsed.
    assert looked_up == [("github", "get-pull")] * 2
    outside = RecordingSink()
    session.run_script("tools github get-pull repo=acme/api number=101", outside)
    assert sink.stdout_text == outside.stdout_text * 5
    assert json.loads(outside.stdout_text)["title"] == "Add rate limiting to /search"


@pytest.mark.slow
def test_an_mcp_line_parsed_before_is_judged_and_counted_each_time(github_session):
    session = github_session('[policy]\ndeny = ["github delete-branch"]\n\n[shell]\ncall_limit = 4\n')
    script = ("for i in 1 2 3; do tools github delete-branch branch=x; echo \"exit $?\"; done;"
              " for i in 1 2 3; do tools github get-pull repo=acme/api number=101 | jq -r .number; done")
    result, sink = run(session, script)
    codes = [e["code"] for e in error_lines(sink.stderr_text)]
    assert sink.stdout_text.startswith("exit 1\nexit 1\nexit 1\n101\n")
    assert codes[:3] == ["denied"] * 3
    # Denied calls count too: the fourth call is the last one allowed, the fifth stops the script.
    assert codes[3:] == ["call_limit"] and result.exit_code != 0
    assert sink.stdout_text.count("101") == 1
