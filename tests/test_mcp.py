"""The MCP client pool against real MCP servers run as subprocesses (tests/servers/)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from jupyter_server_helpers import free_port

from toolkernel import _loop
from toolkernel._mcp_sdk import ClientSession, types, validated, wire
from toolkernel._config._config import load_config
from toolkernel._config._servers import ServerConfig
from toolkernel._errors import ConnectionRequired, Unavailable
from toolkernel._longtext import LongText, pieces
from toolkernel._providers._mcp import ServerPool, convert_result
from toolkernel._tool import Tool, ToolContext

REPO = Path(__file__).resolve().parent.parent
SERVERS = REPO / "tests" / "servers"
# Stdio servers get only a minimal environment (the SDK's default), so the
# fixtures are told where toolkernel is.
ENV = {"PYTHONPATH": str(REPO)}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WAIT = 120  # generous bound for any one step on a loaded machine


def run(coro):
    return _loop.run(coro, timeout=WAIT)


def fixture(name: str, script: str, *args: str, **overrides) -> ServerConfig:
    env = {**ENV, **overrides.pop("env", {})}
    return ServerConfig(name, "stdio", command=sys.executable, args=(str(SERVERS / f"{script}.py"), *args),
                        env=env, **overrides)


def ctx(progress=None) -> ToolContext:
    return ToolContext(REPO) if progress is None else ToolContext(REPO, progress=progress)


def by_name(tools: list[Tool]) -> dict[str, Tool]:
    return {t.name: t for t in tools}


def call(pool: ServerPool, cfg: ServerConfig, tool: str, context: ToolContext | None = None, *,
         via: str = "private", **arguments):
    """One call, on the private loop (as `serve` and a direct call make it), or with `via="lane"`,
    as a script's thread does (on its own loop, see _stdio.py)."""
    tools = by_name(run(pool.tools(cfg)))
    if via == "lane":
        assert pool.callable_here(cfg)
        return here(tools[tool].call(arguments, context or ctx()))
    return run(tools[tool].call(arguments, context or ctx()))


def here(coro):
    """Run on this thread's own loop, as a script's `tools` line does."""
    return _loop.run_here(_loop.local_task(asyncio.wait_for(coro, WAIT)))


@pytest.fixture(params=["private", "lane"])
def via(request, monkeypatch):
    """Both ways a call reaches a stdio server past its session (whose `call_tool` must not be
    used at all): on the private loop, which reads the server for the session too, and from
    another thread, whose own loop reads the reply."""
    no_session_calls(monkeypatch)
    return request.param


def no_session_calls(monkeypatch) -> None:
    async def not_here(*args, **kwargs):
        raise AssertionError("a tool call went through the session")
    monkeypatch.setattr(ClientSession, "call_tool", not_here)


def server_pid(pool: ServerPool, cfg: ServerConfig) -> int:
    return call(pool, cfg, "pid").value()


def wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A dead child not yet reaped still answers kill(0); its /proc state says so.
    status = Path(f"/proc/{pid}/status")
    return not status.exists() or "zombie" in status.read_text()


@pytest.fixture
def pool():
    pool = ServerPool()
    yield pool
    run(pool.close())


@pytest.fixture(scope="module")
def shared_pool():
    """One pool for the tests that only read, so each server starts once."""
    pool = ServerPool()
    yield pool
    run(pool.close())


PULLS = fixture("github", "pulls")
STRUCTURED = fixture("structured", "structured")
IMAGES = fixture("images", "images")
SLOW = fixture("slow", "slow")


# --- listing ---------------------------------------------------------------------------

def test_lists_tools_with_schema_annotations_and_kind(shared_pool):
    tools = by_name(run(shared_pool.tools(PULLS)))

    assert {"list_pulls", "get_pull", "create_issue", "delete_branch"} <= set(tools)
    list_pulls = tools["list_pulls"]
    assert list_pulls.server == "github"
    assert list_pulls.command == "tools github list-pulls"
    assert "pull requests" in list_pulls.description
    assert list_pulls.input_schema["properties"]["repo"]["type"] == "string"
    assert list_pulls.annotations["readOnlyHint"] is True
    assert list_pulls.kind == "read"
    assert tools["get_pull"].kind == "read"
    assert tools["delete_branch"].annotations["destructiveHint"] is True
    assert tools["delete_branch"].kind == "execute"
    assert tools["create_issue"].annotations == {}
    assert tools["create_issue"].kind == "execute"
    assert shared_pool.loaded("github")
    assert shared_pool.tool_count("github") == len(tools)


@pytest.mark.slow
def test_untrusted_annotations_make_every_tool_execute(pool):
    untrusted = fixture("github", "pulls", trust_annotations=False)
    tools = by_name(run(pool.tools(untrusted)))
    assert tools["list_pulls"].annotations["readOnlyHint"] is True
    assert {t.kind for t in tools.values()} == {"execute"}


def test_unknown_server_has_no_count(pool):
    assert pool.tool_count("nobody") is None
    assert not pool.loaded("nobody")


@pytest.mark.slow
def test_same_config_reuses_the_session(pool):
    cfg = fixture("crashy", "crash")
    first = server_pid(pool, cfg)
    run(pool.tools(cfg))
    assert server_pid(pool, cfg) == first


@pytest.mark.slow
def test_concurrent_first_use_starts_one_server(pool):
    cfg = fixture("crashy", "crash")

    async def both():
        return await asyncio.gather(pool.tools(cfg), pool.tools(cfg))

    first, second = run(both())
    assert [t.name for t in first] == [t.name for t in second]
    pid = server_pid(pool, cfg)
    assert server_pid(pool, cfg) == pid


@pytest.mark.slow
def test_changed_config_reconnects(pool):
    before = server_pid(pool, fixture("crashy", "crash"))
    changed = fixture("crashy", "crash", env={"SOMETHING": "new"})
    after = server_pid(pool, changed)
    assert after != before
    wait_until(lambda: process_gone(before), "the old server to stop")


# --- results ---------------------------------------------------------------------------

def test_list_result_is_unwrapped_json(shared_pool, via):
    result = call(shared_pool, PULLS, "list_pulls", via=via, repo="acme/api", state="open")
    assert not result.is_error
    assert [p["number"] for p in result.structured] == [101, 102, 103, 104]
    assert {"number", "title", "draft"} <= set(result.structured[0])


def test_dict_result_is_structured(shared_pool, via):
    result = call(shared_pool, PULLS, "get_pull", via=via, repo="acme/api", number=101)
    assert result.structured["number"] == 101
    assert result.structured["mergeable"] is True
    assert result.value()["title"] == "Add rate limiting to /search"


def test_text_result_stays_text(shared_pool, via):
    result = call(shared_pool, PULLS, "delete_branch", via=via, branch="fix-x")
    assert result.texts == ["deleted branch fix-x"]
    assert result.structured is None
    assert result.value() == "deleted branch fix-x"


@pytest.mark.slow
def test_tool_error_is_an_error_result(shared_pool, via):
    result = call(shared_pool, PULLS, "get_pull", via=via, repo="acme/api", number=999)
    assert result.is_error
    assert "#999 not found" in result.texts[0]


def test_arguments_the_server_rejects_give_an_error_result(shared_pool, via):
    result = call(shared_pool, PULLS, "get_pull", via=via, repo="acme/api", number="not a number")
    assert result.is_error
    assert "number" in result.texts[0]


def test_seed_example_data_flow(shared_pool):
    """What the seed's script computes, done step by step against the demo data."""
    pulls = call(shared_pool, PULLS, "list_pulls", repo="acme/api", state="open").value()
    ready = [p["number"] for p in pulls if not p["draft"]]
    details = [call(shared_pool, PULLS, "get_pull", repo="acme/api", number=n).value() for n in ready]
    assert [(d["number"], d["mergeable"]) for d in details] == [(101, True), (103, False), (104, True)]


def test_object_output_schema(shared_pool, via):
    result = call(shared_pool, STRUCTURED, "stats", via=via, numbers=[1, 2, 4.5])
    assert result.structured == {"count": 3, "total": 7.5, "maximum": 4.5}


def test_wrapped_list_output_is_unwrapped(shared_pool, via):
    assert call(shared_pool, STRUCTURED, "evens", via=via, limit=7).structured == [0, 2, 4, 6]


def test_str_tool_with_schema_gives_text(shared_pool, via):
    result = call(shared_pool, STRUCTURED, "greet", via=via, name="Ada")
    assert (result.texts, result.structured) == (["hello, Ada"], None)


def test_raised_tool_error_in_structured_tool(shared_pool, via):
    result = call(shared_pool, STRUCTURED, "stats", via=via, numbers=[])
    assert result.is_error and "at least one number" in result.texts[0]


@pytest.mark.slow
def test_resources_become_text(shared_pool, via):
    result = call(shared_pool, STRUCTURED, "resources", via=via)
    assert result.texts == ["first note", "memo://notes/2"]


@pytest.mark.slow
def test_image_result(shared_pool, via):
    result = call(shared_pool, IMAGES, "red_square", via=via, size=3)
    assert result.texts == ["a red square, 3x3 pixels"]
    [image] = result.images
    assert image.mime_type == "image/png"
    assert image.data.startswith(PNG_SIGNATURE)
    width, height = int.from_bytes(image.data[16:20], "big"), int.from_bytes(image.data[20:24], "big")
    assert (width, height) == (3, 3)


def test_an_image_that_is_not_base64_is_said_and_the_rest_kept(shared_pool, via):
    # A server's broken block is its own fault: once "Incorrect padding; a bug in toolkernel".
    result = call(shared_pool, IMAGES, "broken_image", via=via)
    assert not result.is_error
    assert result.texts == ["[image (image/png): the server sent data that is not base64; not shown]",
                            "a blue square, after a broken image"]
    [image] = result.images
    assert image.data.startswith(PNG_SIGNATURE)


# --- progress and cancellation ---------------------------------------------------------

@pytest.mark.slow
def test_progress_notifications_reach_the_context(shared_pool, via):
    seen = []
    result = call(shared_pool, SLOW, "wait", ctx(lambda *p: seen.append(p)), via=via, steps=3, step_seconds=0.05)
    assert result.texts == ["waited 3 steps"]
    assert seen == [(1, 3, "step 1 of 3"), (2, 3, "step 2 of 3"), (3, 3, "step 3 of 3")]


@pytest.mark.slow
def test_cancelling_a_slow_call_cancels_it_on_the_server(pool):
    started = threading.Event()
    tools = by_name(run(pool.tools(SLOW)))
    future = _loop.submit(tools["wait"].call({"steps": 3000, "step_seconds": 0.1}, ctx(lambda *_: started.set())))
    assert started.wait(WAIT)

    future.cancel()

    with pytest.raises(BaseException) as raised:
        future.result(WAIT)
    assert type(raised.value).__name__ == "CancelledError"
    assert pool.loaded("slow")
    wait_until(lambda: call(pool, SLOW, "history").structured == ["cancelled"], "the server to see the cancel")
    assert call(pool, SLOW, "ping").texts == ["pong"]


@pytest.mark.slow
def test_cancelling_a_call_on_a_scripts_thread_cancels_it_on_the_server(pool, monkeypatch):
    """As an interrupt cancels a script's `tools` line: the task on that thread's loop, from another thread."""
    no_session_calls(monkeypatch)
    started = threading.Event()
    tools = by_name(run(pool.tools(SLOW)))
    assert pool.callable_here(SLOW)
    task = _loop.local_task(tools["wait"].call({"steps": 3000, "step_seconds": 0.1}, ctx(lambda *_: started.set())))
    threading.Thread(target=lambda: (started.wait(WAIT), _loop.cancel(task)), daemon=True).start()

    with pytest.raises(asyncio.CancelledError):
        _loop.run_here(task)

    wait_until(lambda: call(pool, SLOW, "history", via="lane").structured[-1:] == ["cancelled"],
               "the server to see the cancel")
    assert call(pool, SLOW, "ping", via="lane").texts == ["pong"]


@pytest.mark.slow
def test_a_request_from_the_server_during_a_call_is_answered(pool, via):
    # The server logs and pings the client mid-call: the session answers, the call ends.
    assert call(pool, SLOW, "chatty", via=via).texts == ["answered"]


@pytest.mark.slow
def test_structured_content_that_breaks_the_output_schema_is_an_error_result(pool, via):
    cfg = fixture("liar", "liar")
    assert call(pool, cfg, "honest", via=via).structured == {"n": 7}
    wrong = call(pool, cfg, "wrong_type", via=via)
    assert wrong.is_error and "Invalid structured content returned by tool wrong_type" in wrong.texts[0]
    missing = call(pool, cfg, "no_structure", via=via)
    assert missing.is_error and "did not return structured content" in missing.texts[0]


@pytest.mark.slow
def test_a_line_that_is_not_json_rpc_mid_call_leaves_the_call_and_the_session_alone(pool, via):
    cfg = fixture("liar", "liar")
    assert call(pool, cfg, "noisy", via=via).structured == {"n": 7}
    assert call(pool, cfg, "honest", via=via).structured == {"n": 7}
    assert pool.loaded("liar")


@pytest.mark.slow
def test_calls_from_many_threads_and_the_session_at_once_each_get_their_own_result(pool):
    """Lane requests from several threads, and the session's, share one stdin and one stdout."""
    tools = by_name(run(pool.tools(STRUCTURED)))
    lane = pool._connections["structured"].lane
    results: dict[tuple[str, int], object] = {}

    def caller(name: str) -> None:
        for i in range(15):
            arguments = {"numbers": [i, len(name)]}
            results[name, i] = here(tools["stats"].call(arguments, ctx())).structured["total"]

    threads = [threading.Thread(target=caller, args=(f"t{n}" * (n + 1),)) for n in range(4)]
    for thread in threads:
        thread.start()
    # The private loop's calls go past the session too (its reading is the transport's); the
    # session's own requests share the pipes all the same.
    private = [run(tools["stats"].call({"numbers": [i, 100]}, ctx())).structured["total"] for i in range(15)]
    session = pool._connections["structured"].session
    own = [wire(run(session.call_tool("stats", {"numbers": [i, 200]})))["structuredContent"]["total"]
           for i in range(15)]
    for thread in threads:
        thread.join(WAIT)
    assert private == [i + 100 for i in range(15)] and own == [i + 200 for i in range(15)]
    assert next(lane._ids) == 5 * 15 + 1  # every call but the session's own went past it
    assert results == {(name, i): i + len(name) for name in (f"t{n}" * (n + 1) for n in range(4)) for i in range(15)}


@pytest.mark.slow
def test_a_call_from_a_thread_reads_its_own_reply_while_the_loop_of_the_session_is_busy(pool, monkeypatch):
    """The calling thread reads the server's stdout itself while it waits: its reply does not
    wait for the private loop (blocked here in a sync wait) to read it and hand it on."""
    tools = by_name(run(pool.tools(SLOW)))
    no_session_calls(monkeypatch)
    blocking, release = threading.Event(), threading.Event()

    async def block_the_private_loop() -> None:
        blocking.set()
        release.wait(WAIT)

    blocked = _loop.submit(block_the_private_loop())
    answers: list[object] = []
    caller = threading.Thread(target=lambda: answers.append(here(tools["ping"].call({}, ctx()))), daemon=True)
    try:
        assert blocking.wait(WAIT)
        caller.start()
        caller.join(WAIT / 4)
        answered_while_blocked = not caller.is_alive()
    finally:
        release.set()
        blocked.result(WAIT)
    caller.join(WAIT)
    assert answered_while_blocked, "the call waited for the private loop"
    assert [a.texts for a in answers] == [["pong"]]
    run(pool._connections["slow"].session.send_ping())  # the session reads again


@pytest.mark.slow
def test_what_the_server_sends_after_a_threads_call_still_reaches_the_session(pool, monkeypatch):
    """Once its call is answered, the thread hands the reading of stdout back: a list change the
    server announces later, while no call waits, is still seen."""
    cfg = fixture("dynamic", "dynamic")
    tools = by_name(run(pool.tools(cfg)))
    no_session_calls(monkeypatch)
    assert here(tools["add_tool_later"].call({"name": "later", "delay": 0.5}, ctx())).texts == ["adding later"]
    wait_until(lambda: "later" in by_name(run(pool.tools(cfg))), "the announced tool to be listed")


@pytest.mark.slow
@pytest.mark.parametrize("next_caller", ["private", "lane"])
def test_a_loop_left_with_its_call_waiting_does_not_keep_the_server_from_anyone_else(pool, next_caller):
    """A thread's loop that stops running while its call still waits (its run ended by an
    exception) reads nothing more; the next call, on the private loop or from a thread, takes
    the reading back instead of waiting for it forever."""
    tools = by_name(run(pool.tools(SLOW)))
    started = threading.Event()
    left = asyncio.new_event_loop()
    waiting = left.create_task(tools["wait"].call({"steps": 3000, "step_seconds": 0.1}, ctx(lambda *_: started.set())))
    try:
        left.run_until_complete(left.run_in_executor(None, started.wait, WAIT))
        assert not waiting.done()  # the loop stopped with its call waiting

        assert call(pool, SLOW, "ping", via=next_caller).texts == ["pong"]
        assert call(pool, SLOW, "ping", via="lane").texts == ["pong"]
    finally:
        waiting.cancel()
        left.run_until_complete(asyncio.wait([waiting], timeout=WAIT))
        left.close()
    assert call(pool, SLOW, "ping", via="lane").texts == ["pong"]


@pytest.mark.slow
def test_closing_the_pool_ends_a_call_waiting_on_a_thread(pool):
    tools = by_name(run(pool.tools(SLOW)))
    lane = pool._connections["slow"].lane
    started = threading.Event()
    outcome: list[BaseException] = []

    def waiting_call() -> None:
        try:
            here(tools["wait"].call({"steps": 3000, "step_seconds": 0.1}, ctx(lambda *_: started.set())))
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            outcome.append(exc)

    caller = threading.Thread(target=waiting_call, daemon=True)
    caller.start()
    assert started.wait(WAIT)
    run(pool.close())
    caller.join(WAIT)
    assert not caller.is_alive()
    assert [type(exc) for exc in outcome] == [Unavailable]
    assert not lane.usable and lane._out is None  # its stdout closed once the thread let go of it


@pytest.mark.slow
def test_without_epoll_the_loop_of_the_session_reads_for_every_call(pool, monkeypatch):
    """Where no epoll set can be made, the private loop keeps the reading and hands replies on."""
    from types import SimpleNamespace

    from toolkernel._providers._mcp import _stdio

    monkeypatch.setattr(_stdio, "select", SimpleNamespace(EPOLLIN=1))  # no `epoll` in it
    tools = by_name(run(pool.tools(SLOW)))
    no_session_calls(monkeypatch)
    assert pool._connections["slow"].lane._gate is None
    seen = []
    waited = here(tools["wait"].call({"steps": 2, "step_seconds": 0.05}, ctx(lambda *p: seen.append(p))))
    assert waited.texts == ["waited 2 steps"] and [p[0] for p in seen] == [1, 2]
    assert here(tools["chatty"].call({}, ctx())).texts == ["answered"]


class CountingLoop(asyncio.SelectorEventLoop):
    """A thread's loop that counts what it is asked to watch, and its turns."""

    def __init__(self) -> None:
        super().__init__()
        self.watched = self.unwatched = self.turns = 0
        self.unwatched_on: list[int] = []  # the threads that asked

    def add_reader(self, fd, callback, *args):
        self.watched += 1
        return super().add_reader(fd, callback, *args)

    def remove_reader(self, fd):
        self.unwatched += 1
        self.unwatched_on.append(threading.get_ident())
        return super().remove_reader(fd)

    def _run_once(self):
        self.turns += 1
        return super()._run_once()


@pytest.mark.slow
def test_a_threads_loop_starts_watching_the_server_once_not_on_every_call(pool):
    """Taking the reading and handing it back moves stdout between epoll sets: the loop of the
    calling thread watches its own set from its first call on, with no change per call."""
    tools = by_name(run(pool.tools(SLOW)))
    lane = pool._connections["slow"].lane
    loop = CountingLoop()
    try:
        for _ in range(5):
            assert loop.run_until_complete(asyncio.wait_for(tools["ping"].call({}, ctx()), WAIT)).texts == ["pong"]
        assert (loop.watched, loop.unwatched) == (1, 0)
        assert lane._reader is lane._loop  # handed back after each call
        run(pool._connections["slow"].session.send_ping())  # the session reads again
    finally:
        run(pool.close())
        loop.close()


@pytest.mark.slow
def test_a_server_that_exits_wakes_no_loop_that_read_for_it_before(pool):
    """A set holding the server's stdout reports its hang-up whether or not it asks for input:
    the loop of a thread that called the server before must not hold it and spin."""
    cfg = fixture("crashy", "crash")
    tools = by_name(run(pool.tools(cfg)))
    loop = CountingLoop()
    try:
        pid = loop.run_until_complete(asyncio.wait_for(tools["pid"].call({}, ctx()), WAIT)).value()
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not pool.loaded("crashy"), "the pool to notice the dead server")
        loop.turns = 0
        loop.run_until_complete(asyncio.sleep(0.5))
        assert loop.turns < 20, f"{loop.turns} turns in half a second: the loop spins"
    finally:
        run(pool.close())
        loop.close()


@pytest.mark.slow
def test_closing_the_server_makes_a_threads_loop_forget_its_epoll_set(pool):
    """The set a thread's loop watched is closed with the server, and the loop stops watching
    it first: its number, once the kernel gives it to a new descriptor, works as any other."""
    tools = by_name(run(pool.tools(SLOW)))
    lane = pool._connections["slow"].lane
    loop = CountingLoop()
    read_end, write_end = os.pipe()
    try:
        assert loop.run_until_complete(asyncio.wait_for(tools["ping"].call({}, ctx()), WAIT)).texts == ["pong"]
        number = lane._sets[loop].fileno()
        run(pool.close())
        assert lane._sets == {} and loop.unwatched == 1
        os.dup2(read_end, number)  # the number, now a pipe's (as a later open could make it)
        readable = loop.create_future()
        loop.add_reader(number, lambda: readable.done() or readable.set_result(True))
        os.write(write_end, b"x")
        assert loop.run_until_complete(asyncio.wait_for(readable, WAIT))
        loop.remove_reader(number)
        os.close(number)
    finally:
        os.close(read_end)
        os.close(write_end)
        loop.close()


@pytest.mark.slow
def test_closing_the_server_while_a_threads_loop_runs_makes_it_forget_its_set_on_its_own_thread(pool):
    """A loop running on its thread (other work) is told to stop watching, and does so there."""
    tools = by_name(run(pool.tools(SLOW)))
    lane = pool._connections["slow"].lane
    loop = CountingLoop()
    called, release = threading.Event(), threading.Event()
    outcome: list[object] = []

    async def other_work() -> None:
        while not release.is_set():
            await asyncio.sleep(0.01)

    def thread() -> None:
        outcome.append(loop.run_until_complete(asyncio.wait_for(tools["ping"].call({}, ctx()), WAIT)).texts)
        called.set()
        loop.run_until_complete(other_work())

    worker = threading.Thread(target=thread, daemon=True)
    worker.start()
    try:
        assert called.wait(WAIT)
        watched = lane._sets[loop]
        run(pool.close())
        wait_until(lambda: watched.closed, "the loop to close its set")
        assert loop.unwatched_on == [worker.ident] and worker.is_alive()  # on its own thread, while it ran
    finally:
        release.set()
        worker.join(WAIT)
        loop.close()
    assert outcome == [["pong"]]


HOSTILE = fixture("hostile", "hostile")


@pytest.mark.slow
def test_replies_under_ids_the_call_did_not_send_are_not_its_answer(pool, via):
    # Replies to ids never asked for, near misses of the call's own, and a malformed one to it.
    assert call(pool, HOSTILE, "forged_replies", via=via).texts == ["the real answer"]
    assert call(pool, HOSTILE, "ping", via=via).texts == ["pong"]


@pytest.mark.slow
def test_an_endless_line_mid_call_ends_the_call_at_its_timeout(pool, via):
    cfg = fixture("hostile", "hostile", timeout=2)
    assert call(pool, cfg, "ping", via=via).texts == ["pong"]
    with pytest.raises(Unavailable) as raised:
        call(pool, cfg, "endless_line", via=via, megabytes=20)
    assert raised.value.retryable and "within 2 s" in raised.value.message


@pytest.mark.slow
def test_a_flood_of_messages_for_the_session_mid_call_reaches_it_and_the_call_ends(pool, via):
    # Read by the calling thread, they queue for the session; past a backlog the thread lets
    # the session's own loop read again, at the session's pace.
    assert call(pool, HOSTILE, "flood", via=via, count=3000).texts == ["sent 3000"]
    assert call(pool, HOSTILE, "ping", via=via).texts == ["pong"]
    assert pool.loaded("hostile")


# --- failures --------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("via", ["private", "lane"])  # the session also serves the other calls
def test_crash_mid_call_is_unavailable_then_recovers(pool, via):
    cfg = fixture("crashy", "crash")
    first = server_pid(pool, cfg)

    with pytest.raises(Unavailable) as raised:
        call(pool, cfg, "crash", via=via, code=3)

    assert raised.value.retryable
    assert "'crashy'" in raised.value.message
    assert "exiting with code 3 on purpose" in raised.value.message
    assert not pool.loaded("crashy")
    assert call(pool, cfg, "echo", text="back").texts == ["back"]
    assert server_pid(pool, cfg) != first


@pytest.mark.slow
def test_server_killed_while_idle_reconnects_on_next_use(pool):
    cfg = fixture("crashy", "crash")
    tools = by_name(run(pool.tools(cfg)))
    first = run(tools["pid"].call({}, ctx())).value()

    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not pool.loaded("crashy"), "the pool to notice the dead server")

    # The Tool objects listed before the death still work: they reconnect.
    assert run(tools["echo"].call({"text": "again"}, ctx())).texts == ["again"]
    assert server_pid(pool, cfg) != first


@pytest.mark.slow
def test_die_at_start_is_unavailable_with_its_stderr(pool):
    cfg = fixture("dead", "crash", "--die-at-start", env={"FIXTURE_TOKEN": "s3cr3t-t0ken"})
    with pytest.raises(Unavailable) as raised:
        run(pool.tools(cfg))
    message = raised.value.message
    assert raised.value.retryable
    assert "exited before it finished starting" in message
    assert "cannot open /nonexistent/database.db" in message
    assert "s3cr3t-t0ken" not in message and "token *** failed" in message
    assert pool.last_error("dead") is raised.value
    assert not pool.loaded("dead")


@pytest.mark.slow
def test_a_secret_a_server_names_in_its_error_result_is_masked(pool, via):
    # As for command tools: a server handed a token in its env may echo it when it is refused.
    cfg = fixture("refused", "refused", env={"FIXTURE_TOKEN": "s3cr3t-t0ken"})
    for tool in ("login", "login_structured"):  # a structured error prints as its JSON
        result = call(pool, cfg, tool, via=via)
        assert result.is_error
        shown = "".join(result.texts) + json.dumps(result.structured)
        assert "s3cr3t-t0ken" not in shown and "refused the token ***" in shown, shown


def test_command_not_found_is_unavailable(pool):
    cfg = ServerConfig("ghost", "stdio", command="toolkernel-no-such-server-command")
    with pytest.raises(Unavailable, match="command not found: toolkernel-no-such-server-command"):
        run(pool.tools(cfg))


@pytest.mark.slow
def test_garbage_on_stdout_fails_fast(pool):
    pool.connect_timeout = 2 * WAIT
    started = time.monotonic()
    with pytest.raises(Unavailable, match="not MCP") as raised:
        run(pool.tools(fixture("garbage", "garbage")))
    assert time.monotonic() - started < WAIT / 2, "it waited for the connect timeout instead of failing fast"
    assert "Starting awesome server" in raised.value.message


def test_a_program_that_prints_a_line_and_exits_is_named_for_its_line_not_a_crash(pool, monkeypatch):
    # The session hands the line on in a task of its own, and the end of stdout may beat it (it
    # did once in CI, on a loaded machine): here it always does.
    from toolkernel._providers._mcp._pool import _Connection

    on_message = _Connection._on_message

    async def slow(self, message):
        await asyncio.sleep(0.5)
        await on_message(self, message)

    monkeypatch.setattr(_Connection, "_on_message", slow)
    with pytest.raises(Unavailable, match="not MCP") as raised:
        run(pool.tools(fixture("garbage", "garbage", "--exit")))
    assert "Starting awesome server" in raised.value.message



@pytest.mark.slow
def test_silent_server_times_out(pool):
    pool.connect_timeout = 1.5
    cfg = ServerConfig("silent", "stdio", command="sleep", args=("3600",))
    with pytest.raises(Unavailable, match="did not finish starting within 1.5 s"):
        run(pool.tools(cfg))
    assert not pool.loaded("silent")


@pytest.mark.slow
def test_a_call_past_its_timeout_is_retryable_and_the_server_stays_usable(pool, via):
    cfg = fixture("big", "big", timeout=1.5)
    with pytest.raises(Unavailable) as raised:
        call(pool, cfg, "hang", via=via)
    assert raised.value.retryable
    assert "sent no result nor progress for hang within 1.5 s" in raised.value.message
    assert call(pool, cfg, "ping", via=via).texts == ["pong"]  # the same connection, no restart
    assert pool.loaded("big")


@pytest.mark.slow
def test_progress_restarts_the_call_clock(pool, via):
    # 12 steps of 0.4 s run well past the 3 s timeout; each step's progress restarts it.
    cfg = fixture("slow", "slow", timeout=3)
    assert call(pool, cfg, "wait", via=via, steps=12, step_seconds=0.4).texts == ["waited 12 steps"]


@pytest.mark.slow
@pytest.mark.parametrize("via", ["private", "lane"])  # the session also serves the other calls
def test_a_40_mb_result_arrives_whole(pool, via):
    # The SDK's own stdio reader took 44 s here (quadratic); WAIT bounds this call.
    cfg = fixture("big", "big")
    result = call(pool, cfg, "blob", via=via, megabytes=40)
    assert result.structured is None  # sent twice (as text and as {"result": text}): the text is the result
    (text,) = result.texts
    assert len(text) == 40_000_000
    # Past the session, a text this long stays in a file and is read in pieces (_spool, _longtext).
    assert type(text) is LongText
    digest = hashlib.sha256()
    for piece in pieces(text, 1 << 20):
        digest.update(piece.encode())
    assert digest.hexdigest() == call(pool, cfg, "digest", megabytes=40).texts[0]


@pytest.mark.slow
def test_secrets_from_variables_in_command_and_args_are_masked(pool, tmp_path):
    environ = {"HOME": str(tmp_path), "FIXTURE_SECRET": "arg-s3cr3t-value", "SECRET_CMD": "cmd-s3cr3t-name",
               "TOOLKERNEL_TRUST_ALL": "1"}  # a project config's servers start only once trusted
    (tmp_path / "toolkernel.toml").write_text(
        f"[mcp_servers.dead]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = {json.dumps([str(SERVERS / 'crash.py'), '--die-at-start', '--token=${FIXTURE_SECRET}'])}\n"
        f"env = {{PYTHONPATH = {json.dumps(ENV['PYTHONPATH'])}}}\n\n"
        '[mcp_servers.ghost]\ncommand = "/opt/${SECRET_CMD}/server"\n')
    config = load_config(tmp_path, environ=environ, admin_path=tmp_path / "none.toml")
    messages = []
    for name in ("dead", "ghost"):
        with pytest.raises(Unavailable) as raised:
            run(pool.tools(config.server(name)))
        messages.append(raised.value.message)
    assert "started as" in messages[0] and "--token=***" in messages[0], messages[0]
    assert "command not found: /opt/***/server" in messages[1]
    assert not any(secret in "".join(messages) for secret in ("arg-s3cr3t-value", "cmd-s3cr3t-name"))


def test_missing_variables_need_a_connection(pool):
    cfg = ServerConfig("gh", "stdio", command="toolkernel-no-such-server-command",
                       env={"TOKEN": ""}, missing_vars=("GITHUB_TOKEN",), source="/p/toolkernel.toml")
    with pytest.raises(ConnectionRequired) as raised:
        run(pool.tools(cfg))
    message = raised.value.message
    assert "${GITHUB_TOKEN}" in message and "/p/toolkernel.toml" in message and "%env GITHUB_TOKEN=" in message
    assert raised.value.code == "connection_required"


# --- streamable HTTP -------------------------------------------------------------------

def start_http_server(port: int, transport: str = "--http", script: str = "pulls.py") -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, str(SERVERS / script), transport, str(port)],
        env={**os.environ, **ENV}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        assert process.poll() is None, "the HTTP fixture server exited"
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    wait_until(listening, "the HTTP server to listen")
    return process


@pytest.fixture
def http_server():
    port = free_port()
    processes = [start_http_server(port)]
    yield port, processes
    for process in processes:
        process.kill()
        process.wait()


def test_streamable_http_with_headers(pool, http_server):
    port, _ = http_server
    cfg = ServerConfig("remote", "http", url=f"http://127.0.0.1:{port}/mcp", headers={"X-Team": "platform"})

    assert "list_pulls" in by_name(run(pool.tools(cfg)))
    assert call(pool, cfg, "request_header", name="x-team").texts == ["platform"]
    assert [p["number"] for p in call(pool, cfg, "list_pulls", repo="acme/web").structured] == [12, 11]


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["http", "sse"])
def test_http_server_restart_is_unavailable_then_recovers(pool, transport):
    port = free_port()
    processes = [start_http_server(port, f"--{transport}")]
    cfg = ServerConfig("remote", transport, url=f"http://127.0.0.1:{port}/{'mcp' if transport == 'http' else 'sse'}")
    try:
        restarted(pool, cfg, port, processes, transport)
    finally:
        for process in processes:
            process.kill()
            process.wait()


def restarted(pool: ServerPool, cfg: ServerConfig, port: int, processes: list, transport: str) -> None:
    tools = by_name(run(pool.tools(cfg)))
    processes[0].kill()
    processes[0].wait()

    with pytest.raises(Unavailable) as raised:
        run(tools["get_pull"].call({"repo": "acme/web", "number": 12}, ctx()))
    assert raised.value.retryable and f"http://127.0.0.1:{port}" in raised.value.message

    processes.append(start_http_server(port, f"--{transport}"))
    assert run(tools["get_pull"].call({"repo": "acme/web", "number": 12}, ctx())).structured["number"] == 12


@pytest.fixture
def big_http_server():
    port = free_port()
    process = start_http_server(port, script="big.py")
    yield ServerConfig("big", "http", url=f"http://127.0.0.1:{port}/mcp")
    process.kill()
    process.wait()


def test_a_long_result_over_streamable_http_arrives_whole(pool, big_http_server):
    # The SDK's own cap on one SSE event, 1 MiB, failed a text of 0.5 MB (sent twice) as a
    # server that "stopped answering". A call's reply is read past the session (`_http_lane`).
    text = call(pool, big_http_server, "blob", megabytes=3).texts
    expected = hashlib.sha256(big_fixture().blob_text(3).encode()).hexdigest()
    assert [hashlib.sha256(str(t).encode()).hexdigest() for t in text] == [expected]


def test_a_call_s_reply_is_not_held_to_the_session_s_cap_on_one_message(pool, big_http_server, monkeypatch):
    from toolkernel._providers._mcp import _pool

    monkeypatch.setattr(_pool, "HTTP_EVENT_CAP", 1 << 20)  # what the SDK's session takes in at most
    text = call(pool, big_http_server, "blob", megabytes=2).texts
    assert type(text[0]) is LongText and len(text[0]) == 2_000_000
    assert call(pool, big_http_server, "ping").texts == ["pong"]


def big_fixture():
    import importlib.util

    spec = importlib.util.spec_from_file_location("big_fixture", SERVERS / "big.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_sse_transport(pool):
    port = free_port()
    process = start_http_server(port, "--sse")
    try:
        cfg = ServerConfig("older", "sse", url=f"http://127.0.0.1:{port}/sse", headers={"X-Team": "web"})
        assert call(pool, cfg, "get_pull", repo="acme/web", number=11).structured["draft"] is True
        assert call(pool, cfg, "request_header", name="x-team").texts == ["web"]
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow
def test_a_server_that_hangs_at_start_is_not_started_again_until_its_config_changes(pool, tmp_path):
    pool.connect_timeout = 2
    starts = tmp_path / "starts.log"
    cfg = fixture("stuck", "hang", str(starts))
    with pytest.raises(Unavailable) as first:
        run(pool.tools(cfg))
    assert "did not finish starting within 2 s" in first.value.message
    assert "not started again until its config changes" in first.value.message
    assert first.value.retryable is False  # the same config gets the same answer
    assert "waiting forever (on purpose)" in first.value.message  # its stderr is quoted

    for _ in range(3):  # every later use: the same error, and no new start
        with pytest.raises(Unavailable) as again:
            run(pool.tools(cfg))
        assert again.value.message == first.value.message
    assert starts.read_text().count("started") == 1
    assert pool.last_error("stuck").message == first.value.message

    changed = fixture("stuck", "hang", str(starts), description="now described")
    with pytest.raises(Unavailable):
        run(pool.tools(changed))
    assert starts.read_text().count("started") == 2  # a changed config is a new start

    run(pool.retire(set()))  # unconfigured, then configured again: started again
    with pytest.raises(Unavailable):
        run(pool.tools(changed))
    assert starts.read_text().count("started") == 3


@pytest.mark.slow
def test_a_server_that_fails_fast_is_tried_again_on_next_use(pool, tmp_path):
    dead = fixture("dead", "crash", "--die-at-start")
    for _ in range(2):
        with pytest.raises(Unavailable, match="exited before it finished starting"):
            run(pool.tools(dead))
    ghost = ServerConfig("ghost", "stdio", command=str(tmp_path / "mcp-server-later"))
    with pytest.raises(Unavailable, match="command not found") as missing:
        run(pool.tools(ghost))
    assert missing.value.retryable is False
    # Installed meanwhile: the next use starts it, with no config change.
    (tmp_path / "mcp-server-later").write_text(f"#!/bin/sh\nexec {sys.executable} {SERVERS / 'crash.py'}\n")
    (tmp_path / "mcp-server-later").chmod(0o755)
    assert "echo" in {t.name for t in run(pool.tools(ghost))}


def test_http_server_not_running_is_unavailable(pool):
    cfg = ServerConfig("remote", "http", url=f"http://127.0.0.1:{free_port()}/mcp?token=abc123secret")
    with pytest.raises(Unavailable, match="could not be reached") as raised:
        run(pool.tools(cfg))
    assert "abc123secret" not in raised.value.message


# --- start, retire, close --------------------------------------------------------------

@pytest.mark.slow
def test_start_connects_in_parallel_and_records_errors(pool):
    good = fixture("good", "crash")
    dead = fixture("dead", "crash", "--die-at-start")
    needs = ServerConfig("needs", "stdio", command="x", missing_vars=("API_KEY",))

    run(pool.start([good, dead, needs]))

    assert pool.loaded("good") and pool.last_error("good") is None
    assert isinstance(pool.last_error("dead"), Unavailable)
    assert isinstance(pool.last_error("needs"), ConnectionRequired)
    assert not pool.loaded("dead") and pool.tool_count("dead") is None


@pytest.mark.slow
def test_start_is_parallel(pool):
    # Three servers that never answer, each given the whole connect timeout:
    # one after another would take three timeouts.
    # Timeouts long beside a process start on a loaded machine: the bound leaves 15 s of slack.
    pool.connect_timeout = 10
    silent = [ServerConfig(f"silent{i}", "stdio", command="sleep", args=("3600",)) for i in range(3)]
    started = time.monotonic()
    run(pool.start(silent))
    assert time.monotonic() - started < 25
    assert all(isinstance(pool.last_error(cfg.name), Unavailable) for cfg in silent)


@pytest.mark.slow
def test_retire_closes_servers_no_longer_configured(pool):
    keep, drop = fixture("keep", "crash"), fixture("drop", "crash")
    run(pool.start([keep, drop]))
    dropped_pid = server_pid(pool, drop)

    run(pool.retire({"keep"}))

    assert pool.loaded("keep") and not pool.loaded("drop")
    assert pool.tool_count("drop") is None and pool.tool_count("keep") == 3
    wait_until(lambda: process_gone(dropped_pid), "the retired server to stop")


@pytest.mark.slow
def test_close_stops_every_server():
    pool = ServerPool()
    cfgs = [fixture("a", "crash"), fixture("b", "crash")]
    run(pool.start(cfgs))
    pids = [server_pid(pool, cfg) for cfg in cfgs]
    run(pool.close())
    assert not pool.loaded("a") and not pool.loaded("b")
    for pid in pids:
        wait_until(lambda: process_gone(pid), "a closed server to stop")


@pytest.mark.slow
def test_demo_server_runs_as_a_module(pool):
    cfg = ServerConfig("github", "stdio", command=sys.executable, args=("-m", "toolkernel.demo_server"), env=ENV)
    assert sorted(by_name(run(pool.tools(cfg)))) == ["create_issue", "delete_branch", "get_pull", "list_pulls"]
    assert call(pool, cfg, "create_issue", title="Flaky test").structured["id"] == "ACME-1201"


@pytest.mark.slow
def test_announced_tool_list_change_is_listed_on_next_use(pool):
    cfg = fixture("dynamic", "dynamic")
    assert sorted(by_name(run(pool.tools(cfg)))) == ["add_tool", "add_tool_later"]

    assert call(pool, cfg, "add_tool", name="fresh").texts == ["added fresh"]

    wait_until(lambda: "fresh" in by_name(run(pool.tools(cfg))), "the new tool to be listed")
    assert pool.tool_count("dynamic") == 3
    assert call(pool, cfg, "fresh").texts == ["fresh"]


# --- result conversion of blocks the fixtures do not send ------------------------------

def test_convert_blob_resource_and_audio():
    result = convert_result(wire(types.CallToolResult(content=[
        types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(
            uri="file:///report.pdf", mimeType="application/pdf", blob="JVBERg==")),
        types.AudioContent(type="audio", data="AAAA", mimeType="audio/wav"),
    ])))
    assert result.texts == ["[resource file:///report.pdf (application/pdf)]", "[audio (audio/wav), not shown]"]


def test_convert_keeps_an_object_named_result_without_a_wrapping_schema():
    result = convert_result(wire(types.CallToolResult(content=[types.TextContent(type="text", text="{}")],
                                                      structuredContent={"result": [1, 2]})))
    assert result.structured == {"result": [1, 2]}


def test_convert_error_result():
    result = convert_result(wire(types.CallToolResult(
        content=[types.TextContent(type="text", text="rate limited")], isError=True)))
    assert result.is_error and result.texts == ["rate limited"]


RAW_RESULTS = {  # tools/call results as servers send them: the plain ones, and near misses
    "text": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    "structured": {"content": [{"type": "text", "text": "{}"}], "structuredContent": {"n": 1}, "isError": False},
    "wrapper": {"content": [{"type": "text", "text": "x"}], "structuredContent": {"result": "x"}},
    "wrapped": {"content": [], "structuredContent": {"result": [1, 2]}},
    "null structured": {"content": [], "structuredContent": None},
    "error": {"content": [{"type": "text", "text": "no"}], "isError": True},
    "annotated": {"content": [{"type": "text", "text": "a", "annotations": {"priority": 1}}]},
    "meta": {"content": [{"type": "text", "text": "a"}], "_meta": {"k": 1}},
    "image": {"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]},
    "lax error flag": {"content": [], "isError": "true"},
    "not a block": {"content": ["a"]},
    "no content": {"structuredContent": {"n": 1}},
}


@pytest.mark.parametrize("wrapped", [False, True])
@pytest.mark.parametrize("shape", list(RAW_RESULTS))
def test_a_call_past_the_session_reads_a_result_as_the_sdks_model_does(shape, wrapped):
    """The lane's results skip the SDK's model where it would take them as they are: what comes
    out is what the model's way gives, and anything else still goes through the model."""
    from pydantic import ValidationError

    from toolkernel._providers._mcp._pool import _converted, _plain_texts

    raw = RAW_RESULTS[shape]
    texts = _plain_texts(raw)
    assert (texts is not None) == (shape in {"text", "structured", "wrapper", "wrapped", "null structured", "error"})
    try:
        expected = convert_result(wire(validated(types.CallToolResult, raw)), wrapped)
    except ValidationError:
        assert texts is None
        return
    if texts is not None:
        fast = _converted(texts, [], raw.get("structuredContent"), raw.get("isError", False), wrapped)
        assert fast == expected


@pytest.mark.parametrize("schema", [
    {"type": "object", "additionalProperties": True, "title": "get_pullDictOutput"},  # the Python SDK's for a dict
    {"type": "object"},
    {"type": "object", "properties": {"a": {"type": "string"}}},
    {"type": "object", "additionalProperties": False},
    {"type": "object", "additionalProperties": {"type": "integer"}},
    {"type": "object", "required": ["b"]},
    {"type": "object", "title": 5},
    {"type": "array"},
])
@pytest.mark.parametrize("structured", [{}, {"a": 1}, {"a": "x"}])
def test_an_output_schema_any_object_meets_takes_objects_unchecked_and_nothing_else(schema, structured):
    """The check of structured content against the output schema, with its shortcut for schemas
    that every object meets, says what the schema's own validator says."""
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    from toolkernel._providers._mcp._pool import _ToolCall

    check = _ToolCall(ServerPool(), PULLS, "t", wrapped=False, output_schema=schema)
    try:
        validator_for(schema).check_schema(schema)
        valid = validator_for(schema)(schema).is_valid(structured)
    except SchemaError:
        valid = False
    try:
        check._check_output(structured, True)
        checked = True
    except RuntimeError:
        checked = False
    assert checked == valid


# --- inside a script (Bashkit, the script's own thread) --------------------------------

@pytest.mark.slow
def test_a_script_interrupted_in_an_mcp_call_cancels_it_on_the_server(tmp_path, monkeypatch, python_sigint):
    """The kernel's interrupt lands on the pumping thread mid-call: the script stops at once, the
    server is told (`notifications/cancelled`), and the next run calls the same server."""
    from kernel_helpers import RecordingSink, fixture_toml, policy_toml, project_with
    from toolkernel._session import Session

    project = project_with(tmp_path, monkeypatch, fixture_toml("slow") + policy_toml(allow=["mcp_slow"]))
    session = Session(project)
    try:
        warm = session.run_script("tools slow ping", RecordingSink())
        assert warm.exit_code == 0
        assert session.pool.callable_here(session.pool._connections["slow"].cfg)
        no_session_calls(monkeypatch)  # from here on every call must go past the session
        sink = RecordingSink()
        interrupt = threading.Timer(0.1, _wait_then_interrupt, (sink,))
        interrupt.start()
        started = time.monotonic()
        result = session.run_script("tools slow wait steps=3000 step_seconds=0.1; echo after", sink)

        assert result.interrupted and result.exit_code == 130
        assert time.monotonic() - started < WAIT / 2
        assert "after" not in sink.stdout_text
        check = lambda: json.loads(session.run_script("tools slow history", RecordingSink()).stdout)  # noqa: E731
        wait_until(lambda: check()[-1:] == ["cancelled"], "the server to see the cancel")
    finally:
        session.close()


def _wait_then_interrupt(sink) -> None:
    """A kernel interrupt (KeyboardInterrupt on the main thread) once the call reports progress."""
    import _thread

    deadline = time.monotonic() + WAIT
    while not sink.progress_events and time.monotonic() < deadline:
        time.sleep(0.02)
    _thread.interrupt_main()
