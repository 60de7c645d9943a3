"""notebook_read, notebook_edit and notebook_run as toolkernel tools."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ..._tool import Image, Tool, ToolContext, ToolInputError, ToolResult, tool
from ._text import describe_output, join_source, newest_line, run_reports

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ._connection import Execution
    from ._pairing import Pairing
    from ._stores import CellEdit, Loaded, NotebookStore

# nbformat (and jsonschema with it), the kernel clients and the server stores take
# a second or more to import: the tools' definitions are read by every `tools --help`, the rest is
# imported when a notebook tool runs.

DEFAULT_TIMEOUT_SECONDS = 120
MAX_TIMEOUT_SECONDS = 600
CELL_TYPES = ("code", "markdown", "raw")

_PATH = {"type": "string", "minLength": 1,
         "description": "Notebook (.ipynb) path: relative to the working directory, or, for a notebook paired "
                        "with --server, its path from that server's root. A notebook under a paired server's "
                        "root is read and changed through that server, however its path is spelled."}

READ_SCHEMA = {
    "type": "object",
    "properties": {
        "notebook_path": _PATH,
        "cell_id": {"type": "string", "minLength": 1, "description": "Show only this cell."},
    },
    "required": ["notebook_path"],
    "additionalProperties": False,
}

EDIT_SCHEMA = {
    "type": "object",
    "properties": {
        "notebook_path": _PATH,
        "cell_id": {"type": "string", "description": "The cell to replace or delete; for insert, the cell to insert "
                                                     "after (empty or absent: at the top)."},
        "new_source": {"type": "string", "description": "The cell's new source (replace, insert)."},
        "cell_type": {"type": "string", "enum": list(CELL_TYPES),
                      "description": "Type of the new cell (insert: required); for replace, changes the cell's type."},
        "edit_mode": {"type": "string", "enum": ["replace", "insert", "delete"], "default": "replace"},
    },
    "required": ["notebook_path"],
    "additionalProperties": False,
    "allOf": [
        {"if": {"properties": {"edit_mode": {"const": "insert"}}, "required": ["edit_mode"]},
         "then": {"required": ["new_source", "cell_type"]}},
        {"if": {"properties": {"edit_mode": {"const": "delete"}}, "required": ["edit_mode"]},
         "then": {"required": ["cell_id"], "properties": {"cell_id": {"minLength": 1}}},
         "else": {"required": ["new_source"]}},
        {"if": {"not": {"properties": {"edit_mode": {"enum": ["insert", "delete"]}}, "required": ["edit_mode"]}},
         "then": {"required": ["cell_id"], "properties": {"cell_id": {"minLength": 1}}}},
    ],
}

RUN_SCHEMA = {
    "type": "object",
    "properties": {
        "notebook_path": {**_PATH,
                          "description": "The paired notebook whose kernel runs the code. " + _PATH["description"]},
        "code": {"type": "string", "description": "Code to run in the notebook's kernel."},
        "cell_id": {"type": "string", "minLength": 1,
                    "description": "Run this code cell of the notebook and write its outputs into the notebook."},
        "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_SECONDS,
                            "default": DEFAULT_TIMEOUT_SECONDS},
        "restart": {"type": "boolean", "default": False,
                    "description": "Restart the kernel first (a kernel this session started with --kernel, or a "
                                   "--server kernel); its variables are lost."},
    },
    "required": ["notebook_path"],
    "additionalProperties": False,
    "anyOf": [{"required": ["code"]}, {"required": ["cell_id"]},
              {"required": ["restart"], "properties": {"restart": {"const": True}}}],
    "not": {"required": ["code", "cell_id"]},
}


# --- notebook_read ---------------------------------------------------------

def _server_notebook_paths(arguments: Mapping[str, Any], state: Mapping[str, Any]):
    from ._pairing import server_notebook_paths

    return server_notebook_paths(arguments, state)


@tool("notebook_read", kind="read", path_keys=("notebook_path",), loop_bound=True,
      server_paths=_server_notebook_paths,
      input_schema=READ_SCHEMA, description=(
    "Read a Jupyter notebook: every cell's id, type, execution count, source and text output; image outputs "
    "are returned as images. Cell ids are the handle for notebook-edit and notebook-run."))
async def notebook_read(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    store = await _store(arguments, ctx)
    notebook = await store.load()
    store.record_read(ctx.state, notebook)
    cells = list(enumerate(notebook.nb.cells, 1))
    if arguments.get("cell_id"):
        index = notebook.find(arguments["cell_id"])
        cells = [(index + 1, notebook.nb.cells[index])]
    images: list[Image] = []
    blocks = [_read_header(notebook)] + [_cell_block(n, len(notebook.nb.cells), cell, images) for n, cell in cells]
    warnings = [f"WARNING: {report}." for report in await _pairings(ctx.state).overwritten(store)]
    return ToolResult(texts=["\n".join([*warnings, "\n\n".join(blocks)])], images=images)


def _read_header(notebook: Loaded) -> str:
    nb = notebook.nb
    kernel = (nb.metadata.get("kernelspec") or {}).get("name")
    header = f"{notebook.name}: {len(nb.cells)} cells, " + (f"kernel {kernel}" if kernel else "no kernel recorded")
    if notebook.ids_added:
        header += ("\n(this notebook predates cell ids; ids were given in memory and are written with the next "
                   "edit)")
    if notebook.overwritten:
        header = f"WARNING: {notebook.overwritten}.\n{header}"
    return header


def _cell_block(number: int, total: int, cell: NotebookNode, images: list[Image]) -> str:
    count = cell.get("execution_count")
    title = f"--- cell {number}/{total} id={cell['id']} {cell.cell_type}"
    if cell.cell_type == "code":
        title += f" [{count if count is not None else ' '}]"
    lines = [title, join_source(cell.source).rstrip("\n")]
    for index, output in enumerate(cell.get("outputs") or [], 1):
        text = describe_output(output, images, where=f"cell {cell['id']} output {index}")
        if text:
            lines += [f"--- output {index} ({_output_label(output)})", text]
    return "\n".join(lines)


def _output_label(output: NotebookNode) -> str:
    if output.output_type == "stream":
        return output.get("name", "stream")
    return output.output_type


# --- notebook_edit ---------------------------------------------------------

async def _edit_ready(arguments: Mapping[str, Any], ctx: ToolContext) -> None:
    """What an edit needs, said before anyone is asked to allow it: the notebook read in this
    session (an insert may make a new one), and, on a server without collaboration, nobody else
    with it open."""
    if not arguments.get("notebook_path"):
        return  # the call itself says what is missing
    inserting = (arguments.get("edit_mode") or "replace") == "insert"
    store = await _store(dict(arguments), ctx, missing_ok=inserting)
    if not inserting:
        store.last_read(ctx.state)
    await _not_open_elsewhere(store)


async def _not_open_elsewhere(store: NotebookStore) -> None:
    from ._stores import ContentsStore

    if isinstance(store, ContentsStore):  # no collaboration there: an open copy would save over the change
        await store.require_not_open()


@tool("notebook_edit", kind="edit", path_keys=("notebook_path",), loop_bound=True,
      server_paths=_server_notebook_paths, ready=_edit_ready,
      input_schema=EDIT_SCHEMA, description=(
    "Edit a notebook cell by id: replace its source (default), insert a new cell after cell_id (at the top when "
    "cell_id is empty; needs cell_type), or delete it. Editing a code cell clears its outputs. Refused if the "
    "file changed since this session last read it, or someone is editing that cell. Returns the ids touched."))
async def notebook_edit(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    mode = arguments.get("edit_mode") or "replace"
    store = await _store(arguments, ctx, missing_ok=mode == "insert")
    notebook = await store.load(missing_ok=mode == "insert")
    change = EDITS[mode](notebook, arguments)
    if ctx.journal is not None and _is_local(store):  # a local file: the journal keeps it as it was
        ctx.journal.before_change(store.location)
    from ._restore import record_after, record_before  # a served notebook: the cell, through its server

    record_before(ctx.journal, store, notebook, change)
    notebook = await store.edit(ctx.state, notebook, change)
    record_after(ctx.journal, store, notebook, change)
    touched = [change.cell_id] if mode != "insert" else [str(change.cell.id)]
    done = {"notebook_path": store.location, "edit_mode": mode, "cell_ids": touched,
            "cell_count": len(notebook.nb.cells)}
    warnings = await _pairings(ctx.state).overwritten(store)
    return {**done, "warnings": warnings} if warnings else done


def _is_local(store: NotebookStore) -> bool:
    from ._stores import FileStore

    return isinstance(store, FileStore)


def _replace(notebook: Loaded, arguments: dict[str, Any]) -> CellEdit:
    cell_id = _require(arguments, "cell_id", "replace")
    source = _require_source(arguments, "replace")
    old = notebook.nb.cells[notebook.find(cell_id)]
    cell_type = arguments.get("cell_type") or old.cell_type
    cell = _new_cell(cell_type, source, cell_id)
    cell.metadata = old.get("metadata", {})
    if cell_type == "markdown" and old.cell_type == "markdown" and "attachments" in old:
        cell.attachments = old.attachments
    return _cell_edit("replace", cell_id, cell)


def _insert(notebook: Loaded, arguments: dict[str, Any]) -> CellEdit:
    cell_type = _require(arguments, "cell_type", "insert")
    source = _require_source(arguments, "insert")
    after = arguments.get("cell_id") or ""
    if after:
        notebook.find(after)
    taken = {cell.get("id") for cell in notebook.nb.cells}
    cell = _new_cell(cell_type, source, None)
    while cell.id in taken:
        cell = _new_cell(cell_type, source, None)
    return _cell_edit("insert", after, cell)


def _delete(notebook: Loaded, arguments: dict[str, Any]) -> CellEdit:
    cell_id = _require(arguments, "cell_id", "delete")
    notebook.find(cell_id)
    return _cell_edit("delete", cell_id)


EDITS = {"replace": _replace, "insert": _insert, "delete": _delete}


def _new_cell(cell_type: str, source: str, cell_id: str | None) -> NotebookNode:
    if cell_type not in CELL_TYPES:
        raise ToolInputError(f"cell_type must be one of {', '.join(CELL_TYPES)}, not {cell_type!r}")
    import nbformat

    make = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell,
            "raw": nbformat.v4.new_raw_cell}[cell_type]
    cell = make(source)  # a new code cell has no outputs and no execution count
    if cell_id is not None:
        cell.id = cell_id
    return cell


def _require(arguments: dict[str, Any], key: str, mode: str) -> str:
    value = arguments.get(key)
    if not value:
        raise ToolInputError(f"edit_mode {mode} needs {key}")
    return value


def _require_source(arguments: dict[str, Any], mode: str) -> str:
    if not isinstance(arguments.get("new_source"), str):
        raise ToolInputError(f"edit_mode {mode} needs new_source")
    return arguments["new_source"]


# --- notebook_run ----------------------------------------------------------

def _paired(arguments: Mapping[str, Any], ctx: ToolContext) -> None:
    """Nothing to run in when the notebook is not paired: said before anyone is asked to allow it."""
    path = arguments.get("notebook_path")
    if path:  # without one, the call itself says what is missing
        _pairings(ctx.state).reachable(ctx.workdir, path)


def _code_to_run(arguments: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """For a cell run: the cell's code as this session last read it, which the run checks the cell
    still holds. A script can rewrite the notebook's file and read it again; the id alone would
    name code the person asked never saw."""
    cell_id, path = arguments.get("cell_id"), arguments.get("notebook_path")
    if not cell_id or not isinstance(path, str) or not path:
        return {}
    from ._stores import READS_KEY

    pairing = _pairings(ctx.state).find(ctx.workdir, path)
    store = pairing.store if pairing is not None else None
    seen = ctx.state.get(READS_KEY, {}).get(store.key) if store is not None else None
    code = seen.sources.get(cell_id) if seen is not None else None
    return {"code": code if code is not None else "(not read in this session: the run will be refused)"}


async def _run_ready(arguments: Mapping[str, Any], ctx: ToolContext) -> None:
    """A run needs a kernel (a notebook paired per call: its session, or leave to start one), and a
    cell run what an edit does (it writes the cell's outputs): said before anyone is asked."""
    path, cell_id = arguments.get("notebook_path"), arguments.get("cell_id")
    if not path:
        return  # the call itself says what is missing
    pairing = await _pairings(ctx.state).pairing_for(ctx.workdir, path)
    await pairing.kernel_ready()
    if not cell_id:
        return  # code runs in the kernel alone
    store = await pairing.notebook_store()
    store.last_read(ctx.state)
    await _not_open_elsewhere(store)


@tool("notebook_run", kind="execute", loop_bound=True, server_paths=_server_notebook_paths,
      input_schema=RUN_SCHEMA, precheck=_paired, ready=_run_ready, describe=_code_to_run, description=(
    "Run code in the paired notebook's kernel, sharing its variables and imports; or run one code cell of the "
    "paired notebook by cell_id and write its outputs into the notebook. Returns stream text, the result, errors "
    "and images. Default timeout 120 s, at most 600; on timeout the kernel is interrupted."))
async def notebook_run(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    code, cell_id = arguments.get("code"), arguments.get("cell_id")
    timeout = _timeout(arguments)
    if code is not None and cell_id:
        raise ToolInputError("give code or cell_id, not both")
    pairing = await _pairings(ctx.state).pairing_for(ctx.workdir, _path_argument(arguments))
    connection = await pairing.kernel()
    # The kernel a call paired (found, or started), said once; then a kernel that was gone, and the new one
    # that took its place.
    notices = [pairing.take_news()]
    if arguments.get("restart"):
        notices.append(await connection.restart())
        if code is None and not cell_id:
            return ToolResult.text("\n".join(n for n in notices if n) or f"restarted the {connection.label} kernel")
    if cell_id:
        result, seen = await _run_cell(pairing, cell_id, timeout, ctx.state, ctx), pairing.store
    elif code is None:
        raise ToolInputError("give code to run, or the cell_id of a code cell of the notebook")
    else:
        execution = await connection.execute(code, timeout, _reporting(ctx))
        result, seen = _execution_result(execution, timeout, where="output"), None
    if any(notices):
        result.texts = ["\n".join(part for part in (*result.texts, *notices) if part)]
    return await _with_warnings(result, ctx.state, seen)


async def _with_warnings(result: ToolResult, state: dict[str, Any], seen: NotebookStore | None = None) -> ToolResult:
    """`result`, with what a save by someone else undid of this session's edits in any notebook."""
    warnings = [f"WARNING: {report}." for report in await _pairings(state).overwritten(seen)]
    if warnings:
        result.texts = ["\n".join([*result.texts, *warnings])]
    return result


def _reporting(ctx: ToolContext, then: Any = None) -> Any:
    """The kernel's outputs as the call's progress, as they change: how many reports so far, and
    the newest line of text (a client of `serve` hears them while the cell runs); then `then`."""
    reports = 0

    async def report(execution: Any) -> None:
        nonlocal reports
        reports += 1
        ctx.progress(float(reports), None, newest_line(execution.outputs))
        if then is not None:
            await then(execution)

    return report


async def _run_cell(pairing: Pairing, cell_id: str, timeout: float, state: dict[str, Any],
                    ctx: ToolContext | None = None) -> ToolResult:
    store = await pairing.notebook_store()
    notebook = await store.load()
    cell = notebook.nb.cells[notebook.find(cell_id)]
    if cell.cell_type != "code":
        raise ToolInputError(f"cell {cell_id} is a {cell.cell_type} cell; only code cells run")
    await store.check_runnable(state, notebook, cell_id)

    async def show(execution: Execution) -> None:
        await store.output_changed(cell_id, execution)

    connection = await pairing.kernel()
    try:
        execution = await connection.execute(join_source(cell.source), timeout,
                                             show if ctx is None else _reporting(ctx, show))
    except BaseException:
        await store.run_stopped(cell_id)
        raise
    note = await store.write_outputs(state, notebook, cell_id, execution)
    result = _execution_result(execution, timeout, where=f"cell {cell_id} output")
    result.texts = ["\n".join(part for part in (*result.texts, note) if part)]
    return result


def _timeout(arguments: dict[str, Any]) -> float:
    value = arguments.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_TIMEOUT_SECONDS:
        raise ToolInputError(f"timeout_seconds must be a number above 0 and at most {MAX_TIMEOUT_SECONDS}")
    return float(value)


def _execution_result(execution: Execution, timeout: float, *, where: str) -> ToolResult:
    images: list[Image] = []
    parts = [describe_output(output, images, where=f"{where} {n}") for n, output in enumerate(execution.outputs, 1)]
    parts = [part for part in parts if part]
    if execution.timed_out:
        status = f"timed out after {timeout:g} s; the kernel was interrupted"
        if not execution.settled:
            status += " but was still busy afterwards"
        parts.insert(0, status + (". Output so far:" if parts else ". There was no output."))
    elif execution.status == "aborted":
        parts.append("the kernel aborted the request without running it")
    if execution.outputs_lost:
        parts.append("(the kernel ran the code and replied, but its outputs never came back: the server was not "
                     "yet listening to the kernel's output channel; show what you need in another run)")
    if execution.notice:
        parts.append(execution.notice)
    if execution.restarted:
        parts.append("(the kernel was restarted before this code reached it; a new kernel ran it, without the old "
                     "one's variables)")
    return ToolResult(texts=["\n".join(parts)], images=images, is_error=execution.status != "ok",
                      run_reports=run_reports(execution.outputs))


def _path_argument(arguments: dict[str, Any]) -> str:
    path = arguments.get("notebook_path")
    if not path:
        raise ToolInputError("give notebook_path: every notebook tool call names its notebook")
    return path


async def _store(arguments: dict[str, Any], ctx: ToolContext, *, missing_ok: bool = False) -> NotebookStore:
    """Where the named notebook lives: through the server that serves it, else the local file
    (`missing_ok`: the call makes it)."""
    path = _path_argument(arguments)
    # A local notebook is opened where the dispatcher's checks saw it lead, not resolved again.
    return await _pairings(ctx.state).store(ctx.workdir, path, ctx.real_name(arguments, "notebook_path"),
                                            missing_ok=missing_ok)


def notebook_tools() -> list[Tool]:
    return [notebook_read, notebook_edit, notebook_run]


def _cell_edit(*args: Any) -> CellEdit:
    from ._stores import CellEdit

    return CellEdit(*args)


def _pairings(state: dict[str, Any]):
    from ._pairing import pairings

    return pairings(state)
