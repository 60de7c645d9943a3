"""`toolkernel serve` through the `mcp` SDK's own client, against the real server process.

The server runs as `python -m toolkernel serve` in a project folder whose
toolkernel.toml points at real fixture MCP servers; the client is
`mcp.ClientSession` over stdio (and over streamable HTTP in the HTTP tests), its answers read as
tests/mcp_client.py reads them under either major of the SDK.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from toolkernel._errors import CallError
from toolkernel._mcp_sdk import StdioServerParameters, types

from approval_helpers import SERVERS, policy_section, recorder_server_section, toml_string
from jupyter_server_helpers import free_port
from mcp_client import Client, Question, Result, over_stdio
from mcp_client import over_http as _over_http

REPO = Path(__file__).resolve().parent.parent
WAIT = 180  # generous: a loaded, shared machine


def server_section(name: str, script: str) -> str:
    return f"[mcp_servers.{name}]\ncommand = {toml_string(sys.executable)}\nargs = [{toml_string(str(SERVERS / script))}]\n"


def project(tmp_path: Path, *sections: str) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "toolkernel.toml").write_text("\n".join(sections))
    return work


def server_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


@asynccontextmanager
async def connected(work: Path, elicit=None):
    params = StdioServerParameters(command=sys.executable, args=["-m", "toolkernel", "serve"],
                                   env=server_env(), cwd=str(work))
    async with over_stdio(params, elicit=elicit) as client:
        yield client


def answering(decision: str | None, asked: list):
    """An elicitation callback that records the question and answers `decision` (None: declines)."""

    async def elicit(context: Any, params: Question) -> types.ElicitResult:
        asked.append(params)
        if decision is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"decision": decision})

    return elicit


def run(coro_fn, *args):
    return anyio.run(lambda: _bounded(coro_fn, *args))


async def _bounded(coro_fn, *args):
    with anyio.fail_after(WAIT):
        return await coro_fn(*args)


async def bash(client: Client, script: str) -> Result:
    return await client.call_tool("bash", {"script": script})


def recorded(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


# -- the list ------------------------------------------------------------------


@pytest.mark.slow
def test_the_list_is_bash_the_file_tools_and_keep_visible(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record),
                   '[tools_in_shell]\nkeep_visible = ["mcp_github__list_pulls"]\n')

    async def body():
        async with connected(work) as client:
            listed = (await client.list_tools()).tools
            called = await client.call_tool("mcp_github__list_pulls", {"repo": "toolkernel"})
            return listed, called

    listed, called = run(body)
    names = [t.name for t in listed]
    assert names[0] == "bash"
    assert sorted(names[1:]) == ["bash_output", "edit_file", "kill_shell", "mcp_github__list_pulls", "read_file",
                                 "todo_write", "write_file"]
    pulls = next(t for t in listed if t.name == "mcp_github__list_pulls")
    assert pulls.input_schema["properties"]["repo"]["type"] == "string"  # its own schema
    assert not called.is_error and "toolkernel" in called.content[0].text


def call_error_codes() -> set[str]:
    def below(cls: type) -> list[type]:
        return [cls] + [c for sub in cls.__subclasses__() for c in below(sub)]

    return {c.code for c in below(CallError)}


def test_the_task_list_is_a_direct_tool(tmp_path):
    # Seed 000 keeps write_todos direct: it shapes the turn, and the agent must see it exists.
    work = project(tmp_path, "")

    async def body():
        async with connected(work) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            todos = [{"content": "Run the tests", "status": "in_progress", "activeForm": "Running the tests"}]
            extra = [{**todos[0], "owner": "me"}]  # the terse listing leaves this open; the tool's schema does not
            return (listed, await client.call_tool("todo_write", {"todos": todos}),
                    await client.call_tool("todo_write", {"todos": extra}))

    listed, called, refused = run(body)
    assert "todo_write" in listed and "todos" in listed["todo_write"].input_schema["properties"]
    assert refused.is_error and json.loads(refused.content[0].text)["error"]["code"] == "invalid_input"
    assert not called.is_error and "[~] Run the tests (Running the tests)" in called.content[0].text


@pytest.mark.slow
def test_bash_description_is_written_for_a_model_and_short(tmp_path):
    work = project(tmp_path, "")

    async def body():
        async with connected(work) as client:
            return (await client.list_tools()).tools

    bash_tool = next(t for t in run(body) if t.name == "bash")
    description = bash_tool.description
    for needed in ("tools --help", "tools SERVER --help", "tools search", "key=value", "'{", "jq", "stdin"):
        assert needed in description
    # Exact about the errors: every code `tools` can print is named, and nothing else is.
    codes = call_error_codes()
    assert codes >= {"unknown_command", "invalid_input", "denied", "needs_approval", "call_limit", "unavailable"}
    assert all(code in description for code in codes)
    assert set(re.findall(r"\b[a-z]+(?:_[a-z]+)+\b", description)) == {c for c in codes if "_" in c}
    assert len(description) / 4 < 700  # tokens by bytes/4: well under 1,000
    assert bash_tool.input_schema["required"] == ["script"]


@pytest.mark.slow
def test_the_file_tools_are_listed_tersely_with_their_real_keys(tmp_path):
    work = project(tmp_path, "")

    async def body():
        async with connected(work) as client:
            on = {t.name: t for t in (await client.list_tools()).tools}
        (work / "toolkernel.toml").write_text("[tools_in_shell]\nenabled = false\n")
        async with connected(work) as client:
            off = {t.name: t for t in (await client.list_tools()).tools}
        return on, off

    on, off = run(body)
    for name in ("read_file", "write_file", "edit_file"):
        terse, full = on[name].input_schema, off[name].input_schema  # full: the schema calls are checked against
        assert "\n" not in on[name].description and len(on[name].description) < len(off[name].description)
        assert terse["required"] == full["required"]
        assert {k: v["type"] for k, v in terse["properties"].items()} == \
            {k: v["type"] for k, v in full["properties"].items()}


@pytest.mark.slow
def test_enabled_false_lists_every_tool_directly_and_deny_rules_hide_tools(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), "[tools_in_shell]\nenabled = false\n",
                   policy_section(deny=["mcp_github__delete_repo"]))

    async def body():
        async with connected(work) as client:
            return (await client.list_tools()).tools

    listed = run(body)
    names = [t.name for t in listed]
    assert "bash" not in names
    assert {"read_file", "glob_search", "mcp_github__list_pulls", "mcp_github__delete_branch"} <= set(names)
    assert "mcp_github__delete_repo" not in names
    assert "notebook_run" not in names  # no notebook is paired
    pulls = next(t for t in listed if t.name == "mcp_github__list_pulls")  # as its server lists it
    assert pulls.title == "List pull requests" and pulls.annotations.read_only_hint is True


@pytest.mark.slow
def test_a_denied_tool_is_in_no_list_the_bash_help_and_search_included(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), '[tools_in_shell]\nkeep_visible = ["mcp_github__delete_repo"]\n',
                   policy_section(deny=["mcp_github__delete_repo"]))

    async def body():
        async with connected(work) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            return names, await bash(client, "tools --help; tools github --help; tools search delete")

    names, listed = run(body)
    assert "mcp_github__delete_repo" not in names
    stdout = listed.structured_content["stdout"]
    assert "delete-branch" in stdout and "delete-repo" not in stdout and "delete_repo" not in stdout


# -- bash ----------------------------------------------------------------------------


@pytest.mark.slow
def test_bash_runs_a_script_with_tools_inside(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record))

    async def body():
        async with connected(work) as client:
            return await bash(client, "tools github list_pulls repo=toolkernel | jq -r '.[0].repo'\necho done")

    result = run(body)
    assert result.structured_content["exit_code"] == 0
    assert result.structured_content["stdout"] == "toolkernel\ndone\n"
    assert result.content[0].text == "toolkernel\ndone\n"  # nothing stopped or failed: no report in the text


def test_the_bash_result_has_the_seeds_shape(tmp_path):
    # Seed 000: {"exit_code", "success", "tools": {"done", "read_only_calls", "stopped", "not_reached"}}
    # at the top, where agents and examples written from the seed read `result.tools.stopped`.
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), policy_section(allow=["mcp_github__create_issue"]))

    async def body():
        async with connected(work) as client:
            done = await bash(client, "tools github list_pulls repo=a >/dev/null; tools github create_issue title=x")
            stopped = await bash(client, "tools github create_issue title=y\nb=z; tools github delete_branch branch=$b")
            return done.structured_content, stopped

    done, stopped = run(body)
    assert done["exit_code"] == 0 and done["success"] is True and "report" not in done
    assert done["tools"]["read_only_calls"] == 1
    assert [(d["tool"], d["input"], d["ok"]) for d in done["tools"]["done"]] == \
        [("tools github create-issue", {"title": "x"}, True)]
    body_ = stopped.structured_content
    assert body_["exit_code"] == 1 and body_["success"] is False
    assert body_["tools"]["stopped"]["reason"] == "needs_approval"
    assert body_["tools"]["stopped"]["call"] == {"tool": "tools github delete-branch", "input": {"branch": "z"}}
    assert body_["tools"]["not_reached"].startswith("the stopped call and everything after it")
    assert [d["input"] for d in body_["tools"]["done"]] == [{"title": "y"}]
    shown = json.loads(stopped.content[0].text.split("[report]\n", 1)[1].split("\n[waiting", 1)[0])
    assert set(shown) == {"exit_code", "success", "tools"} and shown["tools"] == body_["tools"]


@pytest.mark.slow
def test_bash_failure_has_the_seed_error_line_and_exit_code(tmp_path):
    work = project(tmp_path, "")

    async def body():
        async with connected(work) as client:
            return await bash(client, "tools no_such_tool")

    body_ = run(body).structured_content
    assert body_["exit_code"] != 0
    assert json.loads(body_["stderr"].strip().splitlines()[-1])["error"]["code"] == "unknown_command"


@pytest.mark.slow
def test_bash_moves_aside_a_module_the_script_planted_and_says_so_last(tmp_path):
    # The same Bashkit run as a cell's: `json.py` at the top would be what a Python started
    # there imports for `import json`.
    work = project(tmp_path, "")

    async def body():
        async with connected(work) as client:
            return await bash(client, "printf 'import os\\n' > json.py; echo done")

    result = run(body).structured_content
    assert result["exit_code"] != 0 and result["stdout"] == "done\n"
    assert result["stderr"].strip().splitlines()[-1].startswith("toolkernel: moved json.py, written while")
    assert not (work / "json.py").exists()
    assert [p.read_text() for p in (work / ".toolkernel" / "quarantine").glob("*/json.py")] == ["import os\n"]


@pytest.mark.slow
def test_images_come_back_as_image_content_and_files(tmp_path):
    work = project(tmp_path, server_section("pics", "images.py"), policy_section(allow=["mcp_pics__red_square"]))

    async def body():
        async with connected(work) as client:
            return await bash(client, "tools pics red_square size=3")

    assert_one_image(run(body), work)


def assert_one_image(result: Result, work: Path) -> None:
    """One PNG as image content, and the same bytes saved under tool-images/."""
    images = [c for c in result.content if c.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    assert base64.b64decode(images[0].data).startswith(b"\x89PNG")
    saved = list((work / "tool-images").iterdir())
    assert len(saved) == 1 and saved[0].read_bytes() == base64.b64decode(images[0].data)


@pytest.mark.slow
def test_large_output_comes_back_as_head_and_tail_with_the_saved_path(tmp_path):
    work = project(tmp_path, "")

    async def body():
        async with connected(work) as client:
            return await bash(client, BIG_OUTPUT)

    assert_head_and_tail(run(body).structured_content["stdout"], work)


BIG_OUTPUT = "seq 1 20000 | sed 's/^/line-/'"


def assert_head_and_tail(stdout: str, work: Path) -> None:
    """BIG_OUTPUT came back as its head and tail, naming the saved whole."""
    assert stdout.startswith("line-1\n") and "line-20000\n" in stdout  # head and tail
    assert len(stdout) < 60_000 and "omitted" in stdout
    saved = next((work / ".toolkernel" / "outputs").iterdir())
    assert saved.name in stdout and saved.read_text().count("\n") == 20000


# -- asking the person -----------------------------------------------------------------


@pytest.mark.slow
def test_elicitation_that_allows_runs_the_script_in_the_same_call(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), policy_section(ask=["mcp_github__delete_branch"]))
    asked: list = []

    async def body():
        async with connected(work, answering("once", asked)) as client:
            return await bash(client, "tools github delete_branch branch=old && echo after")

    result = run(body)
    assert len(asked) == 1
    assert "delete" in asked[0].message and '"old"' in asked[0].message
    assert asked[0].requested_schema["properties"]["decision"]["enum"] == ["once", "always", "deny"]
    assert result.structured_content["exit_code"] == 0 and "after" in result.structured_content["stdout"]
    assert [r["tool"] for r in recorded(record)] == ["delete_branch"]


@pytest.mark.slow
def test_elicitation_that_denies_runs_nothing_and_the_report_says_so(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), policy_section(ask=["mcp_github__delete_branch"]))
    asked: list = []

    async def body():
        async with connected(work, answering("deny", asked)) as client:
            return await bash(client, "echo before > started.txt\ntools github delete_branch branch=old")

    result = run(body).structured_content
    assert len(asked) == 1 and recorded(record) == []
    assert not (work / "started.txt").exists()  # before the start: nothing ran
    stopped = result["tools"]["stopped"]
    assert stopped["approval"] == "denied" and stopped["before_start"] is True


@pytest.mark.slow
def test_a_client_without_elicitation_gets_needs_approval(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), policy_section(ask=["mcp_github__delete_branch"]))

    async def body():
        async with connected(work) as client:
            return await bash(client, "tools github delete_branch branch=old")

    result = run(body)
    stopped = result.structured_content["tools"]["stopped"]
    assert stopped["reason"] == "needs_approval" and stopped["call"]["input"] == {"branch": "old"}
    assert recorded(record) == []
    assert "needs_approval" in result.content[0].text


@pytest.mark.slow
@pytest.mark.parametrize("why, path", [
    ("an ask rule", "x.txt"),
    ("what scripts must not write", "toolkernel.toml"),  # the mount plan, worked out for this call
])
def test_direct_tools_pass_the_same_approvals(tmp_path, why, path):
    work = project(tmp_path, policy_section(ask=["write_file"]) if why == "an ask rule" else "")
    before = (work / path).read_text() if (work / path).exists() else None
    asked: list = []

    async def body():
        async with connected(work, answering("deny", asked)) as client:
            return await client.call_tool("write_file", {"path": path, "content": "hi"})

    result = run(body)
    assert len(asked) == 1 and result.is_error
    assert json.loads(result.content[0].text)["error"]["code"] == "denied"
    assert ((work / path).read_text() if (work / path).exists() else None) == before


def test_a_direct_write_that_would_shadow_an_installed_module_asks_even_in_accept_edits(tmp_path):
    # `json.py` at the top is what the person's next `import json` in a kernel there runs.
    work = project(tmp_path, policy_section(mode="accept-edits"))
    asked: list = []

    async def body():
        async with connected(work, answering("deny", asked)) as client:
            shadowing = await client.call_tool("write_file", {"path": "json.py", "content": "import os"})
            plain = await client.call_tool("write_file", {"path": "notes_of_mine.py", "content": "x = 1"})
        async with connected(work) as client:  # no elicitation: the call waits for a person
            waiting = await client.call_tool("write_file", {"path": "json.py", "content": "import os"})
        return shadowing, plain, waiting

    shadowing, plain, waiting = run(body)
    assert len(asked) == 1 and "`json.py` at the workspace top would shadow the installed module `json`" \
        in asked[0].message
    assert shadowing.is_error and json.loads(shadowing.content[0].text)["error"]["code"] == "denied"
    assert not plain.is_error and (work / "notes_of_mine.py").read_text() == "x = 1"
    assert waiting.is_error and json.loads(waiting.content[0].text.splitlines()[0])["error"]["code"] == "needs_approval"
    assert not (work / "json.py").exists()


# -- streamable HTTP -------------------------------------------------------------------------


@pytest.fixture
def http_server(tmp_path):
    """`toolkernel serve --http` on loopback with a token; yields (url, token, record file, working directory)."""
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), server_section("pics", "images.py"),
                   policy_section(ask=["mcp_github__delete_branch"], allow=["mcp_pics__red_square"]),
                   '[tools_in_shell]\nkeep_visible = ["mcp_github__list_pulls"]\n')
    with serving_http(work) as (url, token):
        yield url, token, record, work


@contextmanager
def serving_http(work: Path):
    """`toolkernel serve --http` in `work`, on a free loopback port, with a token: (url, token)."""
    port, token = free_port(), "s3cret-token"
    proc = subprocess.Popen([sys.executable, "-m", "toolkernel", "serve", "--http", f"127.0.0.1:{port}",
                             "--token", token], cwd=work, env=server_env(), stderr=subprocess.PIPE, text=True)
    wait_for_port(proc, port)
    try:
        yield f"http://127.0.0.1:{port}/mcp", token
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def wait_for_port(proc: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read()


@asynccontextmanager
async def over_http(url: str, token: str, elicit=None):
    async with _over_http(url, {"Authorization": f"Bearer {token}"}, elicit=elicit) as client:
        yield client


HELLO = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest.mark.slow
def test_http_requests_without_the_token_are_refused(http_server):
    url, token, _, _ = http_server
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
        response = httpx.post(url, json=HELLO, headers={**ACCEPT, **headers}, timeout=WAIT)
        assert response.status_code == 401 and token not in response.text


@contextmanager
def serving_untold(work: Path, *extra: str, given: str | None = None):
    """`toolkernel serve --http` on loopback given no token (or `given` as $TOOLKERNEL_SERVE_TOKEN):
    (url, the process, its stderr unread)."""
    port = free_port()
    env = {k: v for k, v in server_env().items() if k != "TOOLKERNEL_SERVE_TOKEN"}
    if given is not None:
        env["TOOLKERNEL_SERVE_TOKEN"] = given
    proc = subprocess.Popen([sys.executable, "-m", "toolkernel", "serve", "--http", f"127.0.0.1:{port}", *extra],
                            cwd=work, env=env, stderr=subprocess.PIPE, text=True)
    wait_for_port(proc, port)
    try:
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("given", [None, ""])
def test_loopback_without_a_token_gets_a_new_one_shown_at_the_start(tmp_path, given):
    # Loopback is every local user's and every program's: a served shell must not be open to
    # them, nor guarded by an empty token that `Authorization: Bearer ` would match.
    with serving_untold(project(tmp_path), given=given) as (url, proc):
        line = proc.stderr.readline()
        token = re.search(r"Authorization: Bearer ([\w-]+)", line).group(1)
        assert len(token) >= 32 and url in line
        assert httpx.post(url, json=HELLO, headers=ACCEPT, timeout=WAIT).status_code == 401

        async def listed():
            async with over_http(url, token) as client:
                return [t.name for t in (await client.list_tools()).tools]

        assert "bash" in run(listed)


@pytest.mark.slow
def test_no_token_serves_loopback_open_and_never_off_it(tmp_path):
    with serving_untold(project(tmp_path), "--no-token") as (url, _):
        assert httpx.post(url, json=HELLO, headers=ACCEPT, timeout=WAIT).status_code == 200
    for argv in (["--http", "0.0.0.0:8999", "--no-token"], ["--http", "127.0.0.1:8999", "--no-token", "--token", "t"]):
        done = subprocess.run([sys.executable, "-m", "toolkernel", "serve", *argv], cwd=tmp_path, env=server_env(),
                              capture_output=True, text=True, timeout=WAIT)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow
def test_off_loopback_without_a_token_does_not_start(tmp_path):
    done = subprocess.run([sys.executable, "-m", "toolkernel", "serve", "--http", "0.0.0.0:8999"],
                          cwd=tmp_path, env=server_env(), capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == 2 and "--token" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_two_http_sessions_do_not_see_each_others_runs(http_server):
    url, token, record, _ = http_server
    results: dict[str, Any] = {}

    async def session(name: str, script: str) -> None:
        async with over_http(url, token) as client:
            results[name] = await bash(client, script)

    async def body():
        async with anyio.create_task_group() as group:
            group.start_soon(session, "a", "echo from-a\ntools github list_pulls repo=a >/dev/null\n"
                                           "tools github delete_branch branch=a")
            group.start_soon(session, "b", "echo from-b\ntools github list_pulls repo=b | jq -r '.[0].repo'")

    run(body)
    a, b = results["a"].structured_content, results["b"].structured_content
    assert a["tools"]["stopped"]["reason"] == "needs_approval"  # a client without elicitation
    assert a["tools"]["stopped"]["call"]["input"] == {"branch": "a"}
    assert [w["call"]["input"] for w in a["waiting"]] == [{"branch": "a"}]
    assert "stopped" not in b["tools"] and b["exit_code"] == 0 and "waiting" not in b  # a's pending call is a's
    assert "from-b" not in a["stdout"] and "from-a" not in b["stdout"] and b["stdout"] == "from-b\nb\n"
    assert recorded(record) == []


@pytest.mark.slow
@pytest.mark.parametrize("decision", ["once", "deny"])
def test_elicitation_over_http_asks_the_client_that_made_the_call(http_server, decision):
    url, token, record, _ = http_server
    asked: list = []
    script = "tools github delete_branch branch=over-http && echo after"

    async def body():
        async with over_http(url, token, answering(decision, asked)) as client:
            return await bash(client, script)

    result = run(body).structured_content
    assert len(asked) == 1 and '"over-http"' in asked[0].message
    assert asked[0].requested_schema["properties"]["decision"]["enum"] == ["once", "always", "deny"]
    if decision == "once":  # before the start: allowed, so the script ran in the same call
        assert result["exit_code"] == 0 and "after" in result["stdout"] and "stopped" not in result["tools"]
        assert recorded(record) == [{"tool": "delete_branch", "input": {"branch": "over-http"}}]
    else:
        assert result["tools"]["stopped"]["approval"] == "denied" and recorded(record) == []


@pytest.mark.slow
@pytest.mark.parametrize("decision, approval", [("once", "granted"), ("deny", "denied")])
def test_mid_run_the_script_stops_and_the_report_carries_the_answer(tmp_path, decision, approval):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), policy_section(ask=["mcp_github__delete_branch"]))
    asked: list = []
    script = "b=old\ntools github delete_branch branch=$b\necho after"  # input built at run time

    async def body():
        async with connected(work, answering(decision, asked)) as client:
            return await bash(client, script), await bash(client, script)

    first, again = run(body)
    stopped = first.structured_content["tools"]["stopped"]
    assert stopped["approval"] == approval and stopped["call"]["input"] == {"branch": "old"}
    assert "after" not in first.structured_content["stdout"]
    # The answer in the words every other line uses ("allowed once", "denied"), not "approval granted"
    message = json.loads(first.structured_content["stderr"].strip().splitlines()[-1])["error"]["message"]
    assert f"a person was asked ({ {'once': 'allowed once', 'deny': 'denied'}[decision] })." in message, message
    if decision == "once":  # the once-grant lets the next script make that call, unasked
        assert len(asked) == 1 and again.structured_content["exit_code"] == 0
        assert [r["tool"] for r in recorded(record)] == ["delete_branch"]
    else:
        assert len(asked) == 2 and recorded(record) == []


@pytest.mark.slow
def test_mid_run_over_http_the_person_is_asked_and_the_report_says_granted(http_server):
    url, token, record, _ = http_server
    asked: list = []
    script = "b=mid-run\ntools github delete_branch branch=$b\necho after"  # input built at run time

    async def body():
        async with over_http(url, token, answering("once", asked)) as client:
            return await bash(client, script), await bash(client, script)

    first, again = run(body)
    stopped = first.structured_content["tools"]["stopped"]
    assert stopped["approval"] == "granted" and "after" not in first.structured_content["stdout"]
    assert len(asked) == 1 and again.structured_content["exit_code"] == 0  # the once-grant: that call, unasked
    assert recorded(record) == [{"tool": "delete_branch", "input": {"branch": "mid-run"}}]


@pytest.mark.slow
def test_over_http_the_list_images_and_large_outputs_are_as_over_stdio(http_server):
    url, token, _, work = http_server

    async def body():
        async with over_http(url, token) as client:
            listed = (await client.list_tools()).tools
            return listed, await bash(client, "tools pics red_square size=3"), await bash(client, BIG_OUTPUT)

    listed, image, big = run(body)
    assert sorted(t.name for t in listed) == ["bash", "bash_output", "edit_file", "kill_shell",
                                              "mcp_github__list_pulls", "read_file", "todo_write", "write_file"]
    assert next(t for t in listed if t.name == "mcp_github__list_pulls").input_schema["required"] == ["repo"]
    assert_one_image(image, work)
    assert_head_and_tail(big.structured_content["stdout"], work)


@pytest.mark.slow
def test_enabled_false_over_http_lists_and_calls_every_tool_directly(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), "[tools_in_shell]\nenabled = false\n",
                   policy_section(deny=["mcp_github__delete_repo"], allow=["mcp_github__delete_branch"]))

    async def body(url, token):
        async with over_http(url, token) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            return names, await client.call_tool("mcp_github__delete_branch", {"branch": "old"})

    with serving_http(work) as (url, token):
        names, called = run(body, url, token)
    assert "bash" not in names and "mcp_github__delete_repo" not in names
    assert {"read_file", "mcp_github__list_pulls", "mcp_github__delete_branch"} <= set(names)
    assert not called.is_error
    assert recorded(record) == [{"tool": "delete_branch", "input": {"branch": "old"}}]


@pytest.mark.slow
def test_a_once_answer_counts_only_for_the_http_session_that_asked(http_server):
    url, token, record, work = http_server
    script = "b=shared\ntools github delete_branch branch=$b && echo deleted"
    seen: dict[str, Any] = {}

    async def body():
        async with over_http(url, token) as a, over_http(url, token) as b:
            first = await bash(a, script)
            request = first.structured_content["waiting"][0]["id"]
            seen["answer"] = await anyio.to_thread.run_sync(approve_cli, work, request, "once")
            # b makes the very call a's person allowed once: b is asked anew, a goes through
            return first, await bash(b, script), await bash(a, script)

    first, other, again = run(body)
    assert seen["answer"].returncode == 0, seen["answer"].stderr
    assert first.structured_content["tools"]["stopped"]["reason"] == "needs_approval"
    assert other.structured_content["tools"]["stopped"]["reason"] == "needs_approval"
    assert again.structured_content["exit_code"] == 0 and "deleted" in again.structured_content["stdout"]
    assert recorded(record) == [{"tool": "delete_branch", "input": {"branch": "shared"}}]


# -- `toolkernel approve`: the pending store other processes read --------------------


def approve_cli(work: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkernel", "approve", *args], cwd=work, env=server_env(),
                          capture_output=True, text=True, timeout=WAIT)


def pending_ids(work: Path) -> list[str]:
    from toolkernel._approval._pending import PendingStore

    folder = PendingStore(work).folder
    return sorted(p.name[:-5] for p in folder.glob("*.json") if not p.name.endswith(".answer.json"))


@pytest.mark.slow
@pytest.mark.parametrize("decision", ["once", "always", "deny"])
def test_a_person_answers_in_a_terminal_while_the_agent_waits(tmp_path, decision):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record))  # the default mode asks before a change
    script = "b=old\ntools github delete_branch branch=$b && echo deleted"
    seen: dict[str, Any] = {}

    async def body():
        async with connected(work) as client:  # no elicitation: the run stops with needs_approval
            first = await bash(client, script)
            seen["ids"] = pending_ids(work)
            seen["listed"] = await anyio.to_thread.run_sync(approve_cli, work)
            request = first.structured_content["waiting"][0]["id"]
            seen["answered"] = await anyio.to_thread.run_sync(approve_cli, work, request, decision)
            seen["after"] = await anyio.to_thread.run_sync(approve_cli, work)
            return first, await bash(client, script), await bash(client, script)

    first, again, third = run(body)
    request = first.structured_content["waiting"][0]
    assert request["call"] == {"tool": "tools github delete-branch", "input": {"branch": "old"}}
    assert f"toolkernel approve {request['id']}" in first.content[0].text
    assert seen["ids"] == [request["id"]]
    listed = seen["listed"]
    assert listed.returncode == 0 and request["id"] in listed.stdout
    assert 'tools github delete-branch {"branch": "old"}' in listed.stdout
    assert "always allows tools github delete-branch from now on (the rule mcp_github__delete_branch)" in listed.stdout
    assert seen["answered"].returncode == 0, seen["answered"].stderr
    assert "no call waits" in seen["after"].stdout
    if decision == "deny":
        assert again.structured_content["tools"]["stopped"]["reason"] == "needs_approval"
        assert recorded(record) == []
    else:
        assert again.structured_content["exit_code"] == 0 and "deleted" in again.structured_content["stdout"]
        # once: that one call, once; always: the tool from now on
        third_ran = third.structured_content["exit_code"] == 0
        assert third_ran is (decision == "always")
        assert len(recorded(record)) == (2 if decision == "always" else 1)
    assert pending_ids(work) == ([] if decision == "always" else pending_ids(work))


def _children(pid: int) -> list[int]:
    """The live child processes of `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_an_http_session_that_ends_has_its_mcp_servers_stopped(tmp_path):
    # Each HTTP session has a Session of its own, with its own MCP servers: kept until serve
    # stopped, they piled up with every client that came and went.
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record))
    port, token = free_port(), "s3cret-token"
    proc = subprocess.Popen([sys.executable, "-m", "toolkernel", "serve", "--http", f"127.0.0.1:{port}",
                             "--token", token], cwd=work, env=server_env(), stderr=subprocess.PIPE, text=True)
    try:
        wait_for_port(proc, port)
        before = set(_children(proc.pid))

        async def one_client():
            async with over_http(f"http://127.0.0.1:{port}/mcp", token) as client:
                result = await bash(client, "tools github list_pulls repo=a | jq -r '.[0].repo'")
                assert result.structured_content["stdout"] == "a\n"
                return set(_children(proc.pid)) - before

        started = run(one_client)
        assert started, "the script's call started the server as a child of serve"
        deadline = time.monotonic() + WAIT
        while started & set(_children(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not started & set(_children(proc.pid))  # the client's DELETE closed its Session
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_clients_idle_past_the_sdks_timeout_are_closed_and_a_later_call_gets_a_fresh_one(tmp_path):
    from toolkernel._frontends._serve import ToolServer

    server = ToolServer(project(tmp_path))
    try:
        first, _ = server.client("a")
        server.forget_after = 0.0
        time.sleep(0.01)
        server.client("b")
        assert "a" not in server._clients  # closed when another client came
        assert server.client("a")[0] is not first
    finally:
        server.close()


@pytest.mark.slow
def test_a_clients_idle_time_counts_from_the_end_of_its_run_not_its_start(tmp_path):
    # The SDK keeps a session while a request is in flight: a run longer than the idle time
    # must not lose its Session (once-grants, pending approvals) the moment it ends.
    from toolkernel._frontends._serve import ToolServer

    server = ToolServer(project(tmp_path))
    server.forget_after = 5.0  # a stall of the test's own thread longer than this fails it
    try:
        with server.running("a") as session:
            time.sleep(5.5)
            server.client("b")
            assert server._clients["a"][0] is session  # running: never closed
        server.client("b")
        assert server._clients["a"][0] is session  # idle for an instant only
        time.sleep(5.5)
        server.client("b")
        assert "a" not in server._clients
    finally:
        server.close()


# -- what the agent's developer reads (issue 37 item 7) ---------------------------------------


def test_a_waiting_request_is_said_in_the_result_that_made_it_and_no_other(tmp_path):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), policy_section(ask=["write_file"]))

    async def body():
        async with connected(work) as client:  # no elicitation: requests wait for a person
            return [await bash(client, "tools github delete_branch branch=old"),
                    await bash(client, "tools github delete_brnch branch=old"),  # a typo
                    await bash(client, "echo fine"),
                    await client.call_tool("read_file", {"path": "missing.txt"}),
                    await client.call_tool("write_file", {"path": "a.txt", "content": "x"}),
                    await client.call_tool("write_file", {"path": "a.txt", "content": "x"}),  # again, still waiting
                    await bash(client, "tools github delete_branch branch=old")]  # again, still waiting

    asked, typo, fine, missing, direct, direct_again, asked_again = run(body)
    first = asked.structured_content["waiting"][0]["id"]
    text = asked.content[0].text
    assert f"`toolkernel approve {first} once|always|deny`; then write a new script" in text
    assert "%tools" not in text  # the agent's reader has no notebook to type it in
    for later in (typo, fine, missing):
        assert "waiting for a person" not in later.content[0].text
        assert "waiting" not in (later.structured_content or {})
    write = [line for line in direct.content[0].text.splitlines() if "[waiting for a person]" in line]
    assert len(write) == 1 and "tools write-file" in write[0] and write[0].endswith("then make the call again")
    assert "%tools" not in direct.content[0].text
    assert direct_again.content[0].text.count("[waiting for a person]") == 1
    assert [w["id"] for w in asked_again.structured_content["waiting"]] == [first]


def test_a_script_that_exits_non_zero_is_an_error_result(tmp_path):
    work = project(tmp_path, "")

    async def body():
        async with connected(work) as client:
            return await bash(client, "echo half; exit 1"), await bash(client, "echo whole")

    failed, passed = run(body)
    assert failed.is_error and failed.structured_content["exit_code"] == 1
    assert failed.content[0].text.startswith("half")
    assert not passed.is_error


def test_with_the_shell_off_bash_cannot_be_called_either(tmp_path):
    work = project(tmp_path, "[tools_in_shell]\nenabled = false\n")
    (work / "kept.txt").write_text("untouched\n")

    async def body():
        async with connected(work) as client:
            return await bash(client, "echo gone > kept.txt; echo ran")

    result = run(body)
    assert result.is_error and json.loads(result.content[0].text)["error"]["code"] == "unknown_command"
    assert (work / "kept.txt").read_text() == "untouched\n"


@pytest.mark.parametrize("spelling", ["github list-pulls", "tools github list-pulls", "mcp_github__list_pulls"])
def test_keep_visible_reads_a_tool_as_the_rules_do(tmp_path, spelling):
    record = tmp_path / "record.jsonl"
    work = project(tmp_path, recorder_server_section(record), f'[tools_in_shell]\nkeep_visible = ["{spelling}"]\n')

    async def body():
        async with connected(work) as client:
            return [t.name for t in (await client.list_tools()).tools]

    names = run(body)
    assert sorted(names) == ["bash", "bash_output", "edit_file", "kill_shell", "mcp_github__list_pulls", "read_file",
                             "todo_write", "write_file"]
