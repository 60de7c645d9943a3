"""Notebooks paired with --server are read, edited and run THROUGH the server.

- A plain Jupyter Server: the Contents API (paths from the server's root).
- A Jupyter Server with jupyter-collaboration: the shared Y.js document. A second
  Y.js client in the same room plays the person who has the notebook open in
  JupyterLab: their unsaved typing, edits racing theirs, outputs they see live.
"""

from __future__ import annotations

import asyncio
import re
import time
from urllib.parse import quote, urlencode

import httpx
import nbformat
import pytest
from conftest import NO_COLLABORATION, SERVER_TOKEN, call, old_notebook_json, start_server, stop_server
from jupyter_server_helpers import GATEWAY_TOKEN, gateway_server_args, start_gateway
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from toolkernel._errors import ConnectionRequired
from toolkernel._loop import run
from toolkernel._providers._notebook import notebook_tools, pair, pairings, unpair
from toolkernel._tool import ToolContext

read, edit, run_tool = notebook_tools()


def three_cells() -> nbformat.NotebookNode:
    nb = new_notebook(cells=[new_markdown_cell("# Data"), new_code_cell("x = 20"), new_code_cell("print(x * 2)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def write_notebook(root, path: str) -> list[str]:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    nb = three_cells()
    nbformat.write(nb, root / path)
    return [cell.id for cell in nb.cells]


@pytest.fixture
def kernel_dir_ctx(tmp_path):
    """The kernel runs in a folder of its own, not the server's root."""
    context = ToolContext(tmp_path, state={})
    yield context
    run(unpair(context.state), timeout=60)


def pair_with(server, ctx, notebook: str):
    return run(pair(ctx.state, ctx.workdir, notebook, server=server["url"], token=SERVER_TOKEN, kernel="python3"),
               timeout=300)


# --- a plain Jupyter Server: the Contents API -------------------------------------------------

def test_contents_api_paths_are_the_servers_and_edits_go_through_it(jupyter_server, kernel_dir_ctx):
    root = jupyter_server["root"]
    ids = write_notebook(root, "work/ds.ipynb")
    # the kernel's own folder has a different notebook of the same relative name: it must not be touched
    (kernel_dir_ctx.workdir / "work").mkdir()
    nbformat.write(new_notebook(cells=[new_code_cell("local copy")]), kernel_dir_ctx.workdir / "work/ds.ipynb")
    pairing = pair_with(jupyter_server, kernel_dir_ctx, "work/ds.ipynb")
    assert "Contents API" in pairing.describe()
    text = call(read, kernel_dir_ctx, notebook_path="work/ds.ipynb").texts[0]
    assert f"id={ids[1]} code [ ]\nx = 20" in text and "local copy" not in text
    result = call(edit, kernel_dir_ctx, notebook_path="work/ds.ipynb", cell_id=ids[1], new_source="x = 21")
    assert result.value()["notebook_path"] == "work/ds.ipynb"
    assert nbformat.read(root / "work/ds.ipynb", as_version=4).cells[1].source == "x = 21"
    assert "local copy" in (kernel_dir_ctx.workdir / "work/ds.ipynb").read_text()
    # the run writes outputs back through the server too
    call(run_tool, kernel_dir_ctx, notebook_path="work/ds.ipynb", cell_id=ids[1])
    result = call(run_tool, kernel_dir_ctx, notebook_path="work/ds.ipynb", cell_id=ids[2])
    assert result.texts[0].startswith("42\n[cell ")
    saved = nbformat.read(root / "work/ds.ipynb", as_version=4).cells[2]
    assert saved.outputs[0].text == "42\n" and saved.execution_count is not None


def test_contents_api_refuses_an_edit_after_someone_saved_the_notebook(jupyter_server, kernel_dir_ctx):
    root = jupyter_server["root"]
    ids = write_notebook(root, "stale.ipynb")
    pair_with(jupyter_server, kernel_dir_ctx, "stale.ipynb")
    call(read, kernel_dir_ctx, notebook_path="stale.ipynb")
    nb = nbformat.read(root / "stale.ipynb", as_version=4)
    nb.cells[0].source = "# Data, retitled by a person"
    nbformat.write(nb, root / "stale.ipynb")
    result = call(edit, kernel_dir_ctx, notebook_path="stale.ipynb", cell_id=ids[1], new_source="x = 1")
    assert result.is_error and "changed since you last read it" in result.texts[0]
    assert nbformat.read(root / "stale.ipynb", as_version=4).cells[0].source == "# Data, retitled by a person"


def test_a_notebook_that_is_not_on_the_server_is_a_clear_error(jupyter_server, kernel_dir_ctx):
    pair_with(jupyter_server, kernel_dir_ctx, "later.ipynb")
    result = call(read, kernel_dir_ctx, notebook_path="later.ipynb")
    assert result.is_error and "no notebook later.ipynb under the root of the Jupyter Server" in result.texts[0]
    # an insert creates it, through the server
    assert not call(edit, kernel_dir_ctx, notebook_path="later.ipynb", edit_mode="insert", cell_type="code",
                    new_source="1 + 1").is_error
    assert nbformat.read(jupyter_server["root"] / "later.ipynb", as_version=4).cells[0].source == "1 + 1"


# --- server paths before the approval layer ---------------------------------------------------

def checked_calls(ctx, policy):
    """A real dispatcher over `ctx`'s session state; its approver records each question and says no."""
    from toolkernel._approval._approvals import Approvals
    from toolkernel._approval._approver import Answer
    from toolkernel._approval._dispatch import CallEnv, Dispatcher
    from toolkernel._approval._hooks import Hooks

    asked = []

    async def approver(request):
        asked.append({"reason": request.reason, "input": dict(request.call.input), **request.call.shown()})
        return Answer.DENY

    env = CallEnv(workdir=ctx.workdir, policy=policy, approvals=Approvals(ctx.workdir), hooks=Hooks(),
                  settings={}, state=ctx.state, approver=approver)
    return Dispatcher(env), asked


def test_a_server_notebook_path_is_checked_against_the_servers_root_not_the_workspace(jupyter_server,
                                                                                     kernel_dir_ctx):
    from toolkernel._approval._policy import Policy
    from toolkernel._approval._run import Run
    from toolkernel._errors import Denied, InvalidInput

    root = jupyter_server["root"]
    ids = write_notebook(root, "team/ds.ipynb")
    write_notebook(root, "team/secret.ipynb")
    pair_with(jupyter_server, kernel_dir_ctx, "/team/ds.ipynb")
    pair_with(jupyter_server, kernel_dir_ctx, "team/secret.ipynb")
    policy = Policy(deny=("notebook_edit(notebook_path=team/secret*)",), ask=("notebook_read(notebook_path=team/*)",))
    dispatcher, asked = checked_calls(kernel_dir_ctx, policy)

    def make(tool, **arguments):
        return run(dispatcher.call(tool, arguments, Run()), timeout=300)

    # The rules see the path as the server names it, however the call spells it; the question names
    # the server path and the server, and no local path.
    for spelling in ("/team/ds.ipynb", "./team/x/../ds.ipynb", "team/ds.ipynb"):
        with pytest.raises(Denied):
            make(read, notebook_path=spelling)
    assert [q["input"]["notebook_path"] for q in asked] == ["team/ds.ipynb"] * 3
    assert asked[0]["reason"] == "the rule 'notebook_read(notebook_path=team/*)' asks for approval"
    assert asked[0]["server"] == jupyter_server["url"] and str(kernel_dir_ctx.workdir) not in str(asked[0])
    for spelling in ("/team/secret.ipynb", "team//secret.ipynb", "team/../team/secret.ipynb"):
        with pytest.raises(Denied, match="denied by the rule"):
            make(edit, notebook_path=spelling, cell_id=ids[1], new_source="leaked = 1")
    assert "leaked" not in (root / "team/secret.ipynb").read_text()

    # Without rules, a path inside the server's root is inside the boundary: nothing asks, even though
    # "/team/ds.ipynb" is no path in the kernel's workspace.
    dispatcher, asked = checked_calls(kernel_dir_ctx, Policy(mode="accept-edits"))
    assert "x = 20" in make(read, notebook_path="/team/ds.ipynb").texts[0]
    assert not make(edit, notebook_path="/team/ds.ipynb", cell_id=ids[1], new_source="x = 2").is_error
    assert asked == [] and nbformat.read(root / "team/ds.ipynb", as_version=4).cells[1].source == "x = 2"

    # A `..` that leaves the server's root names no server notebook: it is refused at pairing, and in a
    # call it is a local path, outside the workspace, so it asks.
    with pytest.raises(InvalidInput, match="leads out of the server's root"):
        pair_with(jupyter_server, kernel_dir_ctx, "team/../../ds.ipynb")
    with pytest.raises(Denied):
        make(read, notebook_path="team/../../ds.ipynb")
    assert asked[-1]["reason"] == "the call touches a path outside the workspace" and "server" not in asked[-1]


def read_in_a_script(server, workdir, notebook: str):
    """`tools notebook-read` in a Bashkit script of a session, as an agent's cell runs it: the script's
    thread has a loop of its own, the server connections live on toolkernel's private loop."""
    from kernel_helpers import RecordingSink

    from toolkernel._session import Session

    session = Session(workdir)
    try:
        run(pair(session.state, workdir, notebook, server=server["url"], token=SERVER_TOKEN, kernel="python3"),
            timeout=300)
        sink = RecordingSink()
        result = session.run_script(f"tools notebook-read notebook_path={notebook}", sink)
        return result.exit_code, sink
    finally:
        run(unpair(session.state), timeout=60)
        session.close()


@pytest.mark.slow
def test_unpairing_from_a_server_that_died_forgets_every_pairing_and_says_which_did_not_close(
        tmp_path_factory, kernel_dir_ctx):
    process, server = start_server(tmp_path_factory, f"--ServerApp.jpserver_extensions={NO_COLLABORATION}")
    try:
        for name in ("a.ipynb", "b.ipynb"):
            write_notebook(server["root"], name)
            pair_with(server, kernel_dir_ctx, name)
    finally:
        process.kill()
        process.wait()
    problems = run(unpair(kernel_dir_ctx.state), timeout=120)
    assert list(pairings(kernel_dir_ctx.state)) == []
    assert [problem.split(":")[0] for problem in problems] == ["a.ipynb", "b.ipynb"]


def test_a_script_reads_a_notebook_through_the_contents_api(jupyter_server, tmp_path):
    write_notebook(jupyter_server["root"], "scripted.ipynb")
    code, sink = read_in_a_script(jupyter_server, tmp_path, "scripted.ipynb")
    assert code == 0 and "x = 20" in sink.stdout_text, sink.stderr_text


# --- a Jupyter Server with jupyter-collaboration: the shared document ------------------------

@pytest.fixture(scope="module")
def collab_server(tmp_path_factory):
    pytest.importorskip("jupyter_server_ydoc")
    process, server = start_server(tmp_path_factory, "--YDocExtension.document_save_delay=0.3")
    yield server
    stop_server(process)


class Person:
    """Someone with the notebook open in JupyterLab: a second client of the same shared document."""

    def __init__(self, server, path: str) -> None:
        self.server, self.path = server, path

    async def __aenter__(self) -> Person:
        import websockets
        from jupyter_ydoc import YNotebook
        from pycrdt import Doc, Provider

        from toolkernel._providers._notebook._shared import _WebsocketChannel

        headers = {"Authorization": f"token {SERVER_TOKEN}"}
        async with httpx.AsyncClient(headers=headers) as http:
            response = await http.put(self.server["url"] + "api/collaboration/session/" + quote(self.path),
                                      json={"format": "json", "type": "notebook"})
        session = response.json()
        room = f"json:notebook:{session['fileId']}"
        url = (self.server["url"].replace("http", "ws", 1) + "api/collaboration/room/" + room + "?"
               + urlencode({"sessionId": session["sessionId"]}))
        self.ws = await websockets.connect(url, additional_headers=headers, max_size=None)
        self.notebook = YNotebook(Doc())
        channel = _WebsocketChannel(self.ws, room)
        self.provider = Provider(self.notebook.ydoc, channel)
        self.task = asyncio.create_task(self.provider.start())
        await asyncio.wait_for(channel.synced.wait(), 120)
        return self

    async def __aexit__(self, *exc) -> None:
        await asyncio.sleep(0.2)
        await self.provider.stop()
        await self.ws.close()

    def cell(self, index: int) -> dict:
        return self.notebook.ycells[index].to_py()

    def type_into(self, index: int, text: str) -> None:
        source = self.notebook.ycells[index]["source"]
        source.insert(len(source), text)

    async def put_cursor(self, index: int, offset: int = 0, name: str = "Ada") -> None:
        """Focus cell `index` at `offset` as JupyterLab does: its editor publishes the cursor in the
        awareness state as Y.js relative positions ({type, tname, item, assoc}) into the cell's text."""
        from pycrdt import Assoc, Awareness, StickyIndex, create_awareness_message

        if not hasattr(self, "awareness"):
            self.awareness = Awareness(self.notebook.ydoc)
        source = self.notebook.ycells[index]["source"]
        text_id = StickyIndex.new(source, 0, Assoc.BEFORE).to_json()["type"]
        item = StickyIndex.new(source, offset, Assoc.AFTER).to_json()["item"] if offset < len(source) else None
        position = {"type": text_id, "tname": None, "item": item, "assoc": 0}
        self.awareness.set_local_state({
            "user": {"username": "ada", "name": name, "display_name": name, "initials": "A", "color": "red"},
            "cursors": [{"anchor": position, "head": position, "primary": True, "empty": True}]})
        own = self.awareness.client_id
        await self.ws.send(create_awareness_message(self.awareness.encode_awareness_update([own])))


async def wait_until(check, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {timeout:g} s: {what}")
        await asyncio.sleep(0.05)


def test_the_shared_document_is_what_is_read_edited_and_run(collab_server, kernel_dir_ctx):
    root = collab_server["root"]
    ids = write_notebook(root, "team/live.ipynb")
    pairing = pair_with(collab_server, kernel_dir_ctx, "team/live.ipynb")
    assert "shared document" in pairing.describe()

    async def scenario():
        async with Person(collab_server, "team/live.ipynb") as person:
            person.type_into(0, " (draft)")  # unsaved typing in another cell
            store = await pairing.notebook_store()
            await wait_until(lambda: "(draft)" in str(store._ynb.ycells[0]["source"]), "the typing at the agent's")
            assert "# Data (draft)" in (await read.call({"notebook_path": "team/live.ipynb"}, kernel_dir_ctx)).texts[0]
            edited = await edit.call({"notebook_path": "team/live.ipynb", "cell_id": ids[1],
                                      "new_source": "x = 50"}, kernel_dir_ctx)
            assert not edited.is_error, edited.texts
            await wait_until(lambda: person.cell(1)["source"] == "x = 50", "the agent's edit at the person's")
            assert person.cell(0)["source"] == "# Data (draft)"  # their typing is untouched
            seen = []  # (execution state, number of outputs) at the person's, after each change
            person.watching = person.notebook.ycells[2].observe_deep(  # kept alive while watched
                lambda events: seen.append((person.cell(2).get("execution_state"), len(person.cell(2)["outputs"]),
                                            person.cell(2).get("execution_count"))))
            await run_tool.call({"notebook_path": "team/live.ipynb", "cell_id": ids[1]}, kernel_dir_ctx)
            ran = await run_tool.call({"notebook_path": "team/live.ipynb", "cell_id": ids[2]}, kernel_dir_ctx)
            assert ran.texts[0].startswith("100\n[cell ") and "shared document" in ran.texts[0]
            await wait_until(lambda: person.cell(2)["outputs"][:1] == [
                {"output_type": "stream", "name": "stdout", "text": "100\n"}], "the run's output at the person's")
            await wait_until(lambda: person.cell(2)["execution_state"] == "idle", "the cell no longer running")
            assert person.cell(2)["execution_count"] >= 1
            assert ("running", 1, None) in seen, seen  # they saw the output while the cell ran
            # and no count until it ended: JupyterLab shows `[*]:` for it, as for a cell a person runs
            assert all(count is None for state, _, count in seen if state == "running"), seen

    run(scenario(), timeout=600)

    def saved():
        return nbformat.read(root / "team/live.ipynb", as_version=4)

    deadline = time.monotonic() + 120  # the server saves the shared document to the file by itself
    while saved().cells[2].get("outputs") == [] and time.monotonic() < deadline:
        time.sleep(0.2)
    nb = saved()
    assert [c.source for c in nb.cells] == ["# Data (draft)", "x = 50", "print(x * 2)"]
    assert nb.cells[2].outputs[0].text == "100\n" and nb.cells[2].execution_count is not None


def test_an_edit_of_a_cell_the_person_is_typing_in_is_refused(collab_server, kernel_dir_ctx):
    ids = write_notebook(collab_server["root"], "race.ipynb")
    pair_with(collab_server, kernel_dir_ctx, "race.ipynb")

    async def scenario():
        async with Person(collab_server, "race.ipynb") as person:
            await read.call({"notebook_path": "race.ipynb"}, kernel_dir_ctx)
            person.type_into(1, "  # tuned by hand")
            store = await pairings(kernel_dir_ctx.state).require(kernel_dir_ctx.workdir,
                                                                 "race.ipynb").notebook_store()
            await wait_until(lambda: "tuned" in str(store._ynb.ycells[1]["source"]), "typing reached the agent")
            refused = await edit.call({"notebook_path": "race.ipynb", "cell_id": ids[1], "new_source": "x = 0"},
                                      kernel_dir_ctx)
            assert refused.is_error and f"cell {ids[1]} of race.ipynb changed since you last read it" in \
                refused.texts[0]
            ran = await run_tool.call({"notebook_path": "race.ipynb", "cell_id": ids[1]}, kernel_dir_ctx)
            assert ran.is_error and "read it again" in ran.texts[0]
            # another cell is fine, and the typed text stays
            other = await edit.call({"notebook_path": "race.ipynb", "cell_id": ids[2], "new_source": "x"},
                                    kernel_dir_ctx)
            assert not other.is_error, other.texts
            await wait_until(lambda: person.cell(2)["source"] == "x", "the other edit")
            assert person.cell(1)["source"] == "x = 20  # tuned by hand"
            # read again: now the agent may edit it
            await read.call({"notebook_path": "race.ipynb"}, kernel_dir_ctx)
            again = await edit.call({"notebook_path": "race.ipynb", "cell_id": ids[1], "new_source": "x = 0"},
                                    kernel_dir_ctx)
            assert not again.is_error
            await wait_until(lambda: person.cell(1)["source"] == "x = 0", "the edit after a fresh read")

    run(scenario(), timeout=600)


def test_an_edit_of_a_cell_someone_is_in_is_refused_before_its_text_changes(collab_server, kernel_dir_ctx,
                                                                           monkeypatch):
    from toolkernel._providers._notebook import _editors

    ids = write_notebook(collab_server["root"], "focus.ipynb")
    pair_with(collab_server, kernel_dir_ctx, "focus.ipynb")

    async def call_tool(tool, **arguments):
        return await tool.call({"notebook_path": "focus.ipynb", **arguments}, kernel_dir_ctx)

    async def scenario():
        store = await pairings(kernel_dir_ctx.state).require(kernel_dir_ctx.workdir, "focus.ipynb").notebook_store()

        def seen_at(index: int):
            return lambda: store.editors.editing(store._ynb.ycells[index]) is not None

        async with Person(collab_server, "focus.ipynb") as person:
            await call_tool(read)
            await person.put_cursor(1, 2, name="Ada Lovelace")  # clicked into cell 1; nothing typed yet
            await wait_until(seen_at(1), "the cursor at the agent's")
            refused = await call_tool(edit, cell_id=ids[1], new_source="x = 0")
            assert refused.is_error and f"Ada Lovelace is editing cell {ids[1]} of focus.ipynb" in refused.texts[0]
            ran = await call_tool(run_tool, cell_id=ids[1])
            assert ran.is_error and "is editing cell" in ran.texts[0]
            assert person.cell(1)["source"] == "x = 20" and person.cell(1)["outputs"] == []
            assert not (await call_tool(edit, cell_id=ids[2], new_source="print(x)")).is_error  # another cell
            # they move on to the last cell: the first is free again, the last is not
            await person.put_cursor(2, name="Ada Lovelace")
            await wait_until(seen_at(2), "the moved cursor")
            assert not (await call_tool(edit, cell_id=ids[1], new_source="x = 0")).is_error
            await wait_until(lambda: person.cell(1)["source"] == "x = 0", "the allowed edit")
            assert (await call_tool(edit, cell_id=ids[2], new_source="y")).is_error
            # they type at the end of the last cell (JupyterLab sends no new cursor for that): the typing counts
            monkeypatch.setattr(_editors, "EDITING_WINDOW_SECONDS", 1.0)
            await asyncio.sleep(1.5)
            person.type_into(2, "  # more")
            await wait_until(lambda: "more" in str(store._ynb.ycells[2]["source"]), "the typing")
            await call_tool(read)
            refused = await call_tool(edit, cell_id=ids[2], new_source="y")
            assert refused.is_error and "is editing cell" in refused.texts[0]
            # a cursor left alone for longer than the window no longer holds the cell
            await asyncio.sleep(1.5)
            assert not (await call_tool(edit, cell_id=ids[2], new_source="y")).is_error
            await wait_until(lambda: person.cell(2)["source"] == "y", "the edit after they stopped")

    run(scenario(), timeout=600)


class CuttableProxy:
    """A TCP proxy on loopback in front of a server; `cut()` drops every open connection at once, as a
    network failure does, and `freeze()` makes them carry nothing more without closing them, as a
    silent network does (new connections go through again)."""

    def __init__(self, target_port: int) -> None:
        import threading

        self.target_port = target_port
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.transports: set[asyncio.BaseTransport] = set()
        self.frozen: set[asyncio.BaseTransport] = set()
        self.server = self._on_loop(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]

    def _on_loop(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(60)

    async def _serve(self, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.transports |= {writer.transport, up_writer.transport}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader, writer) -> None:
        try:
            while data := await reader.read(65536):
                if writer.transport in self.frozen:
                    continue
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    def cut(self) -> None:
        async def cut():
            for transport in list(self.transports | self.frozen):
                transport.abort()
            self.transports.clear()
        self._on_loop(cut())

    def freeze(self) -> None:
        async def freeze():
            self.frozen |= self.transports
            self.transports = set()
        self._on_loop(freeze())

    def close(self) -> None:
        self.cut()
        self.server.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


def test_a_dropped_connection_to_the_shared_document_is_opened_again_by_the_next_call(collab_server,
                                                                                     kernel_dir_ctx, monkeypatch):
    from toolkernel._providers._notebook import _shared

    ids = write_notebook(collab_server["root"], "drop.ipynb")
    proxy = CuttableProxy(collab_server["port"])
    through_proxy = {**collab_server, "url": f"http://127.0.0.1:{proxy.port}/"}
    pair_with(through_proxy, kernel_dir_ctx, "drop.ipynb")

    async def call_tool(tool, **arguments):
        return await tool.call({"notebook_path": "drop.ipynb", **arguments}, kernel_dir_ctx)

    async def scenario():
        async with Person(collab_server, "drop.ipynb") as person:  # the person's connection stays up
            await call_tool(read)
            proxy.cut()
            person.type_into(0, " (typed while the agent was cut off)")
            deadline = time.monotonic() + 120
            while "cut off" not in (text := (await call_tool(read)).texts[0]):
                assert time.monotonic() < deadline, text
                await asyncio.sleep(0.2)
            assert text.startswith("drop.ipynb: 3 cells")  # a fresh copy: nothing merged in twice
            edited = await call_tool(edit, cell_id=ids[1], new_source="x = 30")
            assert not edited.is_error, edited.texts
            await wait_until(lambda: person.cell(1)["source"] == "x = 30", "the edit after the reconnect")
            assert len(person.notebook.ycells) == 3
            # dropped again right before the next edit: the edit still lands
            proxy.cut()
            edited = await call_tool(edit, cell_id=ids[2], new_source="print(x)")
            assert not edited.is_error, edited.texts
            await wait_until(lambda: person.cell(2)["source"] == "print(x)", "the second edit")
            assert [person.cell(i)["source"] for i in range(3)] == [
                "# Data (typed while the agent was cut off)", "x = 30", "print(x)"]
            # The network goes silent without closing anything: the unanswered ping before the edit
            # tells, and the edit goes through a new connection at once.
            monkeypatch.setattr(_shared, "ACK_TIMEOUT_SECONDS", 3.0)
            proxy.freeze()
            edited = await call_tool(edit, cell_id=ids[1], new_source="x = 50")
            assert not edited.is_error, edited.texts
            await wait_until(lambda: person.cell(1)["source"] == "x = 50", "the edit after the silence")
            assert len(person.notebook.ycells) == 3

    try:
        run(scenario(), timeout=600)
    finally:
        run(unpair(kernel_dir_ctx.state), timeout=60)
        proxy.close()


def wait_saved(path, check, timeout: float = 120.0) -> nbformat.NotebookNode:
    """The notebook file once the server has saved what `check` looks for (it writes the file in place,
    so a read may meet it half written)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            nb = nbformat.read(path, as_version=4)
            if check(nb):
                return nb
        except nbformat.reader.NotJSONError:
            pass
        assert time.monotonic() < deadline, f"the server did not save {path.name} as expected"
        time.sleep(0.2)


@pytest.mark.slow
def test_the_shared_document_is_opened_again_after_the_server_restarts(tmp_path_factory, kernel_dir_ctx):
    pytest.importorskip("jupyter_server_ydoc")
    args = ("--YDocExtension.document_save_delay=0.3",)
    process, server = start_server(tmp_path_factory, *args)
    try:
        ids = write_notebook(server["root"], "restart.ipynb")
        pair_with(server, kernel_dir_ctx, "restart.ipynb")
        call(read, kernel_dir_ctx, notebook_path="restart.ipynb")
        assert not call(edit, kernel_dir_ctx, notebook_path="restart.ipynb", cell_id=ids[1],
                        new_source="x = 21").is_error
        wait_saved(server["root"] / "restart.ipynb", lambda nb: nb.cells[1].source == "x = 21")
        process.kill()  # the server dies (with open websockets it would take a minute to stop by itself)
        process.wait()
        process, server = start_server(tmp_path_factory, *args, root=server["root"], port=server["port"])
        text = call(read, kernel_dir_ctx, notebook_path="restart.ipynb").texts[0]
        assert text.startswith("restart.ipynb: 3 cells") and "x = 21" in text
        assert not call(edit, kernel_dir_ctx, notebook_path="restart.ipynb", cell_id=ids[2],
                        new_source="print(x + 1)").is_error
        nb = wait_saved(server["root"] / "restart.ipynb", lambda nb: nb.cells[2].source == "print(x + 1)")
        assert [cell.source for cell in nb.cells] == ["# Data", "x = 21", "print(x + 1)"]
    finally:
        run(unpair(kernel_dir_ctx.state), timeout=60)
        stop_server(process)


def test_a_script_reads_a_notebook_through_the_shared_document(collab_server, tmp_path):
    write_notebook(collab_server["root"], "scripted.ipynb")
    code, sink = read_in_a_script(collab_server, tmp_path, "scripted.ipynb")
    assert code == 0 and "x = 20" in sink.stdout_text, sink.stderr_text


def test_insert_and_delete_in_the_shared_document(collab_server, kernel_dir_ctx):
    ids = write_notebook(collab_server["root"], "cells.ipynb")
    pair_with(collab_server, kernel_dir_ctx, "cells.ipynb")

    async def scenario():
        async with Person(collab_server, "cells.ipynb") as person:
            await read.call({"notebook_path": "cells.ipynb"}, kernel_dir_ctx)
            inserted = (await edit.call({"notebook_path": "cells.ipynb", "edit_mode": "insert", "cell_id": ids[0],
                                         "cell_type": "markdown", "new_source": "Notes"}, kernel_dir_ctx)).value()
            new_id = inserted["cell_ids"][0]
            await wait_until(lambda: len(person.notebook.ycells) == 4, "the inserted cell")
            assert person.cell(1)["id"] == new_id and person.cell(1)["source"] == "Notes"
            await edit.call({"notebook_path": "cells.ipynb", "edit_mode": "delete", "cell_id": ids[2]},
                            kernel_dir_ctx)
            await wait_until(lambda: len(person.notebook.ycells) == 3, "the deleted cell")
            assert [person.cell(i)["id"] for i in range(3)] == [ids[0], new_id, ids[1]]

    run(scenario(), timeout=600)


def test_a_notebook_older_than_cell_ids_is_edited_by_the_ids_the_read_shows(collab_server, kernel_dir_ctx):
    (collab_server["root"] / "old.ipynb").write_text(old_notebook_json())
    pair_with(collab_server, kernel_dir_ctx, "old.ipynb")
    text = call(read, kernel_dir_ctx, notebook_path="old.ipynb").texts[0]
    cell_id = re.search(r"--- cell 3/3 id=(\S+) code", text).group(1)
    assert not call(edit, kernel_dir_ctx, notebook_path="old.ipynb", cell_id=cell_id, new_source="y = 3").is_error
    assert "y = 3" in call(read, kernel_dir_ctx, notebook_path="old.ipynb", cell_id=cell_id).texts[0]


def test_two_notebooks_on_one_server_never_cross(collab_server, tmp_path):
    first, second = ToolContext(tmp_path, state={}), ToolContext(tmp_path, state={})  # two sessions
    a_ids = write_notebook(collab_server["root"], "a.ipynb")
    b_ids = write_notebook(collab_server["root"], "b.ipynb")
    try:
        pair_with(collab_server, first, "a.ipynb")
        pair_with(collab_server, first, "b.ipynb")
        pair_with(collab_server, second, "b.ipynb")
        call(run_tool, first, notebook_path="a.ipynb", code="who = 'a'")
        call(run_tool, first, notebook_path="b.ipynb", code="who = 'b'")
        assert call(run_tool, first, notebook_path="a.ipynb", code="who").texts == ["'a'"]
        # the second session's pairing of b reaches b's session kernel, not a's
        assert call(run_tool, second, notebook_path="b.ipynb", code="who").texts == ["'b'"]
        with pytest.raises(ConnectionRequired):
            call(run_tool, second, notebook_path="a.ipynb", code="who")
        # reads are per session: the second session has not read b, so it may not edit it
        refused = call(edit, second, notebook_path="b.ipynb", cell_id=b_ids[1], new_source="x = 2")
        assert refused.is_error and "has not been read in this session" in refused.texts[0]
        call(read, first, notebook_path="a.ipynb")
        assert not call(edit, first, notebook_path="a.ipynb", cell_id=a_ids[1], new_source="x = 1").is_error
        assert "x = 20" in call(read, first, notebook_path="b.ipynb").texts[0]
    finally:
        run(unpair(first.state), timeout=60)
        run(unpair(second.state), timeout=60)


# --- kernels from a Jupyter Kernel Gateway ------------------------------------------------------

@pytest.fixture(scope="module")
def gateway_server(tmp_path_factory):
    """Jupyter Kernel Gateway on loopback, and a Jupyter Server whose kernels all run there."""
    gateway, gateway_url = start_gateway(tmp_path_factory)
    try:
        process, server = start_server(tmp_path_factory, *gateway_server_args(gateway_url))
        server["gateway"] = gateway_url
        yield server
        stop_server(process)
    finally:
        stop_server(gateway)


def test_pairing_works_unchanged_when_the_kernels_come_from_a_gateway(gateway_server, kernel_dir_ctx):
    ids = write_notebook(gateway_server["root"], "remote.ipynb")
    pairing = pair_with(gateway_server, kernel_dir_ctx, "remote.ipynb")
    on_gateway = httpx.get(gateway_server["gateway"] + "/api/kernels",
                           headers={"Authorization": f"token {GATEWAY_TOKEN}"}, timeout=30).json()
    assert pairing.connection.kernel_id in [kernel["id"] for kernel in on_gateway]
    call(read, kernel_dir_ctx, notebook_path="remote.ipynb")
    call(run_tool, kernel_dir_ctx, notebook_path="remote.ipynb", cell_id=ids[1])
    result = call(run_tool, kernel_dir_ctx, notebook_path="remote.ipynb", cell_id=ids[2])
    assert result.texts[0].startswith("40\n[cell ")
    assert nbformat.read(gateway_server["root"] / "remote.ipynb", as_version=4).cells[2].outputs[0].text == "40\n"
    result = call(run_tool, kernel_dir_ctx, notebook_path="remote.ipynb", code="import time\ntime.sleep(60)",
                  timeout_seconds=2)
    assert result.is_error and "the kernel was interrupted" in result.texts[0]
    assert call(run_tool, kernel_dir_ctx, notebook_path="remote.ipynb", code="x").texts == ["20"]
