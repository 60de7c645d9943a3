"""toolkernel's own imports never come from the working directory.

A kernel puts its working directory (the workspace, which scripts write) on `sys.path`
ahead of the installed packages, and toolkernel imports much of what it needs when a
tool first runs (nbformat, httpx, jsonschema, bs4...): a `nbformat/__init__.py` a
`%%tools` script wrote ran in the kernel at its next `tools notebook-read`, in the same
run. So while toolkernel's code is on the stack, a module that the installed packages
have is taken from them, never from a folder inside the working directory. A module
found only there (a person's own tool importing a helper beside the notebook) still
imports as before, and imports made without toolkernel on the stack are Python's own.
"""

from __future__ import annotations

import functools
import importlib.machinery
import os
import sys
import threading

_OWN = __name__.partition(".")[0]  # "toolkernel"


class OutsideWorkspace:
    """A meta path finder placed before Python's own `PathFinder` (see the module's note)."""

    def __init__(self) -> None:
        self._inside = threading.local()  # set while this finder searches: no recursion

    def find_spec(self, name, path=None, target=None):
        if getattr(self._inside, "on", False) or not _own_code_on_stack():
            return None
        try:
            cwd = os.getcwd()
        except OSError:  # the folder was removed: nothing can be found in it
            return None
        entries = sys.path if path is None else list(path)  # a namespace package's path too
        outside = [entry for entry in entries if not _within(entry, cwd)]
        if len(outside) == len(entries):
            return None  # nothing here comes from the working directory
        self._inside.on = True
        try:
            return importlib.machinery.PathFinder.find_spec(name, outside, target)
        finally:
            self._inside.on = False


def _within(entry: object, cwd: str) -> bool:
    return isinstance(entry, str) and _str_within(entry, cwd)


@functools.lru_cache(maxsize=256)  # top-level imports look at every entry of sys.path
def _str_within(entry: str, cwd: str) -> bool:
    if entry in ("", "."):
        return True
    real = os.path.realpath(os.path.join(cwd, entry))
    return real == cwd or real.startswith(cwd.rstrip(os.sep) + os.sep)


def _own_code_on_stack() -> bool:
    frame = sys._getframe(2)  # past this finder's own frames
    while frame is not None:
        module = frame.f_globals.get("__name__")
        if isinstance(module, str) and (module == _OWN or module.startswith(_OWN + ".")) \
                and module != __name__:
            return True
        frame = frame.f_back
    return False


def install() -> None:
    """Put the finder in front of `PathFinder` once per process."""
    if any(isinstance(finder, OutsideWorkspace) for finder in sys.meta_path):
        return
    index = next((i for i, finder in enumerate(sys.meta_path) if finder is importlib.machinery.PathFinder),
                 len(sys.meta_path))
    sys.meta_path.insert(index, OutsideWorkspace())
