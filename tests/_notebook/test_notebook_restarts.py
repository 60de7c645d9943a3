"""Pairings survive restarts: a Kernel Gateway or a Jupyter Server killed and started again on the same
port, under a pairing. While it is down a run fails at once with the server's own reason; once it is
back, the next run starts a new kernel and says so; `restart=true` works through a gateway.

Each test starts its own server (and gateway): it kills them. Killed with SIGKILL, neither shuts its
kernels down; the kernels' pids, asked of them, are killed at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid

import httpx
import nbformat
import pytest
from conftest import NO_COLLABORATION, SERVER_TOKEN, start_server, stop_server
from jupyter_server_helpers import GATEWAY_TOKEN, gateway_server_args, start_gateway
from nbformat.v4 import new_code_cell, new_notebook

from toolkernel._errors import Unavailable
from toolkernel._loop import run
from toolkernel._providers._notebook import notebook_tools, pair, unpair
from toolkernel._tool import ToolContext

pytestmark = pytest.mark.slow
read, edit, run_tool = notebook_tools()
# Far longer than a run that fails at once takes, however loaded the machine: a run that waited for
# its kernel (as one did while the gateway was down) would take all of it, then time out.
RUN_TIMEOUT = 240


class Kernels:
    """The pids of the kernels a test ran code in, to kill the ones their killed server left behind."""

    def __init__(self) -> None:
        self.pids: list[int] = []

    def note(self, ctx: ToolContext, notebook: str) -> None:
        self.pids.append(int(run_code(ctx, notebook, "import os\nos.getpid()").texts[0]))

    def kill(self) -> None:
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_code(ctx: ToolContext, notebook: str, code: str, **arguments):
    return run(run_tool.call({"notebook_path": notebook, "code": code, **arguments}, ctx), timeout=RUN_TIMEOUT + 60)


def kill(process: subprocess.Popen) -> None:
    process.kill()
    process.wait()


def failure(attempt) -> str:
    """The message of the Unavailable `attempt()` raises."""
    with pytest.raises(Unavailable) as caught:
        attempt()
    message = caught.value.message
    assert "%tools" not in message, message  # no magic: an MCP client cannot run one
    return message


@pytest.fixture
def ctx(tmp_path):
    context = ToolContext(tmp_path, state={})
    yield context
    run(unpair(context.state), timeout=120)


@pytest.fixture
def kernels():
    found = Kernels()
    yield found
    found.kill()


def pair_notebook(server, ctx, notebook: str):
    nbformat.write(new_notebook(cells=[new_code_cell("x = 20")]), server["root"] / notebook)
    return run(pair(ctx.state, ctx.workdir, notebook, server=server["url"], token=SERVER_TOKEN, kernel="python3"),
               timeout=300)


def gateway_kernels(gateway_url: str) -> list[str]:
    listed = httpx.get(gateway_url + "/api/kernels", headers={"Authorization": f"token {GATEWAY_TOKEN}"}, timeout=60)
    return [kernel["id"] for kernel in listed.json()]


def test_a_gateway_that_went_away_fails_at_once_and_a_new_kernel_runs_once_it_is_back(
        tmp_path_factory, ctx, kernels, tmp_path):
    gateway, gateway_url = start_gateway(tmp_path_factory)
    port = int(gateway_url.rsplit(":", 1)[1])
    process, server = start_server(tmp_path_factory, *gateway_server_args(gateway_url))
    try:
        pairing = pair_notebook(server, ctx, "remote.ipynb")
        kernels.note(ctx, "remote.ipynb")
        run_code(ctx, "remote.ipynb", "x = 5")

        # The gateway dies while code runs: the run ends with the server's reason, not at its timeout.
        started = tmp_path / "started"
        outcome: dict[str, object] = {}

        def long_run():
            try:
                outcome["result"] = run_code(ctx, "remote.ipynb", f"open({str(started)!r}, 'w').close()\n"
                                             "import time\ntime.sleep(600)", timeout_seconds=RUN_TIMEOUT)
            except Unavailable as exc:
                outcome["error"] = exc.message

        runner = threading.Thread(target=long_run)
        runner.start()
        deadline = time.monotonic() + 120
        while not started.exists():
            assert time.monotonic() < deadline and runner.is_alive(), outcome
            time.sleep(0.1)
        kill(gateway)
        runner.join(RUN_TIMEOUT + 120)
        message = str(outcome.get("error"))
        assert "lost touch with the python3 kernel while the code ran" in message, outcome
        assert "Gateway" in message, message  # the server's own reason, not just a status

        # While it is down, a run and a restart fail at once, with the server's reason.
        message = failure(lambda: run_code(ctx, "remote.ipynb", "x", timeout_seconds=RUN_TIMEOUT))
        assert "Gateway" in message and "HTTP 503" in message, message
        assert "Gateway" in failure(lambda: run_code(ctx, "remote.ipynb", "x", restart=True))

        # Back on the same port, it has lost the kernel: the next run starts a new one and says so.
        gateway, _ = start_gateway(tmp_path_factory, port=port)
        old = pairing.connection.kernel_id
        result = run_code(ctx, "remote.ipynb", "'x' in dir()", timeout_seconds=RUN_TIMEOUT)
        assert not result.is_error and result.texts[0].startswith("False\n"), result.texts
        assert f"kernel {old} was gone from the Jupyter Server" in result.texts[0]
        assert "a new kernel was started, without the old one's variables" in result.texts[0]
        assert pairing.connection.kernel_id != old and pairing.connection.kernel_id in gateway_kernels(gateway_url)
        kernels.note(ctx, "remote.ipynb")
        assert run_code(ctx, "remote.ipynb", "x = 7\nx").texts == ["7"]  # and it stays
        assert "was gone" not in run_code(ctx, "remote.ipynb", "x").texts[0]

        # restart=true through the gateway: of a live kernel, then of one a restarted gateway lost.
        assert run_code(ctx, "remote.ipynb", "'x' in dir()", restart=True).texts == ["False"]
        kill(gateway)
        gateway, _ = start_gateway(tmp_path_factory, port=port)
        old = pairing.connection.kernel_id
        result = run(run_tool.call({"notebook_path": "remote.ipynb", "restart": True}, ctx), timeout=RUN_TIMEOUT)
        assert not result.is_error and f"kernel {old} was gone" in result.texts[0], result.texts
        kernels.note(ctx, "remote.ipynb")
        assert run_code(ctx, "remote.ipynb", "y = 9").texts == [""]
        assert pairing.connection.kernel_id in gateway_kernels(gateway_url)

        # The Jupyter Server restarts; the gateway keeps the kernel: the next run reaches it again.
        kill(process)
        process, server = start_server(tmp_path_factory, *gateway_server_args(gateway_url), root=server["root"],
                                       port=server["port"])
        kept = pairing.connection.kernel_id
        result = run_code(ctx, "remote.ipynb", "y", timeout_seconds=RUN_TIMEOUT)
        assert result.texts[0].startswith("9\n") and pairing.connection.kernel_id == kept, result.texts
        assert "the server reached it again (on its gateway), with its variables" in result.texts[0]
        assert run_code(ctx, "remote.ipynb", "y + 1").texts == ["10"]

        # Both restart: the server cannot take the kernel up again, and a new one runs.
        kill(process)
        kill(gateway)
        gateway, _ = start_gateway(tmp_path_factory, port=port)
        process, server = start_server(tmp_path_factory, *gateway_server_args(gateway_url), root=server["root"],
                                       port=server["port"])
        result = run_code(ctx, "remote.ipynb", "'y' in dir()", timeout_seconds=RUN_TIMEOUT)
        assert result.texts[0].startswith("False\n") and f"kernel {kept} was gone" in result.texts[0], result.texts
        assert "a new kernel was started" in result.texts[0] and pairing.connection.kernel_id != kept
        kernels.note(ctx, "remote.ipynb")
    finally:
        run(unpair(ctx.state), timeout=120)
        stop_server(process)
        stop_server(gateway)


def test_a_jupyter_server_restarted_under_a_pairing_runs_the_next_call_in_a_new_kernel(
        tmp_path_factory, ctx, kernels):
    process, server = start_server(tmp_path_factory, f"--ServerApp.jpserver_extensions={NO_COLLABORATION}")
    try:
        pairing = pair_notebook(server, ctx, "nb.ipynb")
        kernels.note(ctx, "nb.ipynb")
        run_code(ctx, "nb.ipynb", "x = 5")
        kill(process)
        message = failure(lambda: run_code(ctx, "nb.ipynb", "x", timeout_seconds=RUN_TIMEOUT))
        assert f"the Jupyter Server at {server['url']} did not answer" in message, message

        process, server = start_server(tmp_path_factory, f"--ServerApp.jpserver_extensions={NO_COLLABORATION}",
                                       root=server["root"], port=server["port"])
        old = pairing.connection.kernel_id
        result = run_code(ctx, "nb.ipynb", "print('here')\n'x' in dir()", timeout_seconds=RUN_TIMEOUT)
        assert result.texts[0].startswith("here\nFalse\n"), result.texts
        assert f"kernel {old} was gone from the Jupyter Server at {server['url']}" in result.texts[0]
        # It was asked for by its id; a server with kernels of its own starts a new one under that id.
        assert "the server started a new kernel under its id, without the old one's variables" in result.texts[0]
        kernels.note(ctx, "nb.ipynb")
        # The new kernel is the notebook's session's on the restarted server, and this pairing's to end.
        sessions = httpx.get(server["url"] + "api/sessions", headers={"Authorization": f"token {SERVER_TOKEN}"},
                             timeout=60).json()
        assert [s["kernel"]["id"] for s in sessions if s["path"] == "nb.ipynb"] == [pairing.connection.kernel_id]
        assert run_code(ctx, "nb.ipynb", "x = 8\nx").texts == ["8"]
        run(unpair(ctx.state), timeout=120)
        sessions = httpx.get(server["url"] + "api/sessions", headers={"Authorization": f"token {SERVER_TOKEN}"},
                             timeout=60).json()
        assert [s for s in sessions if s["path"] == "nb.ipynb"] == []
    finally:
        stop_server(process)


def test_a_kernel_someone_shut_down_is_replaced_by_the_next_run_and_an_error_gives_the_servers_reason(
        tmp_path_factory, ctx, kernels):
    process, server = start_server(tmp_path_factory, f"--ServerApp.jpserver_extensions={NO_COLLABORATION}")
    headers = {"Authorization": f"token {SERVER_TOKEN}"}
    try:
        pairing = pair_notebook(server, ctx, "nb.ipynb")
        old = pairing.connection.kernel_id
        api = pairing.connection.api
        missing = str(uuid.uuid4())
        with pytest.raises(Unavailable) as caught:  # the server's own words, then the status
            run(api.request("POST", "api/kernels", missing, "interrupt"), timeout=60)
        assert f"Kernel does not exist: {missing} (HTTP 404 to POST" in caught.value.message
        run_code(ctx, "nb.ipynb", "x = 1")
        httpx.delete(server["url"] + f"api/kernels/{old}", headers=headers, timeout=60).raise_for_status()
        result = run_code(ctx, "nb.ipynb", "'x' in dir()")
        assert result.texts[0].startswith("False\n") and f"kernel {old} was gone" in result.texts[0], result.texts
        assert "without the old one's variables" in result.texts[0]
        assert "was gone" not in run_code(ctx, "nb.ipynb", "1 + 1").texts[0]
        kernels.note(ctx, "nb.ipynb")
    finally:
        run(unpair(ctx.state), timeout=120)
        stop_server(process)


def test_advice_to_pair_again_is_the_front_ends_own():
    """`serve`'s reader is an agent: told to pair again, it is told how the person who runs serve does it."""
    from jupyter_client import AsyncKernelClient

    from toolkernel._frontends._answers import PAIR_AGAIN as MAGIC_PAIR_AGAIN
    from toolkernel._frontends._serve import PAIR_AGAIN as SERVE_PAIR_AGAIN
    from toolkernel._providers._notebook._server import ServerApi
    from toolkernel._providers._notebook._zmq import ZmqConnection

    refused = httpx.Response(403, json={"message": "Forbidden"})
    for again in (SERVE_PAIR_AGAIN, MAGIC_PAIR_AGAIN):
        existing = ZmqConnection(AsyncKernelClient(), label="kernel-1.json", connection_file="kernel-1.json")
        existing.pair_again = again
        token = ServerApi("http://127.0.0.1:9/", "t", again).failure("GET x", refused).message
        for message in (existing.dead_message(), token):
            assert again in message and ("%tools" in message) == (again == MAGIC_PAIR_AGAIN), message
    assert "--server-token" in SERVE_PAIR_AGAIN


# --- through `toolkernel serve`: an MCP client is told what it can do -----------------------------

def serve_text(result) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


def test_serve_runs_on_after_its_jupyter_server_restarts_and_never_advises_a_magic(tmp_path, tmp_path_factory,
                                                                                 kernels):
    import anyio
    from test_serve import project, run as run_serve
    from test_serve_notebook import POLICY, new_notebook, run_code as serve_run, serving

    work = project(tmp_path, POLICY)
    new_notebook(work / "nb.ipynb")
    args = (f"--ServerApp.jpserver_extensions={NO_COLLABORATION}",)
    process, server = start_server(tmp_path_factory, *args, root=work)
    got: dict[str, str] = {}

    async def body():
        nonlocal process, server
        options = ("--notebook", "nb.ipynb", "--server", server["url"], "--server-token", SERVER_TOKEN)
        async with serving(work, *options) as client:
            got["pid"] = serve_text(await serve_run(client, "nb.ipynb", "import os\nshared = 1\nos.getpid()"))
            await anyio.to_thread.run_sync(kill, process)
            down = await serve_run(client, "nb.ipynb", "shared")
            got["down"] = serve_text(down) if down.is_error else "not an error: " + serve_text(down)
            process, server = await anyio.to_thread.run_sync(
                lambda: start_server(tmp_path_factory, *args, root=work, port=server["port"]))
            back = await serve_run(client, "nb.ipynb", "'shared' in dir()")
            got["back"] = serve_text(back) if not back.is_error else "error: " + serve_text(back)
            got["pid2"] = serve_text(await serve_run(client, "nb.ipynb", "import os\nos.getpid()"))

    try:
        run_serve(body)
    finally:
        kernels.pids += [int(got[key]) for key in ("pid", "pid2") if got.get(key, "").strip().isdigit()]
        stop_server(process)
    assert f"the Jupyter Server at {server['url']} did not answer" in got["down"], got
    assert got["back"].startswith("False\n") and "was gone from the Jupyter Server" in got["back"], got
    assert "%tools" not in got["down"] + got["back"], got


def test_serve_advises_starting_serve_again_when_its_existing_kernel_is_gone(tmp_path):
    from jupyter_client import KernelManager
    from test_serve import project, run as run_serve
    from test_serve_notebook import POLICY, new_notebook, run_code as serve_run, serving

    work = project(tmp_path, POLICY)
    new_notebook(work / "nb.ipynb")
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel()
    got: dict[str, str] = {}

    async def body():
        async with serving(work, "--notebook", "nb.ipynb", "--existing", manager.connection_file) as client:
            assert serve_text(await serve_run(client, "nb.ipynb", "1 + 1")).strip() == "2"
            manager.shutdown_kernel(now=True)
            gone = await serve_run(client, "nb.ipynb", "1 + 1")
            got["gone"] = serve_text(gone) if gone.is_error else "not an error: " + serve_text(gone)
            other = await serve_run(client, "other.ipynb", "1 + 1")
            got["other"] = serve_text(other) if other.is_error else "not an error: " + serve_text(other)

    try:
        run_serve(body)
    finally:
        if manager.is_alive():
            manager.shutdown_kernel(now=True)
        manager.cleanup_resources()
    assert "ask whoever started `toolkernel serve` to start it again" in got["gone"], got
    assert "other.ipynb is not paired" in got["other"] and "reaches only the notebook its --notebook option names" \
        in got["other"], got
    assert "%tools" not in got["gone"] + got["other"], got


def test_serve_without_a_notebook_never_advises_a_magic(tmp_path):
    from test_serve import bash, project, run as run_serve
    from test_serve_notebook import POLICY, serving

    work = project(tmp_path, POLICY)

    async def body():
        async with serving(work) as client:
            return serve_text(await bash(client, "tools notebook-run notebook_path=nb.ipynb code=1"))

    said = run_serve(body)
    assert "not paired" in said and "%tools" not in said, said
