"""Pairing with a kernel someone else runs (--existing) and with a Jupyter Server (--server)."""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import time
from pathlib import Path

import nbformat
import pytest
from conftest import NO_COLLABORATION, PNG, SERVER_TOKEN, call, rich_notebook, server_api, start_server, stop_server
from jupyter_client import KernelManager

from toolkernel._errors import InvalidInput, Unavailable
from toolkernel._loop import run
from toolkernel._providers._notebook import notebook_tools, pair, pairing_args_usage, parse_pairing_args, unpair
from toolkernel._tool import Image

read, edit, run_tool = notebook_tools()


# --- argument parsing --------------------------------------------------------

def test_parse_pairing_args():
    assert parse_pairing_args("nb.ipynb --kernel python3") == {"notebook": "nb.ipynb", "kernel": "python3"}
    assert parse_pairing_args(["a b.ipynb", "--server=http://h:8888/", "--token", "t"]) == {
        "notebook": "a b.ipynb", "server": "http://h:8888/", "token": "t"}
    for bad in ("nb.ipynb --kernel", "--kernel python3", "a.ipynb b.ipynb --kernel x", "nb.ipynb --colour red"):
        with pytest.raises(InvalidInput):
            parse_pairing_args(bad)
    assert "--existing CONNECTION_FILE" in pairing_args_usage()


def test_pair_needs_exactly_one_kernel_source(tmp_path):
    for kwargs in ({}, {"kernel": "python3", "existing": "k.json"}, {"token": "t", "kernel": "python3"}):
        with pytest.raises(InvalidInput):
            run(pair({}, tmp_path, "nb.ipynb", **kwargs))
    with pytest.raises(InvalidInput):
        run(pair({}, tmp_path, "notes.txt", kernel="python3"))


def test_unknown_kernel_name(tmp_path):
    with pytest.raises(InvalidInput) as caught:
        run(pair({}, tmp_path, "nb.ipynb", kernel="no-such-kernel"), timeout=60)
    assert "kernelspec list" in caught.value.message


# --- --existing -------------------------------------------------------------

def test_existing_kernel_by_connection_file_shares_its_variables(outside_kernel, ctx):
    client = outside_kernel.blocking_client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    client.execute_interactive("from_jupyterlab = 'hi'", timeout=60)
    client.stop_channels()
    pairing = run(pair(ctx.state, ctx.workdir, "nb.ipynb", existing=outside_kernel.connection_file), timeout=120)
    assert pairing.kind == "existing"
    assert call(run_tool, ctx, notebook_path="nb.ipynb", code="from_jupyterlab * 2").texts == ["'hihi'"]


def test_existing_kernel_by_bare_name_in_the_runtime_dir(outside_kernel, ctx, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(Path(outside_kernel.connection_file).parent))
    run(pair(ctx.state, ctx.workdir, "nb.ipynb", existing=Path(outside_kernel.connection_file).name), timeout=120)
    assert call(run_tool, ctx, notebook_path="nb.ipynb", code="1+1").texts == ["2"]


def test_existing_missing_connection_file(ctx):
    with pytest.raises(InvalidInput) as caught:
        run(pair(ctx.state, ctx.workdir, "nb.ipynb", existing="kernel-does-not-exist.json"), timeout=60)
    assert "runtime directory" in caught.value.message


def test_existing_kernel_timeout_interrupts_through_the_kernel(outside_kernel, ctx):
    run(pair(ctx.state, ctx.workdir, "nb.ipynb", existing=outside_kernel.connection_file), timeout=120)
    result = call(run_tool, ctx, notebook_path="nb.ipynb",
                  code="import time\nprint('tick', flush=True)\ntime.sleep(60)", timeout_seconds=2)
    assert result.is_error and result.texts[0].startswith("timed out after 2 s; the kernel was interrupted")
    assert "KeyboardInterrupt" in result.texts[0]
    assert call(run_tool, ctx, notebook_path="nb.ipynb", code="'still here'").texts == ["'still here'"]
    assert outside_kernel.is_alive()


@pytest.mark.slow
def test_existing_kernel_that_died_is_unavailable_and_not_restarted_by_us(ctx):
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel()
    try:
        run(pair(ctx.state, ctx.workdir, "nb.ipynb", existing=manager.connection_file), timeout=120)
        assert call(run_tool, ctx, notebook_path="nb.ipynb", code="1").texts == ["1"]
        manager.signal_kernel(signal.SIGKILL)
        with pytest.raises(Unavailable) as caught:
            call(run_tool, ctx, notebook_path="nb.ipynb", code="1")
        assert "restart it where it runs" in caught.value.message
        with pytest.raises(InvalidInput):
            call(run_tool, ctx, notebook_path="nb.ipynb", restart=True)
    finally:
        manager.cleanup_resources()


# --- serve --server: a notebook named per call, from the server's root ---------------------

def server_root(tmp_path, monkeypatch, *, published: bool = True):
    """A `ServerRoot` for a server at `root`, published (or not) in the runtime folder as a running one."""
    from toolkernel._providers._notebook._pairing import ServerRoot

    root, runtime = tmp_path / "root", tmp_path / "runtime"
    root.mkdir()
    runtime.mkdir()
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    if published:
        (runtime / "jpserver-1.json").write_text(json.dumps(
            {"url": "http://127.0.0.1:8890/", "root_dir": str(root), "pid": os.getpid(), "token": ""}))
    return ServerRoot("http://127.0.0.1:8890/", None, lambda: False, "allow it"), root


def test_a_per_call_notebook_is_named_from_the_servers_root_and_uris_under_it_map_there(tmp_path, monkeypatch):
    server, root = server_root(tmp_path, monkeypatch)
    (root / "my notes").mkdir()
    (tmp_path / "link").symlink_to(root / "my notes")
    assert server.key("reports/a.ipynb") == "reports/a.ipynb"
    assert server.key("/reports/x/../a.ipynb") == "reports/a.ipynb"  # a path that is no local one: the server's
    assert server.key((root / "my notes" / "a b.ipynb").as_uri()) == "my notes/a b.ipynb"  # %20 and all
    assert server.key("file://localhost" + str(root / "a.ipynb")) == "a.ipynb"
    assert server.key(str(tmp_path / "link" / "a.ipynb")) == "my notes/a.ipynb"  # through a symlink
    for bad, said in [((tmp_path / "a.ipynb").as_uri(), "is outside the root of the Jupyter Server"),
                      ("../a.ipynb", "leads out of the server's root"), ("notes.txt", "is not a notebook"),
                      ("file://elsewhere/a.ipynb", "not a file:// URI of this machine")]:
        with pytest.raises(InvalidInput, match=said):
            server.key(bad)


def test_a_file_uri_needs_the_server_to_run_here(tmp_path, monkeypatch):
    server, root = server_root(tmp_path, monkeypatch, published=False)
    with pytest.raises(InvalidInput, match="does not run on this machine"):
        server.key((root / "a.ipynb").as_uri())


def test_the_nearest_notebooks_share_the_name_first_then_read_close():
    from toolkernel._providers._notebook._nearest import rank

    found = {"notebooks/Untitled.ipynb", "Untitled1.ipynb", "reports/q3.ipynb", "deep/er/untitled.ipynb"}
    assert rank("Untitled.ipynb", found) == ["notebooks/Untitled.ipynb", "deep/er/untitled.ipynb",
                                             "Untitled1.ipynb"]
    assert rank("zzz.ipynb", found) == []


# --- --server -------------------------------------------------------------------

@pytest.fixture
def server_ctx(jupyter_server, ctx):
    ctx.workdir = jupyter_server["root"]  # the server's root is the working directory
    return ctx


def test_server_uses_the_kernel_of_the_notebooks_session(jupyter_server, server_ctx):
    nbformat.write(rich_notebook(), jupyter_server["root"] / "shared.ipynb")
    session = server_api(jupyter_server, "POST", "api/sessions", json={
        "path": "shared.ipynb", "type": "notebook", "name": "shared.ipynb", "kernel": {"name": "python3"}})
    try:
        pairing = run(pair(server_ctx.state, server_ctx.workdir, "shared.ipynb", server=jupyter_server["url"],
                           token=SERVER_TOKEN), timeout=120)
        assert pairing.kind == "server" and pairing.connection.kernel_id == session["kernel"]["id"]
        assert call(run_tool, server_ctx, notebook_path="shared.ipynb",
                    code="print('via server')\nanswer = 6 * 7\nanswer").texts == [
            "via server\n42"]
        run(unpair(server_ctx.state), timeout=60)
        # not ours: the session and its kernel stay, with their variables
        sessions = server_api(jupyter_server, "GET", "api/sessions")
        assert session["id"] in [s["id"] for s in sessions]
        run(pair(server_ctx.state, server_ctx.workdir, "shared.ipynb", server=jupyter_server["url"],
                 token=SERVER_TOKEN), timeout=120)
        assert call(run_tool, server_ctx, notebook_path="shared.ipynb", code="answer").texts == ["42"]
    finally:
        run(unpair(server_ctx.state), timeout=60)
        server_api(jupyter_server, "DELETE", f"api/sessions/{session['id']}")


def test_server_starts_a_session_when_the_notebook_has_none_and_ends_it_on_unpair(jupyter_server, server_ctx):
    url_with_token = f"{jupyter_server['url']}?token={SERVER_TOKEN}"  # as `jupyter server list` prints it
    pairing = run(pair(server_ctx.state, server_ctx.workdir, "sub/fresh.ipynb", server=url_with_token,
                       kernel="python3"), timeout=120)
    sessions = {s["id"]: s for s in server_api(jupyter_server, "GET", "api/sessions")}
    session_id = pairing.connection.session["id"]
    assert sessions[session_id]["path"] == "sub/fresh.ipynb"
    code = ("import base64\nfrom IPython.display import Image, display\n"
            f"display(Image(data=base64.b64decode('{base64.b64encode(PNG).decode()}')))\n1/0")
    result = call(run_tool, server_ctx, notebook_path="sub/fresh.ipynb", code=code)
    assert result.is_error and result.images == [Image(PNG, "image/png")]
    assert result.texts[0].startswith("[image 1: image/png, output 1]\n")
    assert result.texts[0].endswith("ZeroDivisionError: division by zero")
    run(unpair(server_ctx.state), timeout=60)
    assert session_id not in [s["id"] for s in server_api(jupyter_server, "GET", "api/sessions")]


def test_server_timeout_interrupts_and_restart_clears_state(jupyter_server, server_ctx):
    run(pair(server_ctx.state, server_ctx.workdir, "slow.ipynb", server=jupyter_server["url"], token=SERVER_TOKEN),
        timeout=120)
    call(run_tool, server_ctx, notebook_path="slow.ipynb", code="kept = 1")
    result = call(run_tool, server_ctx, notebook_path="slow.ipynb",
                  code="import time\nprint('zzz', flush=True)\ntime.sleep(60)",
                  timeout_seconds=2)
    assert result.is_error and result.texts[0].startswith("timed out after 2 s; the kernel was interrupted")
    assert "zzz" in result.texts[0] and "KeyboardInterrupt" in result.texts[0]
    assert call(run_tool, server_ctx, notebook_path="slow.ipynb", code="kept").texts == ["1"]
    assert call(run_tool, server_ctx, notebook_path="slow.ipynb",
                restart=True, code="'kept' in dir()").texts == ["False"]


def test_server_run_cell_writes_into_the_notebook_through_the_server(jupyter_server, server_ctx):
    path = jupyter_server["root"] / "cells.ipynb"
    nbformat.write(rich_notebook(), path)
    run(pair(server_ctx.state, server_ctx.workdir, "cells.ipynb", server=jupyter_server["url"], token=SERVER_TOKEN),
        timeout=120)
    call(read, server_ctx, notebook_path="cells.ipynb")
    cell_id = nbformat.read(path, as_version=4).cells[1].id
    assert not call(run_tool, server_ctx, notebook_path="cells.ipynb", cell_id=cell_id).is_error
    cell = nbformat.read(path, as_version=4).cells[1]
    assert [o.output_type for o in cell.outputs] == ["stream", "execute_result"] and cell.execution_count == 1


def test_server_wrong_token_is_refused_without_showing_it(jupyter_server, server_ctx):
    with pytest.raises(InvalidInput) as caught:
        run(pair(server_ctx.state, server_ctx.workdir, "x.ipynb", server=jupyter_server["url"],
                 token="wrong-token-value"), timeout=60)
    assert "refused the token" in caught.value.message
    assert "wrong-token-value" not in caught.value.message and SERVER_TOKEN not in caught.value.message


def test_serve_with_a_wrong_server_token_names_its_own_option(jupyter_server, tmp_path):
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-m", "toolkernel", "serve", "--workdir", str(tmp_path),
                           "--notebook", "x.ipynb", "--server", jupyter_server["url"],
                           "--server-token", "wrong-token-value"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2 and "refused the token" in done.stderr
    assert "--server-token" in done.stderr  # not "--token", serve's own bearer token
    assert "%tools" not in done.stderr  # no magic: serve's reader cannot run one
    assert "wrong-token-value" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_server_not_listening_is_unavailable(server_ctx):
    with pytest.raises(Unavailable) as caught:
        run(pair(server_ctx.state, server_ctx.workdir, "x.ipynb", server="http://127.0.0.1:9/?token=abc"),
            timeout=60)
    assert "abc" not in caught.value.message


def until_available(attempt, seconds: float = 120):
    """`attempt()` again while it says the kernel is not there (a restart takes seconds, more on a busy machine)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return attempt()
        except Unavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def kill_mid_run(ctx, notebook: str) -> None:
    with pytest.raises(Unavailable) as caught:
        call(run_tool, ctx, notebook_path=notebook, code="import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    # The kernel dies as it runs the code: whether it said `busy` before it went is a race.
    message = caught.value.message
    assert "died while the code ran" in message or "died with the code sent to it" in message, message
    assert any(fate in message for fate in ("output(s) before that", "the old kernel may have begun it",
                                            "may not have run")), message


def test_server_kernel_dying_mid_run_is_unavailable_then_the_servers_restart_serves(jupyter_server, server_ctx):
    run(pair(server_ctx.state, server_ctx.workdir, "crash.ipynb", server=jupyter_server["url"], token=SERVER_TOKEN,
             kernel="python3"), timeout=120)
    kill_mid_run(server_ctx, "crash.ipynb")
    # Jupyter Server restarts a dead kernel by itself; the pairing keeps working, with a fresh kernel.
    result = until_available(lambda: call(run_tool, server_ctx, notebook_path="crash.ipynb", code="1+1"))
    assert result.texts == ["2"]


def wait_until_gone(pid: int) -> None:
    """Until the killed kernel is a zombie (its sockets closed: a request sent then cannot reach it), and the
    server's sockets have seen them close."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break  # reaped already
        if state in ("Z", "X"):
            break
        time.sleep(0.05)
    time.sleep(0.3)


@pytest.fixture(scope="module")
def slow_start_server(tmp_path_factory):
    """A server with a `slowstart` kernel: ipykernel, 3 s after its process starts (longer than a run
    takes to look at a silent kernel), as a kernel with heavy start-up files would. The server looks
    for dead kernels every 20 s (not 3), so a test has time to act between a death and its notice."""
    share = tmp_path_factory.mktemp("share")
    spec = share / "kernels" / "slowstart"
    spec.mkdir(parents=True)
    boot = "import time; time.sleep(3); from ipykernel.kernelapp import launch_new_instance; launch_new_instance()"
    spec.joinpath("kernel.json").write_text(json.dumps(
        {"argv": [sys.executable, "-c", boot, "-f", "{connection_file}"], "display_name": "slow start",
         "language": "python"}))
    process, server = start_server(tmp_path_factory, f"--ServerApp.jpserver_extensions={NO_COLLABORATION}",
                                   "--KernelRestarter.time_to_dead=20", env={"JUPYTER_PATH": str(share)})
    yield server
    stop_server(process)


def test_server_code_sent_to_a_kernel_that_just_died_runs_once_in_the_new_kernel(slow_start_server, ctx):
    ctx.workdir = slow_start_server["root"]
    run(pair(ctx.state, ctx.workdir, "queued.ipynb", server=slow_start_server["url"], token=SERVER_TOKEN,
             kernel="slowstart"), timeout=120)
    pid = int(call(run_tool, ctx, notebook_path="queued.ipynb", code="import os\nos.getpid()").texts[0])
    marker = slow_start_server["root"] / "queued-ran.txt"
    os.kill(pid, signal.SIGKILL)
    wait_until_gone(pid)
    # Sent before the server looks again: the request waits in the server's queue and the new kernel takes it.
    # Saying the kernel died under it invited a retry, and the code ran twice.
    result = until_available(lambda: call(run_tool, ctx, notebook_path="queued.ipynb",
                                          code=f"open({str(marker)!r}, 'a').write('x')\n'ran'"))
    text = result.texts[0]
    assert not result.is_error and "timed out" not in text
    # The new kernel may run it before the server listens to its output channel again: then
    # only the reply comes (it waited for an idle that never came, until its 120 s timeout).
    assert text.splitlines()[0] == "'ran'" or "outputs never came back" in text
    assert marker.read_text() == "x"


# --- a server that restarts kernels on new ports (remote kernels, or KernelManager.cache_ports off) ----------

@pytest.fixture(scope="module")
def new_ports_server(tmp_path_factory):
    """Every auto-restart counts as one in the kernel's first hour, which picks new ports: the server leaves an
    open websocket on the old ones (jupyter_server connects new ports for new websockets only)."""
    process, server = start_server(tmp_path_factory, f"--ServerApp.jpserver_extensions={NO_COLLABORATION}",
                                   "--KernelManager.cache_ports=False", "--KernelRestarter.stable_start_time=3600")
    yield server
    stop_server(process)


@pytest.fixture
def new_ports_ctx(new_ports_server, ctx):
    ctx.workdir = new_ports_server["root"]
    run(pair(ctx.state, ctx.workdir, "ports.ipynb", server=new_ports_server["url"], token=SERVER_TOKEN,
             kernel="python3"), timeout=120)
    return ctx


def test_server_run_after_a_restart_on_new_ports_reaches_the_new_kernel(new_ports_ctx):
    kill_mid_run(new_ports_ctx, "ports.ipynb")
    # On the old websocket this run waited out its whole timeout, and came back "timed out ... still busy".
    result = until_available(lambda: call(run_tool, new_ports_ctx, notebook_path="ports.ipynb", code="1+1",
                                          timeout_seconds=90))
    assert result.texts == ["2"]


def test_server_code_stuck_on_the_old_ports_is_unavailable_and_never_runs(new_ports_server, new_ports_ctx):
    pid = int(call(run_tool, new_ports_ctx, notebook_path="ports.ipynb", code="import os\nos.getpid()").texts[0])
    marker = new_ports_server["root"] / "stuck-ran.txt"
    os.kill(pid, signal.SIGKILL)
    try:
        call(run_tool, new_ports_ctx, notebook_path="ports.ipynb", code=f"open({str(marker)!r}, 'a').write('x')")
    except Unavailable as exc:  # the request went out on the old websocket, before the server saw the death
        assert "died with the code sent to it, and the server restarted it" in exc.message
        assert "did not run there" in exc.message or "may not have run" in exc.message
        assert until_available(lambda: call(run_tool, new_ports_ctx, notebook_path="ports.ipynb",
                                            code="1+1")).texts == ["2"]
        assert not marker.exists()  # nor later, from some queue
    else:  # the server saw it first (its look every 3 s fell in between): the run went to the new kernel
        assert marker.read_text() == "x"
