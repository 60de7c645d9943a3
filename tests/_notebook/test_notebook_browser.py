"""A person has the notebook open in JupyterLab (Debian's Chromium through Playwright) while the agent
edits and runs it through the shared document: they see the edit and the output appear, keep their own
unsaved typing, and get no "file changed on disk" dialog."""

from __future__ import annotations

import json
import shutil

import nbformat
import pytest
from conftest import SERVER_TOKEN, call, start_server, stop_server
from jupyter_server_helpers import keep_waiting_for_slow_documents
from nbformat.v4 import new_code_cell, new_notebook

from toolkernel._loop import run
from toolkernel._providers._notebook import notebook_tools, pair, unpair
from toolkernel._tool import ToolContext

read, edit, run_tool = notebook_tools()
CHROMIUM = "/usr/bin/chromium"
WAIT_MS = 60_000  # generous: the machine is shared


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    pytest.importorskip("jupyterlab")
    pytest.importorskip("jupyter_server_ydoc")
    if not shutil.which(CHROMIUM):
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    settings = tmp_path_factory.mktemp("lab-settings")
    news = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    process, server = start_server(tmp_path_factory, "--YDocExtension.document_save_delay=0.3", app="jupyterlab",
                                   env={"JUPYTERLAB_SETTINGS_DIR": str(settings)})
    yield server
    stop_server(process)


@pytest.fixture
def browser_page():
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page()
            keep_waiting_for_slow_documents(page)
            yield page
        finally:
            browser.close()


def test_the_person_sees_the_agents_edit_and_output_live_and_keeps_their_typing(lab, browser_page, tmp_path):
    nb = new_notebook(cells=[new_code_cell("a = 1"), new_code_cell("x = 20"), new_code_cell("print(x * 2)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, lab["root"] / "open.ipynb")
    ids = [cell.id for cell in nb.cells]
    ctx = ToolContext(tmp_path, state={})
    run(pair(ctx.state, tmp_path, "open.ipynb", server=lab["url"], token=SERVER_TOKEN, kernel="python3"),
        timeout=120)
    try:
        page = browser_page
        page.goto(f"{lab['url']}lab/tree/open.ipynb?token={SERVER_TOKEN}")
        cells = page.locator(".jp-Notebook .jp-Cell")
        cells.nth(2).wait_for(timeout=WAIT_MS)
        editor = cells.nth(0).locator(".cm-content")
        editor.click()
        page.keyboard.press("End")
        page.keyboard.type("  # typed, not saved")

        call(read, ctx, notebook_path="open.ipynb")
        assert not call(edit, ctx, notebook_path="open.ipynb", cell_id=ids[1], new_source="x = 50").is_error
        call(run_tool, ctx, notebook_path="open.ipynb", cell_id=ids[1])
        result = call(run_tool, ctx, notebook_path="open.ipynb", cell_id=ids[2])
        assert result.texts[0].startswith("100\n")

        page.wait_for_function("document.querySelectorAll('.jp-Notebook .jp-Cell')[1]"
                               ".querySelector('.cm-content').innerText.includes('x = 50')", timeout=WAIT_MS)
        cells.nth(2).locator(".jp-OutputArea-output", has_text="100").wait_for(timeout=WAIT_MS)
        prompt = cells.nth(2).locator(".jp-InputArea-prompt").inner_text()
        assert prompt.strip("[]: ").isdigit(), prompt  # the execution count, as after pressing run
        assert "a = 1  # typed, not saved" in editor.inner_text()
        page.wait_for_timeout(1500)  # the server has saved the document to the file by now
        assert page.locator(".jp-Dialog", has_not_text="Directory not found").count() == 0  # a transient listing error is not ours
        assert "a = 1  # typed, not saved" in editor.inner_text()
        saved = nbformat.read(lab["root"] / "open.ipynb", as_version=4)
        assert saved.cells[1].source == "x = 50" and saved.cells[2].outputs[0].text == "100\n"
    finally:
        run(unpair(ctx.state), timeout=60)


async def _on_its_loop(look):
    """`look()` on toolkernel's private loop, whose thread owns the shared document: pycrdt
    panics ("Object accessed from a different thread") when another thread reads it."""
    return look()


def test_an_edit_of_the_cell_the_person_is_typing_in_is_refused(lab, browser_page, tmp_path):
    nb = new_notebook(cells=[new_code_cell("a = 1"), new_code_cell("x = 20"), new_code_cell("print(x * 2)")])
    nbformat.write(nb, lab["root"] / "typing.ipynb")
    ids = [cell.id for cell in nb.cells]
    ctx = ToolContext(tmp_path, state={})
    pairing = run(pair(ctx.state, tmp_path, "typing.ipynb", server=lab["url"], token=SERVER_TOKEN,
                       kernel="python3"), timeout=120)
    try:
        page = browser_page
        # a workspace of its own: the one of the test before would reopen its notebook beside this one
        page.goto(f"{lab['url']}lab/workspaces/typing/tree/typing.ipynb?token={SERVER_TOKEN}")
        cells = page.locator(".jp-Notebook .jp-Cell")
        cells.nth(2).wait_for(timeout=WAIT_MS)
        cells.nth(1).locator(".cm-content").click()
        page.keyboard.press("End")
        page.keyboard.type("  # still thinking")
        store = pairing.store
        page.wait_for_timeout(200)
        for _ in range(WAIT_MS // 100):  # their typing has reached the agent's copy
            if "thinking" in run(_on_its_loop(lambda: str(store._ynb.ycells[1]["source"])), timeout=30):
                break
            page.wait_for_timeout(100)
        call(read, ctx, notebook_path="typing.ipynb")  # read after the typing: the text is what was read
        refused = call(edit, ctx, notebook_path="typing.ipynb", cell_id=ids[1], new_source="x = 0")
        assert refused.is_error and f"is editing cell {ids[1]} of typing.ipynb" in refused.texts[0]
        assert not call(edit, ctx, notebook_path="typing.ipynb", cell_id=ids[2], new_source="print(x)").is_error
        page.wait_for_timeout(500)
        assert "x = 20  # still thinking" in cells.nth(1).locator(".cm-content").inner_text()
        # they click into the first cell: the second is free again
        cells.nth(0).locator(".cm-content").click()
        page.keyboard.press("End")
        for _ in range(WAIT_MS // 100):
            if run(_on_its_loop(lambda: store.editors.editing(store._ynb.ycells[0])), timeout=30) is not None:
                break
            page.wait_for_timeout(100)
        call(read, ctx, notebook_path="typing.ipynb")
        assert not call(edit, ctx, notebook_path="typing.ipynb", cell_id=ids[1], new_source="x = 0").is_error
        page.wait_for_function("document.querySelectorAll('.jp-Notebook .jp-Cell')[1]"
                               ".querySelector('.cm-content').innerText.includes('x = 0')", timeout=WAIT_MS)
    finally:
        run(unpair(ctx.state), timeout=60)


def test_a_person_typing_in_another_notebook_of_the_server_loses_nothing_to_the_agents_edits(
        lab, browser_page, monkeypatch):
    """Issue 36: paired on side-A, the agent edits side-B (by its local path) while a person types in it."""
    import threading

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(lab["runtime"]))  # the agent runs where the server runs
    ids = {}
    for name in ("side-A.ipynb", "side-B.ipynb"):
        nb = new_notebook(cells=[new_code_cell("a = 1"), new_code_cell("x = 20"), new_code_cell("print(x * 2)")])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, lab["root"] / name)
        ids[name] = [cell.id for cell in nb.cells]
    ctx = ToolContext(lab["root"], state={})
    run(pair(ctx.state, ctx.workdir, "side-A.ipynb", server=lab["url"], token=SERVER_TOKEN, kernel="python3"),
        timeout=120)
    typed = " # " + "".join(f"{n % 10}" for n in range(60))
    results: list = []

    def agent() -> None:
        results.append(call(read, ctx, notebook_path="side-B.ipynb"))
        results.append(call(edit, ctx, notebook_path="side-B.ipynb", cell_id=ids["side-B.ipynb"][1],
                            new_source="x = 99"))
        results.append(call(edit, ctx, notebook_path=str(lab["root"] / "side-B.ipynb"),
                            cell_id=ids["side-B.ipynb"][2], new_source="print(x)"))

    try:
        page = browser_page
        page.goto(f"{lab['url']}lab/workspaces/side-b/tree/side-B.ipynb?token={SERVER_TOKEN}")
        cells = page.locator(".jp-Notebook .jp-Cell")
        cells.nth(2).wait_for(timeout=WAIT_MS)
        editor = cells.nth(0).locator(".cm-content")
        editor.click()
        page.keyboard.press("End")
        page.keyboard.type(typed[:10], delay=30)
        edits = threading.Thread(target=agent)
        edits.start()
        page.keyboard.type(typed[10:], delay=30)  # typing goes on while the agent edits
        edits.join()
        for result in results:
            assert not result.is_error, result.texts
        page.wait_for_function("[...document.querySelectorAll('.jp-Notebook .jp-Cell')].slice(1, 3)"
                               ".map(c => c.querySelector('.cm-content').innerText).join('|') === 'x = 99|print(x)'",
                               timeout=WAIT_MS)
        page.keyboard.type("!", delay=30)
        page.wait_for_timeout(1500)  # the server has saved the document to the file by now
        assert page.locator(".jp-Dialog", has_not_text="Directory not found").count() == 0  # a transient listing error is not ours
        assert editor.inner_text() == "a = 1" + typed + "!"  # 0 characters lost, none moved
        saved = nbformat.read(lab["root"] / "side-B.ipynb", as_version=4)
        assert [cell.source for cell in saved.cells] == ["a = 1" + typed + "!", "x = 99", "print(x)"]
    finally:
        run(unpair(ctx.state), timeout=60)
