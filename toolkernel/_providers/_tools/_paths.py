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


def real_paths(tool: Tool, arguments: Mapping[str, Any], workdir: Path) -> dict[str, Path]:
    """Where each path argument of `tool` leads, by key. Resolved once per call: the checks
    judge these paths, and the tool is handed the same ones (`ToolContext.real`)."""
    return {key: resolve_real(value, workdir) for key in tool.path_keys
            if isinstance(value := arguments.get(key), str) and value}


def outside_workspace(tool: Tool, arguments: Mapping[str, Any], workdir: Path,
                      paths: Mapping[str, Path] | None = None, root: Path | None = None) -> bool:
    """True when a path argument of `tool` resolves outside `workdir` (`paths`: its `real_paths`,
    `root`: the real path of `workdir`, when the caller has them)."""
    if not tool.path_keys:
        return False  # skip the realpath system calls on every call of a tool without paths
    paths = real_paths(tool, arguments, workdir) if paths is None else paths
    root = real_path(Path(workdir)) if root is None else root
    return any(not is_inside(path, root) for path in paths.values())


def resolve_real(value: str, workdir: Path) -> Path:
    """`value` (absolute or relative to `workdir`) with symlinks and `..` resolved."""
    # On strings: this runs for every path of every call, and each Path made costs more than the
    # system calls realpath makes (an absolute `value` replaces `workdir` in the join).
    return Path(os.path.realpath(os.path.join(workdir, os.path.expanduser(value))))


def real_path(path: Path) -> Path:
    # realpath resolves the existing part through symlinks and then applies the
    # remaining components, `..` included, lexically: the same path the kernel
    # will reach when it creates the file.
    return Path(os.path.realpath(path))


def is_inside(path: Path, root: Path) -> bool:
    # Both are real paths (normalised, absolute), so a prefix of whole names decides it.
    inner, outer = str(path), str(root)
    return inner == outer or inner.startswith(outer if outer.endswith("/") else outer + "/")


def display_path(path: Path, workdir: Path) -> str:
    """`path` relative to the workspace when it lies inside it, else absolute."""
    if is_inside(path, workdir):
        return Path(path).relative_to(workdir).as_posix() or "."
    root = real_path(Path(workdir))
    if is_inside(path, root):
        return Path(path).relative_to(root).as_posix() or "."
    return str(path)
