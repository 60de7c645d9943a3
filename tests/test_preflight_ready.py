"""Issue 48, item 3: no question for a call that cannot succeed. A notebook edit this session has
not read fails at once with the reason, before anyone is asked (before the start and mid-run
alike); a read earlier in the same script makes it one the question asks about."""

from __future__ import annotations

import nbformat
import pytest
from kernel_helpers import RecordingSink

from toolkernel._approval._approver import Answer
from toolkernel._session import Session


class Asked:
    """An approver that allows everything and keeps what it was asked."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    async def __call__(self, request):
        self.asked.append([request.call.command])
        return Answer.ONCE

    async def ask_all(self, requests):
        self.asked.append([r.call.command for r in requests])
        return [Answer.ONCE] * len(requests)


@pytest.fixture
def session(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", id="a")])
    nbformat.write(nb, tmp_path / "n.ipynb")
    s = Session(tmp_path)
    yield s
    s.close()


EDIT = "tools notebook-edit notebook_path=n.ipynb cell_id=a new_source='x = 2'"


def test_an_edit_of_a_notebook_not_read_fails_at_once_and_nobody_is_asked(session, tmp_path):
    approver, sink = Asked(), RecordingSink()
    session.run_script(f"{EDIT}\necho after", sink, approver=approver)
    assert approver.asked == []
    assert "has not been read in this session; read it first" in sink.stderr_text
    assert '"code": "tool_error"' in sink.stderr_text
    assert "x = 1" in (tmp_path / "n.ipynb").read_text()
    # Mid-run too (a call built as the script runs): failed before the person is asked.
    sink = RecordingSink()
    session.run_script(f"for c in a; do {EDIT.replace('cell_id=a', 'cell_id=$c')}; done", sink, approver=approver)
    assert approver.asked == [] and "has not been read in this session" in sink.stderr_text


def test_an_edit_after_a_read_in_the_same_script_is_asked_about_before_the_start(session, tmp_path):
    approver, sink = Asked(), RecordingSink()
    result = session.run_script(f"tools notebook-read notebook_path=n.ipynb > /dev/null\n{EDIT}\n"
                                "tools write-file path=w.txt content=w", sink, approver=approver)
    assert result.exit_code == 0, sink.stderr_text
    assert approver.asked == [["tools notebook-edit", "tools write-file"]]  # one question, both calls
    assert "x = 2" in (tmp_path / "n.ipynb").read_text()
