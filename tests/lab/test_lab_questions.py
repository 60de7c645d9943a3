"""Issue 48 in a real browser (items 1, 2 and 4): one JupyterLab for the module, Debian's Chromium
through Playwright. A question is answered by its buttons alone (no stdin box, before or after an
interrupt); a cell's calls that need a person are one question, answered a line at a time; the
Changes sidebar has a labelled tab and names each run's notebook, cell and first line, colours a
diff, marks a rewound run, and forces a refused rewind after a confirmation."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest
from jupyter_server_helpers import keep_waiting_for_slow_documents
from test_browser import WAIT_MS, Steps, _cells, browser_ready, chromium, running_lab  # noqa: F401


@pytest.fixture(scope="module")
def shared_lab(browser_ready, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab-questions")
    workdir = tmp / "project"
    workdir.mkdir()
    (workdir / "toolkernel.toml").write_text(
        f'[mcp_servers.github]\ncommand = {json.dumps(sys.executable)}\nargs = ["-m", "toolkernel.demo_server"]\n')
    with running_lab(tmp, workdir) as base:
        yield base, workdir


class Browser:
    def __init__(self, chromium, base: str, name: str) -> None:
        from playwright.sync_api import expect

        self.expect = expect
        self.context = chromium.new_context(viewport={"width": 1400, "height": 1000})  # a profile of its own
        self.page = self.context.new_page()
        keep_waiting_for_slow_documents(self.page)
        self.page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        self.steps = Steps(self.page, Path(tempfile.mkdtemp(prefix=f"toolkernel-lab-{name}-")))
        print(f"\nscreenshots: {self.steps.artifacts}")
        # A workspace of its own: the module's Lab would otherwise reopen the notebooks of the tests before.
        self.page.goto(f"{base}/lab/workspaces/{name}/tree/{name}.ipynb?reset")
        expect(self.page.locator("#jp-main-statusbar")).to_contain_text("Idle")
        prompt = self.steps.cell(0).locator(".jp-InputPrompt")
        for _ in range(3):  # a Shift+Enter pressed while the page still settles may be lost: press again
            self.steps.run(0)
            try:
                expect(prompt).to_have_text("[1]:", timeout=20_000)
                break
            except AssertionError:
                continue
        expect(prompt).to_have_text("[1]:")

    def close(self) -> None:
        self.context.close()


def _open(chromium, base: str, workdir: Path, name: str, *cells: str) -> Browser:
    (workdir / f"{name}.ipynb").write_text(json.dumps(_cells("%load_ext toolkernel", *cells)))
    return Browser(chromium, base, name)


def test_one_question_for_a_cells_calls_answered_a_line_at_a_time_with_no_stdin_box(shared_lab, chromium):
    base, workdir = shared_lab
    b = _open(chromium, base, workdir, "two-calls",
              "%%tools\ntools write-file path=notes.txt content=hi\ntools github delete-branch branch=fix-x\necho ran")
    expect, steps = b.expect, b.steps
    try:
        steps.run(1)
        out = steps.outputs(1)
        question = out.locator(".toolkernel-question")
        expect(question.locator(".toolkernel-call-line")).to_have_count(2)
        expect(question).to_contain_text("This script makes 2 calls that need your approval before it starts")
        expect(question.locator(".toolkernel-call-line").first).to_contain_text("tools write-file")
        expect(question.locator(".toolkernel-hint")).to_contain_text('mode = "accept-edits"')
        expect(question.get_by_role("button", name="Allow all 2 once")).to_be_visible()
        steps.shot("one-question")
        assert out.locator(".jp-Stdin").count() == 0  # the page said it shows it: no box was asked for
        lines = question.locator(".toolkernel-call-line")
        lines.nth(0).get_by_role("button", name="Allow once", exact=True).click()
        lines.nth(1).get_by_role("button", name="Always allow", exact=True).click()
        expect(out).to_contain_text("allowed once and always allowed (2 calls); running the script")
        expect(out).to_contain_text("ran")
        expect(lines.nth(1).locator(".toolkernel-chosen")).to_have_text("Always allow")
        for index in range(2):
            expect(lines.nth(index).get_by_role("button", name="Deny", exact=True)).to_be_disabled()
        assert out.locator(".jp-Stdin").count() == 0 and "Allow?" not in out.inner_text()
        steps.shot("answered-per-line")
        assert (workdir / "notes.txt").read_text() == "hi"
    except Exception:
        steps.shot("failure")
        raise
    finally:
        b.close()


def test_after_an_interrupt_nothing_looks_as_if_it_still_waits(shared_lab, chromium):
    base, workdir = shared_lab
    b = _open(chromium, base, workdir, "interrupted", "%%tools\ntools write-file path=never.txt content=x")
    expect, steps, page = b.expect, b.steps, b.page
    try:
        steps.run(1)
        out = steps.outputs(1)
        question = out.locator(".toolkernel-question")
        expect(question.get_by_role("button", name="Allow once", exact=True)).to_be_enabled()
        page.locator('[data-command="notebook:interrupt-kernel"]').first.click()
        expect(question.locator(".toolkernel-status")).to_have_text("cancelled; the call was not made")
        expect(question.get_by_role("button", name="Allow once", exact=True)).to_be_disabled()
        expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle")
        assert out.locator(".jp-Stdin").count() == 0
        steps.shot("interrupted")
        assert not (workdir / "never.txt").exists()
    except Exception:
        steps.shot("failure")
        raise
    finally:
        b.close()


def test_the_changes_sidebar_names_the_cell_colours_the_diff_marks_a_rewind_and_forces_after_asking(shared_lab,
                                                                                                   chromium):
    base, workdir = shared_lab
    (workdir / "data.txt").write_text("old line\n")
    b = _open(chromium, base, workdir, "changes", "%%tools\nprintf 'new line\\n' > data.txt\necho wrote")
    expect, steps, page = b.expect, b.steps, b.page
    try:
        steps.run(1)
        expect(steps.outputs(1)).to_contain_text("wrote")
        tab = page.locator('.jp-SideBar [data-id="toolkernel-changes"]')
        expect(tab).to_contain_text("Changes")  # a labelled entry, not an icon alone
        expect(page.locator('.jp-SideBar [data-id="toolkernel-tools"]')).to_contain_text("Tools")
        tab.click()
        panel = page.locator("#toolkernel-changes")
        run = panel.locator(".toolkernel-run").first
        expect(run.locator(".toolkernel-run-where")).to_have_text("changes.ipynb, cell 2")
        expect(run.locator(".toolkernel-run-first-line")).to_have_text("printf 'new line\\n' > data.txt")
        expect(run.locator(".toolkernel-run-when")).to_contain_text("by you")
        run.locator(".toolkernel-file").filter(has_text="data.txt").get_by_role("button", name="Diff").click()
        expect(run.locator(".toolkernel-diff-del")).to_have_text("-old line")
        expect(run.locator(".toolkernel-diff-add")).to_have_text("+new line")
        colours = run.locator(".toolkernel-diff-add").evaluate("n => getComputedStyle(n).color") != \
            run.locator(".toolkernel-diff-del").evaluate("n => getComputedStyle(n).color")
        assert colours
        steps.shot("changes-listed")

        (workdir / "data.txt").write_text("the person's edit\n")
        run.get_by_role("button", name="Rewind").click()
        said = panel.locator(".toolkernel-rewound")
        expect(said).to_contain_text("--force")
        said.get_by_role("button", name="Force").click()
        dialog = page.locator(".jp-Dialog")
        expect(dialog).to_contain_text("Rewind anyway?")
        steps.shot("force-asks")
        dialog.get_by_role("button", name="Force").click()
        expect(said).to_contain_text("rewound run")
        assert (workdir / "data.txt").read_text() == "old line\n"
        rewound = panel.locator(".toolkernel-run-rewound")
        expect(rewound).to_have_count(1)
        expect(rewound.locator(".toolkernel-rewound-mark")).to_contain_text("rewound (by run")
        assert rewound.get_by_role("button", name="Rewind").count() == 0  # no active Rewind on it
        expect(panel.locator(".toolkernel-run").first.locator(".toolkernel-run-where")).to_contain_text("Rewind of run")
        steps.shot("rewound")
    except Exception:
        steps.shot("failure")
        raise
    finally:
        b.close()
