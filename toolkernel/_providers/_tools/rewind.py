"""changes and rewind: the journal of changes (`_journal/`, issue 38) as tools an agent calls.

Listing is a read. A rewind writes the workspace like any edit, so it is an ordinary call of kind
"edit" that the policy asks about (a person rewinds with `%tools rewind` or `toolkernel rewind`).
Neither is on `serve`'s direct list: an agent reaches them through `bash` (`tools rewind ID`),
unless `[tools_in_shell] keep_visible` names them.
"""

from __future__ import annotations

from typing import Any

from ..._journal import Journal, RewindError, chosen_cells, describe_rewind, describe_runs, iter_changes, rewind
from ..._config._trust import NAMING
from ..._tool import ToolContext, ToolInputError, tool

_RUN = {"type": "string", "pattern": "^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$",
        "description": "A run's id, as `changes` lists it."}


def _journal(ctx: ToolContext) -> Journal:
    """The run's journal (its `[rewind]` limits), else the workspace's."""
    return ctx.journal.journal if ctx.journal is not None else Journal(ctx.workdir)


def _a_persons(path: str) -> str | None:
    """A config file or a repository's store is put back by a person only: a call may not write them
    unasked, and the rewind tool's approval is an edit's."""
    parts = path.split("/")
    if parts[-1] in NAMING or ".git" in parts:
        return "config files and .git are rewound by a person (`%tools rewind`, `toolkernel rewind`)"
    return None


@tool(
    "changes",
    description=(
        "List what toolkernel's runs changed in the workspace, newest first: each run's id, time and "
        "route, and its files with the kind of change (created, changed, deleted, renamed). "
        "`rewind` puts a run's files back."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "run": _RUN,
            "path": {"type": "string", "minLength": 1, "description": "Only files matching this glob."},
        },
        "additionalProperties": False,
    },
    kind="read",
)
def changes(arguments: dict[str, Any], ctx: ToolContext) -> str:
    try:
        return describe_runs(iter_changes(_journal(ctx), arguments.get("run"), arguments.get("path")))
    except RewindError as exc:
        raise ToolInputError(str(exc)) from None


UNDO = "tools rewind run={run}"  # how a script undoes a rewind it made


@tool(
    "rewind",
    description=(
        "Put back every file a run changed, as it was before the run (deleted files return, created "
        "ones go, renamed ones move back; a notebook cell edited through a paired Jupyter Server gets its "
        "source back through the server's document). Refused, touching nothing, when a file changed again since; "
        "`force` restores anyway and the newer content is recorded, so the rewind can be undone too."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "run": {"type": "string", "pattern": "^([0-9]{8}-[0-9]{6}-[0-9a-f]{6}|last)$",
                    "description": "A run's id, as `changes` lists it, or `last`: the last run that changed files."},
            "force": {"type": "boolean", "default": False, "description": "Restore files changed since too."},
            "paths": {"type": "array", "items": {"type": "string", "minLength": 1},
                      "description": "Only files matching these globs."},
        },
        "required": ["run"],
        "additionalProperties": False,
    },
    kind="edit",
)
async def rewind_tool(arguments: dict[str, Any], ctx: ToolContext) -> str:
    journal, force, paths = _journal(ctx), bool(arguments.get("force")), arguments.get("paths") or ()
    try:
        run = journal.last() if arguments["run"] == "last" else journal.run(arguments["run"])
        cells = chosen_cells(run, paths)
        if not cells:
            return describe_rewind(rewind(journal, run.id, force=force, paths=paths, into=ctx.journal,
                                          refuse=_a_persons), UNDO)
        from .._notebook._restore import rewind_with_cells

        return describe_rewind(await rewind_with_cells(ctx.state, journal, run.id, cells, force=force, paths=paths,
                                                       into=ctx.journal, refuse=_a_persons), UNDO)
    except RewindError as exc:
        raise ToolInputError(str(exc)) from None
