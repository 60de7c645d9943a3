"""Where a tool's paths lead, for the workspace-boundary decision.

The decision itself belongs to the approval layer; this module only answers
"does any path argument of this call leave the workspace?", resolving `..`,
`~` and symlinks the way the filesystem will when the tool runs, also for
files that do not exist yet.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from ..._tool import Tool


def outside_workspace(tool: Tool, arguments: Mapping[str, Any], workdir: Path) -> bool:
    """True when a path argument of `tool` resolves outside `workdir`."""
    if not tool.path_keys:
        return False  # skip the realpath system calls on every call of a tool without paths
    root = real_path(Path(workdir))
    for key in tool.path_keys:
        value = arguments.get(key)
        if isinstance(value, str) and value and not is_inside(resolve_real(value, workdir), root):
            return True
    return False


def resolve_real(value: str, workdir: Path) -> Path:
    """`value` (absolute or relative to `workdir`) with symlinks and `..` resolved."""
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = Path(workdir) / path
    return real_path(path)


def real_path(path: Path) -> Path:
    # realpath resolves the existing part through symlinks and then applies the
    # remaining components, `..` included, lexically: the same path the kernel
    # will reach when it creates the file.
    return Path(os.path.realpath(path))


def is_inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def display_path(path: Path, workdir: Path) -> str:
    """`path` relative to the workspace when it lies inside it, else absolute."""
    try:
        return Path(path).relative_to(workdir).as_posix() or "."
    except ValueError:
        pass
    try:
        return Path(path).relative_to(real_path(Path(workdir))).as_posix() or "."
    except ValueError:
        return str(path)
