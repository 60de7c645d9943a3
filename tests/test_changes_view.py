"""Issue 48, item 4, the kernel's side of the sidebar's Changes: each run says where it came from
(notebook, cell, first line, person or agent), a run a rewind put back is marked as such, a rewind
refused for files changed since goes through with `force`, and a notebook's diff is cell by cell."""

from __future__ import annotations

import json
import types

import nbformat
import pytest
from kernel_helpers import RecordingSink

from toolkernel._frontends import _changes
from toolkernel._frontends._ipython import cell_about
from toolkernel._frontends._lab import handle
from toolkernel._session import Session


@pytest.fixture
def session(tmp_path):
    s = Session(tmp_path)
    yield s
    s.close()


def test_a_cell_says_where_it_came_from(tmp_path, monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "work" / "analysis.ipynb"))
    kernel = types.SimpleNamespace(get_parent=lambda channel: {"metadata": {"cellId": "c-7", "deletedCells": []}})
    shell = types.SimpleNamespace(kernel=kernel, execution_count=4)
    about = cell_about(shell, "\n  printf 'x' > a.txt\necho done\n", False, tmp_path)
    assert about == {"who": "person", "first_line": "printf 'x' > a.txt", "count": 4, "cell_id": "c-7",
                     "notebook": "work/analysis.ipynb"}
    assert cell_about(shell, "ls", True, tmp_path)["who"] == "agent"


def _runs(session) -> list[dict]:
    reply = handle(session, {"action": "changes"})
    assert reply["ok"], reply
    return reply["runs"]


ABOUT = {"who": "person", "first_line": "printf 'new\\n' > data.txt", "count": 3, "cell_id": "c-1",
         "notebook": "analysis.ipynb"}


def test_the_list_names_each_runs_cell_marks_a_rewound_run_and_force_needs_saying(session, tmp_path):
    (tmp_path / "data.txt").write_text("old\n")
    session.run_script("printf 'new\\n' > data.txt", RecordingSink(), about=ABOUT)
    [run] = _runs(session)
    assert run["about"] == ABOUT and run["rewound_by"] is None
    (tmp_path / "data.txt").write_text("changed since\n")
    refused = handle(session, {"action": "rewind", "run": run["id"]})
    assert refused["ok"] is False and "--force" in refused["message"]
    done = handle(session, {"action": "rewind", "run": run["id"], "force": True})
    assert done["ok"] and "`%tools rewind " in done["message"], done
    assert (tmp_path / "data.txt").read_text() == "old\n"
    rewind, first = _runs(session)
    assert first["id"] == run["id"] and first["rewound_by"] == rewind["id"] and rewind["rewinds"] == [run["id"]]
    text = _changes.changes_text(session.journal, types.SimpleNamespace(run=None, path=None))
    assert f"(rewound by run {rewind['id']})" in text and "from analysis.ipynb [3] by a person: printf" in text
    # The rewind undone: the first run's changes are back, and it is no longer marked.
    handle(session, {"action": "rewind", "run": rewind["id"]})
    assert (tmp_path / "data.txt").read_text() == "changed since\n"
    assert next(r for r in _runs(session) if r["id"] == run["id"])["rewound_by"] is None


def test_a_notebooks_diff_is_cell_by_cell_with_nbdime_or_without(session, tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", id="a"),
                                         nbformat.v4.new_markdown_cell("# gone", id="b")])
    nbformat.write(nb, tmp_path / "n.ipynb")
    nb.cells[0].source = "x = 2"
    nb.cells[1] = nbformat.v4.new_code_cell("y = 3", id="c")
    (tmp_path / "new.json").write_text(json.dumps(nb))
    session.run_script("cat new.json > n.ipynb", RecordingSink())
    [run] = _runs(session)
    diff = handle(session, {"action": "diff", "run": run["id"], "path": "n.ipynb"})["diff"]
    assert "## modified /cells/0/source:" in diff and "-  x = 1" in diff and "+  x = 2" in diff, diff  # nbdime's
    monkeypatch.setattr(_changes, "_nbdime_diff", lambda a, b: (_ for _ in ()).throw(ImportError("nbdime")))
    own = handle(session, {"action": "diff", "run": run["id"], "path": "n.ipynb"})["diff"]
    assert "## cell 1 (code, id a) changed:" in own and "-x = 1" in own and "+x = 2" in own, own
    assert "## cell 2 (code, id c) added:\n+y = 3" in own and "## cell 2 (markdown, id b) deleted:\n-# gone" in own
