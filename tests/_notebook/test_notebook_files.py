"""notebook_read and notebook_edit on real notebook files (no kernel needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import nbformat
import pytest
from conftest import PNG, call, old_notebook_json, rich_notebook

from toolkernel._providers._notebook import notebook_tools
from toolkernel._tool import Image

read, edit, run_tool = notebook_tools()


@pytest.fixture
def rich(workdir):
    nbformat.write(rich_notebook(), workdir / "rich.ipynb")
    return workdir / "rich.ipynb"


def ids(path):
    return [cell.id for cell in nbformat.read(path, as_version=4).cells]


def test_tools_have_the_right_kinds_and_commands():
    assert [(t.command, t.kind) for t in notebook_tools()] == [
        ("tools notebook-read", "read"), ("tools notebook-edit", "edit"), ("tools notebook-run", "execute")]
    assert edit.path_keys == ("notebook_path",)


def test_read_shows_every_cell_with_id_type_count_source_and_text_output(rich, ctx):
    result = call(read, ctx, notebook_path="rich.ipynb")
    assert not result.is_error
    text = result.texts[0]
    cell_ids = ids(rich)
    for cell_id in cell_ids:
        assert f"id={cell_id}" in text
    assert "rich.ipynb: 5 cells, kernel python3" in text
    assert f"id={cell_ids[0]} markdown\n# Title\nSome *prose*." in text
    assert f"id={cell_ids[1]} code [1]\nprint('hello')\n6 * 7" in text
    assert "--- output 1 (stdout)\nhello" in text
    assert "--- output 2 (execute_result)\n42" in text
    assert f"id={cell_ids[3]} raw\nraw text stays raw" in text


def test_read_cleans_error_tracebacks(rich, ctx):
    text = call(read, ctx, notebook_path="rich.ipynb").texts[0]
    assert "\x1b" not in text
    assert "-----------" not in text  # IPython's rule of dashes is noise
    assert "ZeroDivisionError                         Traceback (most recent call last)" in text
    assert "----> 1 1/0" in text
    assert "ZeroDivisionError: division by zero" in text


def test_read_returns_images_and_says_where_they_came_from(rich, ctx):
    result = call(read, ctx, notebook_path="rich.ipynb")
    assert result.images == [Image(PNG, "image/png")]
    image_cell = ids(rich)[4]
    assert f"[image 1: image/png, cell {image_cell} output 1]" in result.texts[0]
    assert "<Figure size" not in result.texts[0]  # the image says it better


def test_read_one_cell(rich, ctx):
    cell_id = ids(rich)[2]
    text = call(read, ctx, notebook_path="rich.ipynb", cell_id=cell_id).texts[0]
    assert f"cell 3/5 id={cell_id} code [2]" in text
    assert "print('hello')" not in text


def test_read_unknown_cell_or_missing_file_is_an_error_result(rich, ctx):
    assert call(read, ctx, notebook_path="rich.ipynb", cell_id="nope").is_error
    result = call(read, ctx, notebook_path="missing.ipynb")
    assert result.is_error and "no notebook" in result.texts[0]


def test_old_notebook_gets_stable_ids_in_memory_and_on_disk_with_the_next_write(workdir, ctx):
    path = workdir / "old.ipynb"
    path.write_text(old_notebook_json())
    first = call(read, ctx, notebook_path="old.ipynb").texts[0]
    assert "predates cell ids" in first
    assert "old output" in first
    assert first == call(read, ctx, notebook_path="old.ipynb").texts[0]  # same ids every read
    assert json.loads(path.read_text())["nbformat_minor"] == 0  # reading never writes

    shown = [line.split("id=")[1].split()[0] for line in first.splitlines() if "id=" in line]
    result = call(edit, ctx, notebook_path="old.ipynb", cell_id=shown[2], new_source="y = 3")
    assert not result.is_error, result.texts
    on_disk = nbformat.read(path, as_version=4)
    nbformat.validate(on_disk)
    assert on_disk.nbformat_minor >= 5
    assert [cell.id for cell in on_disk.cells] == shown
    assert on_disk.cells[2].source == "y = 3"


def test_nbformat3_notebook_is_read(workdir, ctx):
    v3 = nbformat.v3.new_notebook(worksheets=[nbformat.v3.new_worksheet(cells=[
        nbformat.v3.new_text_cell("markdown", source="v3 prose"), nbformat.v3.new_code_cell(input="a = 1")])])
    (workdir / "v3.ipynb").write_text(nbformat.writes(v3, version=3))
    text = call(read, ctx, notebook_path="v3.ipynb").texts[0]
    assert "markdown\nv3 prose" in text and "code [ ]\na = 1" in text


def test_replace_code_cell_clears_outputs_and_execution_count(rich, ctx):
    call(read, ctx, notebook_path="rich.ipynb")
    target = ids(rich)[1]
    result = call(edit, ctx, notebook_path="rich.ipynb", cell_id=target, new_source="print('changed')")
    assert result.value() == {"notebook_path": str(rich), "edit_mode": "replace", "cell_ids": [target],
                              "cell_count": 5}
    cell = nbformat.read(rich, as_version=4).cells[1]
    assert (cell.id, cell.source, cell.outputs, cell.execution_count) == (target, "print('changed')", [], None)


def test_replace_markdown_and_change_a_cells_type(rich, ctx):
    call(read, ctx, notebook_path="rich.ipynb")
    cell_ids = ids(rich)
    call(edit, ctx, notebook_path="rich.ipynb", cell_id=cell_ids[0], new_source="# New title")
    call(edit, ctx, notebook_path="rich.ipynb", cell_id=cell_ids[3], new_source="x = 1", cell_type="code")
    cells = nbformat.read(rich, as_version=4).cells
    assert (cells[0].cell_type, cells[0].source) == ("markdown", "# New title")
    assert (cells[3].cell_type, cells[3].id, cells[3].outputs) == ("code", cell_ids[3], [])


def test_insert_after_a_cell_and_at_the_top(rich, ctx):
    call(read, ctx, notebook_path="rich.ipynb")
    before = ids(rich)
    after_second = call(edit, ctx, notebook_path="rich.ipynb", edit_mode="insert", cell_id=before[1],
                        new_source="z = 1", cell_type="code").value()["cell_ids"][0]
    top = call(edit, ctx, notebook_path="rich.ipynb", edit_mode="insert", cell_id="",
               new_source="## Intro", cell_type="markdown").value()["cell_ids"][0]
    cells = nbformat.read(rich, as_version=4).cells
    assert [c.id for c in cells] == [top, before[0], before[1], after_second, *before[2:]]
    assert cells[0].cell_type == "markdown" and cells[3].source == "z = 1"
    assert len(set(c.id for c in cells)) == len(cells)


def test_insert_needs_cell_type(rich, ctx):
    call(read, ctx, notebook_path="rich.ipynb")
    result = call(edit, ctx, notebook_path="rich.ipynb", edit_mode="insert", new_source="x")
    assert result.is_error and "cell_type" in result.texts[0]
    assert len(ids(rich)) == 5


def test_delete(rich, ctx):
    call(read, ctx, notebook_path="rich.ipynb")
    before = ids(rich)
    result = call(edit, ctx, notebook_path="rich.ipynb", edit_mode="delete", cell_id=before[2])
    assert result.value()["cell_ids"] == [before[2]]
    assert ids(rich) == before[:2] + before[3:]


def test_edit_of_a_notebook_never_read_is_refused(rich, ctx):
    original = rich.read_bytes()
    result = call(edit, ctx, notebook_path="rich.ipynb", cell_id=ids(rich)[0], new_source="x")
    assert result.is_error and "read it first" in result.texts[0]
    # The name serve lists the tool by, which `tools` takes too (not `tools notebook-read`, which an
    # agent over MCP cannot call).
    assert "(notebook_read with notebook_path=rich.ipynb)" in result.texts[0]
    assert rich.read_bytes() == original


# Saves the notebook as an editor does, each save adding one marker to what it read,
# mostly at gaps of up to 2 ms, now and then up to 50 ms (so that on a loaded machine
# some edits still get through); prints the number of saves when told to stop.
# An editor that builds each save on the file it reads. An edit swaps its new file in
# and, when what it took out is a save it never read, puts that save back: a reader can
# catch the moment in between, and no protocol short of a lock both sides take can hide
# it. So the writer waits (up to 2 s) for its own last save to show again before it
# builds on the file; a save that an edit really overwrote never shows again.
OUTSIDE_WRITER = textwrap.dedent("""
    import json, os, random, sys, time
    path, stop = sys.argv[1], sys.argv[2]
    saves = 0

    def load():
        deadline = time.monotonic() + 2
        while True:
            with open(path, encoding="utf-8") as f:
                nb = json.load(f)
            if saves == 0 or saves in nb["metadata"].get("markers", []) or time.monotonic() > deadline:
                return nb
            time.sleep(0.0005)

    while not os.path.exists(stop):
        nb = load()
        saves += 1
        nb["metadata"].setdefault("markers", []).append(saves)
        with open(path + ".writer", "w", encoding="utf-8") as f:
            json.dump(nb, f)
        os.replace(path + ".writer", path)
        time.sleep(random.uniform(0, 0.05 if random.random() < 0.1 else 0.002))
    print(saves)
""")


@pytest.mark.slow
def test_an_outside_save_during_an_edit_is_never_lost(rich, ctx):
    stop = rich.parent / "stop"
    writer = subprocess.Popen([sys.executable, "-c", OUTSIDE_WRITER, str(rich), str(stop)],
                              stdout=subprocess.PIPE, text=True)
    made = 0
    try:
        for attempt in range(300):
            call(read, ctx, notebook_path="rich.ipynb")
            cell_id = nbformat.read(rich, as_version=4).cells[1].id
            made += not call(edit, ctx, notebook_path="rich.ipynb", cell_id=cell_id,
                             new_source=f"print({attempt})").is_error
    finally:
        stop.touch()
        saves = int(writer.communicate(timeout=120)[0])
    markers = json.loads(rich.read_text())["metadata"].get("markers", [])
    lost = sorted(set(range(1, saves + 1)) - set(markers))
    assert made >= 1 and saves >= 1, "no edit got through between the outside saves; the test proved nothing"
    assert lost == [], f"{len(lost)} of {saves} outside saves were overwritten by {made} edits"


def test_edit_after_the_file_changed_on_disk_is_refused_until_read_again(rich, ctx):
    call(read, ctx, notebook_path="rich.ipynb")
    person = nbformat.read(rich, as_version=4)
    person.cells[0].source = "# A person's edit in JupyterLab"
    nbformat.write(person, rich)
    changed = rich.read_bytes()

    result = call(edit, ctx, notebook_path="rich.ipynb", cell_id=person.cells[1].id, new_source="x")
    assert result.is_error and "read it again" in result.texts[0]
    assert rich.read_bytes() == changed

    call(read, ctx, notebook_path="rich.ipynb")
    assert not call(edit, ctx, notebook_path="rich.ipynb", cell_id=person.cells[1].id, new_source="x").is_error
    assert nbformat.read(rich, as_version=4).cells[0].source == "# A person's edit in JupyterLab"


def test_an_edit_counts_as_a_read_so_edits_chain(rich, ctx):
    call(read, ctx, notebook_path="rich.ipynb")
    cell_ids = ids(rich)
    for n in range(3):
        assert not call(edit, ctx, notebook_path="rich.ipynb", cell_id=cell_ids[1], new_source=f"v{n}").is_error


def test_writes_are_atomic_valid_and_keep_permissions(rich, ctx):
    rich.chmod(0o640)
    call(read, ctx, notebook_path="rich.ipynb")
    call(edit, ctx, notebook_path="rich.ipynb", cell_id=ids(rich)[0], new_source="# t")
    nbformat.validate(nbformat.read(rich, as_version=4))
    assert rich.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in rich.parent.iterdir()) == ["rich.ipynb"]  # no temp file left behind


def test_insert_into_a_missing_notebook_creates_it(workdir, ctx):
    result = call(edit, ctx, notebook_path="new.ipynb", edit_mode="insert", new_source="print(1)", cell_type="code")
    assert not result.is_error, result.texts
    nb = nbformat.read(workdir / "new.ipynb", as_version=4)
    nbformat.validate(nb)
    assert [c.id for c in nb.cells] == result.value()["cell_ids"]


def test_replace_in_a_missing_notebook_is_an_error(ctx):
    result = call(edit, ctx, notebook_path="nothing.ipynb", cell_id="abc", new_source="x")
    assert result.is_error and "no notebook" in result.texts[0]


def test_a_pipe_named_like_a_notebook_is_refused_at_once(workdir, ctx):
    # Read by name, a pipe nobody writes to held the open, and the session, for ever.
    os.mkfifo(workdir / "pipe.ipynb")
    results = []
    reader = threading.Thread(target=lambda: results.append(call(read, ctx, notebook_path="pipe.ipynb")),
                              daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert results, "notebook_read waited on the pipe"
    assert results[0].is_error and "is not a regular file" in results[0].texts[0]


def test_read_says_plainly_when_no_kernel_is_recorded(workdir, ctx):
    notebook = rich_notebook()
    notebook.metadata.pop("kernelspec", None)
    nbformat.write(notebook, workdir / "bare.ipynb")
    text = call(read, ctx, notebook_path="bare.ipynb").texts[0]
    assert text.startswith("bare.ipynb: 5 cells, no kernel recorded"), text
