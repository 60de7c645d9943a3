"""What the journal never records, and what it leaves out unless a person's config says otherwise
(issue 44, item 3). Decided once per folder: a folder left out is neither walked nor watched.

Never recorded, whatever the config says (the journal would record itself, or what a kernel,
pip or conda write as a cell runs; a rewind would then refuse, "changed since", or undo them):
- toolkernel's own places in the workspace: `.toolkernel/`, `tool-images/`;
- its state folder (the journal itself), `$XDG_STATE_HOME` and `$XDG_CACHE_HOME` wherever they
  lie (Lab started in `~` puts `~/.local/state` and `~/.cache` inside the workspace), and the
  folders named by `IPYTHONDIR`, `JUPYTER_RUNTIME_DIR`, `JUPYTER_DATA_DIR`, `MPLCONFIGDIR`,
  `PIP_CACHE_DIR`, `CONDA_PKGS_DIRS` when set;
- when the home folder is the workspace or in it: `~/.ipython`, `~/.local/share/jupyter`,
  `~/.jupyter/lab/workspaces`, `~/.conda` (a kernel's history and connection files, Lab's
  layout, conda's packages), and the histories `~/.bash_history`, `~/.python_history`,
  `~/.lesshst`, `~/.viminfo`;
- a Jupyter Server's own state (`.jupyter_ystore.db*`, `.ipynb_checkpoints/`), and `.git/`
  (a repository's own store, which git keeps).

Left out by default (`[rewind] default_ignores = false` records them): virtual environments
(a folder holding `pyvenv.cfg` or `conda-meta/`, and any `.venv/`), `__pycache__/`,
`node_modules/`, `.mypy_cache/`, `.pytest_cache/`, `.ruff_cache/`, `.tox/`, `.nox/`, and in the
home folder `~/.local/lib` (pip's --user installs) and `~/.npm`. `[rewind] ignore` adds globs.
"""

from __future__ import annotations

import fnmatch
import os
import re
from typing import Iterable, Mapping

from .._config._rewind import RewindLimits
from .._config._trust import store_path

TOOLKERNELS_OWN = (".toolkernel", "tool-images")  # at the workspace's top
SERVERS_OWN = (".jupyter_ystore.db*", ".ipynb_checkpoints")  # a name anywhere
NEVER_FOLDERS = (".git",)  # a name anywhere
KERNELS_OWN_IN_HOME = (".ipython", ".local/share/jupyter", ".jupyter/lab/workspaces", ".conda", ".bash_history",
                       ".python_history", ".lesshst", ".viminfo")
KERNELS_OWN_ENV = ("IPYTHONDIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "MPLCONFIGDIR", "PIP_CACHE_DIR",
                   "CONDA_PKGS_DIRS")
DEFAULT_FOLDERS = (".venv", "__pycache__", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox",
                   ".nox")
DEFAULT_IN_HOME = (".local/lib", ".npm")
ENVIRONMENT_MARKERS = ("pyvenv.cfg", "conda-meta")  # a folder holding one is a virtual environment
# Two names no real file has: a glob that matches both below a folder matches all it holds.
_PROBES = ("\x00probe", "\x01\x02/\x03")


class Ignores:
    """The journal's decisions for one workspace: which folders and files it leaves out."""

    def __init__(self, workdir: str, limits: RewindLimits = RewindLimits(),
                 environ: Mapping[str, str] | None = None) -> None:
        self.workdir = workdir
        environ = os.environ if environ is None else environ
        self.defaults = limits.default_ignores
        self.never = frozenset(_below(workdir, _never_places(environ)))
        self.by_default = frozenset(_below(workdir, _default_places(environ))) if self.defaults else frozenset()
        self._glob = re.compile("|".join(fnmatch.translate(g) for g in limits.ignore)) if limits.ignore else None
        self._files_out = self.never | self.by_default | frozenset(TOOLKERNELS_OWN)
        self._folders: dict[str, bool] = {"": False}

    def reason(self) -> str:
        return "never recorded" if not self.defaults else "never recorded, or left out by default"

    def folder_left_out(self, relative: str, names: Iterable[str] | None = None) -> bool:
        """Whether the folder `relative` (and all it holds) is left out. `names`: what it holds,
        when the caller listed it (a virtual environment is known by a name in it); else looked
        up. Decided once per folder (`forget` makes it decide again)."""
        known = self._folders.get(relative)
        if known is not None and names is None:
            return known
        left_out = self._folder(relative, names)
        self._folders[relative] = left_out
        return left_out

    def forget(self, relative: str) -> None:
        """A folder's decision made again when next asked (a virtual environment made in it)."""
        self._folders.pop(relative, None)

    def _folder(self, relative: str, names: Iterable[str] | None) -> bool:
        return self.named_out(relative) or (self.defaults and self._environment(relative, names))

    def named_out(self, relative: str) -> bool:
        """Whether the folder `relative` is left out by its name and place alone (no I/O)."""
        name = relative.rpartition("/")[2]
        if relative in self.never or name in NEVER_FOLDERS or _servers_own(name):
            return True
        if "/" not in relative and name in TOOLKERNELS_OWN:
            return True
        if self.defaults and (relative in self.by_default or name in DEFAULT_FOLDERS):
            return True
        return self._glob is not None and all(self._glob.match(f"{relative}/{probe}") for probe in _PROBES)

    def _environment(self, relative: str, names: Iterable[str] | None) -> bool:
        if names is not None:
            return any(name in ENVIRONMENT_MARKERS for name in names)
        return any(os.path.lexists(os.path.join(self.workdir, relative, marker)) for marker in ENVIRONMENT_MARKERS)

    def file_left_out(self, relative: str, name: str | None = None) -> bool:
        """Whether the file `relative` (its `name`, when the caller has it), in a folder not left
        out, is left out itself. Asked of every file a walk finds: the usual answer in a few steps."""
        if self._glob is not None and self._glob.match(relative) is not None:
            return True
        if relative in self._files_out:
            return True
        if name is None:
            name = relative.rpartition("/")[2]
        return name[:1] == "." and _servers_own(name)

    def left_out(self, relative: str) -> bool:
        """Whether any path `relative` below the workspace is left out (each folder on its way
        asked once)."""
        parts = relative.split("/")
        for end in range(1, len(parts)):
            if self.folder_left_out("/".join(parts[:end])):
                return True
        return self.file_left_out(relative)


def _servers_own(name: str) -> bool:
    return name == ".ipynb_checkpoints" or name.startswith(".jupyter_ystore.db")


def _home(environ: Mapping[str, str]) -> str:
    return environ.get("HOME") or os.path.expanduser("~")


def _never_places(environ: Mapping[str, str]) -> list[str]:
    home = _home(environ)
    places = [str(store_path(environ).parent),
              environ.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state"),
              environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")]
    for name in KERNELS_OWN_ENV:
        places += [part for part in environ.get(name, "").split(os.pathsep if name != "CONDA_PKGS_DIRS" else ",")
                   if part]
    places += [os.path.join(home, own) for own in KERNELS_OWN_IN_HOME]
    return places


def _default_places(environ: Mapping[str, str]) -> list[str]:
    return [os.path.join(_home(environ), own) for own in DEFAULT_IN_HOME]


def _below(workdir: str, places: Iterable[str]) -> list[str]:
    """Each place that lies below the workspace, relative to it (as a walk names it: real paths)."""
    found = []
    for place in places:
        if not os.path.isabs(place):
            continue
        real = os.path.realpath(place)
        if real.startswith(workdir + os.sep):
            found.append(real[len(workdir) + 1:].replace(os.sep, "/"))
    return found
