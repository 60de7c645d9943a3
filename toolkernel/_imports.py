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
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import threading
import types

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
    if "jsonschema" not in sys.modules:
        sys.meta_path.insert(0, LazyFormatGrammar())


# -- jsonschema without the grammar of a format nobody here checks ----------------------

_GRAMMAR_MODULE = "rfc3987_syntax"
_GRAMMAR_IMPORTER = "jsonschema._format"


class LazyFormatGrammar:
    """A meta path finder that makes jsonschema's one import of `rfc3987_syntax` lazy.

    Importing jsonschema imports `rfc3987_syntax` where it is installed (Jupyter Server's
    `jsonschema[format-nongpl]` brings it) for its "iri" format check, and that module builds
    a Lark parser at import: 0.9 s of a 1.1 s import here, paid by a kernel's first tool call
    (its input check), by pairing a notebook (nbformat imports jsonschema), and as GIL time by
    the warm-up. toolkernel checks no formats. So when jsonschema's `_format` module imports it,
    `rfc3987_syntax` is a stand-in whose `is_valid_syntax` (the name jsonschema takes), or any
    other name looked up on it, imports the real module first: a format check that needs the
    grammar still gets it, when it first runs. Once: every later import is Python's own.
    """

    def __init__(self) -> None:
        self.done = False

    def find_spec(self, name, path=None, target=None):
        if self.done or name != _GRAMMAR_MODULE or _importer() != _GRAMMAR_IMPORTER:
            return None
        self.done = True  # from here on this finder finds nothing: the real one is found as ever
        real = importlib.util.find_spec(name)
        if real is None:
            return None
        spec = importlib.util.spec_from_loader(name, _StandInLoader(real.submodule_search_locations),
                                               origin=real.origin, is_package=real.submodule_search_locations is not None)
        spec.has_location = real.has_location  # `__file__` as the real module has it
        return spec


def _importer() -> str | None:
    """The module whose code runs the import being looked up (past the import system's frames)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        frame = frame.f_back
    return None if frame is None else frame.f_globals.get("__name__")


class _StandInLoader:
    def __init__(self, search_locations) -> None:
        self.search_locations = search_locations

    def create_module(self, spec):
        return None  # the default module

    def exec_module(self, module) -> None:
        name = module.__name__

        loaded: list[types.ModuleType] = []

        def real() -> types.ModuleType:
            if loaded:
                return loaded[0]
            if sys.modules.get(name) is module:  # the real module takes its name back
                del sys.modules[name]
            found = importlib.import_module(name)
            for key, value in list(vars(module).items()):  # submodules imported under the stand-in
                if isinstance(value, types.ModuleType) and not hasattr(found, key):
                    setattr(found, key, value)
            loaded.append(found)
            return found

        def is_valid_syntax(*args, **kwargs):
            return real().is_valid_syntax(*args, **kwargs)

        def other_name(attribute: str):
            if attribute.startswith("__"):  # the import system's own looks: no reason to load
                raise AttributeError(attribute)
            return getattr(real(), attribute)

        module.is_valid_syntax = is_valid_syntax
        module.__getattr__ = other_name
        if self.search_locations is not None:  # its submodules import as they would
            module.__path__ = list(self.search_locations)
