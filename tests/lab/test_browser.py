"""The JupyterLab extension in a real browser: JupyterLab on loopback, Debian's Chromium
driven by Playwright. Screenshots of each step are kept (the path is printed)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
from jupyter_server_helpers import (NO_JUPYTER_AI, free_port, keep_waiting_for_slow_documents, launch,
                                    lab_page_without_jupyter_ai, stop_server)

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
WAIT_MS = 60_000  # one step on a loaded, shared machine
RULE = "mcp_github__delete_branch"


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is not installed (apt-get install chromium)"
    for module in ("playwright", "jupyterlab"):
        try:
            __import__(module)
        except ImportError:
            return f"the Python package {module} is not installed"
    return None


@pytest.fixture(scope="module")
def browser_ready():
    missing = _missing()
    if missing and os.environ.get("CI"):
        pytest.fail(f"CI must run the browser test: {missing}")
    if missing:
        pytest.skip(missing)


LAUNCH_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run")


@pytest.fixture(scope="module")
def chromium(browser_ready):
    """One Chromium for a module's tests, each test in a context of its own (`opened_page`): a fresh
    profile, as a browser of its own had. A launch with Playwright's driver is 1.8 s of CPU, and a run
    made about 25; Chromium's CPU is still mostly JupyterLab's page loads, about 4 s each."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=list(LAUNCH_ARGS))
        yield browser
        browser.close()


@contextlib.contextmanager
def opened_page(chromium) -> Iterator:
    """A page in a new context of `chromium` (cookies, storage and workspaces of its own)."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    try:
        yield context.new_page()
    finally:
        context.close()


def _cells(*sources: str) -> dict:
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
              "source": source} for i, source in enumerate(sources)]
    return {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}}


def _extension_path(tmp: Path) -> dict[str, str]:
    """Serve the extension built from this tree when there is one (else the installed one)."""
    built = REPO / "toolkernel" / "labextension"
    if not (built / "package.json").exists():
        return {}
    data = tmp / "jupyter-data"
    (data / "labextensions").mkdir(parents=True)
    (data / "labextensions" / "toolkernel").symlink_to(built)
    return {"JUPYTER_PATH": str(data)}


@pytest.fixture
def lab(browser_ready, tmp_path):
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "toolkernel.toml").write_text(
        f'[mcp_servers.github]\ncommand = {json.dumps(sys.executable)}\nargs = ["-m", "toolkernel.demo_server"]\n'
        f'[mcp_servers.dis]\ncommand = {json.dumps(sys.executable)}\n'
        f'args = [{json.dumps(str(REPO / "tests" / "servers" / "disguised.py"))}]\n'
        '[tools.greet]\ncommand = ["echo", "--", "hello {{ input.name }}"]\n'
        'parameters = { type = "object", properties = { name = { type = "string" } } }\n'
        # These tests answer a mid-run stop on its report (test_midrun_browser.py: in place).
        '[approvals]\nmid_run = "stop"\n')
    # A bidi override in a literal call's input (the question), and in a server's tool name and a
    # script's input (the report of a stop mid-run).
    name = r"push\033]52;c;cm0gLXJmIH4=\007\033[2K\342\200\256hsup\302\2332J"
    (workdir / "disguised.ipynb").write_text(json.dumps(_cells(
        "%load_ext toolkernel",
        "%%tools\ntools github delete-branch 'branch=fix\u202egnp.exe'",
        f"""%%tools\nfor n in "$(printf '{name}')"; do tools dis "$n" "branch=$(printf 'x\\342\\200\\256y')"; done""",
        "%%tools\ntools greet name=ann",  # a command tool: the person sees the argv that would run
        '%%tools\nfor n in bo; do tools greet "name=$n"; done',
    )))
    notebook = _cells(
        "%load_ext toolkernel",
        "%%tools\ntools github delete-branch branch=fix-x\necho ran-after-approval",
        '%%tools\nfor b in wip-auth; do tools github delete-branch "branch=$b"; done',
    )
    (workdir / "approve.ipynb").write_text(json.dumps(notebook))
    with running_lab(tmp_path, workdir) as base:
        yield base, workdir


@contextlib.contextmanager
def running_lab(tmp: Path, workdir: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """JupyterLab on loopback serving `workdir`, with this tree's extension and no news pop-up,
    its settings and workspaces under `tmp`; its base URL. `env`: the server's environment.
    Jupyter AI's extensions are off (tests/lab/test_jupyter_ai.py starts its own Lab)."""
    settings = tmp / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false",
                                                                           "checkForUpdates": False}))
    port = free_port()
    env = {**(os.environ if env is None else env), "PYTHONPATH": str(REPO),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
           "XDG_CONFIG_HOME": str(tmp / "xdg"), "TOOLKERNEL_ADMIN_CONFIG": str(tmp / "no-admin.toml"),
           **_extension_path(tmp)}
    env.update(lab_page_without_jupyter_ai(tmp, env))
    log = open(tmp / "lab.log", "w")
    server = subprocess.Popen(
        [*launch("jupyterlab"), "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={workdir}",
         f"--ServerApp.jpserver_extensions={NO_JUPYTER_AI}"],
        cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for(f"{base}/api/status", server, tmp / "lab.log")
        yield base
    finally:
        stop_server(server)
        log.close()


def _wait_for(url: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"JupyterLab exited:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=5).close()
            return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"JupyterLab did not answer within 240 s:\n{log.read_text()[-3000:]}")


class Steps:
    """The page, with a numbered screenshot after each step."""

    def __init__(self, page, artifacts: Path) -> None:
        self.page, self.artifacts, self.count = page, artifacts, 0
        self.started = time.monotonic()

    def shot(self, name: str) -> None:
        self.count += 1
        print(f"{time.monotonic() - self.started:6.1f} s  {name}")
        self.page.screenshot(path=str(self.artifacts / f"{self.count:02d}-{name}.png"))

    def cell(self, index: int):
        return self.page.locator(".jp-Notebook .jp-Cell").nth(index)

    def run(self, index: int) -> None:
        self.cell(index).locator(".jp-InputArea-editor").click()
        self.page.keyboard.press("Shift+Enter")

    def outputs(self, index: int):
        return self.cell(index).locator(".jp-OutputArea")


def test_approval_buttons_report_and_sidebar_in_jupyterlab(lab, chromium):
    from playwright.sync_api import expect

    base, workdir = lab
    artifacts = Path(tempfile.mkdtemp(prefix="toolkernel-lab-artifacts-"))
    print(f"\nscreenshots: {artifacts}")
    approvals = workdir / ".toolkernel" / "approvals.json"
    started = time.monotonic()
    with opened_page(chromium) as page:
        keep_waiting_for_slow_documents(page)
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        steps = Steps(page, artifacts)
        try:
            page.goto(f"{base}/lab/tree/approve.ipynb")
            expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle")  # the kernel is ready
            steps.run(0)
            expect(steps.cell(0).locator(".jp-InputPrompt")).to_have_text("[1]:")
            steps.shot("loaded")

            # Before the start: the question as buttons; "Allow once" starts the script, no re-run.
            steps.run(1)
            allow = steps.outputs(1).get_by_role("button", name="Allow once", exact=True)
            expect(allow).to_be_visible()
            expect(steps.outputs(1).get_by_role("button", name="Always allow", exact=True)).to_be_visible()
            expect(steps.outputs(1).get_by_role("button", name="Deny", exact=True)).to_be_visible()
            steps.shot("before-start-question")
            allow.click()
            expect(steps.outputs(1)).to_contain_text("ran-after-approval")
            expect(steps.outputs(1)).to_contain_text("deleted branch fix-x")
            steps.shot("before-start-allowed")

            # Mid-run: the report with the stopped call; answer over the comm, then re-run.
            steps.run(2)
            report = steps.outputs(2).locator(".toolkernel-report")
            expect(report).to_contain_text('tools github delete-branch {"branch": "wip-auth"}')  # as the kernel does
            steps.shot("mid-run-report")
            report.get_by_role("button", name="Allow once", exact=True).click()
            expect(report.locator(".toolkernel-taken")).to_contain_text("allowed once")
            report.get_by_role("button", name="Run the cell again").click()
            expect(steps.outputs(2)).to_contain_text("deleted branch wip-auth")
            steps.shot("mid-run-allowed-rerun")

            # The one-off approval is spent: the same cell stops again.
            steps.run(2)
            expect(report).to_contain_text("Stopped while the script ran")
            report.get_by_role("button", name="Always allow", exact=True).click()
            expect(report.locator(".toolkernel-taken")).to_contain_text("always allowed")
            steps.shot("always-allowed")
            assert [e["rule"] for e in json.loads(approvals.read_text())["allow"]] == [RULE]

            # The sidebar lists the lasting approval; "Revoke" removes it.
            page.locator('.jp-SideBar [data-id="toolkernel-tools"]').click()
            sidebar = page.locator("#toolkernel-tools")
            expect(sidebar.locator(".toolkernel-approval")).to_contain_text(RULE)
            expect(sidebar).to_contain_text("running")
            steps.shot("sidebar")
            sidebar.locator(".toolkernel-approval").get_by_role("button", name="Revoke").click()
            expect(sidebar.locator(".toolkernel-approval")).to_have_count(0)
            steps.shot("revoked")
            assert json.loads(approvals.read_text())["allow"] == []

            # A search whose result holds one long word: the panel keeps its width and its left edge.
            sidebar.locator(".toolkernel-search").fill("pull" + "x" * 300)
            sidebar.get_by_role("button", name="Search", exact=True).click()
            expect(sidebar.locator(".toolkernel-search-results")).not_to_be_empty()
            steps.shot("searched")
            sizes = sidebar.evaluate("n => [n.scrollWidth, n.clientWidth, n.scrollLeft, n.parentElement.scrollLeft]")
            assert sizes[0] <= sizes[1] and sizes[2:] == [0, 0], sizes
        except Exception:
            steps.shot("failure")
            raise
    print(f"browser steps took {time.monotonic() - started:.1f} s")


def test_the_question_and_the_report_show_a_bidi_override_escaped(lab, chromium):
    """What a person approves must read as what runs: a U+202E in a tool's name or input is shown
    as `\\u202e`, never applied (it reverses the text after it)."""
    from playwright.sync_api import expect

    base, _ = lab
    with opened_page(chromium) as page:
        keep_waiting_for_slow_documents(page)
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        steps = Steps(page, Path(tempfile.mkdtemp(prefix="toolkernel-lab-bidi-")))
        try:
            page.goto(f"{base}/lab/tree/disguised.ipynb")
            expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle")
            steps.run(0)
            expect(steps.cell(0).locator(".jp-InputPrompt")).to_have_text("[1]:")
            steps.run(1)
            question = steps.outputs(1).locator(".toolkernel-question")
            expect(question).to_contain_text("fix\\u202egnp.exe")
            assert "\u202e" not in question.inner_text()
            question.get_by_role("button", name="Deny", exact=True).click()
            steps.run(2)
            stopped = steps.outputs(2).locator(".toolkernel-stopped-call")
            expect(stopped).to_contain_text("push\\u001b]52;c;cm0gLXJmIH4=\\u0007\\u001b[2K\\u202ehsup")
            assert "\u202e" not in stopped.inner_text() and "\x1b" not in stopped.inner_text()
            steps.shot("bidi-escaped")
            steps.run(3)  # before the start: the question shows the argv as well as the input
            question = steps.outputs(3).locator(".toolkernel-question")
            expect(question.locator(".toolkernel-argv")).to_have_text('["echo","--","hello ann"]')
            question.get_by_role("button", name="Deny", exact=True).click()
            steps.run(4)  # mid-run: so does the report
            report = steps.outputs(4).locator(".toolkernel-report")
            expect(report.locator(".toolkernel-argv")).to_have_text('["echo","--","hello bo"]')
            steps.shot("argv-shown")
        except Exception:
            steps.shot("failure")
            raise


def test_the_sidebar_lists_a_cells_changes_shows_a_diff_and_rewinds_the_run(lab, chromium):
    """Issue 38: a %%tools cell rewrites a file and creates one; the sidebar's "Changes" lists the run,
    "Diff" shows the file's old lines against its new ones, "Rewind" puts both back."""
    from playwright.sync_api import expect

    base, workdir = lab
    (workdir / "data.txt").write_text("old line\n")
    (workdir / "changes.ipynb").write_text(json.dumps(_cells(
        "%load_ext toolkernel",
        "%%tools\nprintf 'new line\\n' > data.txt\necho made > '<b>made.txt'\necho wrote")))
    with opened_page(chromium) as page:
        keep_waiting_for_slow_documents(page)
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        steps = Steps(page, Path(tempfile.mkdtemp(prefix="toolkernel-lab-changes-")))
        print(f"\nscreenshots: {steps.artifacts}")
        try:
            page.goto(f"{base}/lab/tree/changes.ipynb")
            expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle")
            steps.run(0)
            expect(steps.cell(0).locator(".jp-InputPrompt")).to_have_text("[1]:")
            steps.run(1)
            expect(steps.outputs(1)).to_contain_text("wrote")
            assert (workdir / "data.txt").read_text() == "new line\n"

            page.locator('.jp-SideBar [data-id="toolkernel-changes"]').click()
            run = page.locator("#toolkernel-changes .toolkernel-run")
            expect(run).to_have_count(1)
            expect(run.locator(".toolkernel-run-head")).to_contain_text("changes.ipynb, cell 2")
            expect(run.locator(".toolkernel-file").filter(has_text="data.txt")).to_contain_text("changed")
            made = run.locator(".toolkernel-file").filter(has_text="<b>made.txt")  # text, not markup
            expect(made).to_contain_text("created")
            assert made.locator("b").count() == 0
            steps.shot("changes-listed")

            run.locator(".toolkernel-file").filter(has_text="data.txt").get_by_role("button", name="Diff").click()
            expect(run.locator(".toolkernel-diff")).to_contain_text("-old line")
            expect(run.locator(".toolkernel-diff")).to_contain_text("+new line")
            steps.shot("diff-shown")

            run.get_by_role("button", name="Rewind").click()
            expect(page.locator("#toolkernel-changes .toolkernel-rewound")).to_contain_text("rewound run")
            expect(page.locator("#toolkernel-changes .toolkernel-run")).to_have_count(2)  # the rewind: a run of its own
            expect(page.locator("#toolkernel-changes .toolkernel-run").first).to_contain_text("Rewind of run")
            steps.shot("rewound")
            assert (workdir / "data.txt").read_text() == "old line\n"
            assert not (workdir / "<b>made.txt").exists()
        except Exception:
            steps.shot("failure")
            raise


def test_the_installed_extension_is_listed_enabled_and_ok(browser_ready):
    """`pip install .` put the prebuilt extension where JupyterLab finds it."""
    listed = subprocess.run([sys.executable, "-m", "jupyterlab.labextensions", "list"], capture_output=True,
                            text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"})
    line = next((l for l in (listed.stdout + listed.stderr).splitlines() if "toolkernel" in l), "")
    assert "enabled" in line and "OK" in line, listed.stdout + listed.stderr
