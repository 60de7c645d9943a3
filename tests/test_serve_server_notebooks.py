"""`toolkernel serve --server URL`: every notebook of a Jupyter Server, paired per call (issue 47 item 2).

Real parts: one Jupyter Server on loopback for the module (each test in a folder of its own under
its root), real kernels it starts, `toolkernel serve` as a child process driven by the `mcp` SDK's
client (stdio, and streamable HTTP for two sessions of one serve). A person's session is made as
JupyterLab makes it (POST /api/sessions) and runs code over the kernel's websocket.
"""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import nbformat
import pytest

from approval_helpers import policy_section
from jupyter_server_helpers import NO_COLLABORATION, SERVER_TOKEN, free_port, server_api, start_server, stop_server
from mcp_client import Client, over_stdio
from test_serve import WAIT, over_http, run, server_env, wait_for_port

from toolkernel import _loop
from toolkernel._mcp_sdk import StdioServerParameters
from toolkernel._providers._notebook._server import ServerApi, connect_server

ALLOW = ["notebook_run", "notebook_edit", "notebook_read"]


@pytest.fixture(scope="module")
def jupyter_server(tmp_path_factory):
    process, server = start_server(tmp_path_factory, f"--ServerApp.jpserver_extensions={NO_COLLABORATION}")
    yield server
    stop_server(process)


def folder(server, name: str, *sections: str, notebooks: dict[str, str] = {}) -> Path:
    """A folder under the server's root with a toolkernel.toml, and notebooks (path: first cell's source)."""
    work = server["root"] / name
    work.mkdir()
    (work / "toolkernel.toml").write_text("\n".join(sections or [policy_section(allow=ALLOW)]))
    for path, source in notebooks.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), work / path)
    return work


def serve_env(server) -> dict[str, str]:
    # The server publishes itself (root folder, URL) in its runtime folder: serve finds its root there.
    return {**server_env(), "JUPYTER_RUNTIME_DIR": str(server["runtime"])}


def serve_args(server, *options: str) -> list[str]:
    return [sys.executable, "-m", "toolkernel", "serve", "--server", server["url"], "--server-token", SERVER_TOKEN,
            *options]


@asynccontextmanager
async def serving(work: Path, server, *options: str):
    argv = serve_args(server, *options)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=serve_env(server), cwd=str(work))
    async with over_stdio(params) as client:
        yield client


def text(result) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


async def run_code(client: Client, notebook: str, code: str):
    return await client.call_tool("notebook_run", {"notebook_path": notebook, "code": code})


def person_runs(server, notebook: str, code: str) -> dict:
    """The notebook opened as JupyterLab opens it (a session of its own), and `code` run in its kernel."""
    session = server_api(server, "POST", "api/sessions", json={
        "path": notebook, "type": "notebook", "name": Path(notebook).name, "kernel": {"name": "python3"}})

    async def execute() -> None:
        connection = await connect_server(ServerApi(server["url"], SERVER_TOKEN), notebook, None)
        try:
            assert (await connection.execute(code, 120)).status == "ok"
        finally:
            await connection.close()  # not its session: it stays, kernel and all

    _loop.run(execute(), timeout=300)
    return session


def session_paths(server, folder: str = "") -> list[str]:
    """The notebooks the server has sessions for, in `folder` (each test has its own)."""
    return sorted(s["path"] for s in server_api(server, "GET", "api/sessions") if s["path"].startswith(folder))


def sessions_become(server, folder: str, expected: list[str]) -> None:
    """Wait for the server's sessions in `folder` to be `expected` (one ends after serve's reply went out)."""
    deadline = time.monotonic() + WAIT
    while (now := session_paths(server, folder)) != expected:
        assert time.monotonic() < deadline, f"the server's sessions stay {now}, not {expected}"
        time.sleep(0.2)


@pytest.mark.slow
def test_each_call_pairs_its_notebook_with_its_session_and_starts_a_kernel_only_where_config_allows(
        jupyter_server):
    server = jupyter_server
    work = folder(server, "per-call", notebooks={"a.ipynb": "# a", "b.ipynb": "# b"})
    person = person_runs(server, "per-call/a.ipynb", "shared = 41")
    seen: dict = {}

    async def body():
        async with serving(work, server) as client:
            seen["listed"] = {t.name: t for t in (await client.list_tools()).tools}
            seen["a"] = await run_code(client, "per-call/a.ipynb", "print(shared + 1)")
            seen["b refused"] = await run_code(client, "per-call/b.ipynb", "print('b')")
            seen["sessions refused"] = await anyio.to_thread.run_sync(session_paths, server, "per-call/")
            seen["b read"] = await client.call_tool("notebook_read", {"notebook_path": "per-call/b.ipynb"})
            seen["b edit"] = await client.call_tool("notebook_edit", {
                "notebook_path": "per-call/b.ipynb", "edit_mode": "insert", "cell_type": "code",
                "new_source": "print('inserted')"})
            # The person shuts their notebook's kernel down (JupyterLab ends its session): a run gets no new one.
            await anyio.to_thread.run_sync(lambda: server_api(server, "DELETE", f"api/sessions/{person['id']}"))
            seen["a gone"] = await run_code(client, "per-call/a.ipynb", "print('again')")
            seen["sessions gone"] = await anyio.to_thread.run_sync(session_paths, server, "per-call/")
            # The person allows it in their config (read again at each call):
            (work / "toolkernel.toml").write_text(policy_section(allow=ALLOW) + "[serve]\nstart_kernels = true\n")
            seen["b started"] = await run_code(client, "per-call/b.ipynb", "print('b', 'shared' in dir())")
            seen["b again"] = await run_code(client, "per-call/b.ipynb", "print('b again')")
            seen["sessions"] = await anyio.to_thread.run_sync(session_paths, server, "per-call/")

    try:
        run(body)
        run_tool = seen["listed"]["notebook_run"]
        path = run_tool.input_schema["properties"]["notebook_path"]["description"]
        assert "from the root of the Jupyter Server" in path and "file://" in path and "outside it is refused" in path
        assert "notebook_path" in run_tool.input_schema["required"]  # no --notebook: the agent names one
        assert not seen["a"].is_error and text(seen["a"]).startswith("42"), text(seen["a"])  # the person's kernel
        assert "session on the Jupyter Server" in text(seen["a"])
        refused = text(seen["b refused"])
        assert seen["b refused"].is_error and "per-call/b.ipynb has no kernel session" in refused
        assert "start_kernels = true" in refused and "connection_required" in refused
        assert seen["sessions refused"] == ["per-call/a.ipynb"]  # nothing was started for b
        gone = text(seen["a gone"])
        assert seen["a gone"].is_error and "per-call/a.ipynb has no kernel session" in gone, gone
        assert seen["sessions gone"] == []
        assert not seen["b read"].is_error and "# b" in text(seen["b read"])  # a read needs no kernel
        assert not seen["b edit"].is_error, text(seen["b edit"])
        started = text(seen["b started"])
        assert not seen["b started"].is_error and started.startswith("b False"), started  # a kernel of its own
        assert "started a new python3 kernel session for per-call/b.ipynb" in started
        assert "started" not in text(seen["b again"])  # said once
        assert seen["sessions"] == ["per-call/b.ipynb"]
        sessions_become(server, "per-call/", [])  # serve ended: the session it started ended with it
        sources = [c.source for c in nbformat.read(work / "b.ipynb", as_version=4).cells]
        assert sources == ["print('inserted')", "# b"]  # edited through the server
    finally:
        if person["id"] in [s["id"] for s in server_api(server, "GET", "api/sessions")]:
            server_api(server, "DELETE", f"api/sessions/{person['id']}")


@pytest.mark.slow
def test_a_notebook_is_named_from_the_servers_root_a_missing_one_is_refused_with_the_nearest_and_uris_map(
        jupyter_server, tmp_path):
    server = jupyter_server
    root = server["root"]
    work = folder(server, "naming", policy_section(allow=[*ALLOW, "write_file"],
                                                   deny=["notebook_edit(notebook_path=naming/locked*)"]),
                  notebooks={"notebooks/Untitled.ipynb": "# untitled", "locked.ipynb": "# locked"})
    inside = work / "notebooks"
    # The reported bug: from a subfolder, `--notebook Untitled.ipynb` paired a notebook the server does
    # not have (at its root), with a new kernel session, and every call failed.
    started = subprocess.run(serve_args(server, "--notebook", "Untitled.ipynb"), cwd=inside, env=serve_env(server),
                             capture_output=True, text=True, timeout=WAIT, stdin=subprocess.DEVNULL)
    assert started.returncode == 2 and "Traceback" not in started.stderr, started.stderr
    assert "no notebook Untitled.ipynb under the root of the Jupyter Server" in started.stderr
    assert "nearest: naming/notebooks/Untitled.ipynb" in started.stderr
    assert not [path for path in session_paths(server) if path.endswith("Untitled.ipynb")]  # nor a session started
    outside = tmp_path / "elsewhere.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), outside)
    seen: dict = {}

    async def read(client, notebook: str | None = None):
        return await client.call_tool("notebook_read", {"notebook_path": notebook} if notebook else {})

    async def body():
        async with serving(inside, server, "--notebook", "naming/notebooks/Untitled.ipynb") as client:
            seen["listed"] = {t.name: t for t in (await client.list_tools()).tools}
            seen["default"] = await read(client)  # --notebook: calls without a path are about it
            seen["missing"] = await read(client, "Untitled.ipynb")
            seen["uri"] = await read(client, (root / "naming" / "locked.ipynb").as_uri())
            seen["absolute"] = await read(client, str(root / "naming" / "locked.ipynb"))
            seen["uri edit"] = await client.call_tool("notebook_edit", {
                "notebook_path": (root / "naming" / "locked.ipynb").as_uri(), "edit_mode": "insert",
                "cell_type": "code", "new_source": "leaked = 1"})
            seen["outside"] = await read(client, outside.as_uri())
            seen["file write"] = await client.call_tool("write_file", {"path": "Untitled.ipynb", "content": "{}"})
            seen["new"] = await client.call_tool("notebook_edit", {  # an insert still makes a notebook
                "notebook_path": "naming/new.ipynb", "edit_mode": "insert", "cell_type": "code",
                "new_source": "made = 1"})

    run(body)
    listed = seen["listed"]["notebook_read"].input_schema
    assert "notebook_path" not in listed["required"]
    assert "Leave it out for naming/notebooks/Untitled.ipynb" in listed["properties"]["notebook_path"]["description"]
    assert not seen["default"].is_error and "# untitled" in text(seen["default"]), text(seen["default"])
    missing = text(seen["missing"])
    assert seen["missing"].is_error and "no notebook Untitled.ipynb under the root" in missing
    assert "nearest: naming/notebooks/Untitled.ipynb" in missing
    for how in ("uri", "absolute"):  # a Jupyter AI attachment's URI, a local path: through the server
        assert not seen[how].is_error and "naming/locked.ipynb" in text(seen[how]), text(seen[how])
        assert "# locked" in text(seen[how])
    assert seen["uri edit"].is_error and "denied" in text(seen["uri edit"])  # the rule saw the server's path
    assert "leaked" not in (work / "locked.ipynb").read_text()
    assert seen["outside"].is_error and "outside the root of the Jupyter Server" in text(seen["outside"])
    # Its file, under the server's root, changes only through the server, though no call paired it yet.
    assert seen["file write"].is_error and "served by the Jupyter Server" in text(seen["file write"])
    assert "# untitled" in (inside / "Untitled.ipynb").read_text()
    assert not seen["new"].is_error, text(seen["new"])
    assert [c.source for c in nbformat.read(work / "new.ipynb", as_version=4).cells] == ["made = 1"]


@contextmanager
def serving_http(work: Path, server, *options: str):
    port, token = free_port(), "serve-token-47"
    proc = subprocess.Popen([*serve_args(server, *options), "--http", f"127.0.0.1:{port}", "--token", token],
                            cwd=work, env=serve_env(server), stderr=subprocess.PIPE, text=True)
    wait_for_port(proc, port)
    try:
        yield f"http://127.0.0.1:{port}/mcp", token
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.mark.slow
def test_two_http_sessions_of_one_serve_never_reach_each_others_kernels(jupyter_server):
    server = jupyter_server
    work = folder(server, "two", policy_section(allow=ALLOW), "[serve]\nstart_kernels = true\n",
                  notebooks={"c.ipynb": "# c", "shared.ipynb": "# shared"})
    seen: dict = {}

    async def body(url: str, token: str):
        async with over_http(url, token) as second:
            async with over_http(url, token) as first:
                seen["first"] = await run_code(first, "two/c.ipynb", "who = 'first'")
                seen["second while first"] = await run_code(second, "two/c.ipynb", "print(who)")
                seen["first default"] = await first.call_tool("notebook_run", {"code": "mark = 'both see it'"})
            # The first session ended (the client's DELETE): the kernel it started ends with it, and
            # --notebook's pairing, which every session shares, stays.
            await anyio.to_thread.run_sync(sessions_become, server, "two/", ["two/shared.ipynb"])
            seen["second after"] = await run_code(second, "two/c.ipynb", "print('who' in dir())")
            seen["second default"] = await second.call_tool("notebook_run", {"code": "print(mark)"})

    with serving_http(work, server, "--notebook", "two/shared.ipynb") as (url, token):
        run(body, url, token)
    assert not seen["first"].is_error and "started a new" in text(seen["first"]), text(seen["first"])
    refused = text(seen["second while first"])
    assert seen["second while first"].is_error and "started by another MCP session of this serve" in refused
    assert "first" not in refused.replace("'first'", "")  # nothing of the first session's kernel came back
    after = text(seen["second after"])
    assert not seen["second after"].is_error and after.startswith("False") and "started a new" in after, after
    assert not seen["first default"].is_error, text(seen["first default"])
    assert text(seen["second default"]).startswith("both see it"), text(seen["second default"])
    sessions_become(server, "two/", [])  # serve ended (SIGTERM): the second's kernel and --notebook's too
