"""Files no script may change: toolkernel's own configuration and approvals.

The shell mounts the working directory writable, and the config is re-read
at the start of every run; without this, a script could write
`toolkernel.toml` or `.toolkernel/approvals.json` and give its next run
permissions nobody granted. Two guards:

- a tool call that would write one of these files asks for approval
  (`touches_protected`, used by the dispatcher for every call);
- a shell run cannot keep a change to them: `.toolkernel/` is mounted
  read-only, and the config files are restored after the run if the script
  changed them, the script's version kept under `.toolkernel/rejected/`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

from ._atomic import write_atomic
from ._tool import Tool
from ._tools._paths import is_inside, real_path, resolve_real

STATE_DIR = ".toolkernel"
CONFIG_FILES = ("toolkernel.toml", ".mcp.json")
WATCHED = (*CONFIG_FILES, f"{STATE_DIR}/approvals.json")


def is_protected(path: Path, workdir: Path) -> bool:
    root = real_path(Path(workdir))
    return path in {root / name for name in CONFIG_FILES} or is_inside(path, root / STATE_DIR)


def touches_protected(tool: Tool, arguments: Mapping[str, Any], workdir: Path) -> bool:
    """True when a call that may write names a protected file."""
    if tool.read_only or not tool.path_keys:
        return False
    return any(
        isinstance(arguments.get(key), str) and arguments[key]
        and is_protected(resolve_real(arguments[key], workdir), workdir)
        for key in tool.path_keys
    )


class ConfigGuard:
    """Snapshot the watched files before a run; undo what the run changed."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.before = {name: _read(workdir / name) for name in WATCHED}

    def undo_changes(self) -> list[str]:
        """Restore every watched file the run changed; one message per file."""
        return [self._restore(name, old) for name, old in self.before.items()
                if _read(self.workdir / name) != old]

    def _restore(self, name: str, old: bytes | None) -> str:
        path = self.workdir / name
        kept = self._keep_rejected(path)
        if old is None:
            path.unlink(missing_ok=True)
        else:
            write_atomic(path, old)
        return (f"toolkernel: the script changed {name}; scripts cannot change toolkernel's"
                f" configuration or approvals, so the change was undone"
                + (f" (the script's version is in {kept})" if kept else "") + "\n")

    def _keep_rejected(self, path: Path) -> Path | None:
        new = _read(path)
        if new is None:
            return None
        kept = Path(STATE_DIR) / "rejected" / f"{path.name}-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**6:06d}"
        write_atomic(self.workdir / kept, new)
        return kept


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
