"""The approvals demo as a person meets it: `notebooks/` copied as a cloned folder (its config not
trusted), opened in JupyterLab in a real browser, **Run All**, every question answered with its
buttons (the trust question first), as each cell's metadata says a person answers it. The deny
before the start at its end runs nothing."""

from __future__ import annotations

import json
import re
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from jupyter_server_helpers import keep_waiting_for_slow_documents
from test_browser import REPO, WAIT_MS, Steps, browser_ready, chromium, opened_page, running_lab  # noqa: F401

BUTTONS = {"once": "Allow once", "always": "Always allow", "deny": "Deny"}


@pytest.fixture
def untrusted_lab(browser_ready, tmp_path):
    workdir = tmp_path / "notebooks"
    shutil.copytree(REPO / "notebooks", workdir)
    env = {k: v for k, v in os.environ.items() if k != "TOOLKERNEL_TRUST_ALL"}  # as on a person's machine
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    with running_lab(tmp_path, workdir, env) as base:
        yield base, workdir


def _answers(workdir: Path) -> dict[int, list[str]]:
    cells = json.loads((workdir / "approvals.ipynb").read_text())["cells"]
    return {i: c["metadata"]["toolkernel-demo"]["answers"] for i, c in enumerate(cells)
            if c["cell_type"] == "code" and "toolkernel-demo" in c["metadata"]}


@pytest.mark.slow
def test_the_approvals_demo_runs_all_in_jupyterlab_answered_with_the_buttons(untrusted_lab, chromium):
    from playwright.sync_api import expect

    base, workdir = untrusted_lab
    answers = _answers(workdir)
    cells = json.loads((workdir / "approvals.ipynb").read_text())["cells"]
    first_tools = next(i for i, c in enumerate(cells) if "".join(c["source"]).startswith("%%tools"))
    last = len(cells) - 1
    artifacts = Path(tempfile.mkdtemp(prefix="toolkernel-lab-demo-"))
    print(f"\nscreenshots: {artifacts}")
    started = time.monotonic()
    with opened_page(chromium) as page:
        keep_waiting_for_slow_documents(page)
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        steps = Steps(page, artifacts)
        try:
            page.goto(f"{base}/lab/tree/approvals.ipynb")
            expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle")
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()

            # The folder's config is not trusted: the first %%tools cell asks, as buttons over a
            # prompt it hides. Trusting starts the demo server for that very cell.
            trust = steps.outputs(first_tools).locator(".toolkernel-trust")
            expect(trust).to_contain_text("is not trusted (toolkernel.toml)")
            # The config to read is there (its path and text), and the buttons answer: no stdin box.
            expect(trust.locator(".toolkernel-config").first).to_contain_text("toolkernel.toml")
            expect(trust.locator(".toolkernel-config pre").first).to_contain_text("[mcp_servers.github]")
            trust.scroll_into_view_if_needed()
            steps.shot("trust-question")
            trust.get_by_role("button", name="Trust this folder's config").click()
            expect(steps.outputs(first_tools)).to_contain_text("trusted the config of")
            expect(steps.outputs(first_tools)).to_contain_text("#101 Add rate limiting")
            trust.scroll_into_view_if_needed()
            steps.shot("trusted")

            for index, said in answers.items():
                for answer in said:
                    button = steps.outputs(index).get_by_role("button", name=BUTTONS[answer], exact=True).first
                    expect(button).to_be_enabled()
                    steps.shot(f"cell-{index}-asks")
                    button.click()
            # The last cell ran: Run All stopped at no cell before it (it stops at a failed cell). Its
            # deny ran nothing; `--no-raise-error` keeps the cell from failing (as headless runners need).
            expect(steps.outputs(last)).to_contain_text("denied; nothing ran")
            expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle")
            steps.shot("ran-all")
            shown = {i: steps.outputs(i).inner_text() for i, c in enumerate(cells) if c["cell_type"] == "code"}
            assert "deleting fix-x" in shown[min(i for i, a in answers.items() if a == ["once"])]
            assert "deleted branch feature/search-limits" in "".join(shown.values())
            assert "not reached" not in shown[last]
            # The answers in the cells' metadata (which JupyterLab sends with each cell) do not make
            # the person's cells an agent's: nothing was left for `toolkernel approve` in a terminal.
            assert "toolkernel approve" not in "".join(shown.values())
            assert page.locator(".jp-Notebook .jp-Stdin").count() == 0  # no question asked with a stdin box
        except Exception:
            steps.shot("failure")
            raise
    print(f"browser steps took {time.monotonic() - started:.1f} s")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["quickstart", "data-science", "agent-notebook-editing"])
def test_the_other_demos_run_all_in_jupyterlab_once_the_folder_is_trusted(untrusted_lab, name, chromium):
    from playwright.sync_api import expect

    base, workdir = untrusted_lab
    cells = json.loads((workdir / f"{name}.ipynb").read_text())["cells"]
    first_tools = next(i for i, c in enumerate(cells) if "".join(c["source"]).startswith("%%tools"))
    last = max(i for i, c in enumerate(cells) if c["cell_type"] == "code")
    with opened_page(chromium) as page:
        keep_waiting_for_slow_documents(page)
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        steps = Steps(page, Path(tempfile.mkdtemp(prefix=f"toolkernel-lab-{name}-")))
        try:
            page.goto(f"{base}/lab/tree/{name}.ipynb")
            expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle")
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            steps.outputs(first_tools).get_by_role("button", name="Trust this folder's config").click()
            # Run All stops at a failed cell: the last one ran, so none failed.
            expect(steps.cell(last).locator(".jp-InputPrompt")).to_have_text(re.compile(r"\[\d+\]:"))
            expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle")
            steps.shot("ran-all")
        except Exception:
            steps.shot("failure")
            raise
