"""Calls a script starts at once (background jobs, `xargs -P`, concurrent `serve` calls): every
one is made or named as not made, they really run at once, and the call limit and the report
stay exact across them. Real Bashkit, real host bash, real MCP fixture servers, real command
tool processes, a real `toolkernel serve` with the SDK's client.

Parallelism is proved without a clock: the calls of a test meet (each waits until all have
started, for long enough that calls made one after another would time out and say "alone")."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest

from kernel_helpers import RecordingSink, error_lines, isolated_env, server_toml, write_config
from test_commands import command_tool
from test_serve import bash, connected, project, run, server_section
from toolkernel import tool
from toolkernel._runners import _bashkit
from toolkernel._runners._hostbash._channel import Channel
from toolkernel._runners._hostbash._runner import HostBashRunner
from toolkernel._session import Session

pytestmark = pytest.mark.timeout(600)

PY = sys.executable
PATIENCE = 60  # seconds a call waits for the others: generous, only calls made one by one reach it
TRIALS = 20

# A command tool's program: note this call in the room (a folder), then wait until `size` calls are in.
MEET = ("import pathlib, sys, time; room = pathlib.Path(sys.argv[1]); room.mkdir(exist_ok=True);"
        " (room / sys.argv[3]).touch(); end = time.monotonic() + float(sys.argv[4])\n"
        "while len(list(room.iterdir())) < int(sys.argv[2]):\n"
        "    if time.monotonic() > end: print('alone'); sys.exit(0)\n"
        "    time.sleep(0.01)\n"
        "print('met')")
# A command tool's program that leaves one marker file per call.
MARK = "import pathlib, sys; pathlib.Path(sys.argv[1], sys.argv[2]).touch()"


def meet_tool(name: str = "meet") -> str:
    return command_tool(name, [PY, "-c", MEET, "{{ input.room }}", "{{ input.size }}", "{{ input.me }}",
                               str(PATIENCE)], read_only=True, timeout=PATIENCE + 30, parameters={
        "type": "object", "properties": {"room": {"type": "string"}, "size": {"type": "integer"},
                                         "me": {"type": "string"}}, "required": ["room", "size", "me"]})


def mark_tool() -> str:
    return command_tool("mark", [PY, "-c", MARK, "{{ input.dir }}", "{{ input.name }}"], read_only=True,
                        parameters={"type": "object", "properties": {"dir": {"type": "string"},
                                                                     "name": {"type": "string"}}})


class Meeting:
    """Own tools for the tests: `count` counts its calls; `gather` answers once `size` calls
    are in; `hold` waits for `release`; `arrived` waits until `n` holds are in."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.counted: list[int] = []
        self.rooms: dict[str, int] = {}
        self.held = 0
        self.release = threading.Event()

    def tools(self):
        number = {"type": "object", "properties": {"n": {"type": "integer"}, "size": {"type": "integer"},
                                                   "room": {"type": "string"}}}

        @tool("count", description="Count this call.", kind="read", input_schema=number)
        def count(arguments, ctx):
            with self.changed:
                self.counted.append(arguments["n"])
            return "counted\n"

        @tool("gather", description="Answer once `size` calls are in.", kind="read", input_schema=number)
        def gather(arguments, ctx):
            room = arguments.get("room", "a")
            with self.changed:
                self.rooms[room] = self.rooms.get(room, 0) + 1
                self.changed.notify_all()
                met = self.changed.wait_for(lambda: self.rooms[room] >= arguments["size"], timeout=PATIENCE)
            return "met\n" if met else "alone\n"

        @tool("hold", description="Wait for the test's word.", kind="read", input_schema=number)
        def hold(arguments, ctx):
            with self.changed:
                self.held += 1
                self.changed.notify_all()
            return "released\n" if self.release.wait(PATIENCE) else "never released\n"

        @tool("arrived", description="Wait until `n` holds are in.", kind="read", input_schema=number)
        def arrived(arguments, ctx):
            with self.changed:
                self.changed.wait_for(lambda: self.held >= arguments["n"], timeout=PATIENCE)
            return "all in\n"

        @tool("change", description="Changes something: asks first.", kind="edit", input_schema=number)
        def change(arguments, ctx):
            return "changed\n"

        return [count, gather, hold, arrived, change]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("parallel")
    work = tmp / "work"
    work.mkdir()
    write_config(work, server_toml("meeting", script="meeting.py") + meet_tool() + mark_tool()
                 + '[policy]\nallow = ["mcp_meeting__*"]\n')
    return work


@pytest.fixture(scope="module")
def session(workdir, tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        for key, value in isolated_env(tmp_path_factory.mktemp("env")).items():
            patch.setenv(key, value)
        s = Session(workdir)
        s.meeting = Meeting()
        s.register_tools(s.meeting.tools())
        yield s
        s.close()


@pytest.fixture
def meeting(session) -> Meeting:
    kept = session.meeting  # the registered tools close over it: reset in place
    kept.counted.clear()
    kept.rooms.clear()
    kept.held = 0
    kept.release.clear()
    return kept


@pytest.fixture(scope="module")
def channel():
    made = Channel()
    yield made
    made.close()


def script_run(session: Session, script: str, runner=None):
    sink = RecordingSink()
    result = session.run_script(script, sink, runner=runner)
    return result, sink


def server_ticks(session: Session) -> list[int]:
    result, sink = script_run(session, "tools meeting count")
    assert result.exit_code == 0, sink.stderr_text
    return json.loads(sink.stdout_text)


# -- nothing vanishes ------------------------------------------------------------------------


def test_background_calls_of_a_server_are_all_made(session):
    made = len(server_ticks(session))  # the module's server: other tests (in any order) tick it too
    for trial in range(TRIALS):
        result, sink = script_run(session, "for i in 1 2 3 1 2 3; do tools meeting tick n=$i > /dev/null & done;"
                                           " wait; echo done")
        assert (result.exit_code, sink.stdout_text) == (0, "done\n"), sink.stderr_text
        made += 6
        assert len(server_ticks(session)) == made, f"trial {trial}"


def test_background_calls_of_a_command_tool_are_all_made(session, tmp_path):
    for trial in range(TRIALS):
        folder = tmp_path / f"trial{trial}"
        folder.mkdir()
        result, sink = script_run(session, f"for i in 1 2 3 4 5 6; do tools mark dir={folder} name=m$i > /dev/null &"
                                           " done; wait; echo done")
        assert (result.exit_code, sink.stdout_text) == (0, "done\n"), sink.stderr_text
        assert sorted(p.name for p in folder.iterdir()) == [f"m{i}" for i in range(1, 7)], f"trial {trial}"


@pytest.mark.parametrize("script", [
    "for i in 1 2 3 1 2 3; do tools count n=$i > /dev/null & done; wait; echo done",
    "for i in 1 2 3; do (tools count n=$i; tools count n=$i) > /dev/null & done; wait; echo done",
    "tools count n=1 | cat > /dev/null & for i in 2 3 4 5 6; do tools count n=$i > /dev/null & done; wait; echo done",
])
def test_background_calls_of_an_own_tool_are_all_made(session, meeting, script):
    for trial in range(TRIALS):
        meeting.counted.clear()
        result, sink = script_run(session, script)
        assert (result.exit_code, sink.stdout_text) == (0, "done\n"), sink.stderr_text
        assert len(meeting.counted) == 6, f"trial {trial}: {meeting.counted}"


def test_the_relay_loses_no_background_call(session, meeting, monkeypatch):
    """A script `_way` takes for one without background jobs still runs with the relay: a job
    whose call finds another's waiting in the relay's slot makes its own in place."""
    monkeypatch.setattr(_bashkit, "_way", lambda script, *_: "relayed")
    for trial in range(TRIALS):
        meeting.counted.clear()
        result, sink = script_run(session, "for i in 1 2 3 4 5 6; do tools count n=$i > /dev/null & done;"
                                           " wait; echo done")
        assert (result.exit_code, sink.stdout_text) == (0, "done\n"), sink.stderr_text
        assert sorted(meeting.counted) == [1, 2, 3, 4, 5, 6], f"trial {trial}"


def test_a_call_left_running_when_the_script_ends_is_awaited(session, meeting):
    result, sink = script_run(session, "tools count n=1 > /dev/null & tools meeting tick n=9 > /dev/null &")
    assert result.exit_code == 0, sink.stderr_text
    assert meeting.counted == [1] and 9 in server_ticks(session)


@pytest.mark.parametrize("where", ["tools", "bash"])
def test_calls_in_flight_when_a_job_stops_the_run_are_awaited_and_reported(session, meeting, channel, where):
    """Bashkit cancels the other jobs' calls when one stops the script, and host bash's process
    group is ended: the calls still end, and the report counts them. (The stopping call is built
    at run time: a literal one is asked about before the start.)"""
    finished = []
    sink = RecordingSink()
    script = "for i in 1 2 3; do tools hold n=$i > /dev/null & done; tools arrived n=3; c=change; tools $c n=1; wait"
    shell = HostBashRunner(channel) if where == "bash" else None
    runner = threading.Thread(target=lambda: finished.append(session.run_script(script, sink, runner=shell)))
    runner.start()
    deadline = time.monotonic() + PATIENCE
    while "needs_approval" not in sink.stderr_text and time.monotonic() < deadline:
        time.sleep(0.02)
    meeting.release.set()
    runner.join(PATIENCE)
    result = finished[0]
    report = result.report["tools"]
    assert result.exit_code != 0
    assert report["stopped"]["reason"] == "needs_approval" and report["stopped"]["call"]["tool"] == "tools change"
    assert report["read_only_calls"] == 4  # three holds and `arrived`: none dropped halfway


# -- the call limit across jobs ---------------------------------------------------------------


def limited(session: Session, workdir: Path, limit: int):
    text = (workdir / "toolkernel.toml").read_text()
    return text, text + f"\n[shell]\ncall_limit = {limit}\n"


@pytest.mark.parametrize("where", ["tools", "bash"])
def test_the_call_limit_holds_exactly_across_jobs(session, meeting, workdir, channel, where):
    before, now = limited(session, workdir, 5)
    (workdir / "toolkernel.toml").write_text(now)
    try:
        for trial in range(5):
            meeting.counted.clear()
            if where == "tools":
                result, sink = script_run(session, "for i in $(seq 1 12); do tools count n=$i > /dev/null & done; wait")
            else:
                result, sink = script_run(session, "seq 1 12 | xargs -P 6 -I{} tools count n={} > /dev/null; wait",
                                          runner=HostBashRunner(channel))
            report = result.report["tools"]
            assert len(meeting.counted) == 5, f"trial {trial}: {meeting.counted}"
            assert report["read_only_calls"] == 5 and report["stopped"]["reason"] == "call_limit"
            assert result.exit_code != 0
            assert any(e["code"] == "call_limit" for e in error_lines(sink.stderr_text))
    finally:
        (workdir / "toolkernel.toml").write_text(before)


# -- they run at once -------------------------------------------------------------------------


@pytest.mark.parametrize("call", [
    "tools meeting meet size=8 room=r{trial} patience=60",
    "tools meet room={tmp}/r{trial} size=8 me=$i",
    "tools gather size=8 room=r{trial}",  # a sync tool: 8 threads of the script's loop
])
def test_eight_background_calls_in_tools_run_at_once(session, meeting, tmp_path, call):
    for trial in range(3):
        line = call.format(trial=trial, tmp=tmp_path)
        result, sink = script_run(session, f"for i in $(seq 1 8); do {line} & done; wait")
        assert (result.exit_code, sink.stdout_text) == (0, "met\n" * 8), sink.stderr_text


@pytest.mark.parametrize("script", [
    "seq 1 4 | xargs -P 4 -I{{}} tools meet room={tmp}/x size=4 me={{}}",
    "seq 1 8 | xargs -P 8 -I{{}} tools meet room={tmp}/y size=8 me={{}}",
    "for i in 1 2 3 4; do tools meet room={tmp}/b size=4 me=$i & done; wait",
    "for i in 1 2 3 4; do tools meeting meet size=4 room=hb patience=60 & done; wait",
    "for i in 1 2 3 4; do tools gather size=4 room=hb & done; wait",
])
def test_host_bash_calls_run_at_once(session, meeting, channel, tmp_path, script):
    result, sink = script_run(session, script.format(tmp=tmp_path), runner=HostBashRunner(channel))
    calls = 8 if "-P 8" in script else 4
    assert (result.exit_code, sink.stdout_text) == (0, "met\n" * calls), sink.stderr_text


def serve_project(tmp_path: Path) -> Path:
    work = project(tmp_path, server_section("meeting", "meeting.py"), meet_tool(),
                   '[policy]\nallow = ["mcp_meeting__*"]\n')
    return work


def test_concurrent_serve_bash_calls_of_one_client_run_at_once(tmp_path):
    work = serve_project(tmp_path)
    room = work / "room"  # in the workspace: an agent's command tools see their own /tmp

    async def body():
        answers = {}
        async with connected(work) as client:
            async def one(i: int) -> None:
                answers[i] = await bash(client, f"tools meet room={room} size=4 me={i}")

            async with anyio.create_task_group() as group:
                for i in range(4):
                    group.start_soon(one, i)
        return answers

    answers = run(body)
    assert [answers[i].structured_content["stdout"] for i in range(4)] == ["met\n"] * 4


def test_concurrent_serve_bash_calls_of_several_clients_run_at_once(tmp_path):
    work = serve_project(tmp_path)
    room = work / "room"  # in the workspace: an agent's command tools see their own /tmp

    async def body():
        answers = {}

        async def client_calls(c: int) -> None:
            async with connected(work) as client:
                async def one(i: int) -> None:
                    answers[c, i] = await bash(client, f"tools meet room={room} size=4 me={c}-{i}")

                async with anyio.create_task_group() as group:
                    for i in range(2):
                        group.start_soon(one, i)

        async with anyio.create_task_group() as group:
            for c in range(2):
                group.start_soon(client_calls, c)
        return answers

    answers = run(body)
    assert sorted(a.structured_content["stdout"] for a in answers.values()) == ["met\n"] * 4
