"""Issue 47 in a real browser, end to end: JupyterLab with Jupyter AI and jupyter-collaboration, a
scripted ACP agent as two personas (tests/acp_agent.py: one forwards toolkernel's elicitation to the
chat's buttons, one does not), and `toolkernel serve --server` started by the agent from the
recipe in docs/jupyter-ai.md (its three blocks are read from the page and used as they are).

One Lab for the module, run as a person's would be: its own HOME (the runtime folder, where serve
finds the server's URL and token, toolkernel's state and user config are under it), a token, no
TOOLKERNEL_TRUST_ALL. The person opens a notebook and runs its first cell (`x = 6`), opens a chat,
picks an agent and asks it to add a cell; the agent inserts it through serve (per call, the path
from the root, no --notebook), the person answers toolkernel's question in the chat or in
toolkernel's own notification / sidebar, and the cell and its output show in the open notebook,
run in the person's kernel. Denied, the notebook is as it was.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from pathlib import Path

import httpx
import pytest
from jupyter_server_helpers import free_port, keep_waiting_for_slow_documents, stop_server
from toolkernel._config._rules import parse_rule

from test_browser import (CHROMIUM, LAUNCH_ARGS, REPO, WAIT_MS, Steps, _extension_path, _wait_for,  # noqa: F401
                          browser_ready)

DOC = REPO / "docs" / "jupyter-ai.md"
PERSONAS = REPO / "tests" / "lab" / "jai_personas" / "toolkernel_agent_personas.py"
NOTEBOOK = "analysis.ipynb"
CHAT = "talk.chat"
AGENT_WAIT_MS = 180_000  # an agent's turn: its serve, a kernel's run, on a loaded, shared machine
# What the person's Lab must not inherit from the test run: serve would not see it (an agent starts
# its MCP servers with a small environment), and a person's Lab does not have it.
NOT_INHERITED = ("JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_TOKEN", "XDG_DATA_HOME",
                 "XDG_STATE_HOME", "XDG_CONFIG_HOME", "TOOLKERNEL_TRUST_ALL", "TOOLKERNEL_SERVE_TOKEN")


def recipe(name: str) -> str:
    """The fenced block that follows `<!-- recipe: NAME -->` in docs/jupyter-ai.md."""
    found = re.search(rf"<!-- recipe: {re.escape(name)} -->\s*```\w*\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert found, f"docs/jupyter-ai.md has no recipe block {name}"
    return found.group(1)


def test_the_recipe_blocks_are_what_jupyter_ai_and_toolkernel_read():
    """The page's blocks parse as Jupyter AI's settings model and toolkernel's config do (a fast check,
    without a browser: the end-to-end tests below run them)."""
    pytest.importorskip("jupyter_ai_persona_manager")
    from jupyter_ai_persona_manager.mcp_server_models import McpServerStdio, McpSettings

    settings = McpSettings(**json.loads(recipe("mcp_settings.json")))
    (server,) = settings.mcp_servers
    assert isinstance(server, McpServerStdio) and server.args[:2] == ["serve", "--server"] and len(server.args) == 2
    assert json.loads(recipe("jupyter_server_config.json")) == {"PersonaManager": {"builtin_mcp_servers": []}}
    for rule in tomllib.loads(recipe("toolkernel.toml"))["policy"]["allow"]:
        parse_rule(rule)


def _missing() -> str | None:
    for module in ("jupyter_ai_acp_client", "acp", "jupyterlab_chat", "jupyter_server_ydoc"):
        try:
            __import__(module)
        except ImportError:
            return f"the Python package {module} is not installed (pip install jupyter-ai jupyter-collaboration)"
    return None


@pytest.fixture(scope="module")
def jai_lab(browser_ready, tmp_path_factory):
    missing = _missing()
    if missing and os.environ.get("CI"):
        pytest.fail(f"CI must run the Jupyter AI test: {missing}")
    if missing:
        pytest.skip(missing)
    tmp = tmp_path_factory.mktemp("jai")
    home = tmp / "home"
    root = home / "project"
    (root / ".jupyter" / "personas").mkdir(parents=True)
    (root / ".jupyter" / "personas" / PERSONAS.name).symlink_to(PERSONAS)
    (root / ".jupyter" / "mcp_settings.json").write_text(recipe("mcp_settings.json"))
    (home / ".jupyter").mkdir()
    (home / ".jupyter" / "jupyter_server_config.json").write_text(recipe("jupyter_server_config.json"))
    (home / ".config" / "toolkernel").mkdir(parents=True)
    (home / ".config" / "toolkernel" / "toolkernel.toml").write_text(recipe("toolkernel.toml"))
    (root / NOTEBOOK).write_text(json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "id": "first", "metadata": {}, "outputs": [],
                   "source": "x = 6"}],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5}))
    (root / CHAT).write_text(json.dumps({"messages": [], "users": {}, "attachments": {},
                                         "metadata": {"id": str(uuid.uuid4())}}))
    settings = tmp / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false",
                                                                           "checkForUpdates": False}))
    env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
    env.update(HOME=str(home), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               PYTHONPATH=str(REPO), FASTMCP_CHECK_FOR_UPDATES="off", JUPYTER_AI_ACP_CLIENT_E2E_TESTING_ONLY="1",
               JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
               TOOLKERNEL_ADMIN_CONFIG=str(tmp / "no-admin.toml"), **_extension_path(tmp))
    token, port = secrets.token_hex(16), free_port()
    log_path = tmp / "lab.log"
    log = log_path.open("w")
    # jupyter_server_mcp (the built-in MCP server, offered to no agent by the recipe) is not loaded:
    # it listens on a fixed port, 3001, which another test's Lab would hold.
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         '--ServerApp.jpserver_extensions={"jupyter_server_mcp": False}'],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for(f"{base}/api/status?token={token}", server, log_path)
        with _browser(base, token, root, log_path) as lab:
            yield lab
    finally:
        stop_server(server)
        log.close()


class Lab:
    """The person's page: the notebook (its first cell run) and the chat, side by side as tabs."""

    def __init__(self, page, base: str, token: str, root: Path, log: Path) -> None:
        from playwright.sync_api import expect

        self.page, self.base, self.token, self.root, self.log = page, base, token, root, log
        self.expect = expect
        self.steps = Steps(page, Path(tempfile.mkdtemp(prefix="toolkernel-lab-jai-")))
        print(f"\nscreenshots: {self.steps.artifacts}")

    def tab(self, name: str) -> None:
        self.page.locator(".lm-TabBar-tab", has_text=name).click()

    @property
    def chat(self):
        return self.page.locator(".jp-chat-messages-container")

    def ask(self, persona: str, text: str, attach: str | None = None) -> None:
        """Pick the agent in the chat's input, attach a file (the chat's paperclip), and send `text`."""
        self.tab(CHAT)
        self.page.locator(".jp-jai-personaControls-persona-btn").click()
        self.page.get_by_role("menuitem", name=persona).click()
        self.expect(self.page.locator(".jp-jai-personaControls-persona-btn")).to_contain_text(persona)
        if attach:
            self.page.get_by_role("button", name="Add attachment").click()
            dialog = self.page.locator(".jp-Dialog", has_text="Select files to attach")
            dialog.locator(".jp-DirListing-item", has_text=attach).click()
            dialog.get_by_role("button", name="Select").click()
            self.expect(dialog).to_have_count(0)
            self.expect(self.page.locator(".jp-chat-input-container")).to_contain_text(attach)
        box = self.page.locator(".jp-chat-input-container textarea").first
        box.fill(text)
        box.press("Enter")
        self.expect(box).to_have_value("")  # sent

    def agent_said(self, text: str):
        return self.chat.get_by_text(text)

    def waiting(self, code: str):
        """toolkernel's own question, in the Tools sidebar's "Waiting for you", about the call that inserts
        `code` (a call this long is not put in a notification: JupyterLab cuts them at 140 characters)."""
        return self.waiting_list().locator(".toolkernel-waiting-request").filter(has_text=code)

    def waiting_list(self):
        tab = self.page.locator('.jp-SideBar [data-id="toolkernel-tools"]')
        if tab.get_attribute("aria-selected") != "true":
            tab.click()
        return self.page.locator("#toolkernel-tools .toolkernel-waiting")

    def cells(self):
        return self.page.locator(".jp-Notebook .jp-Cell")

    def cells_shown(self) -> int:
        """How many cells the open notebook shows (the live document: its file is saved a moment later)."""
        self.tab(NOTEBOOK)
        self.expect(self.cells().first).to_be_visible()
        return self.cells().count()

    def saved_cells(self) -> list[str]:
        """The notebook's cell sources as the server has them."""
        response = httpx.get(f"{self.base}/api/contents/{NOTEBOOK}", params={"content": 1},
                             headers={"Authorization": f"token {self.token}"}, timeout=60)
        response.raise_for_status()
        return ["".join(cell["source"]) for cell in response.json()["content"]["cells"]]

    def lab_log(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


class _browser:
    def __init__(self, base: str, token: str, root: Path, log: Path) -> None:
        self.args = base, token, root, log

    def __enter__(self) -> Lab:
        from playwright.sync_api import sync_playwright

        base, token, root, log = self.args
        self._pw = sync_playwright().start()
        self._browser = self._pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=list(LAUNCH_ARGS))
        page = self._browser.new_page(viewport={"width": 1400, "height": 1000})
        keep_waiting_for_slow_documents(page)
        page.set_default_timeout(WAIT_MS)
        lab = Lab(page, base, token, root, log)
        lab.expect.set_options(timeout=WAIT_MS)
        try:
            page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}")
            lab.expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle")  # its kernel is up
            lab.steps.run(0)  # the person's variable, in the kernel the agent's cell will run in
            lab.expect(lab.steps.cell(0).locator(".jp-InputPrompt")).to_have_text("[1]:")
            page.locator(".jp-DirListing-item", has_text=CHAT).dblclick()
            _wait_for_chat_to_take_messages(base, token)
            lab.steps.shot("notebook-and-chat-open")
        except Exception:
            lab.steps.shot("failure")
            self.__exit__()
            raise
        return lab

    def __exit__(self, *exc_info) -> None:
        self._browser.close()
        self._pw.stop()


def _wait_for_chat_to_take_messages(base: str, token: str) -> None:
    """Until the server has saved the chat once. Jupyter Chat's server document takes no message before
    (`YChat.dirty` until its first save: a message sent in the first seconds after a chat opens keeps its
    client time and reaches no persona); the personas are in the file once it saved."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline:
        response = httpx.get(f"{base}/api/contents/{CHAT}", params={"content": 1},
                             headers={"Authorization": f"token {token}"}, timeout=60)
        if response.status_code == 200 and "QuietAgentPersona" in (response.json().get("content") or ""):
            return
        time.sleep(0.3)
    raise AssertionError(f"the server did not save {CHAT} within {WAIT_MS / 1000} s")


def test_an_agent_that_forwards_elicitation_is_answered_with_the_chats_buttons(jai_lab):
    lab = jai_lab
    expect, steps = lab.expect, lab.steps
    before = lab.cells_shown()
    try:
        lab.ask("Forwarder", f"Add `print(x * 7)` to {NOTEBOOK} and run it")
        allow = lab.chat.get_by_role("button", name="Allow once", exact=True)
        expect(allow).to_be_visible(timeout=AGENT_WAIT_MS)
        expect(lab.chat.get_by_role("button", name="Deny", exact=True)).to_be_visible()
        expect(lab.waiting("print(x * 7)")).to_be_visible()  # published for Lab at the same time
        steps.shot("asked-in-the-chat")
        allow.click()
        expect(lab.chat.get_by_text(re.compile(r"ran it\. Output:\s*42"))).to_be_visible(timeout=AGENT_WAIT_MS)
        expect(lab.waiting("print(x * 7)")).to_have_count(0)  # answered in the chat: Lab's question goes
        steps.shot("agent-reported")
        lab.tab(NOTEBOOK)
        new = lab.cells().nth(before)
        expect(new.locator(".jp-InputArea")).to_contain_text("print(x * 7)")
        expect(new.locator(".jp-OutputArea")).to_contain_text("42")  # x from the person's run: their kernel
        steps.shot("cell-and-output-in-the-open-notebook")
    except Exception:
        steps.shot("failure")
        print(lab.lab_log())
        raise


def test_an_agent_that_does_not_forward_is_answered_through_toolkernels_notification_and_sidebar(jai_lab):
    lab, page = jai_lab, jai_lab.page
    expect, steps = lab.expect, lab.steps
    before = lab.cells_shown()
    try:
        # The notebook attached, as Jupyter AI gives it: a resource_link with its file:// URI.
        lab.ask("Quiet", "Add `print(x * 8)` to the attached notebook and run it", attach=NOTEBOOK)
        # A notebook edit is too long for a notification's 140 characters: it says so and shows the sidebar.
        toast = page.locator(".Toastify__toast").filter(has_text="An agent asks to run a call too long to show here")
        expect(toast.filter(has_text="tools notebook-edit")).to_be_visible(timeout=AGENT_WAIT_MS)
        steps.shot("notified")
        toast.get_by_role("button", name="Show").click()
        request = lab.waiting("print(x * 8)")
        expect(request).to_be_visible()
        expect(lab.chat.get_by_role("button", name="Allow once", exact=True)).to_have_count(0)  # not in the chat
        steps.shot("asked-in-lab")
        request.get_by_role("button", name="Allow once", exact=True).click()
        expect(request).to_have_count(0)
        expect(toast).to_have_count(0)  # answered: the notification goes too
        expect(lab.chat.get_by_text(re.compile(r"ran it\. Output:\s*48"))).to_be_visible(timeout=AGENT_WAIT_MS)
        steps.shot("agent-reported")
        # The agent named the notebook as Jupyter AI gave it: the attachment's file:// URI.
        expect(lab.chat.get_by_text(f"toolkernel notebook_read {(lab.root / NOTEBOOK).as_uri()}")).to_be_visible()
        lab.tab(NOTEBOOK)
        new = lab.cells().nth(before)
        expect(new.locator(".jp-InputArea")).to_contain_text("print(x * 8)")
        expect(new.locator(".jp-OutputArea")).to_contain_text("48")
        steps.shot("cell-and-output-in-the-open-notebook")
    except Exception:
        steps.shot("failure")
        print(lab.lab_log())
        raise


def test_denied_in_the_sidebar_the_notebook_is_unchanged(jai_lab):
    lab, page = jai_lab, jai_lab.page
    expect, steps = lab.expect, lab.steps
    before = lab.cells_shown()
    try:
        lab.ask("Quiet", f"Add `print(x * 9)` to {NOTEBOOK} and run it")
        request = lab.waiting("print(x * 9)")
        expect(request).to_be_visible(timeout=AGENT_WAIT_MS)
        steps.shot("waiting-in-the-sidebar")
        request.get_by_role("button", name="Deny", exact=True).click()
        expect(lab.agent_said(f"{NOTEBOOK} is unchanged")).to_be_visible(timeout=AGENT_WAIT_MS)
        steps.shot("agent-reported-the-deny")
        lab.tab(NOTEBOOK)
        expect(lab.cells()).to_have_count(before)
        expect(page.locator(".jp-Notebook")).not_to_contain_text("print(x * 9)")
        assert not any("x * 9" in source for source in lab.saved_cells())
    except Exception:
        steps.shot("failure")
        print(lab.lab_log())
        raise
