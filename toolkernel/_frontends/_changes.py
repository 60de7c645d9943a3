"""`changes` and `rewind` for a person: `%tools changes|rewind ...` and `toolkernel changes|rewind`.

The journal itself is `_rewind.py`; this is the one parser both front ends share and the text
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
from .._rewind import CellEntry, Journal, Rewound, chosen_cells, describe_rewind, describe_runs, iter_changes, rewind


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
    return describe_runs(iter_changes(journal, args.run, args.path))


def rewind_text(journal: Journal, args: argparse.Namespace,
                cells: Callable[[str, list[CellEntry]], Rewound] | None = None, undo: str = "toolkernel rewind {run}") -> str:
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
