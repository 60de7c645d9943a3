"""What a configured Python program imports from the workspace without naming it.

`python -m pkg.server` names no file, yet runs the package `pkg` from wherever the
interpreter finds it: a project installed in editable mode (`pip install -e .`) is found in
the workspace through a `.pth` file or an editable finder, and a folder a `PYTHONPATH` names
is searched first. A script that rewrote that code ran it on the host at the program's next
start, so those places are protected like a file the command names.

The module is looked up with the kernel's own import machinery (`importlib.util.find_spec`
of the top-level name, which imports nothing): a server started with another interpreter
may find it elsewhere; the look then names too much, never too little of what this one sees.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Sequence

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?w?$")
_TAKES_VALUE = ("-X", "-W", "-Q")


def imported_places(argv: Sequence[str], cwd: Path, pythonpath: str | None, looked_at: list[str]) -> list[Path]:
    """The folders `pythonpath` names, and where the module of `-m` lies, for a Python `argv`."""
    if not argv or not _PYTHON.match(os.path.basename(argv[0])):
        return []
    places = [cwd / entry for entry in (pythonpath or "").split(os.pathsep) if entry]
    module = _module(argv[1:])
    if module:
        places += _found(module.split(".")[0], places)
    looked_at.extend(map(str, places))
    return places


def _module(options: Sequence[str]) -> str | None:
    """The MODULE of `-m MODULE` (or `-mMODULE`) before the script or `-c` ends the options."""
    words = iter(options)
    for word in words:
        if word == "-m":
            return next(words, None)
        if word.startswith("-m"):
            return word[2:]
        if word in _TAKES_VALUE:
            next(words, None)
        elif word == "-c" or word == "-" or not word.startswith("-"):
            return None
    return None


def _found(top: str, pythonpath: list[Path]) -> list[Path]:
    """Where `top` lies: on `pythonpath` first, then where this interpreter would import it."""
    from importlib.machinery import PathFinder

    places = []
    for spec in (PathFinder.find_spec(top, [str(p) for p in pythonpath]), _spec(top)):
        if spec is None:
            continue
        if spec.submodule_search_locations:  # a package (a namespace one has several portions)
            places += [Path(location) for location in spec.submodule_search_locations]
        elif spec.origin and os.path.isabs(spec.origin):
            places.append(Path(spec.origin))
    return places


def _spec(top: str):
    try:
        return importlib.util.find_spec(top)
    except (ImportError, ValueError):  # a name no finder takes, or a module without a spec
        return None
