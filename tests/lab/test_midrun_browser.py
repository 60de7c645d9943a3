"""Mid-run questions in place, in JupyterLab in a real browser (issue 37): a call built while the
script runs waits with its buttons; Allow once lets the script go on with no re-run, Deny makes the
call fail for the script to handle, and an interrupt cancels the question. No button stays live
after its question ended. The server and page come from test_browser.py's fixture."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from test_browser import WAIT_MS, Steps, _cells, browser_ready, chromium, lab, opened_page  # noqa: F401 - fixtures
from jupyter_server_helpers import keep_waiting_for_slow_documents

LOOP = 'for b in {branch}; do tools github delete-branch "branch=$b"{handle}; done\n'


def test_a_mid_run_question_is_answered_in_place_and_ends_with_its_buttons(lab, chromium):
    from playwright.sync_api import expect

    base, workdir = lab
    config = workdir / "toolkernel.toml"
    config.write_text(config.read_text().replace('[approvals]\nmid_run = "stop"\n', ""))  # the default: ask
    (workdir / "midrun.ipynb").write_text(json.dumps(_cells(
        "%load_ext toolkernel",
        "%%tools\necho before\n" + LOOP.format(branch="fix-x", handle="") + "echo went-on",
        "%%tools\n" + LOOP.format(branch="wip-auth", handle=" || echo handled-denial"),
        "%%tools\n" + LOOP.format(branch="gone", handle=""),
    )))
    artifacts = Path(tempfile.mkdtemp(prefix="toolkernel-lab-midrun-"))
    print(f"\nscreenshots: {artifacts}")
    with opened_page(chromium) as page:
        keep_waiting_for_slow_documents(page)
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        steps = Steps(page, artifacts)
        try:
            page.goto(f"{base}/lab/tree/midrun.ipynb")
            expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle")
            steps.run(0)
            expect(steps.cell(0).locator(".jp-InputPrompt")).to_have_text("[1]:")

            # Allow once: the script goes on from the call, no re-run.
            steps.run(1)
            out = steps.outputs(1)
            question = out.locator(".toolkernel-question")
            expect(question).to_contain_text('tools github delete-branch {"branch": "fix-x"} needs your approval.')
            expect(out).to_contain_text("before")
            steps.shot("mid-run-question")
            # The question is shown once: the prompt under the buttons only asks for the answer.
            assert out.inner_text().count("needs your approval") == 1
            question.get_by_role("button", name="Allow once", exact=True).click()
            expect(out).to_contain_text("deleted branch fix-x")
            expect(out).to_contain_text("went-on")
            expect(steps.cell(1).locator(".jp-InputPrompt")).to_have_text("[2]:")  # ran once, in place
            for name in ("Allow once", "Always allow", "Deny"):
                expect(question.get_by_role("button", name=name, exact=True)).to_be_disabled()
            expect(question.locator(".toolkernel-chosen")).to_have_text("Allow once")  # Deny not marked
            expect(out.locator(".toolkernel-report")).to_contain_text(
                'tools github delete-branch {"branch": "fix-x"}: allowed once')
            assert len(re.findall(r"allowed once; making the call", out.inner_text())) == 1
            assert "%tools approve" not in out.inner_text()
            steps.shot("mid-run-allowed")

            # Deny: the call fails with `denied`, and the script's own handling decides.
            steps.run(2)
            out = steps.outputs(2)
            out.locator(".toolkernel-question").get_by_role("button", name="Deny", exact=True).click()
            expect(out).to_contain_text("handled-denial")
            expect(out).to_contain_text('"code": "denied"')
            expect(out.locator(".toolkernel-report")).to_contain_text("denied")
            expect(out.locator(".toolkernel-question .toolkernel-chosen")).to_have_text("Deny")
            steps.shot("mid-run-denied")

            # Interrupt while the question is open: it is cancelled, its buttons end, one true line.
            steps.run(3)
            out = steps.outputs(3)
            question = out.locator(".toolkernel-question")
            expect(question.get_by_role("button", name="Allow once", exact=True)).to_be_enabled()
            page.locator('[data-command="notebook:interrupt-kernel"]').first.click()
            expect(question.locator(".toolkernel-status")).to_have_text("cancelled; the call was not made")
            expect(question.get_by_role("button", name="Allow once", exact=True)).to_be_disabled()
            expect(out).to_contain_text("interrupted while a person was asked about tools github delete-branch")
            expect(out.locator(".toolkernel-report")).to_contain_text("cancelled")
            assert "printed before" not in out.inner_text() and "code 130" not in out.inner_text()
            stdin = out.locator("input.jp-Stdin-input")
            if stdin.count():
                expect(stdin).to_be_disabled()
            expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle")
            steps.shot("mid-run-interrupted")
        except Exception:
            steps.shot("failure")
            raise
