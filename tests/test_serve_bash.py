"""serve's `bash` as seed 002's Bash (issue 46): a client's cancel stops the run, long runs
report progress, a time limit per call, background runs (`bash_output`, `kill_shell`).

Real processes throughout: `toolkernel serve` started by the `mcp` SDK's client over stdio
(streamable HTTP where the transport matters), real fixture MCP servers, real command-tool
processes, a real kernel for `notebook_run`. Tests wait on events (a file appearing, a
notification, a process gone, a run's status), never on a fixed sleep of their own.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Callable

import anyio
import pytest

from toolkernel._mcp_sdk import StdioServerParameters, types, wire

from approval_helpers import policy_section, recorder_server_section
from mcp_client import Client as SessionClient
from mcp_client import Question, Result, over_stdio
from test_serve import WAIT, approve_cli, over_http, project, recorded, run, server_env, server_section, serving_http

pytestmark = pytest.mark.timeout(300)

LOOP = "for i in $(seq 1 {n}); do echo tick-$i >> {file}; echo line-$i; sleep {step}; done"


def ticking(file: str = "ticks.txt", n: int = 600, step: float = 0.1) -> str:
    """A script that appends a line to `file` every `step` seconds, `n` times (a minute by default)."""
    return LOOP.format(n=n, file=file, step=step)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


class Client:
    """A connected client with what the server told it: log messages, progress."""

    def __init__(self, session: SessionClient, logs: list) -> None:
        self.session, self.logs = session, logs

    async def bash(self, script: str, **more: Any) -> Result:
        return await self.session.call_tool("bash", {"script": script, **more})

    async def call(self, name: str, **arguments: Any) -> Result:
        return await self.session.call_tool(name, arguments)

    def logged(self, event: str) -> list[dict]:
        return [data for data in self.logs if isinstance(data, dict) and data.get("event") == event]


@asynccontextmanager
async def connected(work: Path, *options: str):
    logs: list = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    params = StdioServerParameters(command=sys.executable, args=["-m", "toolkernel", "serve", *options],
                                   env=server_env(), cwd=str(work))
    async with over_stdio(params, logging_callback=on_log) as session:
        yield Client(session, logs)


async def until(condition: Callable[[], Any], what: str, within: float = WAIT) -> Any:
    """Wait (on the event loop) until `condition()` holds; fail saying `what` did not happen."""
    with anyio.fail_after(within):
        while not (found := condition()):
            await anyio.sleep(0.05)
    return found


async def cancel_when(call: Callable[[], Any], ready: Callable[[], Any], what: str) -> float:
    """Make the call, and cancel it (the SDK sends `notifications/cancelled`) once `ready()`.
    Returns when the cancel went out (monotonic seconds)."""
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(call)
        await until(ready, what)
        tasks.cancel_scope.cancel()
    return time.monotonic()


def processes(marker: str) -> list[int]:
    """Live processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z":
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


async def still(client: Client, file: str) -> tuple[int, int]:
    """The lines of `file` now and a second later, as a script of the same session counts them."""
    result = await client.bash(f"a=$(wc -l < {file}); sleep 1; b=$(wc -l < {file}); echo $a $b")
    a, b = result.structured_content["stdout"].split()
    return int(a), int(b)


# -- 1. a cancel stops the run -------------------------------------------------------


def test_a_cancelled_script_stops_and_its_report_says_cancelled(tmp_path):
    work = project(tmp_path, "")
    ticks = work / "ticks.txt"

    async def body():
        async with connected(work) as client:
            await cancel_when(lambda: client.bash(ticking()), lambda: lines(ticks) >= 5, "ticks")
            notice = (await until(lambda: client.logged("cancelled"), "the cancelled run's report"))[0]
            return notice, await still(client, "ticks.txt")

    notice, (before, after) = run(body)
    assert before == after < 600  # it ended long before its minute, and nothing wrote after it ended
    assert notice["cancelled"] == "cancelled by the client" and notice["success"] is False
    assert notice["exit_code"] == 130
    assert notice["changes"]["files"] == 1  # the journal keeps what it changed: it can be rewound


def test_a_cancel_kills_a_command_tools_process_group(tmp_path):
    marker = "31.2578"  # this test's own `sleep`, found in /proc
    work = project(tmp_path, f'[tools.sleeper]\ncommand = ["sh", "-c", "sleep {marker}; echo done"]\n',
                   policy_section(allow=["tool__sleeper"]))

    async def body():
        async with connected(work) as client:
            await cancel_when(lambda: client.bash("tools sleeper"), lambda: processes(marker), "the command tool")
            await until(lambda: client.logged("cancelled"), "the cancelled run's report")
            await until(lambda: not processes(marker), "the command tool's process to go", within=20)
            return client.logged("cancelled")[0]

    notice = run(body)
    assert notice["cancelled"] == "cancelled by the client"


def test_a_cancel_cancels_the_mcp_call_in_flight_downstream(tmp_path):
    marker = tmp_path / "reached.txt"
    work = project(tmp_path, server_section("slow", "slow.py"), policy_section(allow=["mcp_slow__*"]))

    async def body():
        async with connected(work) as client:
            script = f"tools slow wait-marked marker={json.dumps(str(marker))} steps=600 step_seconds=0.1"
            await cancel_when(lambda: client.bash(script), marker.exists, "the call to reach the server")
            await until(lambda: client.logged("cancelled"), "the cancelled run's report")
            # The server's own record of the call: cancelled there (`notifications/cancelled`), not finished.
            result = None
            for _ in range(100):
                result = await client.bash("tools slow history")
                if "cancelled" in result.structured_content["stdout"]:
                    break
                await anyio.sleep(0.1)
            return result

    result = run(body)
    assert json.loads(result.structured_content["stdout"]) == ["cancelled"]


def test_a_stdio_client_that_goes_away_mid_call_stops_the_run(tmp_path):
    # A client that goes away sends no cancel: its pipes close. Spoken by hand, as the SDK's
    # client would send a courtesy cancel on its way out.
    import subprocess

    work = project(tmp_path, "")
    ticks = work / "ticks.txt"
    proc = subprocess.Popen([sys.executable, "-m", "toolkernel", "serve"], cwd=work, env=server_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "bash",
                                                                          "arguments": {"script": ticking()}}}
    try:
        for message in (hello, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call):
            proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
        deadline = time.monotonic() + WAIT
        while lines(ticks) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.stdin.close()  # gone
        proc.wait(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()

    async def body():
        async with connected(work) as client:
            return await still(client, "ticks.txt")

    before, after = run(body)
    assert before == after < 600


def test_an_http_client_that_drops_the_call_stops_its_run(tmp_path):
    # Spoken by hand, as the SDK's client would send a courtesy cancel: the request's connection
    # is dropped mid-call, and nothing else is said.
    import httpx

    from test_serve import ACCEPT, HELLO

    work = project(tmp_path, "")
    ticks = work / "ticks.txt"
    call_ = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "bash",
                                                                          "arguments": {"script": ticking()}}}
    with serving_http(work) as (url, token):
        headers = {**ACCEPT, "Authorization": f"Bearer {token}"}
        with httpx.Client(timeout=WAIT) as http:
            hello = http.post(url, json=HELLO, headers=headers)
            headers["mcp-session-id"] = hello.headers["mcp-session-id"]
            headers["mcp-protocol-version"] = "2025-06-18"
            http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
            with http.stream("POST", url, json=call_, headers=headers):
                deadline = time.monotonic() + WAIT
                while lines(ticks) < 5 and time.monotonic() < deadline:
                    time.sleep(0.05)
            # The response is closed here, unread: the client went away from the call.

        async def body():
            async with over_http(url, token) as client:
                for _ in range(200):  # until the run is seen stopped by a script of another session
                    result = await client.call_tool("bash", {"script": "a=$(wc -l < ticks.txt); sleep 1; "
                                                                       "b=$(wc -l < ticks.txt); echo $a $b"})
                    a, b = result.structured_content["stdout"].split()
                    if a == b:
                        return int(a)
            return None

        stopped_at = run(body)
    assert stopped_at is not None and stopped_at < 600


def test_the_http_client_gone_mid_call_is_a_cancel():
    from toolkernel._frontends._serve import _call_ids

    assert _call_ids(b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}') == [7]
    assert _call_ids(b'[{"jsonrpc":"2.0","id":"a","method":"tools/call"},{"jsonrpc":"2.0","method":"x"}]') == ["a"]
    assert _call_ids(b'{"jsonrpc":"2.0","id":true,"method":"tools/call"}') == []
    assert _call_ids(b"not json") == []


# -- notebook_run: a cancel interrupts the kernel; its progress -----------------------------


def test_notebook_run_reports_progress_and_a_cancel_interrupts_its_kernel(tmp_path):
    import nbformat

    work = project(tmp_path, policy_section(allow=["notebook_run"]))
    nbformat.write(nbformat.v4.new_notebook(), work / "nb.ipynb")
    ticks = work / "nb_ticks.txt"
    code = ("import time\nfor i in range(600):\n    print(f'cell-line-{i}', flush=True)\n"
            "    open('nb_ticks.txt', 'a').write(f'{i}\\n')\n    time.sleep(0.1)\n")
    heard: list = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        heard.append((value, message))

    async def body():
        async with connected(work, "--notebook", "nb.ipynb", "--kernel", "python3") as client:
            call = lambda: client.session.call_tool("notebook_run", {"notebook_path": "nb.ipynb", "code": code},
                                                    progress_callback=progress)
            await cancel_when(call, lambda: heard, "a progress notification")
            count = ("import time\na = len(open('nb_ticks.txt').read().split()); time.sleep(1)\n"
                     "b = len(open('nb_ticks.txt').read().split()); print(a, b)")
            after = await client.call("notebook_run", notebook_path="nb.ipynb", code=count)
            return after

    after = run(body)
    a, b = after.content[0].text.split()
    assert a == b and int(a) < 600  # the kernel was interrupted, and runs the next call at once
    assert heard[0][1].startswith("cell-line-")  # the newest line the cell printed


# -- 2. long runs report -------------------------------------------------------------------


def test_a_long_run_reports_progress_within_5_s_and_then_every_5_s(tmp_path):
    work = project(tmp_path, "")
    heard: list = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        heard.append((time.monotonic(), value, message))

    script = "for i in $(seq 1 24); do echo line-$i; tools glob-search pattern='*.none' >/dev/null; sleep 0.5; done"

    async def body():
        async with connected(work) as client:
            start = time.monotonic()
            result = await client.session.call_tool("bash", {"script": script}, progress_callback=progress)
            return start, result

    start, result = run(body)
    assert result.structured_content["exit_code"] == 0
    times = [start] + [at for at, _, _ in heard]
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    assert len(heard) >= 2, heard
    assert gaps[0] <= 5.0 and all(4.0 <= gap <= 6.5 for gap in gaps[1:]), gaps
    assert all(message and message.startswith("line-") for _, _, message in heard)  # the newest line printed
    values = [value for _, value, _ in heard]
    assert values == sorted(values) and values[-1] >= 8  # the calls made so far


def test_the_progress_message_is_the_newest_line_bounded():
    from toolkernel._frontends._serve_bash import MESSAGE_CHARS, Newest

    newest = Newest()
    assert newest.message() is None
    newest.printed("first\nsecond\n\n")
    assert newest.message() == "second"
    newest.printed("third, not ended \x1b[31m" + "x" * 1000)
    message = newest.message()
    assert message.startswith("third, not ended \\x1b") and len(message) <= MESSAGE_CHARS
    newest.printed("\r 50%\r")  # a progress bar, redrawn
    assert newest.message() == "50%"


# -- 3. a time limit per call ----------------------------------------------------------


def test_a_call_ends_at_its_timeout_and_says_which_limit(tmp_path):
    work = project(tmp_path, "")

    async def body():
        async with connected(work) as client:
            ended = await client.bash(ticking(), timeout=1500)
            return ended, await still(client, "ticks.txt"), await client.bash("echo x", timeout=600_001)

    ended, (before, after), too_long = run(body)
    body_ = ended.structured_content
    assert ended.is_error and body_["exit_code"] != 0
    assert body_["timed_out"] == "the call's timeout (1500 ms)"
    assert "ended by the call's timeout (1500 ms)" in ended.content[0].text
    assert before == after < 600
    assert too_long.is_error and json.loads(too_long.content[0].text)["error"]["code"] == "invalid_input"


def test_the_shell_timeout_stays_the_ceiling(tmp_path):
    work = project(tmp_path, "[shell]\ntimeout = 1\n")

    async def body():
        async with connected(work) as client:
            return await client.bash(ticking(), timeout=30_000)

    body_ = run(body).structured_content
    assert body_["timed_out"] == "the [shell] timeout (1 s)" and body_["exit_code"] != 0


def test_the_default_timeout_is_two_minutes_and_background_runs_have_none():
    from toolkernel._frontends._serve_bash import BashInput

    assert BashInput.parse({"script": "x"}).control().timeout == 120.0
    assert BashInput.parse({"script": "x", "timeout": 2000}).control().timeout == 2.0
    assert BashInput.parse({"script": "x", "run_in_background": True}).control().timeout is None
    for bad in ({"script": "x", "timeout": 0}, {"script": "x", "timeout": 600_001}, {"script": "x", "timeout": True},
                {"script": "x", "nope": 1}, {"script": "x", "description": 5}):
        with pytest.raises(Exception) as raised:
            BashInput.parse(bad)
        assert raised.value.code == "invalid_input"


# -- 4. background runs ------------------------------------------------------------------


async def finished(client: Client, run_id: str) -> dict:
    """bash_output until the run is over; its reads joined."""
    read = ""
    while True:
        result = await client.call("bash_output", bash_id=run_id)
        body = result.structured_content
        read += body["output"]
        if body["status"] != "running":
            return {**body, "output": read}
        await anyio.sleep(0.1)


def test_a_background_run_returns_at_once_its_output_is_read_in_parts_and_the_client_is_told(tmp_path):
    work = project(tmp_path, "")
    go = work / "go.txt"

    async def body():
        async with connected(work) as client:
            started = await client.bash(f"echo one; until [ -f {go.name} ]; do sleep 0.05; done; echo two",
                                        run_in_background=True, description="waits for go")
            first = await client.call("bash_output", bash_id="bash-1")
            while "one" not in first.structured_content["output"]:
                first = await client.call("bash_output", bash_id="bash-1")
            go.write_text("go")  # only now can it end: the call above returned while it ran
            rest = await finished(client, "bash-1")
            notice = (await until(lambda: client.logged("background run ended"), "the end notice"))[0]
            return started, first, rest, notice

    started, first, rest, notice = run(body)
    assert started.structured_content == {"id": "bash-1", "status": "running", "description": "waits for go"}
    assert first.structured_content["status"] == "running" and first.structured_content["output"] == "one\n"
    assert rest["output"] == "two\n" and rest["status"] == "exited" and rest["exit_code"] == 0  # since the last read
    assert notice["id"] == "bash-1" and notice["status"] == "exited" and notice["exit_code"] == 0


def test_bash_output_filters_lines_and_consumes_the_rest(tmp_path):
    work = project(tmp_path, "")

    async def body():
        async with connected(work) as client:
            await client.bash("for i in 1 2 3; do echo keep-$i; echo drop-$i; done", run_in_background=True)
            await until(lambda: client.logged("background run ended"), "the end notice")
            kept = await client.call("bash_output", bash_id="bash-1", filter="^keep")
            after = await client.call("bash_output", bash_id="bash-1")
            bad = await client.call("bash_output", bash_id="bash-1", filter="(")
            return kept.structured_content, after.structured_content, bad

    kept, after, bad = run(body)
    assert kept["output"] == "keep-1\nkeep-2\nkeep-3\n" and kept["status"] == "exited"
    assert after["output"] == ""  # the drop lines were consumed by the filtered read
    assert bad.is_error and json.loads(bad.content[0].text)["error"]["code"] == "invalid_input"


def test_kill_shell_ends_a_background_run_and_its_output_stays_readable(tmp_path):
    work = project(tmp_path, "")
    ticks = work / "ticks.txt"

    async def body():
        async with connected(work) as client:
            await client.bash(ticking(), run_in_background=True)
            await until(lambda: lines(ticks) >= 5, "ticks")
            killed = await client.call("kill_shell", shell_id="bash-1")
            output = await client.call("bash_output", bash_id="bash-1")
            again = await client.call("kill_shell", shell_id="bash-1")
            unknown = await client.call("bash_output", bash_id="bash-9")
            return killed, output.structured_content, again, unknown, await still(client, "ticks.txt"), client.logs

    killed, output, again, unknown, (before, after), logs = run(body)
    assert killed.structured_content["status"] == "killed" and not killed.is_error
    assert output["status"] == "killed" and output["output"].startswith("line-1\nline-2\n")
    assert output["cancelled"] == "killed (kill_shell)"
    assert "had ended already" in again.content[0].text
    assert unknown.is_error and "bash-1" in unknown.content[0].text
    assert before == after < 600
    assert not [data for data in logs if isinstance(data, dict) and data.get("event") == "background run ended"]


def test_a_background_run_keeps_its_most_recent_200_kb_and_says_how_much_was_dropped(tmp_path):
    work = project(tmp_path, "")

    async def body():
        async with connected(work) as client:
            await client.bash("seq 1 100000", run_in_background=True)
            await until(lambda: client.logged("background run ended"), "the end notice")
            return await client.call("bash_output", bash_id="bash-1")

    result = run(body)
    body_ = result.structured_content
    whole = "".join(f"{i}\n" for i in range(1, 100001))
    assert len(body_["output"]) <= 200_000 and whole.endswith(body_["output"])
    assert body_["output"].startswith(str(int(body_["output"].split()[0])))  # from a line's start
    assert body_["dropped"] == len(whole) - len(body_["output"])
    assert f"[{body_['dropped']:,} characters of older output were dropped unread]" in result.content[0].text


def test_a_background_run_ends_at_its_timeout(tmp_path):
    work = project(tmp_path, "")

    async def body():
        async with connected(work) as client:
            await client.bash(ticking(), run_in_background=True, timeout=1000)
            notice = (await until(lambda: client.logged("background run ended"), "the end notice"))[0]
            return notice

    notice = run(body)
    assert notice["status"] == "timed_out" and notice["timed_out"] == "the call's timeout (1000 ms)"


def test_background_runs_count_toward_the_eight_runs_at_once(tmp_path):
    work = project(tmp_path, "")

    async def body():
        async with connected(work) as client:
            for _ in range(8):
                await client.bash("sleep 60", run_in_background=True)
            ninth = await client.bash("echo nine", run_in_background=True)
            await client.call("kill_shell", shell_id="bash-3")
            tenth = await client.bash("echo ten", run_in_background=True)
            return ninth, tenth

    ninth, tenth = run(body)
    assert ninth.is_error and json.loads(ninth.content[0].text)["error"]["code"] == "unavailable"
    assert not tenth.is_error and tenth.structured_content["id"] == "bash-9"


def test_a_background_runs_question_waits_for_toolkernel_approve(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record))  # the default mode asks before a change

    async def body():
        async with connected(work) as client:  # no elicitation: a person answers in a terminal
            await client.bash("b=old; tools github delete_branch branch=$b && echo deleted", run_in_background=True)
            while True:
                waiting = (await client.call("bash_output", bash_id="bash-1")).structured_content
                if waiting.get("waiting"):
                    break
                await anyio.sleep(0.1)
            answered = await anyio.to_thread.run_sync(approve_cli, work, waiting["waiting"][0]["id"], "once")
            return waiting, answered, await finished(client, "bash-1")

    waiting, answered, done = run(body)
    assert waiting["status"] == "running"  # the run waits for the answer
    assert waiting["waiting"][0]["call"] == {"tool": "tools github delete-branch", "input": {"branch": "old"}}
    assert answered.returncode == 0, answered.stderr
    assert done["status"] == "exited" and done["output"].endswith("deleted\n")
    assert recorded(record) == [{"tool": "delete_branch", "input": {"branch": "old"}}]


def test_the_session_end_kills_its_background_runs(tmp_path):
    work = project(tmp_path, "")

    async def body(url, token):
        async with over_http(url, token) as client:
            await client.call_tool("bash", {"script": ticking(), "run_in_background": True})
            await until(lambda: lines(work / "ticks.txt") >= 5, "ticks")
        # The client's DELETE ended its session: its run is killed (seen from a new session).
        async with over_http(url, token) as other:
            for _ in range(200):
                result = await other.call_tool("bash", {"script": "a=$(wc -l < ticks.txt); sleep 1; "
                                                                  "b=$(wc -l < ticks.txt); echo $a $b"})
                a, b = result.structured_content["stdout"].split()
                if a == b:
                    return int(a)
        return None

    with serving_http(work) as (url, token):
        stopped_at = run(body, url, token)
    assert stopped_at is not None and stopped_at < 600


# -- 5. description ------------------------------------------------------------------------


def test_the_description_is_in_the_question_and_the_report(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), policy_section(ask=["mcp_github__delete_branch"]))
    asked: list = []

    async def elicit(context: Any, params: Question) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"decision": "deny"})

    async def body():
        params = StdioServerParameters(command=sys.executable, args=["-m", "toolkernel", "serve"],
                                       env=server_env(), cwd=str(work))
        async with over_stdio(params, elicit=elicit) as client:
            return await client.call_tool("bash", {"script": "tools github delete_branch branch=old",
                                                   "description": "Clean up old branches"})

    result = run(body).structured_content
    assert asked and asked[0].startswith("[Clean up old branches] ")
    assert result["description"] == "Clean up old branches"


def test_the_description_names_the_run_in_the_changes_list(tmp_path):
    from toolkernel._frontends._lab import _run
    from toolkernel._journal import Journal, describe_runs, iter_changes

    work = project(tmp_path, "")

    async def body():
        async with connected(work) as client:
            return await client.bash("echo new > made.txt", description="Make the file")

    assert run(body).structured_content["exit_code"] == 0
    journal = Journal(work)
    try:
        (record,) = list(iter_changes(journal))
        assert record.about["description"] == "Make the file"
        assert _run(record)["about"]["description"] == "Make the file"  # what the Lab sidebar's Changes list shows
        assert '"Make the file"' in describe_runs([record])
    finally:
        journal.close()


# -- the list ------------------------------------------------------------------------------


def test_the_list_stays_the_same_size_as_servers_are_added(tmp_path):
    listed = []
    for sections in ([""], [server_section("slow", "slow.py")],
                     [server_section("slow", "slow.py"), server_section("pics", "images.py")]):
        (tmp_path / str(len(listed))).mkdir()
        work = project(tmp_path / str(len(listed)), *sections)

        async def body():
            async with connected(work) as client:
                return wire(await client.session.session.list_tools())["tools"]  # as sent

        listed.append([json.dumps(t, sort_keys=True) for t in run(body)])
    assert listed[0] == listed[1] == listed[2]
    assert [json.loads(t)["name"] for t in listed[0]] == ["bash", "bash_output", "kill_shell", "read_file",
                                                          "write_file", "edit_file", "todo_write"]
