"""A notebook cell edited through a Jupyter Server with jupyter-collaboration is recorded in the run's
journal and put back through the server's document (issue 38 items 1 and 3).

A real server on loopback; a "person" is a second client of the same shared document, as
collaborative JupyterLab is. Their typing in other cells survives the rewind; a cell they changed
since the run is refused by name until `force`. A server without collaboration: the same, through
its Contents API.
"""

from __future__ import annotations

import asyncio

import nbformat
import pytest
from conftest import NO_COLLABORATION, SERVER_TOKEN, start_server, stop_server
from test_notebook_live import Person, pair_with, wait_until, write_notebook

from toolkernel._loop import run
from toolkernel._providers._notebook import notebook_tools, unpair
from toolkernel._providers._tools.rewind import changes, rewind_tool
from toolkernel._journal import Journal, RewindError, rewind
from toolkernel._tool import ToolContext

read, edit, _ = notebook_tools()


@pytest.fixture(scope="module")
def collab_server(tmp_path_factory):
    pytest.importorskip("jupyter_server_ydoc")
    process, server = start_server(tmp_path_factory, "--YDocExtension.document_save_delay=0.3")
    yield server
    stop_server(process)


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the journal, outside the workspace
    (tmp_path / "work").mkdir()
    context = ToolContext(tmp_path / "work", state={})
    yield context
    run(unpair(context.state), timeout=60)


def start(ctx: ToolContext):
    """A run of its own (one direct call, as the session starts them)."""
    ctx.journal = Journal(ctx.workdir).start_run("direct")
    return ctx.journal


async def edited_in_a_run(ctx, person, path: str, cell_id: str, source: str, index: int) -> str:
    """`notebook-edit` of one cell in a run of its own; the run's id once the person sees the edit."""
    journal = start(ctx)
    await read.call({"notebook_path": path}, ctx)
    got = await edit.call({"notebook_path": path, "cell_id": cell_id, "new_source": source}, ctx)
    assert not got.is_error, got.texts
    assert journal.finish() == 1
    await wait_until(lambda: person.cell(index)["source"] == source, "the edit at the person's")
    return journal.id


async def agent_sees(ctx, path: str, text: str) -> None:
    for _ in range(1200):
        if text in (await read.call({"notebook_path": path}, ctx)).texts[0]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{text!r} never reached the agent's copy of {path}")


def test_a_cell_edit_is_listed_and_rewound_through_the_document(collab_server, ctx):
    path = "rw/listed.ipynb"
    ids = write_notebook(collab_server["root"], path)
    pair_with(collab_server, ctx, path)

    async def scenario():
        async with Person(collab_server, path) as person:
            run_id = await edited_in_a_run(ctx, person, path, ids[1], "x = 50", 1)
            listed = (await changes.call({}, ctx)).texts[0]
            assert f"run {run_id}" in listed and f"cell      {path}#{ids[1]}" in listed, listed
            assert collab_server["url"].rstrip("/") in listed and SERVER_TOKEN not in listed
            person.type_into(2, "  # the person's")  # another cell, changed meanwhile
            await agent_sees(ctx, path, "# the person's")
            start(ctx)
            got = await rewind_tool.call({"run": run_id}, ctx)
            assert not got.is_error, got.texts
            assert f"{path}#{ids[1]}" in got.texts[0]
            undo = ctx.journal
            assert undo.finish() == 1  # the rewind is a run of its own changes: it can be rewound too
            await wait_until(lambda: person.cell(1)["source"] == "x = 20", "the old source at the person's")
            assert person.cell(2)["source"] == "print(x * 2)  # the person's"
            assert person.cell(0)["source"] == "# Data"
            start(ctx)
            again = await rewind_tool.call({"run": undo.id}, ctx)
            assert not again.is_error, again.texts
            await wait_until(lambda: person.cell(1)["source"] == "x = 50", "the rewind undone at the person's")
            assert person.cell(2)["source"] == "print(x * 2)  # the person's"

    run(scenario(), timeout=600)


def test_a_cell_changed_since_the_run_is_refused_by_name_until_force(collab_server, ctx):
    path = "rw/since.ipynb"
    ids = write_notebook(collab_server["root"], path)
    pair_with(collab_server, ctx, path)

    async def scenario():
        async with Person(collab_server, path) as person:
            run_id = await edited_in_a_run(ctx, person, path, ids[1], "x = 50", 1)
            person.type_into(1, "  # mine")
            await agent_sees(ctx, path, "x = 50  # mine")
            start(ctx)
            refused = await rewind_tool.call({"run": run_id}, ctx)
            assert refused.is_error and f"changed since run {run_id}: {path}#{ids[1]}" in refused.texts[0]
            assert person.cell(1)["source"] == "x = 50  # mine"  # nothing touched
            # a front end with no pairing (`%tools rewind`, `toolkernel rewind`) says who can, and touches nothing
            with pytest.raises(RewindError, match="a session paired with that server"):
                rewind(Journal(ctx.workdir), run_id, force=True)
            forced = await rewind_tool.call({"run": run_id, "force": True}, ctx)
            assert not forced.is_error, forced.texts
            await wait_until(lambda: person.cell(1)["source"] == "x = 20", "the forced rewind at the person's")

    run(scenario(), timeout=600)


def test_a_person_rewinds_a_served_cell_with_percent_tools_rewind_in_a_paired_kernel(collab_server, ctx):
    # `%tools rewind` in a kernel whose session is paired with the server: through its document,
    # as a run of its own that can be rewound too; no question asked (the person's own rewind).
    import argparse
    from types import SimpleNamespace

    from toolkernel._frontends._answers import journal_line

    path = "rw/person.ipynb"
    ids = write_notebook(collab_server["root"], path)
    pair_with(collab_server, ctx, path)
    kernel_session = SimpleNamespace(workdir=ctx.workdir, state=ctx.state, journal=None)

    def percent_tools_rewind(run_id: str) -> str:
        return journal_line(kernel_session, argparse.Namespace(what="rewind", run=run_id, last=False, force=False,
                                                               path=[]))

    async def scenario():
        async with Person(collab_server, path) as person:
            run_id = await edited_in_a_run(ctx, person, path, ids[1], "x = 50", 1)
            said = await asyncio.to_thread(percent_tools_rewind, run_id)
            assert f"rewound run {run_id}: 1 file put back" in said and f"{path}#{ids[1]}" in said, said
            await wait_until(lambda: person.cell(1)["source"] == "x = 20", "the old source at the person's")
            undo = said.rsplit("`%tools rewind ", 1)[1].split("`")[0]
            await asyncio.to_thread(percent_tools_rewind, undo)
            await wait_until(lambda: person.cell(1)["source"] == "x = 50", "the rewind undone at the person's")

    run(scenario(), timeout=600)


def test_a_session_not_paired_with_the_server_cannot_rewind_the_cell(collab_server, ctx):
    path = "rw/unpaired.ipynb"
    ids = write_notebook(collab_server["root"], path)
    pair_with(collab_server, ctx, path)

    async def scenario():
        async with Person(collab_server, path) as person:
            run_id = await edited_in_a_run(ctx, person, path, ids[1], "x = 50", 1)
            other = ToolContext(ctx.workdir, state={})
            refused = await rewind_tool.call({"run": run_id}, other)
            assert refused.is_error and "not paired with the Jupyter Server" in refused.texts[0]
            assert person.cell(1)["source"] == "x = 50"

    run(scenario(), timeout=600)


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory):
    process, server = start_server(tmp_path_factory, f"--ServerApp.jpserver_extensions={NO_COLLABORATION}")
    yield server
    stop_server(process)


def test_a_cell_edited_through_the_contents_api_is_rewound_through_it(plain_server, ctx):
    path = "rw/plain.ipynb"
    ids = write_notebook(plain_server["root"], path)
    pair_with(plain_server, ctx, path)

    async def scenario():
        journal = start(ctx)
        await read.call({"notebook_path": path}, ctx)
        got = await edit.call({"notebook_path": path, "cell_id": ids[1], "new_source": "x = 50"}, ctx)
        assert not got.is_error, got.texts
        assert journal.finish() == 1
        start(ctx)
        done = await rewind_tool.call({"run": journal.id}, ctx)
        assert not done.is_error, done.texts
        ctx.journal.finish()

    run(scenario(), timeout=600)
    saved = nbformat.read(plain_server["root"] / path, as_version=4)
    assert [cell.source for cell in saved.cells] == ["# Data", "x = 20", "print(x * 2)"]


def test_a_rewind_that_fails_between_two_cells_names_the_cells_put_back_and_the_rest(collab_server, ctx):
    # A server's document cannot be changed as one: the person deletes the second cell after the
    # check and before it is put back. The first is back (and recorded); the error names both.
    from toolkernel._providers._notebook._restore import check_cells, put_back

    path = "rw/partway.ipynb"
    ids = write_notebook(collab_server["root"], path)
    pair_with(collab_server, ctx, path)

    async def scenario():
        async with Person(collab_server, path) as person:
            journal = start(ctx)
            await read.call({"notebook_path": path}, ctx)
            for cell_id, source in ((ids[0], "# Changed"), (ids[1], "x = 50")):
                got = await edit.call({"notebook_path": path, "cell_id": cell_id, "new_source": source}, ctx)
                assert not got.is_error, got.texts
            assert journal.finish() == 2
            await wait_until(lambda: person.cell(1)["source"] == "x = 50", "the edits at the person's")
            kept = Journal(ctx.workdir)
            targets = await check_cells(ctx.state, kept, journal.id, kept.run(journal.id).cells, force=False)
            del person.notebook.ycells[1]
            for _ in range(1200):
                if "x = 50" not in (await read.call({"notebook_path": path}, ctx)).texts[0]:
                    break
                await asyncio.sleep(0.1)
            own = kept.start_run("rewind")
            with pytest.raises(RewindError) as failed:
                await put_back(targets, own)
            assert own.finish() == 1
            said = str(failed.value)
            assert f"put back: {path}#{ids[0]}; not put back: {path}#{ids[1]}" in said, said
            assert f"recorded as run {own.id}" in said
            await wait_until(lambda: person.cell(0)["source"] == "# Data", "the first cell back at the person's")

    run(scenario(), timeout=600)
