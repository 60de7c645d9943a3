"""Which names at a folder's top would shadow an installed Python module.

A Python started in a folder puts it first on `sys.path` (a kernel does, for the notebook's
imports), so a `requests.py`, a `requests/__init__.py` or bytecode in that folder's own
`__pycache__/` is what the person's next `import requests` runs. Two places ask this module:
the end of a script's run, which moves such an entry aside (`_runners/_shadows.py`), and the
dispatcher, which asks a person before a direct write makes one (`_approval/_dispatch.py`).

What counts is what importlib's `PathFinder` takes from the folder, in its order: for a
top-level name NAME, a package `NAME/__init__.*`, then `NAME` with an extension module's, a
source or a bytecode suffix; a bare folder `NAME/` only joins a namespace package NAME, first.
A `.pth` file is no such entry: `site` reads those only in site-packages folders.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.machinery
import os
import sys
import threading
from typing import Iterable, NamedTuple

from ._errors import printable

# Python's own suffixes for a module in a folder, in the order its FileFinder tries them.
SUFFIXES = (*importlib.machinery.EXTENSION_SUFFIXES, *importlib.machinery.SOURCE_SUFFIXES,
            *importlib.machinery.BYTECODE_SUFFIXES)
# Where importlib may match names without regard to case (PYTHONCASEOK, and Windows' suffixes):
# there a name is compared folded, which can only find more, never less. Elsewhere importlib
# compares the folder's listing exactly, whatever the file system, so `Pandas.py` is no `pandas`.
FOLD = sys.platform.startswith(("win", "cygwin", "darwin"))


# What `site` imports at every start of Python, from the first folder of `sys.path` that has it,
# installed or not: one left in a folder of the PYTHONPATH runs in the person's next Python.
STARTUP = ("sitecustomize", "usercustomize")


def _fold(name: str) -> str:
    return name.lower() if FOLD else name


@functools.lru_cache(maxsize=None)
def _suffix_forms() -> frozenset[str]:
    return frozenset(_fold(suffix) for suffix in SUFFIXES)


def module_of(name: str, is_dir: bool) -> str | None:
    """The top-level module an entry named `name` is (folded as importlib compares it), or None."""
    head, dot, tail = name.partition(".")
    if is_dir:
        return None if dot or not head else _fold(head)  # `a.b/` is no top-level module
    # Every suffix starts with a dot and no module name holds one: the first dot splits
    # (`pandas.abi3.so` is `pandas`, not `pandas.abi3`).
    return _fold(head) if dot and head and _fold(dot + tail) in _suffix_forms() else None


# -- what is installed -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Installed:
    """Top-level names importable from outside the workspace, folded: `regular` modules and
    packages, and names that are only namespace packages there (a bare folder joins those)."""

    regular: frozenset[str]
    namespaces: frozenset[str]
    # Both: what an entry's name before its first dot must be to matter at all. A run looks up
    # every top-level name once in it, and only the few found here are looked at closer.
    heads: frozenset[str] = frozenset()

    def shadowed_by(self, module: str, kind: str) -> bool:
        """Whether a top-level entry of `kind` ("module", "package" or "folder": a folder with no
        `__init__`) that is `module` takes the place of an installed one."""
        if kind == "folder":
            return module in self.namespaces  # a regular module elsewhere wins over a bare folder
        return module in self.regular or module in self.namespaces

    def may_shadow(self, module: str | None) -> bool:
        return module is not None and (module in self.regular or module in self.namespaces)


_installed: dict[str, tuple[tuple, Installed]] = {}
_installed_lock = threading.Lock()


def installed(workdir: str) -> Installed:
    """What the workspace `workdir` (a real path) could shadow: the standard library
    (`sys.stdlib_module_names`, but the modules built into the interpreter, which no folder
    shadows), every top-level module found on the entries of `sys.path` that are neither the
    workspace nor the working directory (a project's `.venv` inside it counts), the names
    setuptools' editable finders map to somewhere else, and what `site` imports at start (`STARTUP`).

    Worked out once per process and workspace, and again when `sys.path` or `sys.meta_path`
    changes or any of those folders' times moves (a package installed while the kernel runs:
    the next run counts it); the check is one `stat` per entry of `sys.path`. A `.pth` file
    installed meanwhile adds its folders only to the next Python started."""
    entries = _outside_entries(workdir, tuple(sys.path), _cwd())
    key = (tuple(map(_mtime, entries)), tuple(map(id, sys.meta_path)))
    with _installed_lock:
        kept = _installed.get(workdir)
        if kept is not None and kept[0] == (entries, key):
            return kept[1]
    found = _scan(entries, workdir)
    with _installed_lock:
        _installed[workdir] = ((entries, key), found)
    return found


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:
        return ""


@functools.lru_cache(maxsize=64)  # a run asks with the same sys.path as the last
def _outside_entries(workdir: str, path: tuple, cwd: str) -> tuple[str, ...]:
    here = {workdir, os.path.realpath(cwd) if cwd else workdir}
    outside = []
    for entry in path:
        if not isinstance(entry, str) or entry in ("", "."):
            continue  # the working directory of whichever Python looks: the workspace's own
        real = os.path.realpath(entry)
        if real not in here and real not in outside:
            outside.append(real)
    return tuple(outside)


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _scan(entries: Iterable[str], workdir: str) -> Installed:
    builtin = set(sys.builtin_module_names)
    regular = {_fold(name) for name in sys.stdlib_module_names if name not in builtin}
    folders: set[str] = set()
    for entry in entries:
        if os.path.isdir(entry):
            _scan_folder(entry, regular, folders)
        elif os.path.isfile(entry):
            _scan_zip(entry, regular, folders)
    regular |= _editable_names(workdir) | {_fold(name) for name in STARTUP}
    regular -= {_fold(name) for name in builtin}
    return Installed(frozenset(regular), frozenset(folders - regular), frozenset(regular | folders))


def _scan_folder(folder: str, regular: set[str], folders: set[str]) -> None:
    try:
        with os.scandir(folder) as listing:
            for entry in listing:
                is_dir = _is_dir(entry)
                module = module_of(entry.name, is_dir)
                if module is None or module == "__pycache__":
                    continue
                if not is_dir:
                    regular.add(module)
                elif _has_init(entry.path):
                    regular.add(module)
                else:
                    folders.add(module)
    except OSError:
        pass  # a folder that cannot be listed gives Python nothing to import either


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()  # links followed, as PathFinder follows them
    except OSError:
        return False


def _has_init(folder: str) -> bool:
    return any(os.path.isfile(os.path.join(folder, "__init__" + suffix)) for suffix in SUFFIXES)


def _scan_zip(path: str, regular: set[str], folders: set[str]) -> None:
    """An egg or zip on sys.path (zipimport): its top-level names count as regular."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, ValueError, zipfile.BadZipFile):  # not a zip Python could import from either
        return
    for name in names:
        top, slash, _ = name.partition("/")
        module = module_of(top, bool(slash))
        if module is not None:
            regular.add(module)


def _editable_names(workdir: str) -> set[str]:
    """Names setuptools' editable installs map (a finder in `sys.meta_path` whose module holds a
    `MAPPING` of name to folder), but not those mapped to an entry at the workspace's top: that
    entry is the installed package itself, and the person's edits to it are no shadow."""
    names = set()
    for finder in sys.meta_path:
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "") or ""), "MAPPING", None)
        if not isinstance(mapping, dict):
            continue
        for name, where in mapping.items():
            if isinstance(name, str) and isinstance(where, str) \
                    and os.path.dirname(os.path.realpath(where)) != workdir:
                names.add(_fold(name))
    return names


# Bytecode beside the top's own modules: Python runs a `__pycache__/NAME.cpython-311.pyc` whose
# header matches NAME.py's size and mtime (which anyone who can write there sees) instead of that
# source, so bytecode written there can stand in for the person's `helpers.py`.
BYTECODE = "__pycache__"


# -- what one write would make -------------------------------------------------------------


class Shadow(NamedTuple):
    """What writing one path would make at the folder's top that a Python started there imports."""

    key: str  # the input key that named the path
    entry: str  # where, from the top: `requests.py`, `requests/__init__.py`, `space/`, `__pycache__/x.pyc`
    module: str  # the installed module it would stand in for; "" for bytecode in the top's cache

    @property
    def reason(self) -> str:
        entry = printable(self.entry)
        if not self.module:
            return (f"`{entry}` is in the workspace top's bytecode cache: Python runs bytecode there in"
                    " place of the sources beside it")
        return f"`{entry}` at the workspace top would shadow the installed module `{printable(self.module)}`"


def shadow_of_write(key: str, path: str, root: str, found: Installed) -> Shadow | None:
    """What writing the file `path` (a real path) would make shadow at the top of `root` (a real
    path) given what is `found` installed; None for nothing. A file at the top that is a module
    of an installed name; anything in the top's `__pycache__/`; the `__init__` that makes a
    top-level folder of an installed name a package; a file in a top-level folder with no
    `__init__`, when that folder would join an installed namespace package. A file deeper in a
    package already at the top is no new shadow: the package is the person's already."""
    if not path.startswith(root + os.sep) or root == os.sep:
        return None  # outside the workspace (asked about anyway), or a workspace that is `/`
    head, deeper, rest = path[len(root) + 1:].partition(os.sep)
    if not deeper:
        module = module_of(head, False)
        return Shadow(key, head, module) if found.may_shadow(module) else None
    if head == BYTECODE:
        return Shadow(key, f"{head}/{rest}", "")
    module = module_of(head, True)
    if not found.may_shadow(module):
        return None
    if os.sep not in rest and module_of(rest, False) == _fold("__init__"):
        return Shadow(key, f"{head}/{rest}", module)
    if _has_init(os.path.join(root, head)) or not found.shadowed_by(module, "folder"):
        return None
    return Shadow(key, f"{head}/", module)
