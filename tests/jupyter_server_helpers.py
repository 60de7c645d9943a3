"""A real Jupyter Server on loopback, for the notebook tools' tests and for `toolkernel serve --server`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

SERVER_TOKEN = "s3cret-test-token-5f1e"
SERVER_START_SECONDS = 300  # JupyterLab with its extensions starts slowly on a shared, busy machine
PORT_ATTEMPTS = 3


def free_port() -> int:
    """A loopback port free now, for a server this test starts, which binds it a moment later.

    Not one the system hands out (`bind(("", 0))`): in that moment every outgoing connection and
    every kernel's ports come from the same ephemeral range, and a CI run lost a test to a port
    taken so (its HTTP request reached another program, which hung up: RemoteProtocolError). So the
    port is below that range, in a slice of its own for each xdist worker, taken in turn: no other
    program is handed it, and no other test of the run picks it meanwhile."""
    low, high = _PORTS
    for _ in range(high - low):
        with _CURSOR_LOCK:  # fixtures may start servers from threads
            port = next(_CURSOR)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # a server of this run, or a program of the machine's, has it
            return port
    raise RuntimeError(f"no free loopback port in {low}-{high}")


def _worker_ports(span: int = 1500) -> tuple[int, int]:
    """This process's slice of the ports below the ephemeral range (`gw3` the fourth)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            ephemeral = int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    slots = max(1, (ephemeral - 10_000) // span)
    low = 10_000 + (int(worker) if worker.isdigit() else 0) % slots * span
    return low, low + span


def _cycle(low: int, high: int):
    start = low + os.getpid() % (high - low)  # a rerun in the same worker slot starts elsewhere
    while True:
        yield from range(start, high)
        yield from range(low, start)


_PORTS = _worker_ports()
_CURSOR = _cycle(*_PORTS)
_CURSOR_LOCK = threading.Lock()


# The server extensions Jupyter AI 3.x brings (`jupyter server extension list` beside jupyter-ai 3.2).
# Only tests/lab/test_jupyter_ai.py uses them: every other test server leaves them off. Loaded, they
# took 1.5-2 s of CPU at each server's start (jupyter_server_mcp's import alone about 0.8 s), and
# jupyter_server_mcp binds port 3001 in each. A name that is not installed (the other ends' venvs in
# .ci/run have no Jupyter AI) is harmless: Jupyter Server imports only the extensions it enables.
JUPYTER_AI_EXTENSIONS = ("jupyter_ai_acp_client", "jupyter_ai_chat_commands", "jupyter_ai_persona_manager",
                         "jupyter_ai_router", "jupyter_ai_tools", "jupyter_live_content", "jupyter_server_mcp",
                         "jupyterlab_chat", "jupyterlab_commands_toolkit")
# ... and their parts in JupyterLab's page: left on without their server side, they asked it for
# what it no longer had (404s, a websocket tried again and again, errors in the browser's console).
JUPYTER_AI_LAB_EXTENSIONS = ("@jupyter-ai/acp-client", "@jupyter-ai/chat-commands", "@jupyter-ai/persona-manager",
                             "@jupyter-ai/router", "@jupyter-ai-contrib/live-content", "jupyterlab-ai-commands",
                             "jupyterlab-cell-input-footer-extension", "jupyterlab-chat-extension",
                             "jupyterlab-commands-toolkit", "jupyterlab-diff")
COLLABORATION_EXTENSIONS = ("jupyter_server_ydoc", "jupyter_collaboration", "jupyterlab")
# What a plain server has no use for: JupyterLab's language servers, terminals, nbdime's diff
# pages, the classic notebook's shim and the file ids of collaboration (0.45 s of CPU a start).
PAGE_EXTENSIONS = ("jupyter_lsp", "jupyter_server_terminals", "nbdime", "notebook_shim", "jupyter_server_fileid")


def extensions_off(*names: str) -> str:
    """A `--ServerApp.jpserver_extensions=` value that turns these extensions off."""
    return "{" + ", ".join(f'"{name}": False' for name in names) + "}"


# A plain Jupyter Server (the Contents API path): neither collaboration nor Jupyter AI, even when installed.
NO_COLLABORATION = extensions_off(*COLLABORATION_EXTENSIONS, *JUPYTER_AI_EXTENSIONS, *PAGE_EXTENSIONS)
# A server with collaboration (or JupyterLab) that does not test Jupyter AI: start_server's default.
NO_JUPYTER_AI = extensions_off(*JUPYTER_AI_EXTENSIONS)


def lab_page_without_jupyter_ai(folder: Path, env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment variable that makes a JupyterLab's page leave Jupyter AI's parts off: a
    config folder (under `folder`) with their names in `labconfig/page_config.json`, first in
    JUPYTER_CONFIG_PATH."""
    config = folder / "no-jupyter-ai-config"
    (config / "labconfig").mkdir(parents=True, exist_ok=True)
    (config / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": dict.fromkeys(JUPYTER_AI_LAB_EXTENSIONS, True)}))
    return {"JUPYTER_CONFIG_PATH": os.pathsep.join(filter(None, [str(config), env.get("JUPYTER_CONFIG_PATH")]))}


def start_server(tmp_path_factory, *args: str, app: str = "jupyter_server", env: dict[str, str] | None = None,
                 root: Path | None = None, port: int | None = None) -> tuple[subprocess.Popen, dict]:
    """A Jupyter Server (or JupyterLab) on loopback serving a fresh root folder (or `root`, on `port`:
    the same server started again).

    A free port is picked here and taken by the server later: another xdist worker's server or
    kernel may take it first. Then the server exits, and it is started again on another port
    (a port given by the test is kept: that test starts a server again where it was).

    Jupyter AI's extensions are off (also in JupyterLab's page) unless `args` set
    `--ServerApp.jpserver_extensions` themselves."""
    root = root or tmp_path_factory.mktemp("server-root")
    runtime = tmp_path_factory.mktemp("runtime")  # where it publishes itself (jpserver-<pid>.json)
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime), **(env or {}))
    if not any(arg.startswith("--ServerApp.jpserver_extensions=") for arg in args):
        args = (*args, f"--ServerApp.jpserver_extensions={NO_JUPYTER_AI}")
        env.update(lab_page_without_jupyter_ai(tmp_path_factory.mktemp("lab-config"), env))
    env.pop("JUPYTER_TOKEN", None)
    for attempt in range(1 if port else PORT_ATTEMPTS):
        taken = port or free_port()
        log = tmp_path_factory.mktemp("server-log") / "server.log"
        process = subprocess.Popen(
            [*launch(app), "--no-browser", "--allow-root", f"--ServerApp.port={taken}",
             "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0", f"--IdentityProvider.token={SERVER_TOKEN}",
             f"--ServerApp.root_dir={root}", *args],
            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=root,
        )
        url = f"http://127.0.0.1:{taken}/"
        if _wait_for_server(process, url, log, runtime, last=bool(port) or attempt == PORT_ATTEMPTS - 1):
            return process, {"url": url, "root": root, "token": SERVER_TOKEN, "log": log, "port": taken,
                             "runtime": runtime}
    raise AssertionError("unreachable")


# A server is started with toolkernel imported first: its stand-in for the grammar jsonschema
# builds at import for the "iri" format (`toolkernel._imports.LazyFormatGrammar`) is then in place
# before Jupyter Server imports jsonschema (through jupyter_events). Built at every start, that
# grammar cost 0.9 s of CPU, about a third of a plain server's start, for a format no test server
# checks; a check that needs it still builds it. `-m APP` otherwise: toolkernel's server extension
# is imported in every one of these servers anyway.
LAUNCH = "import runpy, sys, toolkernel; runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)"


def launch(module: str) -> list[str]:
    """The command line that runs `python -m MODULE` with toolkernel imported first (see LAUNCH)."""
    return [sys.executable, "-c", LAUNCH, module]


GATEWAY_TOKEN = "gateway-token-9c2d"


def start_gateway(tmp_path_factory, port: int | None = None) -> tuple[subprocess.Popen, str]:
    """A Jupyter Kernel Gateway on loopback (on `port`: the same gateway started again) and its URL.
    It lists its kernels, as a Jupyter Server in front of it needs (`--gateway-url`). Without the
    package the test is skipped, but not in CI, which installs it (the `test` extra)."""
    if not os.environ.get("CI"):
        import pytest

        pytest.importorskip("kernel_gateway")
    port = port or free_port()
    log = tmp_path_factory.mktemp("gateway-log") / "gateway.log"
    gateway = subprocess.Popen(
        [*launch("kernel_gateway"), "--KernelGatewayApp.ip=127.0.0.1", f"--KernelGatewayApp.port={port}",
         f"--KernelGatewayApp.auth_token={GATEWAY_TOKEN}", "--KernelGatewayApp.port_retries=0",
         "--JupyterWebsocketPersonality.list_kernels=True",
         # Its kernels talk over Unix sockets: on TCP a kernel lost its port to another worker's
         # process between the gateway's pick and its bind, died at start, and the pairing waited
         # out its minute (one fresh-clone run failed so).
         "--KernelManager.transport=ipc"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=tmp_path_factory.mktemp("gateway-cwd"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_SECONDS
    while True:
        try:
            if httpx.get(url + "/api", headers={"Authorization": f"token {GATEWAY_TOKEN}"},
                         timeout=5).status_code == 200:
                return gateway, url
        except httpx.HTTPError:
            pass
        if gateway.poll() is not None or time.monotonic() > deadline:
            gateway.kill()
            raise RuntimeError(f"kernel gateway did not come up: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.3)


def gateway_server_args(gateway_url: str) -> tuple[str, ...]:
    """A Jupyter Server's arguments to run all its kernels on the gateway at `gateway_url`."""
    return (f"--gateway-url={gateway_url}", f"--GatewayClient.auth_token={GATEWAY_TOKEN}",
            f"--ServerApp.jpserver_extensions={NO_COLLABORATION}")


def stop_server(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_for_server(process: subprocess.Popen, url: str, log: Path, runtime: Path, last: bool) -> bool:
    """True once this server answers; False when it exited because its port was taken (and `last` is
    not set). Its own file in `runtime` must be there too: every test server has the same token, so
    an answer on the port alone may come from another worker's server that took the port."""
    deadline = time.monotonic() + SERVER_START_SECONDS
    published = runtime / f"jpserver-{process.pid}.json"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = log.read_text(errors="replace")
            if "is not available" in said and not last:
                return False
            raise RuntimeError(f"jupyter server exited: {said[-2000:]}")
        try:
            response = httpx.get(url + "api/status", headers={"Authorization": f"token {SERVER_TOKEN}"}, timeout=5)
            if response.status_code == 200 and published.exists() and process.poll() is None:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    process.kill()
    raise RuntimeError(f"jupyter server did not come up within {SERVER_START_SECONDS} s")


def server_api(server, method: str, path: str, **kwargs):
    response = httpx.request(method, server["url"] + path, headers={"Authorization": f"token {server['token']}"},
                             timeout=60, **kwargs)
    response.raise_for_status()
    return response.json() if response.content else None


def keep_waiting_for_slow_documents(page) -> None:
    """Answer "Continue waiting" whenever JupyterLab's collaboration provider asks, as a person would:
    on a loaded machine a notebook can take longer to sync than its load timeout, and the modal
    question then takes every click meant for the page (it does not close once the document loads)."""
    question = page.locator(".jp-Dialog", has_text="taking some time to load")
    page.add_locator_handler(question, lambda dialog: dialog.get_by_role("button", name="Continue waiting").click())
    close_transient_listing_errors(page)


def close_transient_listing_errors(page) -> None:
    """Close JupyterLab's "Directory not found" dialog, as a person would. The file browser shows it
    when one refresh of the root's listing got a 404: a file went between the folder's listing and its
    stat (jupyter-collaboration's SQLite journal, `.jupyter_ystore.db-journal` in the root, comes and
    goes with the documents' updates: the server logs "... doesn't exist"); the next refresh lists it.
    It is JupyterLab's and the server's, not what these tests check, and its modal takes their clicks
    (a demo test and a typing test failed so under load 9-11)."""
    dialog = page.locator(".jp-Dialog", has_text="Directory not found")
    page.add_locator_handler(dialog, lambda found: found.get_by_role("button", name="Close").click())
