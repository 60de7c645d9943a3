"""`changes` and `rewind` for a person: `%tools changes|rewind ...` and `toolkernel changes|rewind`.

The journal itself is `_journal/`; this is the one parser both front ends share and the text
they print. An agent lists changes and rewinds through the `changes` and `rewind` tools
(`_providers/_tools/rewind.py`), where a rewind is a write that asks.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from .._config._config import load_config
from .._config._rewind import RewindLimits
from .._errors import ConfigError
from .._journal import (CellEntry, Journal, Rewound, chosen_cells, describe_rewind, describe_runs, iter_changes,
                        rewind, rewound_by)


def add_changes_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", metavar="ID", help="only this run")
    parser.add_argument("--path", metavar="GLOB", help="only files matching GLOB (relative to the workspace)")


def add_rewind_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", nargs="?", metavar="ID", help="the run to undo, as `changes` lists it")
    parser.add_argument("--last", action="store_true", help="the last run that changed files")
    parser.add_argument("--force", action="store_true",
                        help="restore files changed since the run too (that newer content is recorded)")
    parser.add_argument("--path", metavar="GLOB", action="append", default=[], help="only files matching GLOB")


def journal_for(workdir: Path, journal: Journal | None = None) -> Journal:
    """The session's journal, or the workspace's (with `[rewind]` from its config, if that reads)."""
    if journal is not None:
        return journal
    try:
        limits = load_config(workdir).rewind
    except ConfigError:
        limits = RewindLimits()  # the config is reported where it is used; listing needs no limit
    return Journal(workdir, limits)


def changes_text(journal: Journal, args: argparse.Namespace) -> str:
    """Raises `_rewind.RewindError` for an unknown run."""
    return describe_runs(iter_changes(journal, args.run, args.path), rewound_by(journal.runs()))


def rewind_text(journal: Journal, args: argparse.Namespace,
                cells: Callable[[str, list[CellEntry]], Rewound] | None = None,
                undo: str = "toolkernel rewind {run}") -> str:
    """Raises `_rewind.RewindError` (nothing restored) or ValueError (no run named). `cells`: how a
    front end paired with Jupyter Servers puts back a run that changed cells through one (the
    files too); without it such a run is refused (`rewind` says where it can be done)."""
    if bool(args.run) == bool(args.last):
        raise ValueError("name one run: rewind ID, or rewind --last")
    if cells is not None:
        run = journal.last() if args.last else journal.run(args.run)
        served = chosen_cells(run, args.path)
        if served:
            return describe_rewind(cells(run.id, served), undo)
    return describe_rewind(rewind(journal, args.run, force=args.force, paths=args.path), undo)


def notebook_diff(old: str, new: str) -> str | None:
    """A notebook's change cell by cell: nbdime's diff where it is installed, else each cell
    added, deleted or changed (its source as a unified diff; outputs are said to have changed).
    None when a side is not a notebook (the caller shows its lines)."""
    import json

    try:
        before = json.loads(old) if old.strip() else {"cells": [], "nbformat": 4, "nbformat_minor": 5, "metadata": {}}
        after = json.loads(new) if new.strip() else {"cells": [], "nbformat": 4, "nbformat_minor": 5, "metadata": {}}
        if not isinstance(before.get("cells"), list) or not isinstance(after.get("cells"), list):
            return None
    except (ValueError, AttributeError):
        return None
    try:
        return _nbdime_diff(before, after)
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - a notebook nbdime cannot take (an odd field): shown our way
        pass
    return _cell_diff(before["cells"], after["cells"])


def _nbdime_diff(before: dict, after: dict) -> str:
    import io
    import json

    import nbdime
    from nbdime.prettyprint import PrettyPrintConfig, pretty_print_diff

    import nbformat

    # As nbformat reads a file: a source given as a list of lines is one string, as nbdime wants it.
    before, after = (nbformat.from_dict(nbformat.reads(json.dumps(side), as_version=4)) for side in (before, after))
    out = io.StringIO()
    # No git, no external diff, no colour codes: the page colours the lines by their first character.
    pretty_print_diff(before, nbdime.diff_notebooks(before, after), "",
                      PrettyPrintConfig(out=out, use_git=False, use_diff=False, use_color=False))
    return out.getvalue().rstrip("\n")


def _cell_diff(before: list, after: list) -> str:
    import difflib

    def source(cell) -> str:
        text = cell.get("source", "")
        return "".join(text) if isinstance(text, list) else str(text)

    def name(number: int, cell) -> str:
        return f"cell {number} ({cell.get('cell_type', '?')}, id {cell.get('id', '?')})"

    old = {cell.get("id"): (n, cell) for n, cell in enumerate(before, 1) if isinstance(cell, dict)}
    lines: list[str] = []
    for number, cell in enumerate(after, 1):
        if not isinstance(cell, dict):
            continue
        if cell.get("id") not in old:
            lines.append(f"## {name(number, cell)} added:")
            lines += [f"+{line}" for line in source(cell).splitlines()]
            continue
        _, was = old.pop(cell.get("id"))
        diff = list(difflib.unified_diff(source(was).splitlines(), source(cell).splitlines(), lineterm="", n=2))[2:]
        outputs = was.get("outputs") != cell.get("outputs")
        if diff or outputs or was.get("cell_type") != cell.get("cell_type"):
            lines.append(f"## {name(number, cell)} changed:")
            lines += diff + (["(its outputs changed)"] if outputs else [])
    for number, cell in old.values():
        lines.append(f"## {name(number, cell)} deleted:")
        lines += [f"-{line}" for line in source(cell).splitlines()]
    return "\n".join(lines)
