"""A real JupyterHub on loopback: its configurable-http-proxy (npm), DummyAuthenticator and
SimpleLocalProcessSpawner, with a service token that may start servers and make users' tokens.

Every user's server is reached only through the hub's proxy, at `/jupyter/user/NAME/` (the hub
is served under a prefix). It is the same
single-user server a team's hub starts (`jupyterhub.singleuser`), with the extensions installed
here, jupyter-collaboration among them (Jupyter AI's left off: no test here uses them).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from jupyter_server_helpers import NO_JUPYTER_AI, SERVER_START_SECONDS, free_port

ADMIN_TOKEN = "hub-admin-service-token-7c1d9e"  # the test's own service: starts servers, makes tokens
PROXY_VERSION = "4.6.3"  # what .ci/run installs from npm
CI_TOOLS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "toolkernel" / "ci-tools"

CONFIG = """\
c = get_config()  # noqa
c.JupyterHub.bind_url = {public!r}  # with a prefix, as a hub shared with other sites is served
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}/"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.ConfigurableHTTPProxy.pid_file = {folder!r} + "/proxy.pid"
c.JupyterHub.db_url = "sqlite:///" + {folder!r} + "/hub.sqlite"
c.JupyterHub.cookie_secret_file = {folder!r} + "/cookie_secret"
c.JupyterHub.authenticator_class = "dummy"
c.JupyterHub.spawner_class = "simple"
c.Authenticator.allowed_users = {{"ada", "bob"}}
c.SimpleLocalProcessSpawner.home_dir_template = {folder!r} + "/home/{{username}}"
c.Spawner.cmd = [{python!r}, "-m", "jupyterhub.singleuser"]
c.Spawner.args = ["--allow-root", "--YDocExtension.document_save_delay=0.3", {no_jupyter_ai!r}]
c.Spawner.start_timeout = c.Spawner.http_timeout = {start_seconds}  # a loaded machine starts servers slowly
# At the hub's shutdown a user's server ignores the first SIGINT (it asks on its terminal), and
# with jupyter-collaboration's rooms open it did not end on SIGTERM either: each waited out its
# whole timeout (30 s by default), most of the module's time. Its kernels are shut down by then.
c.LocalProcessSpawner.interrupt_timeout = 1
c.LocalProcessSpawner.term_timeout = 5
c.JupyterHub.services = [{{"name": "tester", "api_token": {admin!r}}}]
c.JupyterHub.load_roles = [{{"name": "tester", "services": ["tester"],
                             "scopes": ["admin:users", "admin:servers", "tokens"]}}]
"""


def proxy_command() -> str | None:
    """configurable-http-proxy on PATH, or where .ci/run installs it."""
    found = shutil.which("configurable-http-proxy")
    installed = CI_TOOLS / "node_modules" / ".bin" / "configurable-http-proxy"
    return found or (str(installed) if installed.exists() else None)


def require_hub() -> str:
    """The proxy's command. Without jupyterhub or the proxy the hub's tests are skipped, but not in CI."""
    missing = []
    if importlib.util.find_spec("jupyterhub") is None:
        missing.append("jupyterhub (pip install '.[test]')")
    proxy = proxy_command()
    if proxy is None:
        missing.append(f"configurable-http-proxy (npm install --prefix {CI_TOOLS} "
                       f"configurable-http-proxy@{PROXY_VERSION}, as .ci/run does)")
    if missing and os.environ.get("CI"):
        pytest.fail(f"CI must run the JupyterHub tests: {', '.join(missing)} missing")
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
    assert proxy is not None
    return proxy


def start_hub(tmp_path_factory) -> tuple[subprocess.Popen, dict]:
    proxy = require_hub()
    folder = tmp_path_factory.mktemp("hub")
    ports: set[int] = set()
    while len(ports) < 3:  # the proxy's public port, the hub's own, the proxy's API
        ports.add(free_port())
    public_port, hub_port, proxy_api_port = ports
    public = f"http://127.0.0.1:{public_port}/jupyter/"
    (folder / "jupyterhub_config.py").write_text(CONFIG.format(
        public=public, hub_port=hub_port, proxy_api_port=proxy_api_port, proxy=proxy, folder=str(folder),
        python=sys.executable, start_seconds=SERVER_START_SECONDS, admin=ADMIN_TOKEN,
        no_jupyter_ai=f"--ServerApp.jpserver_extensions={NO_JUPYTER_AI}"))
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(folder / "runtime"))
    env.pop("JUPYTER_TOKEN", None)
    log = folder / "hub.log"
    process = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", "jupyterhub_config.py"], cwd=folder,
                               env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    hub = {"url": public, "folder": folder, "log": log}
    _wait(process, log, lambda: httpx.get(public + "hub/api/", timeout=5).status_code == 200, "the hub")
    return process, hub


def stop_hub(process: subprocess.Popen) -> None:
    """The hub stops the servers it started and its proxy when it ends."""
    process.terminate()
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def hub_api(hub: dict, method: str, path: str, **kwargs):
    response = httpx.request(method, hub["url"] + "hub/api/" + path, timeout=60,
                             headers={"Authorization": f"token {ADMIN_TOKEN}"}, **kwargs)
    response.raise_for_status()
    return response.json() if response.content else None


def start_user_server(hub: dict, process: subprocess.Popen, user: str) -> Path:
    """Start `user`'s default server; returns its root folder (the user's home)."""
    hub_api(hub, "POST", f"users/{user}/server")
    _wait(process, hub["log"], lambda: (hub_api(hub, "GET", f"users/{user}")["servers"].get("") or {}).get("ready"),
          f"the server of {user}")
    return hub["folder"] / "home" / user


def user_token(hub: dict, user: str, scopes: list[str]) -> str:
    return hub_api(hub, "POST", f"users/{user}/tokens", json={"scopes": scopes, "note": "toolkernel test"})["token"]


def _wait(process: subprocess.Popen, log: Path, ready, what: str) -> None:
    deadline = time.monotonic() + SERVER_START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"jupyterhub exited: {log.read_text(errors='replace')[-3000:]}")
        try:
            if ready():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{what} did not come up within {SERVER_START_SECONDS} s: "
                       f"{log.read_text(errors='replace')[-3000:]}")
