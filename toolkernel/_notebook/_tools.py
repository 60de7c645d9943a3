"""notebook_read, notebook_edit and notebook_run as toolkernel tools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode

from .._tool import Image, Tool, ToolContext, ToolInputError, ToolResult, tool
from . import _document as doc
from ._connection import Execution
from ._pairing import STATE_KEY, Pairing, current_pairing
from ._text import describe_output, join_source

DEFAULT_TIMEOUT_SECONDS = 120
MAX_TIMEOUT_SECONDS = 600
CELL_TYPES = ("code", "markdown", "raw")

_PATH = {"type": "string", "minLength": 1,
         "description": "Notebook (.ipynb) path, relative to the working directory. Default: the paired notebook."}

READ_SCHEMA = {
    "type": "object",
    "properties": {
        "notebook_path": _PATH,
        "cell_id": {"type": "string", "minLength": 1, "description": "Show only this cell."},
    },
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
        "code": {"type": "string", "description": "Code to run in the paired notebook's kernel."},
        "cell_id": {"type": "string", "minLength": 1,
                    "description": "Run this code cell of the paired notebook and write its outputs into the notebook."},
        "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_SECONDS,
                            "default": DEFAULT_TIMEOUT_SECONDS},
        "restart": {"type": "boolean", "default": False,
                    "description": "Restart the kernel first (a kernel this session started with --kernel, or a "
                                   "--server kernel); its variables are lost."},
    },
    "additionalProperties": False,
    "anyOf": [{"required": ["code"]}, {"required": ["cell_id"]},
              {"required": ["restart"], "properties": {"restart": {"const": True}}}],
    "not": {"required": ["code", "cell_id"]},
}


# --- notebook_read ---------------------------------------------------------

@tool("notebook_read", kind="read", path_keys=("notebook_path",), input_schema=READ_SCHEMA, description=(
    "Read a Jupyter notebook: every cell's id, type, execution count, source and text output; image outputs "
    "are returned as images. Cell ids are the handle for notebook-edit and notebook-run."))
async def notebook_read(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    notebook = doc.load(_notebook_path(arguments, ctx))
    doc.record_read(ctx.state, notebook)
    cells = list(enumerate(notebook.nb.cells, 1))
    if arguments.get("cell_id"):
        index = notebook.find(arguments["cell_id"])
        cells = [(index + 1, notebook.nb.cells[index])]
    images: list[Image] = []
    blocks = [_read_header(notebook)] + [_cell_block(n, len(notebook.nb.cells), cell, images) for n, cell in cells]
    return ToolResult(texts=["\n\n".join(blocks)], images=images)


def _read_header(notebook: doc.NotebookFile) -> str:
    nb = notebook.nb
    kernel = (nb.metadata.get("kernelspec") or {}).get("name", "no kernel recorded")
    header = f"{notebook.path.name}: {len(nb.cells)} cells, kernel {kernel}"
    if notebook.ids_added:
        header += ("\n(this notebook predates cell ids; ids were given in memory and are written with the next "
                   "edit)")
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

@tool("notebook_edit", kind="edit", path_keys=("notebook_path",), input_schema=EDIT_SCHEMA, description=(
    "Edit a notebook cell by id: replace its source (default), insert a new cell after cell_id (at the top when "
    "cell_id is empty; needs cell_type), or delete it. Editing a code cell clears its outputs. Refused if the "
    "file changed since this session last read it. Returns the ids touched."))
async def notebook_edit(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    mode = arguments.get("edit_mode") or "replace"
    notebook = doc.load(_notebook_path(arguments, ctx), missing_ok=mode == "insert")
    doc.require_unchanged(ctx.state, notebook)
    touched = EDITS[mode](notebook, arguments)
    doc.save(ctx.state, notebook)
    return {"notebook_path": str(notebook.path), "edit_mode": mode, "cell_ids": touched,
            "cell_count": len(notebook.nb.cells)}


def _replace(notebook: doc.NotebookFile, arguments: dict[str, Any]) -> list[str]:
    cell_id = _require(arguments, "cell_id", "replace")
    source = _require_source(arguments, "replace")
    index = notebook.find(cell_id)
    old = notebook.nb.cells[index]
    cell_type = arguments.get("cell_type") or old.cell_type
    cell = _new_cell(cell_type, source, cell_id)
    cell.metadata = old.get("metadata", {})
    if cell_type == "markdown" and old.cell_type == "markdown" and "attachments" in old:
        cell.attachments = old.attachments
    notebook.nb.cells[index] = cell
    return [cell_id]


def _insert(notebook: doc.NotebookFile, arguments: dict[str, Any]) -> list[str]:
    cell_type = _require(arguments, "cell_type", "insert")
    source = _require_source(arguments, "insert")
    after = arguments.get("cell_id") or ""
    position = notebook.find(after) + 1 if after else 0
    taken = {cell.get("id") for cell in notebook.nb.cells}
    cell = _new_cell(cell_type, source, None)
    while cell.id in taken:
        cell = _new_cell(cell_type, source, None)
    notebook.nb.cells.insert(position, cell)
    return [cell.id]


def _delete(notebook: doc.NotebookFile, arguments: dict[str, Any]) -> list[str]:
    cell_id = _require(arguments, "cell_id", "delete")
    del notebook.nb.cells[notebook.find(cell_id)]
    return [cell_id]


EDITS = {"replace": _replace, "insert": _insert, "delete": _delete}


def _new_cell(cell_type: str, source: str, cell_id: str | None) -> NotebookNode:
    if cell_type not in CELL_TYPES:
        raise ToolInputError(f"cell_type must be one of {', '.join(CELL_TYPES)}, not {cell_type!r}")
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

@tool("notebook_run", kind="execute", loop_bound=True, input_schema=RUN_SCHEMA, description=(
    "Run code in the paired notebook's kernel, sharing its variables and imports; or run one code cell of the "
    "paired notebook by cell_id and write its outputs into the notebook. Returns stream text, the result, errors "
    "and images. Default timeout 120 s, at most 600; on timeout the kernel is interrupted."))
async def notebook_run(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    pairing = current_pairing(ctx.state)
    code, cell_id = arguments.get("code"), arguments.get("cell_id")
    timeout = _timeout(arguments)
    if code is not None and cell_id:
        raise ToolInputError("give code or cell_id, not both")
    if arguments.get("restart"):
        await pairing.connection.restart()
        if code is None and not cell_id:
            return ToolResult.text(f"restarted the {pairing.connection.label} kernel")
    if cell_id:
        return await _run_cell(pairing, cell_id, timeout, ctx.state)
    if code is None:
        raise ToolInputError("give code to run, or the cell_id of a code cell of the paired notebook")
    execution = await pairing.connection.execute(code, timeout)
    return _execution_result(execution, timeout, where="output")


async def _run_cell(pairing: Pairing, cell_id: str, timeout: float, state: dict[str, Any]) -> ToolResult:
    notebook = doc.load(pairing.notebook)
    doc.require_unchanged(state, notebook)
    cell = notebook.nb.cells[notebook.find(cell_id)]
    if cell.cell_type != "code":
        raise ToolInputError(f"cell {cell_id} is a {cell.cell_type} cell; only code cells run")
    execution = await pairing.connection.execute(join_source(cell.source), timeout)
    result = _execution_result(execution, timeout, where=f"cell {cell_id} output")
    if doc.is_unchanged_since(notebook):
        cell.outputs = execution.outputs
        cell.execution_count = execution.execution_count
        doc.save(state, notebook)
        note = f"[cell {cell_id} ran as [{execution.execution_count}]; its outputs are written to {notebook.path.name}]"
    else:
        note = (f"[outputs NOT written: {notebook.path.name} changed on disk while the cell ran; "
                "read it again]")
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
    return ToolResult(texts=["\n".join(parts)], images=images, is_error=execution.status != "ok")


def _notebook_path(arguments: dict[str, Any], ctx: ToolContext) -> Path:
    if arguments.get("notebook_path"):
        return ctx.resolve(arguments["notebook_path"])
    pairing = ctx.state.get(STATE_KEY)
    if pairing is None:
        raise ToolInputError("give notebook_path (no notebook is paired in this session)")
    return pairing.notebook


def notebook_tools() -> list[Tool]:
    return [notebook_read, notebook_edit, notebook_run]
