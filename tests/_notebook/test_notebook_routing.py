"""A notebook a Jupyter Server serves is only ever changed through that server (issue 36 items 3-4).

Real Jupyter Servers on loopback, which publish themselves in a runtime folder this test
shares with toolkernel (as JupyterLab and toolkernel share `jupyter --runtime-dir`):
- paired on one notebook, every other notebook under the server's root, and the paired one
  named by a local path (relative, absolute, through a symlink), is read and changed through
  the server's document, never its file;
- a notebook a running server has open, with no pairing to that server, is refused;
- through the Contents API an edit is refused while the notebook is open in a session, and an
  edit a later save overwrote is reported by the next call.
"""

from __future__ import annotations

import asyncio
import json
import os

import nbformat
import pytest
import websockets
from conftest import NO_COLLABORATION, SERVER_TOKEN, call, free_port, server_api, start_server, stop_server
from test_notebook_live import Person, wait_until, write_notebook

from toolkernel._errors import ConnectionRequired
from toolkernel._loop import run
from toolkernel._providers._notebook import notebook_tools, pair, unpair
from toolkernel._tool import ToolContext

read, edit, run_tool = notebook_tools()

# The server saves its shared documents to disk only after this long: until then the file on disk
# is older than the document, as it is while a person types.
SLOW_SAVE = "--YDocExtension.document_save_delay=600"


@pytest.fixture(scope="module")
def lazy_collab_server(tmp_path_factory):
    pytest.importorskip("jupyter_server_ydoc")
    process, server = start_server(tmp_path_factory, SLOW_SAVE)
    yield server
    stop_server(process)


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory):
    process, server = start_server(tmp_path_factory, f"--ServerApp.jpserver_extensions={NO_COLLABORATION}")
    yield server
    stop_server(process)


@pytest.fixture
def in_root(monkeypatch):
    """A session whose working folder is `server`'s root, on a machine where `server` runs."""
    made = []

    def make(server) -> ToolContext:
        monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(server["runtime"]))
        context = ToolContext(server["root"], state={})
        made.append(context)
        return context

    yield make
    for context in made:
        run(unpair(context.state), timeout=60)


def pair_on(server, ctx: ToolContext, notebook: str):
    return run(pair(ctx.state, ctx.workdir, notebook, server=server["url"], token=SERVER_TOKEN, kernel="python3"),
               timeout=300)


def disk(server, path: str) -> str:
    return (server["root"] / path).read_text()


# --- a pairing reaches every notebook under its server's root through the server --------------

def test_other_notebooks_and_local_spellings_go_through_the_shared_document(lazy_collab_server, in_root):
    server = lazy_collab_server
    root = server["root"]
    a_ids, b_ids = write_notebook(root, "side-A.ipynb"), write_notebook(root, "side-B.ipynb")
    (root / "alias-B.ipynb").symlink_to(root / "side-B.ipynb")
    on_disk = {name: disk(server, name) for name in ("side-A.ipynb", "side-B.ipynb")}
    ctx = in_root(server)
    pair_on(server, ctx, "side-A.ipynb")

    async def scenario():
        async with Person(server, "side-B.ipynb") as b, Person(server, "side-A.ipynb") as a:
            b.type_into(0, " typed by B")
            a.type_into(0, " typed by A")
            # read by a relative path that is not the paired notebook: the document, with B's typing
            await read_until(ctx, "side-B.ipynb", "typed by B")
            got = await edit.call({"notebook_path": "side-B.ipynb", "cell_id": b_ids[1], "new_source": "x = 99"},
                                  ctx)
            assert not got.is_error, got.texts
            b.type_into(0, " and more")  # typing goes on after the edit, in the same cell's text
            await wait_until(lambda: b.cell(1)["source"] == "x = 99", "the edit at B's")
            # through a symlink: the same document
            via_link = await edit.call({"notebook_path": "alias-B.ipynb", "cell_id": b_ids[2],
                                        "new_source": "print(x)"}, ctx)
            assert not via_link.is_error, via_link.texts
            await wait_until(lambda: b.cell(2)["source"] == "print(x)", "the edit through the link at B's")
            # the paired notebook by its absolute path: the document, not the stale file
            absolute = str(root / "side-A.ipynb")
            await read_until(ctx, absolute, "typed by A")
            got = await edit.call({"notebook_path": absolute, "cell_id": a_ids[1], "new_source": "x = 7"}, ctx)
            assert not got.is_error, got.texts
            await wait_until(lambda: a.cell(1)["source"] == "x = 7", "the edit by absolute path at A's")
            ran = await run_tool.call({"notebook_path": absolute, "code": "print(6 * 7)"}, ctx)
            assert ran.texts[0].strip() == "42", ran.texts  # the pairing's kernel, found by the local path
            return b.cell(0)["source"], a.cell(0)["source"]

    b_title, a_title = run(scenario(), timeout=600)
    assert b_title == "# Data typed by B and more" and a_title == "# Data typed by A"  # not a character lost
    # nothing was written behind the server's back (it saves only after 600 s)
    assert {name: disk(server, name) for name in on_disk} == on_disk


async def read_until(ctx: ToolContext, path: str, text: str) -> None:
    """notebook_read of `path` until it shows `text` (the typing reaches the agent's copy of the room)."""
    got = ""
    for _ in range(600):
        got = (await read.call({"notebook_path": path}, ctx)).texts[0]
        if text in got:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} never read with {text!r}: {got}")


def test_a_notebook_under_the_paired_servers_root_goes_through_its_contents_api(plain_server, in_root):
    server = plain_server
    root = server["root"]
    write_notebook(root, "cc-A.ipynb")
    b_ids = write_notebook(root, "cc-B.ipynb")
    ctx = in_root(server)
    pair_on(server, ctx, "cc-A.ipynb")
    call(read, ctx, notebook_path=str(root / "cc-B.ipynb"))
    # someone has cc-B open: only a call that goes through the server knows, and refuses
    with BrowserOn(server, "cc-B.ipynb"):
        refused = call(edit, ctx, notebook_path="cc-B.ipynb", cell_id=b_ids[1], new_source="x = 1")
    assert refused.is_error and "pip install jupyter-collaboration" in refused.texts[0]
    assert nbformat.read(root / "cc-B.ipynb", as_version=4).cells[1].source == "x = 20"


def test_write_file_and_edit_file_leave_a_served_notebook_to_the_server(plain_server, in_root):
    """The file tools would write behind the server's back: they are refused, the file untouched."""
    from toolkernel._providers._tools.files import edit_file, write_file

    server = plain_server
    root = server["root"]
    write_notebook(root, "ff-A.ipynb")
    write_notebook(root, "ff-B.ipynb")
    before = disk(server, "ff-B.ipynb")
    ctx = in_root(server)
    (root / "plain.txt").write_text("a")
    assert not call(write_file, ctx, path="ff-B.ipynb", content="{}").is_error  # no pairing yet: a file
    (root / "ff-B.ipynb").write_text(before)
    pair_on(server, ctx, "ff-A.ipynb")
    # "cell_type" occurs twice: the refusal comes before the file is read (a random cell id with
    # "20" in it made "20" occur twice, and the answer was the one about old_string).
    for tool, arguments in ((write_file, {"content": "{}"}), (edit_file, {"old_string": "cell_type", "new_string": "x"}),
                            (edit_file, {"old_string": "x = 20", "new_string": "x = 2"})):
        for path in ("ff-B.ipynb", str(root / "ff-A.ipynb")):
            refused = call(tool, ctx, path=path, **arguments)
            assert refused.is_error and "change it with notebook-edit" in refused.texts[0], refused.texts
            assert server["url"].rstrip("/") in refused.texts[0]
    assert disk(server, "ff-B.ipynb") == before
    assert not call(write_file, ctx, path="plain.txt", content="b").is_error  # other files are files


@pytest.mark.parametrize("name", ["odd?type=file&x.ipynb", "odd #1 %41.ipynb"])
def test_a_notebook_named_like_a_url_reaches_its_own_document_and_no_other_file(plain_server, in_root, name):
    server = plain_server
    root = server["root"]
    write_notebook(root, "url-A.ipynb")
    ids = write_notebook(root, name)
    ctx = in_root(server)
    pair_on(server, ctx, "url-A.ipynb")
    files = lambda: sorted(p.name for p in root.iterdir() if p.name != ".ipynb_checkpoints")  # noqa: E731
    before = files()
    assert "x = 20" in call(read, ctx, notebook_path=name).texts[0]
    done = call(edit, ctx, notebook_path=str(root / name), cell_id=ids[1], new_source="x = 5")
    assert not done.is_error, done.texts
    assert nbformat.read(root / name, as_version=4).cells[1].source == "x = 5"
    assert files() == before  # no file named by a part of the name


# --- a notebook a running server has open, with no pairing to it ---------------------------------

def test_a_notebook_open_on_a_server_this_session_is_not_paired_with_is_refused(plain_server, in_root):
    server = plain_server
    root = server["root"]
    ids = write_notebook(root, "elsewhere.ipynb")
    closed_ids = write_notebook(root, "closed.ipynb")
    ctx = in_root(server)
    with BrowserOn(server, "elsewhere.ipynb"):
        for tool, arguments in ((read, {}), (edit, {"cell_id": ids[1], "new_source": "x = 1"})):
            with pytest.raises(ConnectionRequired) as refused:
                call(tool, ctx, notebook_path=str(root / "elsewhere.ipynb"), **arguments)
            message = refused.value.message
            assert f"--server {server['url']}" in message and "%tools pair elsewhere.ipynb" in message
            assert SERVER_TOKEN not in message
        # a notebook it does not have open is the local file's
        call(read, ctx, notebook_path="closed.ipynb")
        done = call(edit, ctx, notebook_path="closed.ipynb", cell_id=closed_ids[1], new_source="x = 2")
        assert not done.is_error, done.texts
    assert nbformat.read(root / "elsewhere.ipynb", as_version=4).cells[1].source == "x = 20"
    assert nbformat.read(root / "closed.ipynb", as_version=4).cells[1].source == "x = 2"


# --- the Contents API: never a silent loss -------------------------------------------------------

class BrowserOn:
    """JupyterLab without collaboration with `path` open: the notebook's session, and a connection
    to its kernel's channels (started when there is none, ended with it)."""

    def __init__(self, server, path: str) -> None:
        self.server, self.path = server, path

    def __enter__(self) -> BrowserOn:
        found = [s for s in server_api(self.server, "GET", "api/sessions") if s["path"] == self.path]
        self.created = not found
        self.session = found[0] if found else server_api(self.server, "POST", "api/sessions", json={
            "path": self.path, "name": self.path, "type": "notebook", "kernel": {"name": "python3"}})
        url = (self.server["url"].replace("http", "ws", 1) + f"api/kernels/{self.session['kernel']['id']}/channels"
               + "?session_id=browser")
        headers = {"Authorization": f"token {SERVER_TOKEN}"}

        async def connect():
            return await websockets.connect(url, additional_headers=headers)

        self.ws = run(connect(), timeout=120)
        return self

    def __exit__(self, *exc) -> None:
        run(self.ws.close(), timeout=60)
        if self.created:
            server_api(self.server, "DELETE", f"api/sessions/{self.session['id']}")


def test_contents_api_edit_is_refused_while_the_notebook_is_open_in_a_session(plain_server, in_root):
    server = plain_server
    root = server["root"]
    ids = write_notebook(root, "open.ipynb")
    ctx = in_root(server)
    pair_on(server, ctx, "open.ipynb")  # the pairing's own session and kernel channels are no person's
    call(read, ctx, notebook_path="open.ipynb")
    with BrowserOn(server, "open.ipynb"):
        for tool, arguments in ((edit, {"cell_id": ids[1], "new_source": "x = 1"}), (run_tool, {"cell_id": ids[1]})):
            refused = call(tool, ctx, notebook_path="open.ipynb", **arguments)
            assert refused.is_error, refused.texts
            assert "is open in a session" in refused.texts[0] and "pip install jupyter-collaboration" in \
                refused.texts[0] and "closed" in refused.texts[0]
        assert nbformat.read(root / "open.ipynb", as_version=4).cells[1].source == "x = 20"
    wait_for_no_browser(server, "open.ipynb")
    done = call(edit, ctx, notebook_path="open.ipynb", cell_id=ids[1], new_source="x = 1")
    assert not done.is_error, done.texts
    assert nbformat.read(root / "open.ipynb", as_version=4).cells[1].source == "x = 1"


def wait_for_no_browser(server, path: str) -> None:
    """The server counts a closed connection out when its handler ends."""
    async def closed():
        while True:
            sessions = server_api(server, "GET", "api/sessions")
            if all(s["kernel"].get("connections", 0) <= 1 for s in sessions if s["path"] == path):
                return
            await asyncio.sleep(0.05)

    run(closed(), timeout=120)


def test_a_browser_save_over_an_edit_is_reported_by_the_next_call(plain_server, in_root):
    server = plain_server
    root = server["root"]
    ids = write_notebook(root, "saved-over.ipynb")
    ctx = in_root(server)
    pair_on(server, ctx, "saved-over.ipynb")
    call(read, ctx, notebook_path="saved-over.ipynb")
    browser_copy = server_api(server, "GET", "api/contents/saved-over.ipynb")["content"]
    for round_, (source, next_call) in enumerate((("x = 1", "edit"), ("x = 2", "read"))):
        done = call(edit, ctx, notebook_path="saved-over.ipynb", cell_id=ids[1], new_source=source)
        assert not done.is_error, done.texts
        browser_save(server, "saved-over.ipynb", browser_copy)  # "File Changed" → Overwrite, in JupyterLab
        if next_call == "edit":
            got = call(edit, ctx, notebook_path="saved-over.ipynb", cell_id=ids[2], new_source="print(1)")
            assert got.is_error
        else:
            got = call(read, ctx, notebook_path="saved-over.ipynb")
            assert not got.is_error and got.texts[0].startswith("WARNING: ")
        assert f"overwrote this session's edit of cell(s) {ids[1]}" in got.texts[0], (round_, got.texts)
        assert "pip install jupyter-collaboration" in got.texts[0]
        again = call(read, ctx, notebook_path="saved-over.ipynb")  # said once
        assert "WARNING" not in again.texts[0] and "x = 20" in again.texts[0]
    # a save that kept the edit (the person reloaded first) is nobody's loss
    call(edit, ctx, notebook_path="saved-over.ipynb", cell_id=ids[1], new_source="x = 3")
    kept = server_api(server, "GET", "api/contents/saved-over.ipynb")["content"]
    kept["cells"][0]["source"] = "# Data, retitled"
    browser_save(server, "saved-over.ipynb", kept)
    assert "WARNING" not in call(read, ctx, notebook_path="saved-over.ipynb").texts[0]


def test_any_later_notebook_call_reports_an_edit_a_save_undid(plain_server, in_root):
    server = plain_server
    root = server["root"]
    ids = write_notebook(root, "ow-A.ipynb")
    write_notebook(root, "ow-B.ipynb")
    ctx = in_root(server)
    pair_on(server, ctx, "ow-A.ipynb")
    call(read, ctx, notebook_path="ow-A.ipynb")
    browser_copy = server_api(server, "GET", "api/contents/ow-A.ipynb")["content"]
    for next_call in ("run code", "read another notebook"):
        call(read, ctx, notebook_path="ow-A.ipynb")
        assert not call(edit, ctx, notebook_path="ow-A.ipynb", cell_id=ids[1], new_source="x = 1").is_error
        browser_save(server, "ow-A.ipynb", browser_copy)
        if next_call == "run code":
            got = call(run_tool, ctx, notebook_path="ow-A.ipynb", code="print('ran')").texts[0]
            assert got.startswith("ran\n"), got
        else:
            got = call(read, ctx, notebook_path="ow-B.ipynb").texts[0]
        assert "WARNING: a later save of ow-A.ipynb" in got and ids[1] in got, (next_call, got)
        assert "WARNING" not in call(run_tool, ctx, notebook_path="ow-A.ipynb", code="1").texts[0]  # said once


def browser_save(server, path: str, content: dict) -> None:
    before = server_api(server, "GET", f"api/contents/{path}?content=0")["last_modified"]
    while True:  # a save in the same clock tick as the edit would look like no save at all
        server_api(server, "PUT", f"api/contents/{path}",
                   json={"type": "notebook", "format": "json", "content": json.loads(json.dumps(content))})
        if server_api(server, "GET", f"api/contents/{path}?content=0")["last_modified"] != before:
            return



# --- the case, through `toolkernel serve` -----------------------------------------------

@pytest.mark.slow
def test_serve_paired_on_side_a_edits_side_b_and_side_a_by_path_through_the_room(tmp_path, tmp_path_factory,
                                                                                   monkeypatch):
    pytest.importorskip("jupyter_server_ydoc")
    import anyio
    from test_serve import project, run as run_serve
    from test_serve_notebook import POLICY, serving, text

    work = project(tmp_path, POLICY)
    process, server = start_server(tmp_path_factory, SLOW_SAVE, root=work)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(server["runtime"]))  # serve runs on the server's machine
    a_ids, b_ids = write_notebook(work, "side-A.ipynb"), write_notebook(work, "side-B.ipynb")
    on_disk = {name: (work / name).read_text() for name in ("side-A.ipynb", "side-B.ipynb")}
    typed = "".join(f"{n % 10}" for n in range(40))

    async def person_types(person: Person) -> None:
        for character in typed:
            person.type_into(0, character)
            await anyio.sleep(0.02)

    async def body():
        options = ("--notebook", "side-A.ipynb", "--server", server["url"], "--server-token", SERVER_TOKEN)
        async with serving(work, *options) as client, Person(server, "side-B.ipynb") as b, \
                Person(server, "side-A.ipynb") as a:
            a.type_into(0, " typed by A")
            async with anyio.create_task_group() as group:
                group.start_soon(person_types, b)
                got = {"read B": await client.call_tool("notebook_read", {"notebook_path": "side-B.ipynb"})}
                got["edit B"] = await client.call_tool("notebook_edit", {
                    "notebook_path": "side-B.ipynb", "cell_id": b_ids[1], "new_source": "x = 99"})
            absolute = str(work / "side-A.ipynb")
            for _ in range(600):
                got["read A"] = await client.call_tool("notebook_read", {"notebook_path": absolute})
                if "typed by A" in text(got["read A"]):
                    break
                await anyio.sleep(0.1)
            got["edit A"] = await client.call_tool("notebook_edit", {
                "notebook_path": absolute, "cell_id": a_ids[1], "new_source": "x = 7"})
            await wait_until(lambda: b.cell(1)["source"] == "x = 99" and a.cell(1)["source"] == "x = 7",
                             "both edits in the room")
            got["B"], got["A"] = b.cell(0)["source"], a.cell(0)["source"]
            return got

    try:
        got = run_serve(body)
    finally:
        stop_server(process)
    for step in ("read B", "edit B", "read A", "edit A"):
        assert not got[step].is_error, (step, text(got[step]))
    assert "typed by A" in text(got["read A"])  # the room's document, not the file on disk
    assert got["B"] == "# Data" + typed and got["A"] == "# Data typed by A"  # 0 characters lost
    assert {name: (work / name).read_text() for name in on_disk} == on_disk  # no write behind the server


# --- what the runtime folder says ------------------------------------------------------------------

def test_runtime_files_that_say_nothing_are_ignored_and_a_silent_server_counts_as_having_it_open(
        tmp_path, monkeypatch):
    runtime, root = tmp_path / "runtime", tmp_path / "root"
    runtime.mkdir()
    root.mkdir()
    ids = write_notebook(root, "nb.ipynb")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    silent = f"http://127.0.0.1:{free_port()}/"  # nothing listens there
    (runtime / "jpserver-1.json").write_text("{not json")
    (runtime / "jpserver-2.json").write_text(json.dumps(["a list"]))
    (runtime / "jpserver-3.json").write_text(json.dumps({"url": silent, "root_dir": str(root), "pid": 2 ** 22 + 7}))
    ctx = ToolContext(root, state={})
    call(read, ctx, notebook_path="nb.ipynb")  # a dead server's file says nothing
    assert not call(edit, ctx, notebook_path="nb.ipynb", cell_id=ids[1], new_source="x = 1").is_error
    (runtime / "jpserver-4.json").write_text(json.dumps({"url": silent, "root_dir": str(root), "pid": os.getpid()}))
    with pytest.raises(ConnectionRequired, match=f"open on the Jupyter Server at {silent}"):
        call(edit, ctx, notebook_path="nb.ipynb", cell_id=ids[1], new_source="x = 2")
    assert nbformat.read(root / "nb.ipynb", as_version=4).cells[1].source == "x = 1"
