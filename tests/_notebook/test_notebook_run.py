"""notebook_run in a kernel this session starts (--kernel): outputs, errors, images,
timeouts, cells written back, a dead kernel and its restart."""

from __future__ import annotations

import base64
import signal
import time

import nbformat
import pytest
from conftest import PNG, call, rich_notebook

from toolkernel._errors import ConnectionRequired, Unavailable
from toolkernel._loop import run
from toolkernel._providers._notebook import notebook_tools, pair, pairings, unpair
from toolkernel._tool import Image, ToolContext

read, edit, run_tool = notebook_tools()


@pytest.fixture(scope="module")
def paired(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("run")
    nbformat.write(rich_notebook(), workdir / "nb.ipynb")
    context = ToolContext(workdir, state={})
    run(pair(context.state, workdir, "nb.ipynb", kernel="python3"), timeout=120)
    yield context
    run(unpair(context.state), timeout=60)


def test_unpaired_run_asks_for_a_connection_and_says_how(ctx):
    with pytest.raises(ConnectionRequired) as caught:
        call(run_tool, ctx, notebook_path="nb.ipynb", code="1+1")
    assert "%tools pair NOTEBOOK --kernel" in caught.value.message


def test_result_and_stream_text(paired):
    result = call(run_tool, paired, notebook_path="nb.ipynb",
                  code="print('hello')\nimport sys; print('warn', file=sys.stderr)\n40 + 2")
    assert not result.is_error
    assert result.texts == ["hello\nwarn\n42"]


def test_variables_and_imports_are_shared_between_calls(paired):
    call(run_tool, paired, notebook_path="nb.ipynb", code="import math\nshared = math.sqrt(16)")
    assert call(run_tool, paired, notebook_path="nb.ipynb", code="shared * 2").texts == ["8.0"]


def test_ansi_codes_and_carriage_return_redraws_are_stripped(paired):
    result = call(run_tool, paired, notebook_path="nb.ipynb",
                  code="print('\\x1b[31mred\\x1b[0m plain'); print('10%\\r50%\\r100%')")
    assert result.texts == ["red plain\n100%"]


def test_error_is_an_error_result_with_a_clean_traceback(paired):
    result = call(run_tool, paired, notebook_path="nb.ipynb", code="print('before')\ndef f():\n    return 1/0\nf()")
    assert result.is_error
    text = result.texts[0]
    assert text.startswith("before\n")
    assert "\x1b" not in text and "-------------" not in text
    assert "----> 4 f()" in text and "return 1/0" in text
    assert text.endswith("ZeroDivisionError: division by zero")


def test_images_become_image_objects(paired):
    code = ("import base64\nfrom IPython.display import Image, display\n"
            f"display(Image(data=base64.b64decode('{base64.b64encode(PNG).decode()}')))\n'done'")
    result = call(run_tool, paired, notebook_path="nb.ipynb", code=code)
    assert result.images == [Image(PNG, "image/png")]
    assert result.texts == ["[image 1: image/png, output 1]\n'done'"]


def test_timeout_interrupts_the_kernel_and_returns_the_output_so_far(paired):
    call(run_tool, paired, notebook_path="nb.ipynb", code="kept = 4.0")
    code = "import time\nprint('started', flush=True)\ntime.sleep(60)\nprint('never')"
    result = call(run_tool, paired, notebook_path="nb.ipynb", code=code, timeout_seconds=2)
    assert result.is_error
    text = result.texts[0]
    assert text.startswith("timed out after 2 s; the kernel was interrupted. Output so far:\nstarted")
    assert "KeyboardInterrupt" in text and "never" not in text.splitlines()
    # the kernel is usable again, with its state
    assert call(run_tool, paired, notebook_path="nb.ipynb", code="kept").texts == ["4.0"]


def test_timeout_limits(paired):
    assert call(run_tool, paired, notebook_path="nb.ipynb", code="1", timeout_seconds=601).is_error
    assert call(run_tool, paired, notebook_path="nb.ipynb", code="1", timeout_seconds=0).is_error


def test_code_and_cell_id_together_is_an_error(paired):
    assert call(run_tool, paired, notebook_path="nb.ipynb", code="1", cell_id="x").is_error


def test_run_cell_writes_outputs_and_execution_count_into_the_notebook(paired):
    path = paired.workdir / "nb.ipynb"
    nbformat.write(rich_notebook(), path)  # as the module began: another test edits its cells
    # The cell's count in the file is 1: the kernel's next one is above it whatever ran before
    # on this module's kernel (in random order, maybe nothing).
    call(run_tool, paired, notebook_path="nb.ipynb", code="pass")
    call(read, paired, notebook_path="nb.ipynb")
    cell_id = nbformat.read(path, as_version=4).cells[1].id  # print('hello')\n6 * 7
    result = call(run_tool, paired, notebook_path="nb.ipynb", cell_id=cell_id)
    assert not result.is_error
    assert result.texts[0].startswith("hello\n42\n[cell ")
    cell = nbformat.read(path, as_version=4).cells[1]
    nbformat.validate(nbformat.read(path, as_version=4))
    assert cell.execution_count is not None and cell.execution_count > 1
    assert [o.output_type for o in cell.outputs] == ["stream", "execute_result"]
    assert cell.outputs[1].data["text/plain"] == "42"
    # the written notebook counts as read: the next cell run needs no re-read
    error_cell = nbformat.read(path, as_version=4).cells[2].id
    result = call(run_tool, paired, notebook_path="nb.ipynb", cell_id=error_cell)
    assert result.is_error
    assert nbformat.read(path, as_version=4).cells[2].outputs[0].ename == "ZeroDivisionError"


def test_run_cell_refuses_a_stale_notebook_and_markdown_cells(paired):
    path = paired.workdir / "nb.ipynb"
    call(read, paired, notebook_path="nb.ipynb")
    nb = nbformat.read(path, as_version=4)
    assert call(run_tool, paired, notebook_path="nb.ipynb", cell_id=nb.cells[0].id).is_error  # markdown
    nb.cells[1].source = "print('edited by a person')"
    nbformat.write(nb, path)
    result = call(run_tool, paired, notebook_path="nb.ipynb", cell_id=nb.cells[1].id)
    assert result.is_error and "read it again" in result.texts[0]
    assert nbformat.read(path, as_version=4).cells[1].outputs == nb.cells[1].outputs


@pytest.mark.slow
def test_dead_kernel_is_unavailable_and_restart_brings_it_back(tmp_path):
    context = ToolContext(tmp_path, state={})
    pairing = run(pair(context.state, tmp_path, "x.ipynb", kernel="python3"), timeout=120)
    try:
        call(run_tool, context, notebook_path="x.ipynb", code="lost = 1")
        run(pairing.connection.manager.signal_kernel(signal.SIGKILL))
        with pytest.raises(Unavailable) as caught:
            call(run_tool, context, notebook_path="x.ipynb", code="1+1")
        assert caught.value.retryable and "restart=true" in caught.value.message
        result = call(run_tool, context, notebook_path="x.ipynb", restart=True, code="'lost' in dir()")
        assert result.texts == ["False"]
        assert call(run_tool, context, notebook_path="x.ipynb", code="1+1").texts == ["2"]
    finally:
        run(unpair(context.state), timeout=60)


@pytest.mark.slow
def test_a_launcher_left_in_the_notebooks_folder_does_not_start_with_the_kernel(tmp_path):
    # `python -m ipykernel_launcher` looked in its working directory first: a file a script
    # left there ran on the next start, `restart=true` included.
    context = ToolContext(tmp_path, state={})
    (tmp_path / "ipykernel_launcher.py").write_text("import pathlib; pathlib.Path('pwned').write_text('x')\n")
    run(pair(context.state, tmp_path, "x.ipynb", kernel="python3"), timeout=120)
    try:
        assert call(run_tool, context, notebook_path="x.ipynb", restart=True, code="1+1").texts == ["2"]
        assert not (tmp_path / "pwned").exists()
        # The notebook's own imports still find what lies beside it.
        (tmp_path / "helper_beside.py").write_text("VALUE = 7\n")
        assert call(run_tool, context, notebook_path="x.ipynb", code="import helper_beside; helper_beside.VALUE").texts == ["7"]
    finally:
        run(unpair(context.state), timeout=60)


@pytest.mark.slow
def test_kernel_dying_mid_run_is_unavailable(tmp_path):
    context = ToolContext(tmp_path, state={})
    run(pair(context.state, tmp_path, "x.ipynb", kernel="python3"), timeout=120)
    try:
        with pytest.raises(Unavailable) as caught:
            call(run_tool, context, notebook_path="x.ipynb",
                 code="import os, signal\nprint('bye', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)")
        assert "died while the code ran" in caught.value.message
    finally:
        run(unpair(context.state), timeout=60)


# Run in the kernel: from here on it sends its replies and nothing else, as a kernel whose output
# channel the client (a server reconnecting to a new kernel) is not yet listening to.
DROP_IOPUB = ("k = get_ipython().kernel\n_send = k.session.send\n"
              "k.session.send = lambda stream, msg, *a, **kw: (_send(stream, msg, *a, **kw)"
              " if isinstance(msg, str) and msg.endswith('_reply') else None)\n'never seen'")


@pytest.mark.slow
def test_a_reply_whose_outputs_never_come_ends_the_run_saying_so_not_at_its_timeout(tmp_path):
    context = ToolContext(tmp_path, state={})
    run(pair(context.state, tmp_path, "x.ipynb", kernel="python3"), timeout=120)
    try:
        started = time.monotonic()
        result = call(run_tool, context, notebook_path="x.ipynb", code=DROP_IOPUB, timeout_seconds=60)
        # It waited for an idle that never came: "timed out after 60 s ... still busy afterwards".
        assert time.monotonic() - started < 50
        text = result.texts[0]
        assert "outputs never came back" in text and "timed out" not in text and not result.is_error
    finally:
        run(unpair(context.state), timeout=60)


@pytest.mark.slow
def test_pairing_a_notebook_again_replaces_and_shuts_down_its_owned_kernel(tmp_path):
    state: dict = {}
    first = run(pair(state, tmp_path, "a.ipynb", kernel="python3"), timeout=120)
    second = run(pair(state, tmp_path, "./a.ipynb", kernel="python3"), timeout=120)
    try:
        assert list(pairings(state)) == [second]
        assert not run(first.connection.manager.is_alive())
    finally:
        run(unpair(state), timeout=60)
    assert list(pairings(state)) == []
    assert not run(second.connection.manager.is_alive())


@pytest.mark.slow
def test_two_notebooks_paired_at_once_each_run_in_their_own_kernel(tmp_path):
    context = ToolContext(tmp_path, state={})
    for name in ("a.ipynb", "b.ipynb"):
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("who")]), tmp_path / name)
        run(pair(context.state, tmp_path, name, kernel="python3"), timeout=120)
    try:
        call(run_tool, context, notebook_path="a.ipynb", code="who = 'a'")
        call(run_tool, context, notebook_path="b.ipynb", code="who = 'b'")
        for name in ("b.ipynb", "a.ipynb"):
            call(read, context, notebook_path=name)
            cell_id = nbformat.read(tmp_path / name, as_version=4).cells[0].id
            assert call(run_tool, context, notebook_path=name, cell_id=cell_id).texts[0].startswith(f"'{name[0]}'")
            assert nbformat.read(tmp_path / name, as_version=4).cells[0].outputs[0].data["text/plain"] == \
                f"'{name[0]}'"
        with pytest.raises(ConnectionRequired, match=r"c.ipynb is not paired .*paired: a.ipynb, b.ipynb"):
            call(run_tool, context, notebook_path="c.ipynb", code="who")
        run(unpair(context.state, tmp_path, "a.ipynb"), timeout=60)
        with pytest.raises(ConnectionRequired):
            call(run_tool, context, notebook_path="a.ipynb", code="who")
        assert call(run_tool, context, notebook_path="b.ipynb", code="who").texts == ["'b'"]
    finally:
        run(unpair(context.state), timeout=60)


def test_every_run_names_its_notebook(paired):
    result = call(run_tool, paired, code="1")
    assert result.is_error and "notebook_path" in result.texts[0]


def test_a_stopped_call_interrupts_the_kernel(paired):
    from toolkernel._loop import submit

    future = submit(run_tool.call({"notebook_path": "nb.ipynb", "code": "import time\ntime.sleep(120)"}, paired))
    time.sleep(2)
    future.cancel()
    # Were the sleep still running, this would wait behind it and time out.
    result = call(run_tool, paired, notebook_path="nb.ipynb", code="'free again'", timeout_seconds=30)
    assert result.texts == ["'free again'"], result.texts


@pytest.mark.slow
def test_the_person_asked_to_run_a_cell_sees_the_code_that_would_run(tmp_path):
    """A script may rewrite the notebook file itself (the workspace is writable) and read it again:
    then `cell_id` alone names code the person never saw. The question shows the cell's source
    as this session last read it, which is what the run checks it still is."""
    from kernel_helpers import RecordingSink
    from toolkernel._approval._approver import Answer
    from toolkernel._session import Session

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("1 + 1", id="c1")]
    nbformat.write(notebook, tmp_path / "nb.ipynb")
    session = Session(tmp_path)
    asked: list[str] = []

    async def person(request):
        asked.append(request.question())
        return Answer.DENY

    try:
        run(pair(session.state, tmp_path, "nb.ipynb", kernel="python3"), timeout=120)
        rewrite = ("jq -c '.cells[0].source = \"import os; os.system(\\\"touch pwned\\\")\"' nb.ipynb > t.json;"
                   " cat t.json > nb.ipynb; tools notebook-read notebook_path=nb.ipynb > /dev/null")
        assert session.run_script(rewrite, RecordingSink()).exit_code == 0
        result = session.run_script("tools notebook-run notebook_path=nb.ipynb cell_id=c1", RecordingSink(),
                                    approver=person)
        assert result.exit_code != 0 and len(asked) == 1
        assert 'os.system(\\"touch pwned\\")' in asked[0] or 'os.system("touch pwned")' in asked[0], asked[0]
        assert not (tmp_path / "pwned").exists()
    finally:
        run(unpair(session.state), timeout=60)
        session.close()
