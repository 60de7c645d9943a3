"""Where a tool's paths lead, for the workspace-boundary decision.

The decision itself belongs to the approval layer; this module only answers
"does any path argument of this call leave the workspace?", resolving `..`,
`~` and symlinks the way the filesystem will when the tool runs, also for
files that do not exist yet.
"""

from __future__ import annotations

import collections.abc
import os
import stat
from pathlib import Path
from typing import Any, Mapping

from ..._checked_open import Resolved
from ..._errors import InvalidInput
from ..._tool import Tool


def real_paths(tool: Tool, arguments: Mapping[str, Any], workdir: Path,
               root: str | None = None) -> dict[str, str]:
    """Where each path argument of `tool` leads, by key, as real path strings. Resolved once per
    call: the checks judge these paths, and the tool is handed the same ones (`ToolContext.real`).
    `root`: the real path of `workdir`, when the caller has it (see `real_name`)."""
    paths = {}
    for key in tool.path_keys:  # a loop, not a comprehension: one frame less on every call
        value = arguments.get(key)
        if isinstance(value, str) and value:
            if "\0" in value or not value.isascii() and _unencodable(value):
                raise InvalidInput(f"input: '{key}' holds a NUL character or half a surrogate pair, which no"
                                   " file name can hold")
            paths[key] = real_name(value, workdir, root)
    return paths


def _unencodable(value: str) -> bool:
    """What the system calls refuse to name (half a surrogate pair; a file name's own
    undecodable bytes, which Python gives as \\udc80-\\udcff, encode back)."""
    try:
        os.fsencode(value)
    except UnicodeEncodeError:
        return True
    return False


def outside_workspace(tool: Tool, arguments: Mapping[str, Any], workdir: Path,
                      paths: Mapping[str, str | Path] | None = None, root: Path | None = None) -> bool:
    """True when a path argument of `tool` resolves outside `workdir` (`paths`: its `real_paths`,
    `root`: the real path of `workdir`, when the caller has them)."""
    if not tool.path_keys:
        return False  # skip the realpath system calls on every call of a tool without paths
    paths = real_paths(tool, arguments, workdir) if paths is None else paths
    root = real_path(Path(workdir)) if root is None else root
    for path in paths.values():
        if not is_inside(path, root):
            return True
    return False


def rule_forms(paths: Mapping[str, str], root: str) -> Mapping[str, tuple[str, ...]]:
    """What a rule's pattern on each path argument is matched against: where the path leads
    (`paths`: its `real_paths`), relative to the workspace when it lies inside it (`root`: the
    workspace's real path), as `display_path` writes it, its real path, and under the home
    folder `~/...` too (so `read-file(path=~/.ssh/*)` names what it says). Worked out for a key
    when a rule first asks for it: most calls meet no rule on their paths."""
    return _RuleForms(paths, root)


class _RuleForms(collections.abc.Mapping):
    def __init__(self, paths: Mapping[str, str], root: str) -> None:
        self._paths, self._root, self._made = paths, root, {}

    def __getitem__(self, key: str) -> tuple[str, ...]:
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = _forms(self._paths[key], self._root)
        return made

    def __contains__(self, key: object) -> bool:
        return key in self._paths

    def __iter__(self):
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __repr__(self) -> str:
        return repr(dict(self))


def _forms(path: str, root: str) -> tuple[str, ...]:
    inside = _relative(path, root)
    home = _real_home()
    at_home = _relative(path, home) if home else None
    found = (path,) if inside is None else (inside, path)
    return found if at_home is None else (*found, "~" if at_home == "." else f"~/{at_home}")


_homes: dict[str | None, str] = {}


def _real_home() -> str:
    """The real path of the home folder `~` names now, worked out once per value of HOME (it
    runs on every call with a path: one lookup, not `expanduser`'s steps)."""
    key = os.environ.get("HOME")
    real = _homes.get(key)
    if real is None:
        named = os.path.expanduser("~")
        real = _homes[key] = os.path.realpath(named) if named.startswith("/") else ""
    return real


def resolve_real(value: str, workdir: Path) -> Path:
    """`value` (absolute or relative to `workdir`) with symlinks and `..` resolved."""
    return Path(real_name(value, workdir))


def real_name(value: str, workdir: Path | str, root: str | None = None) -> str:
    """`resolve_real` as a string. On strings: this runs for every path of every call, and a
    Path made (and named again) costs more than the system calls do. With `root`, the real
    path of `workdir`, a plain name in it (`data.csv`) is looked up with one system call."""
    if root is not None and "/" not in value and value not in (".", "..") and not value.startswith("~"):
        found = _plain_name(root, value)
        if found is not None:
            return found
    if value.startswith("~"):
        value = os.path.expanduser(value)  # `~nobody` (no such user) stays relative, as it was
    if value.startswith("/"):  # an absolute `value` replaces `workdir`
        joined = value
    else:  # what os.path.join gives, without its steps in Python
        root = os.fspath(workdir)
        joined = f"{root}{value}" if root.endswith("/") else f"{root}/{value}"
    return _kernel_real(joined) or os.path.realpath(joined)


def _plain_name(root: str, name: str) -> str | None:
    """`name`, one name and no link, in the real folder `root`: the real path is the two joined,
    with the identity of what it names (`Resolved`); None for a link or a name not there,
    which `_kernel_real` and realpath decide as for any other path.

    One lstat, where the kernel's answer costs four system calls (its readlink in /proc the
    dearest). Sound because nothing lies between `root` and `name` that could be a link: the
    folders above `root` lie outside every workspace a script can write, and a link put in
    place of `name` after this look is never followed (`_checked_open` opens without
    following one, and a file other than the one seen here is checked by name again).
    """
    path = f"{root}{name}" if root.endswith("/") else f"{root}/{name}"
    try:
        status = os.lstat(path)
    except (OSError, ValueError):
        return None
    if stat.S_ISLNK(status.st_mode):
        return None
    resolved = Resolved(path)
    resolved.identity = (status.st_dev, status.st_ino)
    return resolved


_O_PATH = getattr(os, "O_PATH", None)  # Linux


def _kernel_real(path: str) -> str | None:
    """Where the kernel resolves `path` to, asked of the kernel: one open that reads nothing, and
    its name in /proc, where realpath makes a system call and Python steps per component.
    None when that does not answer (a path that does not exist yet, no /proc, not Linux):
    realpath decides those."""
    if _O_PATH is None:
        return None
    try:
        fd = os.open(path, _O_PATH | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
        status = os.fstat(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    # Anything but a plain absolute path (a file unlinked meanwhile is named "... (deleted)").
    if not real.startswith("/") or real.endswith(" (deleted)"):
        return None
    resolved = Resolved(real)
    resolved.identity = (status.st_dev, status.st_ino)  # the file the checks judge (see Resolved)
    return resolved


def real_path(path: Path) -> Path:
    # realpath resolves the existing part through symlinks and then applies the
    # remaining components, `..` included, lexically: the same path the kernel
    # will reach when it creates the file.
    return Path(os.path.realpath(path))


def is_inside(path: str | Path, root: str | Path) -> bool:
    # Both are real paths (normalised, absolute), so a prefix of whole names decides it.
    inner, outer = str(path), str(root)
    return inner == outer or inner.startswith(outer if outer.endswith("/") else outer + "/")


def display_path(path: str | Path, workdir: Path) -> str:
    """`path` relative to the workspace when it lies inside it, else absolute."""
    # On strings: both are normalised, so a prefix of whole names is a relative path.
    shown = _relative(str(path), str(workdir))
    if shown is None:
        shown = _relative(str(path), str(real_path(Path(workdir))))
    return str(path) if shown is None else shown


def _relative(path: str, root: str) -> str | None:
    if path == root:
        return "."
    prefix = root if root.endswith("/") else root + "/"
    return path[len(prefix):] if path.startswith(prefix) else None
