"""The run path's seams with test doubles: a fake runner (no Bashkit), fake approvers
answering at the ask point, the typed report against its published schema, and a
soak run that keeps descriptors and memory flat.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import jsonschema
import pytest

from approval_helpers import Answering
from kernel_helpers import RecordingSink, error_lines, github_toml, isolated_env, write_config
from toolkernel._approval._approver import Answer, ApprovalRequest, ElicitApprover
from toolkernel import _loop, tool
from toolkernel._session import Session
from toolkernel._runners._shell import ShellResult

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((REPO / "docs" / "report.schema.json").read_text())
DELETE = "tools github delete-branch branch=fix-x"
BUILT_AT_RUN_TIME = "b=fix-x\ntools github delete-branch branch=$b\necho after"


@pytest.fixture
def project(tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.fixture
def session(project):
    write_config(project, github_toml())
    s = Session(project)
    yield s
    s.close()


class FakeRunner:
    """A runner with no shell: each line is one `tools` argv (space-separated)."""

    def __init__(self) -> None:
        self.cancelled = False

    def literal_calls(self, script: str) -> list[list[str]]:
        return []  # it cannot read scripts: every call is checked as it runs

    def run(self, script, command, events) -> ShellResult:
        exit_code = 0
        for line in script.splitlines():
            outcome = command.handle_sync(line.split()[1:], None, str(command.workdir))
            events.output(outcome.stdout, outcome.stderr)
            exit_code = outcome.exit_code
            if outcome.stops_script or self.cancelled:
                break
        return ShellResult(exit_code, "", "")

    def cancel(self) -> None:
        self.cancelled = True


# -- the runner seam ------------------------------------------------------------------


def test_the_tools_command_imports_no_bashkit():
    code = ("import sys, toolkernel._command._command, toolkernel._session, toolkernel._runners._shell, toolkernel._runners._preflight;"
            " print('bashkit' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_a_fake_runner_runs_tools_lines_through_the_same_command(session):
    sink = RecordingSink()
    result = session.run_script("tools github get-pull repo=acme/api number=101\ntools nosuch", sink,
                                runner=FakeRunner())
    assert json.loads("".join(sink.out))["number"] == 101
    assert [e["code"] for e in error_lines("".join(sink.err))] == ["unknown_command"]
    assert result.exit_code == 1 and result.report is None


@pytest.mark.slow
def test_a_fake_runner_stops_where_a_call_needs_approval(session):
    sink = RecordingSink()
    result = session.run_script(f"{DELETE}\ntools github list-pulls repo=acme/api", sink, runner=FakeRunner())
    assert result.report["tools"]["stopped"]["call"]["tool"] == "tools github delete-branch"
    assert "before_start" not in result.report["tools"]["stopped"]  # this runner cannot read ahead
    assert "".join(sink.out) == "" and [e["code"] for e in error_lines(result.stderr)] == ["needs_approval"]



class BrokenRunner(FakeRunner):
    def run(self, script, command, events) -> ShellResult:
        raise RuntimeError("the interpreter went away\nsecond line")


def test_a_runner_that_raises_ends_the_cell_with_one_line_that_says_so(session):
    sink = RecordingSink()
    result = session.run_script("tools github list-pulls repo=acme/api", sink, runner=BrokenRunner())
    assert result.exit_code == 1
    assert "".join(sink.err) == "toolkernel: the shell failed: RuntimeError: the interpreter went away\n"

# -- the approver seam ------------------------------------------------------------------


@pytest.mark.slow
def test_an_approver_answering_once_at_the_ask_point_lets_the_call_run_in_the_same_script(session):
    approver = Answering(Answer.ONCE)
    sink = RecordingSink()
    result = session.run_script(BUILT_AT_RUN_TIME, sink, approver=approver)
    assert result.exit_code == 0 and result.report["success"] is True
    # The report at the end says what the person was asked and answered.
    assert result.report["tools"]["asked"] == [{"tool": "tools github delete-branch", "input": {"branch": "fix-x"},
                                                "answer": "allowed once"}]
    jsonschema.validate(result.report, SCHEMA)
    assert "".join(sink.out) == "deleted branch fix-x\nafter\n"
    assert [r.before_start for r in approver.requests] == [False]
    assert approver.requests[0].call.input == {"branch": "fix-x"}
    assert not session.approvals.has_pending()
    # "once" covered that call only: the next script asks again.
    assert session.run_script(BUILT_AT_RUN_TIME, RecordingSink()).report["tools"]["stopped"]["reason"] \
        == "needs_approval"


@pytest.mark.slow
def test_an_approver_answering_once_before_the_start_starts_the_script_without_a_rerun(session):
    approver = Answering(Answer.ONCE)
    sink = RecordingSink()
    result = session.run_script(f"echo start > started.txt\necho start\n{DELETE}", sink, approver=approver)
    assert result.exit_code == 0 and result.report is None
    assert "".join(sink.out) == "start\ndeleted branch fix-x\n"
    assert "".join(sink.err) == "", "no stale needs_approval line after an inline approval"
    assert [r.before_start for r in approver.requests] == [True]  # asked once, before the start only
    assert session.approvals.pending_once() == []  # the grant was spent by the call itself


@pytest.mark.slow
def test_an_approver_answering_deny_mid_run_denies_the_call_and_the_script_goes_on(session):
    sink = RecordingSink()
    result = session.run_script(BUILT_AT_RUN_TIME, sink, approver=Answering(Answer.DENY))
    assert [e["code"] for e in error_lines("".join(sink.err))] == ["denied"]
    assert "".join(sink.out) == "after\n" and result.exit_code == 0
    assert not session.approvals.has_pending()


@pytest.mark.slow
def test_an_approver_answering_always_saves_a_lasting_rule(session):
    result = session.run_script(DELETE, RecordingSink(), approver=Answering(Answer.ALWAYS))
    assert result.exit_code == 0
    assert session.approvals.lasting_rules() == ["mcp_github__delete_branch"]
    assert session.run_script(BUILT_AT_RUN_TIME, RecordingSink()).exit_code == 0  # no approver needed now


@pytest.mark.slow
def test_later_leaves_the_call_pending_for_the_persons_answer(session):
    result = session.run_script(BUILT_AT_RUN_TIME, RecordingSink(), approver=Answering(Answer.LATER))
    assert result.report["tools"]["stopped"]["approval"] == "requested"
    assert session.approvals.take_pending().input == {"branch": "fix-x"}


def test_the_elicitation_approver_maps_the_clients_answer():
    import asyncio

    from toolkernel._approval._policy import CallInfo

    asked = []

    async def elicit(message, schema):
        asked.append((message, schema))
        return replies.pop(0)

    replies = [{"decision": "once"}, {"decision": "always"}, {"decision": "deny"}, None, {"decision": "maybe"}]
    approver = ElicitApprover(elicit)
    request = ApprovalRequest(CallInfo("mcp_github__delete_branch", "tools github delete-branch",
                                       {"branch": "fix-x"}, "destructive"), "destructive tool")
    answers = [asyncio.run(approver(request)) for _ in range(5)]
    assert answers == [Answer.ONCE, Answer.ALWAYS, Answer.DENY, Answer.LATER, Answer.DENY]
    assert "delete-branch" in asked[0][0] and asked[0][1]["properties"]["decision"]["enum"] == ["once", "always", "deny"]


# -- the typed report ------------------------------------------------------------------


@pytest.mark.slow
def test_real_reports_validate_against_the_published_schema(session):
    write_config(session.workdir, github_toml() + '[policy]\nallow = ["mcp_github__create_issue"]\n')
    reports = [
        session.run_script(DELETE, RecordingSink()).report,  # before the start
        session.run_script(f"tools github create-issue title=x\n{BUILT_AT_RUN_TIME}", RecordingSink()).report,
        session.run_script("for i in $(seq 1 51); do tools github list-pulls repo=acme/api >/dev/null; done",
                           RecordingSink()).report,  # the call limit
        session.run_script("tools github create-issue title=y\nexit 3", RecordingSink()).report,
    ]
    for report in reports:
        jsonschema.validate(report, SCHEMA)
        assert report["version"] == 1
    assert [r["tools"].get("stopped", {}).get("reason") for r in reports] == \
        ["needs_approval", "needs_approval", "call_limit", None]
    assert reports[0]["tools"]["stopped"]["before_start"] is True
    assert reports[1]["tools"]["done"][0]["ok"] is True and reports[3]["exit_code"] == 3


@pytest.mark.slow
def test_the_schema_rejects_a_report_without_its_seed_fields(session):
    report = session.run_script(DELETE, RecordingSink()).report
    del report["tools"]["not_reached"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, SCHEMA)


# -- lifecycle ----------------------------------------------------------------------------


@pytest.mark.slow
def test_unloading_the_extension_closes_the_session_and_stops_the_private_loop(project):
    write_config(project, github_toml())
    code = (
        "import threading\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\n"
        "ip.run_line_magic('load_ext', 'toolkernel')\n"
        "ip.run_cell_magic('tools', '', 'tools github list-pulls repo=acme/api > /dev/null')\n"
        "alive = lambda: sorted(t.name for t in threading.enumerate() if t.name == 'toolkernel-loop')\n"
        "print(alive())\n"
        "ip.run_line_magic('unload_ext', 'toolkernel')\n"
        "print(alive())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=project,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.splitlines()[-2:] == ["['toolkernel-loop']", "[]"], out.stderr


# -- soak: no descriptor or memory leak per run ------------------------------------------------


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.slow
def test_a_thousand_runs_keep_descriptors_and_memory_flat(project):
    session = Session(project)  # no servers: what is measured is the run path itself
    sink = RecordingSink()
    try:
        for _ in range(100):  # warm-up: imports, caches, the private loop
            session.run_script("echo hi; tools --help > /dev/null", sink)
        descriptors, rss = _open_descriptors(), _rss_bytes()
        for _ in range(1_000):  # 5,000 took a minute of a loaded run; a leak shows in 1,000 as well
            sink.out.clear()
            session.run_script("echo hi; tools --help > /dev/null", sink)
        # The leak this guards against was 3 descriptors a run (3,000 here).
        assert _open_descriptors() - descriptors <= 10
        assert _rss_bytes() - rss < 40 * 2**20  # 40 KB a run, as 200 MB was for 5,000
        assert "".join(sink.out) == "hi\n" and "".join(sink.err) == ""
    finally:
        session.close()


# -- the byte-sink path (scripts that do not name `tools`): Bashkit's threads ------------------

HANG_CHILD = """
import json, sys
from pathlib import Path
from toolkernel import _loop, tool
from toolkernel._session import Session
from kernel_helpers import RecordingSink
work = Path(sys.argv[1])
(work / "d.txt").write_text("x\\n")
session = Session(work)
result = session.run_script(sys.argv[2], RecordingSink())
print(json.dumps({"exit": result.exit_code, "size": len(result.stdout), "stderr": result.stderr}))
"""


def test_a_builtin_called_while_output_is_still_arriving_does_not_hang_the_run(project):
    # Bashkit runs a sync builtin (`chmod` here) on its own thread inside the Context in which
    # it also hands output chunks to this side; a chunk that came during the builtin could not
    # enter that Context, was never acknowledged, and the run hung for good.
    script = "for i in 1 2 3 4 5; do seq 1 30000 | head -c 100000; chmod 644 d.txt; done; echo end"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    out = subprocess.run([sys.executable, "-c", HANG_CHILD, str(project), script], env=env, capture_output=True,
                         text=True, timeout=240, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == {"exit": 0, "size": 5 * 100_000 + 4, "stderr": ""}


def test_tools_calls_on_bashkits_threads_reuse_one_loop_per_thread_and_unloading_closes_it(project):
    # A name the script builds (`$t`) keeps the script on the byte-sink path, where Bashkit
    # calls the builtin on its own threads with a fresh Python thread state each time: a
    # thread-local loop was empty on every call, and each call made (and dropped) a new one.
    loops = []

    @tool("where", description="Notes the loop it runs on.", kind="read", input_schema={"type": "object"})
    async def where(arguments, ctx):
        loops.append(asyncio.get_running_loop())
        return "ok"

    session = Session(project)
    session.register_tools([where])
    try:
        result = session.run_script("t=to; t=${t}ols\nfor i in $(seq 1 40); do $t where > /dev/null; done",
                                    RecordingSink())
    finally:
        session.close()
    assert result.exit_code == 0, result.stderr
    assert len(loops) == 40
    assert len({id(loop) for loop in loops}) <= (os.cpu_count() or 1) + 1
    async def unload():  # a kernel unloads the extension on its main thread, its own loop running
        _loop.stop()  # Bashkit's threads never end, so this closes their loops

    asyncio.run(unload())
    assert all(loop.is_closed() for loop in loops)


@pytest.mark.parametrize("sync_tool", [False, True])
def test_what_a_script_printed_before_a_call_reaches_the_cell_while_the_call_runs(project, sync_tool):
    # Under the byte sinks a sync builtin holds back the output before it until the
    # interpreter next waits (see _bashkit._streamed); the live command awaits the call on
    # the loop that hands the output on, so a sync tool must not run in place there.
    printed = threading.Event()

    class Watching(RecordingSink):
        def stdout(self, text: str) -> None:
            super().stdout(text)
            if "before" in "".join(self.out):
                printed.set()

    async def wait_async(arguments, ctx):
        return "shown\n" if await asyncio.to_thread(printed.wait, 30) else "not shown\n"

    def wait_sync(arguments, ctx):
        return "shown\n" if printed.wait(30) else "not shown\n"

    wait_for_output = tool("wait-for-output", description="Waits until the cell shows what came before.",
                           kind="read", input_schema={"type": "object"})(wait_sync if sync_tool else wait_async)
    session = Session(project)
    session.register_tools([wait_for_output])
    sink = Watching()
    try:
        result = session.run_script("echo before\ntools wait-for-output\necho after", sink)
    finally:
        session.close()
    assert result.exit_code == 0, result.stderr
    assert "".join(sink.out) == "before\nshown\nafter\n"


def test_a_sync_tool_runs_off_the_loop_that_hands_the_scripts_output_on(project):
    # Whether the output before a slow sync call reaches the cell during it would otherwise
    # depend on a race with Bashkit's thread: the sync tool would block the loop that runs
    # the byte sinks. An async tool runs on that loop.
    threads = {}

    @tool("on-loop", description="Notes its thread.", kind="read", input_schema={"type": "object"})
    async def on_loop(arguments, ctx):
        threads["async"] = threading.get_ident()
        return "ok\n"

    @tool("off-loop", description="Notes its thread.", kind="read", input_schema={"type": "object"})
    def off_loop(arguments, ctx):
        threads["sync"] = threading.get_ident()
        return "ok\n"

    session = Session(project)
    session.register_tools([on_loop, off_loop])
    try:
        result = session.run_script("tools on-loop; tools off-loop", RecordingSink())
    finally:
        session.close()
    assert result.exit_code == 0, result.stderr
    assert threads["sync"] != threads["async"]


class OrderedSink(RecordingSink):
    """Also keeps stdout and stderr in the one order the cell shows them."""

    def __init__(self) -> None:
        super().__init__()
        self.both: list[tuple[str, str]] = []

    def stdout(self, text: str) -> None:
        super().stdout(text)
        self.both.append(("out", text))

    def stderr(self, text: str) -> None:
        super().stderr(text)
        self.both.append(("err", text))


@tool("sized", description="A result of `size` characters.", kind="read",
      input_schema={"type": "object", "properties": {"size": {"type": "integer"}}})
def sized(arguments, ctx):
    return "z" * arguments["size"]


@pytest.mark.parametrize("where", ["tools sized size=1500000", "tools sized size=1500000 2>/dev/null",
                                   "if tools sized size=1500000 > /dev/null; then echo yes; fi",
                                   "tools sized size=1500000 | wc -c", "x=$(tools sized size=1500000)",
                                   "(tools sized size=1500000)"])
def test_a_call_that_stops_the_script_shows_what_came_before_then_its_error_last(project, where):
    # Cancelling a Bashkit run drops what it has not handed on yet: inside an `if`, a pipe,
    # `$(...)` or a subshell, the output before the call too. The error line is shown even
    # where the script sends the call's stderr elsewhere.
    write_config(project, "[shell]\nmax_result_mb = 1\n")
    session = Session(project)
    session.register_tools([sized])
    sink = OrderedSink()
    try:
        result = session.run_script(f"seq 1 3\necho err >&2\n{where}\necho after", sink)
    finally:
        session.close()
    assert result.exit_code != 0
    assert result.run_report.stopped.reason == "result_too_large"
    assert sink.stdout_text == "1\n2\n3\n"
    assert sink.stderr_text.startswith("err\n")
    kind, last = sink.both[-1]
    assert kind == "err" and error_lines(last)[-1]["code"] == "stopped", sink.both


class InterruptsAsItStarts(FakeRunner):
    """Interrupts the kernel's thread as the first thing its script's thread does (the before-start
    check asks it for the calls), then runs until cancelled."""

    def literal_calls(self, script: str) -> list[list[str]]:
        import _thread

        _thread.interrupt_main()
        return []

    def run(self, script, command, events) -> ShellResult:
        import time

        deadline = time.monotonic() + 30
        while not self.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        self.ran_to_the_end = not self.cancelled
        return ShellResult(0, "", "")


def test_an_interrupt_as_the_script_starts_ends_the_run_and_goes_no_further(project, python_sigint):
    # The interrupt can land while the kernel's thread is still starting the script's thread
    # (Thread.start waits for it): it escaped the cell as a KeyboardInterrupt, and the script
    # ran on, uncancelled, on its thread.
    session = Session(project)
    try:
        for _ in range(20):
            runner = InterruptsAsItStarts()
            result = session.run_script("tools help", RecordingSink(), runner=runner)
            assert result.interrupted and result.exit_code == 130
            assert runner.cancelled and not getattr(runner, "ran_to_the_end", False)
    finally:
        session.close()


@pytest.mark.parametrize("script", ["echo before; tools hang; echo after",
                                    "for i in 1; do echo before; tools hang; done; echo after"])
def test_an_interrupt_ends_an_in_process_call_on_either_way_of_running(project, python_sigint, script):
    # A script without a loop awaits the call on its own loop (the live command); one with a
    # loop runs it on the script thread's loop (execute_sync): the interrupt cancels both.
    import _thread
    import time

    started = threading.Event()
    cancelled = threading.Event()

    @tool("hang", description="Waits a minute.", kind="read", input_schema={"type": "object"})
    async def hang(arguments, ctx):
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "woke\n"

    sink = RecordingSink()

    def interrupt() -> None:
        # Once "before" has reached the cell: Bashkit drops what it has not handed on when a
        # run is cancelled, so an interrupt landing sooner may lose it (a race under load).
        if started.wait(60):
            deadline = time.monotonic() + 60
            while "before" not in sink.stdout_text and time.monotonic() < deadline:
                time.sleep(0.01)
            _thread.interrupt_main()

    session = Session(project)
    session.register_tools([hang])
    threading.Thread(target=interrupt, daemon=True).start()
    began = time.monotonic()
    try:
        result = session.run_script(script, sink)
    finally:
        session.close()
    assert result.interrupted and result.exit_code == 130
    assert time.monotonic() - began < 30  # far less than the tool's minute
    assert cancelled.is_set()
    assert sink.stdout_text == "before\n"


@pytest.mark.slow
@pytest.mark.parametrize("script", ["echo before; tools doze; echo after",
                                    "for i in 1; do echo before; tools doze; echo after; done"])
def test_the_runs_timeout_ends_a_tool_call_still_running(project, script):
    # Bashkit's own timeout only ends a script between commands: without the pump's
    # deadline, this run waited out the tool's minute and then went on with exit 0.
    import time

    @tool("doze", description="Waits a minute.", kind="read", input_schema={"type": "object"})
    async def doze(arguments, ctx):
        await asyncio.sleep(60)
        return "woke"

    write_config(project, "[shell]\ntimeout = 2\n")
    session = Session(project)
    session.register_tools([doze])
    sink = RecordingSink()
    started = time.monotonic()
    try:
        result = session.run_script(script, sink)
    finally:
        session.close()
    assert time.monotonic() - started < 45  # generous: the point is not waiting out the minute
    assert result.exit_code != 0
    assert "before" in sink.stdout_text and "after" not in sink.stdout_text and "woke" not in sink.stdout_text
    assert "timeout" in sink.stderr_text.strip().splitlines()[-1]


def _sync_tool_that_looks_at_the_cancel(started: threading.Event, saw_cancel: threading.Event):
    import time

    @tool("walk", description="Works a minute in plain sync code.", kind="read", input_schema={"type": "object"})
    def walk(arguments, ctx):
        started.set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.01)
            try:
                ctx.check_cancelled()
            except asyncio.CancelledError:
                saw_cancel.set()
                raise
        return "walked"
    return walk


@pytest.mark.slow
@pytest.mark.parametrize("script", ["echo before; tools walk; echo after",
                                    "for i in 1; do echo before; tools walk; echo after; done"])
def test_a_sync_tool_at_work_sees_the_runs_timeout_and_interrupt(project, python_sigint, script):
    # Plain sync code cannot be cancelled from outside: the run's cancel reaches it through
    # `ToolContext.check_cancelled`, on the script's thread (a loop: `call_now`) as in a worker
    # thread (no loop: the live command). Without it, the timeout waited out the tool's minute.
    import _thread
    import time

    write_config(project, "[shell]\ntimeout = 2\n")
    for way in ("timeout", "interrupt"):
        started, saw_cancel = threading.Event(), threading.Event()
        session = Session(project)
        session.register_tools([_sync_tool_that_looks_at_the_cancel(started, saw_cancel)])
        if way == "interrupt":
            write_config(project, "[shell]\ntimeout = 120\n")
            threading.Thread(target=lambda: started.wait(60) and _thread.interrupt_main(), daemon=True).start()
        sink = RecordingSink()
        began = time.monotonic()
        try:
            result = session.run_script(script, sink)
            assert saw_cancel.wait(30), way
        finally:
            session.close()
        assert time.monotonic() - began < 45, way  # generous: the point is not waiting out the minute
        assert result.exit_code != 0 and "after" not in sink.stdout_text and "walked" not in sink.stdout_text
        if way == "timeout":
            assert "timeout" in sink.stderr_text.strip().splitlines()[-1]
        else:
            assert result.interrupted and result.exit_code == 130


@pytest.mark.slow
def test_the_runs_timeout_ends_the_run_when_a_sync_tool_never_returns(project):
    # A tool that does not look at the cancel keeps the script's thread: the cell still ends
    # soon after the timeout (the run is left to end on its own thread, as after an interrupt),
    # and no later call runs once the tool does return.
    import time

    release, later_calls = threading.Event(), []

    @tool("stuck", description="Waits until released.", kind="read", input_schema={"type": "object"})
    def stuck(arguments, ctx):
        release.wait(120)
        return "released"

    @tool("later", description="Called after stuck.", kind="read", input_schema={"type": "object"})
    def later(arguments, ctx):
        later_calls.append(True)
        return "later"

    write_config(project, "[shell]\ntimeout = 2\n")
    session = Session(project)
    session.register_tools([stuck, later])
    sink = RecordingSink()
    began = time.monotonic()
    try:
        result = session.run_script("for i in 1 2; do echo before; tools stuck; tools later; done", sink)
        took = time.monotonic() - began
        release.set()
        time.sleep(1)  # the tool returns: the script must not go on to `tools later`
    finally:
        release.set()
        session.close()
    assert took < 60  # generous; it waited the tool's two minutes before
    assert result.exit_code != 0 and "timeout" in sink.stderr_text.strip().splitlines()[-1]
    assert not later_calls


@pytest.mark.slow
def test_the_runs_timeout_counts_from_the_start_not_from_the_question_before_it(project):
    # The clock started with the cell: a person who took longer than [shell] timeout to answer
    # the question before the start got a script that never ran, ended by a limit it never reached.
    async def slow_person(request):
        await asyncio.sleep(4)  # twice the run's timeout
        return Answer.ONCE

    write_config(project, "[shell]\ntimeout = 2\n")
    session = Session(project)
    sink = RecordingSink()
    try:
        result = session.run_script("tools write-file path=a.txt content=x; echo after", sink, approver=slow_person)
    finally:
        session.close()
    assert result.exit_code == 0, sink.stderr_text
    assert sink.stdout_text.strip().endswith("after") and (project / "a.txt").read_text() == "x"


# -- the fixed cost of a run: one `Bash`, no trip it does not need, a thread kept (issue 44) --------


def test_a_run_builds_one_bash_and_goes_to_the_private_loop_only_when_it_must(project, monkeypatch):
    import bashkit

    built, trips = [], []
    real_bash, real_submit = bashkit.Bash, _loop.submit
    monkeypatch.setattr(bashkit, "Bash", lambda *a, **k: built.append(1) or real_bash(*a, **k))
    monkeypatch.setattr(_loop, "submit", lambda coro: trips.append(1) or real_submit(coro))
    session = Session(project)
    try:
        session.run_script("echo first", RecordingSink())  # the first run makes the kept parser
        built.clear(), trips.clear()
        sink = RecordingSink()
        assert session.run_script("echo hi", sink).exit_code == 0, sink.err
        # The config and the before-start check (with no call to check) each took a trip to the
        # private loop, with nothing to wait for there.
        assert trips == []
        assert session.run_script("tools --help > /dev/null", sink).exit_code == 0, sink.err
        # A second `Bash` parsed each script before it ran (0.23 ms).
        assert len(built) == 2
    finally:
        session.close()


def _on_a_script_thread(body) -> concurrent.futures.Future:
    from toolkernel._runners._shell import _start

    future: concurrent.futures.Future = concurrent.futures.Future()
    _start(body, future)
    return future


def test_a_script_thread_is_kept_for_the_next_run_and_a_busy_one_is_not_taken():
    import contextvars

    seen: list[threading.Thread] = []
    mark = contextvars.ContextVar("mark", default="unset")
    release = threading.Event()

    def busy():
        seen.append(threading.current_thread())
        mark.set("set by the first run")
        release.wait(30)

    def quick():
        seen.append(threading.current_thread())
        return mark.get()

    first = _on_a_script_thread(busy)
    assert _on_a_script_thread(quick).result(30) == "unset"  # a run still going keeps its thread
    release.set()
    first.result(30)
    for _ in range(3):
        assert _on_a_script_thread(quick).result(30) == "unset"  # nothing of a run reaches the next
    assert seen[1] is not seen[0] and len(set(seen)) == 2  # each run after the first two took a kept one
    assert all(thread.name == "toolkernel-script" and thread.daemon for thread in seen)


def test_a_kept_loop_carries_nothing_of_a_run_into_the_next(project):
    # The script thread keeps its event loop between runs: a task a tool left running there
    # is cancelled as the run ends (as `asyncio.Runner` did, closing a loop each run).
    loops, left, generators = [], [], []

    async def endless():
        while True:
            yield await asyncio.sleep(0)

    @tool("leave", description="Starts a task that never ends.", kind="read", input_schema={"type": "object"})
    async def leave(arguments, ctx):
        loops.append(asyncio.get_running_loop())
        left.append(asyncio.get_running_loop().create_task(asyncio.sleep(3600)))
        generators.append(endless())
        await generators[-1].__anext__()  # left open, mid-way
        return "ok"

    session = Session(project)
    session.register_tools([leave])
    try:
        for _ in range(2):
            result = session.run_script("tools leave", RecordingSink())
            assert result.exit_code == 0, result.stderr
    finally:
        session.close()
    assert loops[0] is loops[1] and not loops[0].is_closed()
    assert all(task.cancelled() for task in left)
    assert all(generator.ag_frame is None for generator in generators)  # closed
