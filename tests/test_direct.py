"""Direct calls (`%tools x`, `toolkernel.call`): on the calling thread's own loop, or on one
worker thread when that loop runs already (toolkernel/_frontends/_direct.py). A real session,
real tools, a real demo MCP server; the kernel's side (interrupts) in a real kernel."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import stat
import threading
import time

import pytest

from kernel_helpers import github_toml, isolated_env, loaded_kernel, policy_toml, write_config
from toolkernel import tool
from toolkernel._errors import CallError, ConfigError
from toolkernel._frontends._direct import call_argv
from toolkernel._approval._protected import Unprotectable
from toolkernel._session import Session

seen: list[str] = []


@tool("where", description="Say which thread runs it (a test tool).", kind="read",
      input_schema={"type": "object", "properties": {"then": {"type": "string"}}})
def where(arguments, ctx):
    seen.append(threading.current_thread().name)
    return threading.current_thread().name


@pytest.fixture
def session(tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "work"
    work.mkdir()
    write_config(work, github_toml())
    opened = Session(work)
    opened.register_tools([where])
    yield opened
    opened.close()


@tool("nested", description="Make a direct call of its own while it runs (a test tool).", kind="read",
      input_schema={"type": "object"})
def nested(arguments, ctx):
    return call_argv(ctx.state["session"], ["where"])


@tool("nested-async", description="`nested`, as a coroutine on this thread's loop (a test tool).", kind="read",
      input_schema={"type": "object"})
async def nested_async(arguments, ctx):
    return call_argv(ctx.state["session"], ["where"])


def test_a_plain_tool_runs_on_the_calling_thread(session):
    # No hand-off: the private loop would pass a plain function on to a worker thread.
    assert call_argv(session, ["where"]) == "MainThread"
    assert call_argv(session, ["where"]) == "MainThread"
    names = []
    caller = threading.Thread(target=lambda: names.append(call_argv(session, ["where"])), name="a-user-thread")
    caller.start()
    caller.join(60)
    assert names == ["a-user-thread"]


def test_a_call_inside_a_running_loop_runs_in_place_and_gives_the_loop_back(session):
    # A kernel's cell: sync code inside a coroutine on the kernel's running loop.
    async def cell():
        outer, me = asyncio.get_running_loop(), asyncio.current_task()
        got = call_argv(session, ["where"])
        assert asyncio.get_running_loop() is outer and asyncio.current_task() is me
        await asyncio.sleep(0.01)  # the outer loop still runs its own work
        return got

    assert asyncio.run(cell()) == "MainThread"


def test_a_call_made_while_this_threads_loop_runs_goes_to_the_worker(session):
    session.register_tools([nested, nested_async])
    session.state["session"] = session  # the tools find the session here
    assert call_argv(session, ["nested-async"]) == "toolkernel-direct"
    # A plain sync tool is called with no loop running (`call_now`): its own call runs in place.
    assert call_argv(session, ["nested"]) == "MainThread"


@pytest.mark.slow
def test_mcp_calls_and_help_still_reach_the_private_loop(session):
    pull = call_argv(session, ["github", "get-pull", "repo=acme/api", "number=101"])
    assert pull["title"] == "Add rate limiting to /search"
    assert "get-pull" in call_argv(session, ["github", "--help"])


@pytest.mark.slow
def test_a_server_taken_out_of_the_config_is_closed_by_the_next_direct_call(session):
    # A direct call goes over to the private loop to close servers only when the pool holds
    # one the config no longer names: such a one is still closed by the next call, of any tool.
    assert call_argv(session, ["github", "get-pull", "repo=acme/api", "number=101"])["number"] == 101
    assert call_argv(session, ["where"]) == "MainThread"
    assert session.pool.loaded("github")  # still configured: kept
    write_config(session.workdir, policy_toml())
    assert call_argv(session, ["where"]) == "MainThread"
    assert not session.pool.loaded("github")


@pytest.mark.slow
def test_a_hook_may_make_a_direct_call_of_its_own(session):
    @session.hooks.before_call("github *")
    def look_first(call):
        call_argv(session, ["where"])  # on the direct calls' thread: must not wait on itself

    seen.clear()
    assert call_argv(session, ["github", "get-pull", "repo=acme/api", "number=101"])["number"] == 101
    assert len(seen) == 1


@tool("loopless", description="Say whether an event loop runs this call (a test tool).", kind="read",
      input_schema={"type": "object", "properties": {"n": {"type": "integer"}}})
def loopless(arguments, ctx):
    return "no loop" if asyncio._get_running_loop() is None else "a loop"


def test_a_plain_sync_tool_is_called_with_no_loop_and_meets_every_check(session):
    # As a script calls it (`call_now`): no event loop run for a call that never waits.
    session.register_tools([loopless])
    assert call_argv(session, ["loopless"]) == "no loop"
    with pytest.raises(CallError) as raised:
        call_argv(session, ["loopless", "n=text"])
    assert raised.value.code == "invalid_input"
    write_config(session.workdir, github_toml() + policy_toml(ask=["loopless"]))
    with pytest.raises(CallError) as raised:
        call_argv(session, ["loopless"])  # nobody to ask: stops for `%tools approve`
    assert raised.value.code == "needs_approval"
    asked = []
    with pytest.raises(CallError) as raised:
        call_argv(session, ["loopless"], ask=lambda prompt: asked.append(prompt) or "n")
    assert raised.value.code == "denied" and len(asked) == 1
    assert call_argv(session, ["loopless"], ask=lambda prompt: "y") == "no loop"
    write_config(session.workdir, github_toml() + policy_toml(deny=["loopless"]))
    with pytest.raises(CallError) as raised:
        call_argv(session, ["loopless"])
    assert raised.value.code == "denied"
    write_config(session.workdir, github_toml())

    # A hook may wait: with one registered, the call takes the async path, and the hook runs.
    @session.hooks.before_call("loopless")
    def look_first(call):
        seen.append("hook")

    seen.clear()
    assert call_argv(session, ["loopless"]) == "a loop" and seen == ["hook"]


@tool("echo-text", description="Return its text as it is (a test tool).", kind="read",
      input_schema={"type": "object", "properties": {"text": {"type": "string"}}})
def echo_text(arguments, ctx):
    return arguments["text"]


def test_a_result_reads_as_json_exactly_when_it_is_json(session):
    session.register_tools([echo_text])
    for text, value in [('  [1, 2]', [1, 2]), ('\n{"a": 1}', {"a": 1}), ("-3", -3), ("true", True),
                        ("null", None), ("Infinity", float("inf")), ('"q"', "q"),
                        ("", ""), ("hello", "hello"), ("tru", "tru"), ("\x0b1", "\x0b1"), ("{bad", "{bad")]:
        assert call_argv(session, ["echo-text"], base={"text": text}) == value, text
    assert call_argv(session, ["echo-text"], base={"text": "NaN"}) != call_argv(session, ["echo-text"], base={"text": "NaN"})


@pytest.mark.slow
def test_a_failed_direct_call_raises_its_coded_error(session):
    with pytest.raises(CallError) as raised:
        call_argv(session, ["github", "no-such-tool"])
    assert raised.value.code == "unknown_command"


@pytest.mark.slow
def test_questions_are_asked_on_the_calling_thread(session, tmp_path):
    # The in-process tool asks in place; the MCP tool's question, asked on the private
    # loop, comes back to this thread (where `input()` works in a kernel).
    write_config(session.workdir, github_toml() + policy_toml(ask=["where", "mcp_github__get_pull"]))
    asked = []

    def answer(prompt):
        asked.append(threading.current_thread().name)
        return "y"

    assert call_argv(session, ["where"], ask=answer) == "MainThread"
    assert call_argv(session, ["github", "get-pull", "repo=acme/api", "number=101"], ask=answer)["number"] == 101
    assert asked == ["MainThread", "MainThread"]


@tool("nap", description="Sleep until cancelled (a test tool).", kind="read", input_schema={"type": "object"})
async def nap(arguments, ctx):
    try:
        # Said once the task waits: an interrupt then lands in the loop, not in this code.
        asyncio.get_running_loop().call_soon(ctx.state.__setitem__, "napping", True)
        await asyncio.sleep(120)
    except asyncio.CancelledError:
        ctx.state["cancelled"] = True
        raise


def test_an_interrupt_another_thread_takes_cancels_a_call_in_place_and_the_next_call_works(session, python_sigint):
    # Any thread may take a process's SIGINT; Python then runs its handler on the main thread
    # once that runs code again. The worst case: the thread that sends it takes it.
    session.register_tools([nap])
    interrupt = threading.Thread(target=_interrupt_when, args=(lambda: session.state.get("napping"),))
    interrupt.start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        call_argv(session, ["nap"])
    interrupt.join(60)
    assert time.monotonic() - started < 60  # generous: far less than the 120 s nap
    assert session.state.get("cancelled") is True
    assert call_argv(session, ["where"]) == "MainThread"


def _interrupt_when(ready) -> None:
    deadline = time.monotonic() + 60
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.01)
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)


KERNEL_TOOLS = """
import asyncio, threading, time, toolkernel
state = {}

@toolkernel.tool("doze", description="Sleep (a test tool).", kind="read", input_schema={"type": "object"})
def doze(arguments, ctx):
    state["thread"] = threading.current_thread().name
    print("dozing")  # no flush: the kernel's IO thread sends it, the cell's thread sleeps on
    time.sleep(120)

@toolkernel.tool("snooze", description="Sleep until cancelled (a test tool).", kind="read",
                 input_schema={"type": "object"})
async def snooze(arguments, ctx):
    try:
        asyncio.get_running_loop().call_soon(print, "snoozing")  # once the task waits
        await asyncio.sleep(120)
    except asyncio.CancelledError:
        state["cancelled"] = True
        raise

@toolkernel.tool("here", description="Say which thread runs it (a test tool).", kind="read",
                 input_schema={"type": "object"})
def here(arguments, ctx):
    return threading.current_thread().name

toolkernel.register_tools(doze, snooze, here)
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_interrupt_in_a_real_kernel_stops_the_direct_call_and_the_kernel_goes_on(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    write_config(work, policy_toml(allow=["doze", "snooze", "here"]))
    with loaded_kernel(work) as kernel:
        kernel.execute_ok(KERNEL_TOOLS)
        kernel.execute_ok("name = %tools here")
        assert kernel.value("name") == "MainThread"  # in place: the cell's own thread
        # An async cell: the call is made from a coroutine on the kernel's loop, without await.
        kernel.execute_ok("await asyncio.sleep(0)\nfrom_async = toolkernel.call('here')\nawait asyncio.sleep(0)")
        assert kernel.value("from_async") == "MainThread"
        for code, said in (("%tools doze", "dozing"), ("toolkernel.call('snooze')", "snoozing")):
            msg_id = kernel.start(code)
            kernel.messages_until(msg_id, lambda seen: any(
                m["msg_type"] == "stream" and said in m["content"]["text"] for m in seen), timeout=60)
            started = time.monotonic()
            kernel.manager.interrupt_kernel()
            run = kernel.finish(msg_id, timeout=60)
            assert time.monotonic() - started < 60  # generous: far less than the 120 s sleep
            if code.startswith("%tools"):
                assert run.status == "ok" and "tools: interrupted" in run.stderr
            else:
                assert run.status == "error" and run.error["ename"] == "KeyboardInterrupt"
        assert kernel.value("state") == {"thread": "MainThread", "cancelled": True}
        assert kernel.value("toolkernel.call('here')") == "MainThread"
        assert kernel.value("1 + 1") == 2


@pytest.mark.slow
def test_each_direct_call_reads_the_config_and_the_lasting_approvals_again(session):
    assert call_argv(session, ["where"]) == "MainThread"
    write_config(session.workdir, github_toml() + policy_toml(deny=["where"]))
    with pytest.raises(CallError) as raised:
        call_argv(session, ["where"])
    assert raised.value.code == "denied"
    write_config(session.workdir, github_toml())
    delete = ["github", "delete-branch", "branch=fix-x"]
    with pytest.raises(CallError) as raised:
        call_argv(session, delete)  # asks by default; nobody to ask: stops for `%tools approve`
    assert raised.value.code == "needs_approval"
    session.approvals.always_allow("mcp_github__delete_branch")
    assert call_argv(session, delete) == "deleted branch fix-x"


@pytest.mark.slow
def test_a_lasting_approval_another_process_writes_counts_on_the_next_call(session):
    # The config's check found no approvals file, so none is read: one made since is seen,
    # even in a workspace settled long enough for the check to spare its looks.
    delete = ["github", "delete-branch", "branch=fix-x"]
    (session.workdir / ".toolkernel").mkdir(exist_ok=True)
    time.sleep(2.2)
    for _ in range(2):
        assert call_argv(session, ["where"]) == "MainThread"
    with pytest.raises(CallError) as raised:
        call_argv(session, delete)
    assert raised.value.code == "needs_approval"
    grant = {"version": 1, "allow": [{"rule": "mcp_github__delete_branch", "added": "2026-11-30T00:00:00+00:00"}]}
    (session.workdir / ".toolkernel" / "approvals.json").write_text(json.dumps(grant))
    assert call_argv(session, delete) == "deleted branch fix-x"


def test_a_call_naming_paths_still_checks_the_mount_plan_and_sees_it_change(session):
    # A direct call works the plan out only when its arguments name paths: such a call
    # must still find what no call may write unasked, as it is at this call.
    work = session.workdir
    bypass = '[policy]\nmode = "bypass-permissions"\n'
    write_config(work, github_toml() + bypass)
    for folder in ("one", "two"):
        (work / folder).mkdir()
    (work / "hooks").symlink_to("one")
    assert call_argv(session, ["where"]) == "MainThread"  # names no path
    call_argv(session, ["write-file", "path=one/guard.sh", "content=x"])
    for protected in ("toolkernel.toml", ".toolkernel/approvals.json"):
        assert needs_approval(session, protected)
    # The config now runs hooks/guard.sh: from the next call on, what it leads to is protected.
    hook = '[[hooks]]\nevent = "pre_call"\nmatch = "nothing_here"\ncommand = ["sh", "hooks/guard.sh"]\n'
    write_config(work, github_toml() + hook + bypass)
    assert needs_approval(session, "one/guard.sh") and not needs_approval(session, "two/guard.sh")
    # Same config, a link moved: now the other file is the one run.
    (work / "hooks").unlink()
    (work / "hooks").symlink_to("two")
    assert needs_approval(session, "two/guard.sh") and not needs_approval(session, "one/guard.sh")
    assert (work / "one" / "guard.sh").read_text() == "x" and (work / "two" / "guard.sh").read_text() == "x"
    # The state folder replaced by a file: nothing under it can be protected, and nothing runs.
    (work / ".toolkernel").rename(work / "old-state")
    (work / ".toolkernel").write_text("planted")
    with pytest.raises(ConfigError, match="[Nn]ot a (folder|directory)"):
        call_argv(session, ["write-file", "path=notes.txt", "content=x"])
    assert not (work / "notes.txt").exists()


def test_a_direct_call_makes_the_state_folder_private_and_refuses_one_that_is_a_link(session, tmp_path):
    # Made by the mount plan before, which a call naming no path no longer works out.
    state = session.workdir / ".toolkernel"
    shutil.rmtree(state, ignore_errors=True)
    assert call_argv(session, ["where"]) == "MainThread"
    assert state.is_dir() and stat.S_IMODE(state.stat().st_mode) == 0o700
    # A link planted in its place would carry lasting approvals from elsewhere.
    shutil.rmtree(state)
    planted = tmp_path / "planted"
    planted.mkdir()
    grant = {"version": 1, "allow": [{"rule": "mcp_github__delete_branch", "added": "2026-11-30T00:00:00+00:00"}]}
    (planted / "approvals.json").write_text(json.dumps(grant))
    state.symlink_to(planted)
    for argv in (["where"], ["github", "delete-branch", "branch=fix-x"]):
        with pytest.raises(Unprotectable, match="is not a folder"):
            call_argv(session, argv)


def needs_approval(session, path: str) -> bool:
    """Whether writing `path` stops for an approval (else it is written, with "x")."""
    try:
        call_argv(session, ["write-file", f"path={path}", "content=x"])
    except CallError as raised:
        assert raised.code == "needs_approval", (path, raised.code)
        return True
    return False


@pytest.mark.slow
def test_half_a_surrogate_pair_never_reaches_a_server(session):
    # Python input can hold one; the MCP SDK failed to encode it and the server's connection
    # was dropped ("stopped answering ... will be restarted").
    with pytest.raises(CallError) as raised:
        call_argv(session, ["github", "get-pull"], base={"repo": "acme/api\ud800", "number": 101})
    assert raised.value.code == "invalid_input" and "half a surrogate pair" in str(raised.value)
    assert call_argv(session, ["github", "get-pull"], base={"repo": "acme/api", "number": 101})["number"] == 101
