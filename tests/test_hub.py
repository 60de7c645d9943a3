"""Notebook tools paired through a real JupyterHub (issue 36 item 6).

A hub on loopback (DummyAuthenticator, SimpleLocalProcessSpawner, configurable-http-proxy from
npm) starts ada's single-user server with jupyter-collaboration. `toolkernel serve --server
http://HUB/user/ada/ --server-token T` reads, edits and runs her notebook through the hub's
proxy: that URL is the only way the test knows to her server. A token without the
`access:servers` scope for that server, a token the hub does not know, a user's server that is
not running and the hub's own URL given for a user's server are each one clear line, never a
traceback, never the token. A hostile server that says it is a hub gets the token nowhere else,
and what it says is shown inert.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from approval_helpers import policy_section
from hub_helpers import hub_api, start_hub, start_user_server, stop_hub, user_token
from test_serve import project, run, server_env
from test_serve_notebook import serving, text
from toolkernel._errors import InvalidInput, Unavailable
from toolkernel._loop import run as run_on_loop
from toolkernel._providers._notebook import pair, unpair
from toolkernel._providers._notebook._server import ServerApi

POLICY = policy_section(allow=["notebook_run", "notebook_edit", "notebook_read"])
NOTEBOOK = "team/hub.ipynb"

@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    process, hub = start_hub(tmp_path_factory)
    try:
        hub["ada_root"] = start_user_server(hub, process, "ada")
        hub["ada"] = hub["url"] + "user/ada/"
        hub["scoped"] = user_token(hub, "ada", ["access:servers!server=ada/"])
        hub["unscoped"] = user_token(hub, "ada", ["read:users:name!user=ada"])
        yield hub
    finally:
        stop_hub(process)


def write_notebook(root, path: str) -> list[str]:
    nb = new_notebook(cells=[new_code_cell("x = 20"), new_code_cell("print(x * 2)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, root / path)
    return [cell.id for cell in nb.cells]


def wait_saved(path, check, timeout: float = 120.0) -> nbformat.NotebookNode:
    """The server saves the shared document to the file by itself, a moment after a change."""
    deadline = time.monotonic() + timeout
    while True:
        nb = nbformat.read(path, as_version=4)
        if check(nb) or time.monotonic() > deadline:
            return nb
        time.sleep(0.2)


@pytest.mark.slow
def test_read_edit_and_run_go_through_the_hubs_proxy_with_a_scoped_token(hub, tmp_path):
    ids = write_notebook(hub["ada_root"], NOTEBOOK)
    work = project(tmp_path, POLICY)
    seen: dict = {}

    async def body():
        async with serving(work, "--notebook", NOTEBOOK, "--server", hub["ada"],
                           "--server-token", hub["scoped"]) as client:
            call = client.call_tool
            seen["read"] = await call("notebook_read", {"notebook_path": NOTEBOOK})
            seen["edit"] = await call("notebook_edit", {"notebook_path": NOTEBOOK, "cell_id": ids[0],
                                                        "new_source": "x = 21"})
            await call("notebook_run", {"notebook_path": NOTEBOOK, "cell_id": ids[0]})
            seen["run"] = await call("notebook_run", {"notebook_path": NOTEBOOK, "cell_id": ids[1]})
            async with httpx.AsyncClient(headers={"Authorization": f"token {hub['scoped']}"}, timeout=60) as http:
                seen["sessions"] = (await http.get(hub["ada"] + "api/sessions")).json()

    run(body)
    assert "id=" in text(seen["read"]) and "x = 20" in text(seen["read"]), text(seen["read"])
    assert not seen["edit"].is_error, text(seen["edit"])
    assert not seen["run"].is_error and text(seen["run"]).startswith("42\n"), text(seen["run"])
    assert "shared document" in text(seen["run"])  # jupyter-collaboration on ada's server, through the proxy
    assert NOTEBOOK in [session["path"] for session in seen["sessions"]]  # the kernel ran on ada's server
    saved = wait_saved(hub["ada_root"] / NOTEBOOK, lambda nb: nb.cells[1].get("outputs"))
    assert saved.cells[0].source == "x = 21" and saved.cells[1].outputs[0].text == "42\n"


@pytest.mark.slow
def test_the_token_a_users_server_is_given_may_pair_with_it(hub):
    """What the README says of $JUPYTERHUB_API_TOKEN: by default (the hub's `server` role) it has the scope."""
    tokens = hub_api(hub, "GET", "users/ada/tokens")["api_tokens"]
    servers = [token for token in tokens if token.get("note", "").startswith("Server at")]
    assert servers and "access:servers!server=ada/" in servers[0]["scopes"], tokens


def serve_paired(work, server: str, token: str) -> subprocess.CompletedProcess:
    """`toolkernel serve` pairs before it serves: a pairing that fails ends it with one line on stderr."""
    return subprocess.run([sys.executable, "-m", "toolkernel", "serve", "--notebook", NOTEBOOK, "--server", server,
                           "--server-token", token], cwd=work, env=server_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_token_without_access_servers_is_told_which_scope_it_lacks(hub, tmp_path):
    write_notebook(hub["ada_root"], NOTEBOOK)
    done = serve_paired(project(tmp_path, POLICY), hub["ada"], hub["unscoped"])
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and hub["unscoped"] not in done.stderr
    line = done.stderr.strip()
    assert "\n" not in line, line
    assert "lacks the `access:servers` scope" in line and "`access:servers!server=ada/`" in line, line
    assert "user ada" in line and "read:users:name!user=ada" in line, line  # whose token, and what it may do
    assert f"{hub['url']}hub/token" in line, line


def pair_error(hub, tmp_path, server: str, token: str) -> Exception:
    state: dict = {}
    with pytest.raises((InvalidInput, Unavailable)) as caught:
        run_on_loop(pair(state, tmp_path, NOTEBOOK, server=server, token=token, kernel="python3"), timeout=300)
    run_on_loop(unpair(state), timeout=60)
    assert token not in str(caught.value)
    return caught.value


@pytest.mark.slow
def test_a_token_the_hub_does_not_know_is_told_so(hub, tmp_path):
    error = pair_error(hub, tmp_path, hub["ada"], "not-a-token-of-this-hub")
    assert isinstance(error, InvalidInput)
    assert f"the JupyterHub at {hub['url']} does not accept the token" in error.message
    assert "`access:servers!server=ada/`" in error.message


@pytest.mark.slow
def test_a_users_server_that_is_not_running_is_told_so(hub, tmp_path):
    bobs = user_token(hub, "bob", ["access:servers!server=bob/"])  # bob's server was never started
    error = pair_error(hub, tmp_path, hub["url"] + "user/bob/", bobs)
    assert isinstance(error, Unavailable) and error.retryable
    assert f"the server of bob on the JupyterHub at {hub['url']} is not running" in error.message
    assert f"{hub['url']}hub/home" in error.message


@pytest.mark.slow
def test_the_hubs_own_url_is_not_taken_for_a_users_server(hub, tmp_path):
    error = pair_error(hub, tmp_path, hub["url"], hub["scoped"])
    assert isinstance(error, InvalidInput)
    assert f"is a JupyterHub, not a user's Jupyter Server: give the URL of the user's server, {hub['url']}user/NAME/" \
        in error.message


# --- a hostile server that says it is a hub -----------------------------------------------------

class Hostile(BaseHTTPRequestHandler):
    """Answers every path from `routes` (status, headers, body) and records what it was sent."""

    routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        status, headers, body = self.routes.get(self.path, (404, {}, b""))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@contextmanager
def serving_hostile(routes: dict):
    """A server answering `routes` on loopback: (what it was sent, its URL)."""
    handler = type("Route", (Hostile,), {"routes": routes, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield handler.seen, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def refused_by(url: str, token: str) -> Exception:
    api = ServerApi(url + "user/ada/", token)

    async def ask():
        try:
            await api.request("GET", "api/sessions")
        finally:
            await api.close()

    with pytest.raises((InvalidInput, Unavailable)) as caught:
        run_on_loop(ask(), timeout=60)
    return caught.value


FORBIDDEN = (403, {"X-JupyterHub-Version": "6.1.1", "Content-Type": "application/json"},
             json.dumps({"message": "Forbidden"}).encode())


def test_a_hostile_hub_cannot_send_the_token_elsewhere():
    with serving_hostile({"/steal": (200, {}, b"{}")}) as (stolen, other):
        with serving_hostile({"/user/ada/api/sessions": FORBIDDEN,
                              "/hub/api/user": (302, {"Location": other + "steal"}, b"")}) as (asked, url):
            error = refused_by(url, "secret-token-1234")
    assert "does not accept the token" in error.message and "secret-token-1234" not in error.message
    assert stolen == []  # the hub's redirect is not followed with the token
    assert [path for path, _ in asked] == ["/user/ada/api/sessions", "/hub/api/user"]


def test_what_a_hostile_hub_says_is_shown_inert_and_bounded():
    owner = {"kind": "user", "name": "eve\x1b[2J\u202e" * 50, "scopes": ["\x1b]52;c;AAAA\x07"] * 500}
    with serving_hostile({"/user/ada/api/sessions": FORBIDDEN,
                          "/hub/api/user": (200, {"Content-Type": "application/json"},
                                            json.dumps(owner).encode())}) as (_, url):
        error = refused_by(url, "secret-token-1234")
    assert "lacks the `access:servers` scope" in error.message
    assert error.message.isprintable() and len(error.message) < 1500, error.message
    assert "\\x1b[2J" in error.message and "\\u202e" in error.message  # escaped, as written in Python


def test_a_hub_answer_of_the_wrong_shape_is_no_traceback():
    with serving_hostile({"/user/ada/api/sessions": FORBIDDEN,
                          "/hub/api/user": (200, {}, json.dumps({"name": ["x"], "scopes": 7}).encode())}) as (_, url):
        error = refused_by(url, "secret-token-1234")
    assert "lacks the `access:servers` scope" in error.message and "its scopes: none" in error.message


def test_a_hostile_redirect_is_shown_inert():
    with serving_hostile({"/user/ada/api/sessions": (302, {"Location": "/login\x9b2J\x9b31m"}, b"")}) as (_, url):
        error = refused_by(url, "secret-token-1234")
    assert isinstance(error, InvalidInput) and error.message.isprintable(), error.message
    assert "redirect (HTTP 302) to /login\\x9b2J" in error.message
