"""What the OS sandbox of an agent's host process protects in this workspace (`_sandbox.Plan`).

The same list as the Bashkit mounts (`_guard.protection`: config, `.toolkernel/`, `.git/`,
what hooks, servers and command tools execute, home dotfiles when the workspace is the home
folder), each made read-only through its top-level folder, since a folder that holds a mount
point can still be renamed with the protected file in it. Top-level entries that shadow an
installed module are read-only too; new ones are moved aside when the run ends (`_shadows`).
A protected name that does not exist yet cannot be mounted without making it on the host:
a new config file is caught by trust (never trusted until a person says so), a new module or
`.git` by the run's end (`_shadows`).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Mapping

from .._config._trust import store_path
from .._sandbox import Plan
from .._approval._protected import STATE_DIR, Protection, make_state_dir
from ._shadows import installed, module_of

# Credentials an agent's process has no business reading, under the home folder.
_SECRETS = (".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".config/gh", ".docker", ".kube",
            ".netrc", ".git-credentials", ".pypirc")


def sandbox_plan(protection: Protection, *, visible: tuple[str, ...] = (),
                 environ: Mapping[str, str] | None = None) -> Plan:
    environ = os.environ if environ is None else environ
    root = protection.workdir
    make_state_dir(root / STATE_DIR)  # it must exist to be mounted read-only
    try:
        top = os.stat(root)
    except OSError:
        top = None
    # The same while the protection (kept while nothing it looked at moved) and the top's entries do.
    status = None if top is None else (top.st_ino, top.st_mtime_ns, top.st_ctime_ns)
    shown = (*_installed_in_tmp(str(root), tuple(sys.path), environ.get("PATH", "")), *visible)
    return _plan(protection, shown, hidden_places(environ), status)


@functools.lru_cache(maxsize=8)
def _installed_in_tmp(root: str, path: tuple[str, ...], programs: str) -> tuple[str, ...]:
    """What runs from under /tmp, which the sandbox replaces by an empty folder of its own:
    the interpreter and its environment (a venv made in /tmp), the folders Python imports from
    and the PATH's; shown read-only. The workspace itself is bound apart."""
    places = [sys.prefix, sys.exec_prefix, sys.base_prefix, os.path.dirname(sys.executable), *path,
              *programs.split(os.pathsep)]
    found = []
    for place in places:
        real = os.path.realpath(place) if place else ""
        if real.startswith("/tmp/") and os.path.isdir(real) and not _inside(real, root):
            found.append(real)
    outer = [p for p in dict.fromkeys(found) if not any(p != q and _inside(p, q) for q in found)]
    return tuple(sorted(outer))


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@functools.lru_cache(maxsize=16)
def _plan(protection: Protection, visible: tuple[str, ...], hidden: tuple[str, ...], status: tuple | None) -> Plan:
    root = protection.workdir
    tops = {str(root / path.relative_to(root).parts[0]) for path in protection.protected}
    tops |= set(_shadowing_tops(str(root)))
    return Plan(writable=(str(root),), read_only=tuple(sorted(tops)), hidden=hidden, visible=visible)


def hidden_places(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The state folder (approvals, pending requests, trust), the Jupyter runtime folder (a
    kernel's connection file lets anyone run code in it, outside the sandbox), the session's
    runtime folder (agent sockets), and the home folder's credentials."""
    return _hidden(tuple(environ.get(name) for name in _PLACES_FROM))


# The variables the hidden places are worked out from (jupyter_core's runtime folder too).
_PLACES_FROM = ("HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR", "XDG_DATA_HOME", "JUPYTER_RUNTIME_DIR",
                "JUPYTER_DATA_DIR", "JUPYTER_PLATFORM_DIRS")


@functools.lru_cache(maxsize=8)
def _hidden(values: tuple[str | None, ...]) -> tuple[str, ...]:
    environ = {name: value for name, value in zip(_PLACES_FROM, values) if value is not None}
    home = Path(environ.get("HOME") or Path.home())
    places = [store_path(environ).parent, _jupyter_runtime(), *(home / name for name in _SECRETS)]
    if environ.get("XDG_RUNTIME_DIR"):
        places.append(Path(environ["XDG_RUNTIME_DIR"]))
    return tuple(dict.fromkeys(os.path.realpath(p) for p in places))


def _jupyter_runtime() -> Path:
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir())


def _shadowing_tops(root: str) -> list[str]:
    found = installed(root)
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    shadowing = []
    for entry in entries:
        if entry.name.partition(".")[0] not in found.heads:
            continue
        module = module_of(entry.name, entry.is_dir(follow_symlinks=False))
        if found.may_shadow(module):
            shadowing.append(entry.path)
    return shadowing


def doctor(workdir: Path) -> str:
    """`toolkernel doctor`: which OS sandbox holds an agent's host code here, what it protects."""
    from .._sandbox import mechanism
    from .._approval._protected import mount_plan

    found = mechanism()
    head = f"OS sandbox for an agent's host code: {found.name} ({found.detail})"
    if not found.available:
        return "\n".join([head, "  none here: every %%bash cell an agent sends and every command tool an agent's",
                          "  run calls asks a person, whatever the Bash(...) and allow rules say"])
    plan = sandbox_plan(mount_plan(Path(workdir)))
    root = plan.writable[0]
    inside = [os.path.relpath(p, root) for p in plan.read_only if os.path.lexists(p)]
    return "\n".join([
        head,
        "  runs: %%bash cells an agent sends, and command tools an agent's run calls",
        f"  writable: {root} (the workspace) and a private /tmp; everything else read-only",
        f"  read-only in the workspace: {', '.join(inside) or '(nothing there yet)'}",
        f"  hidden (shown empty): {', '.join(p for p in plan.hidden if os.path.lexists(p)) or '(none present)'}",
        "  network: off (a command tool with `network = true` keeps it)",
    ])
