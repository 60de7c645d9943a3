"""The operating system's sandbox for host code an agent starts.

An agent's `%%bash` cell and the command tools an agent's run calls run real programs on the
host. A checker of bash text cannot be the line between what the agent may do and what the
person decides (bash always has one more way to run a command), so these processes run
inside an OS sandbox that holds the line whatever the text says:

- everything outside the workspace is read-only, `/tmp` is a private empty folder, and the
  workspace is writable except `Plan.read_only` (what decides policy or runs later: config,
  `.toolkernel/`, `.git/`, the programs hooks, servers and command tools run, existing
  top-level modules that shadow installed ones);
- `Plan.hidden` (the state folder that holds approvals, pending requests and trust; the
  Jupyter runtime folder with the kernels' connection files; ssh and cloud credentials) is
  an empty folder inside;
- a process table of its own (no other process's `/proc`, environment or command line) and,
  unless the plan allows it, no network: only a loopback device of its own.

The mechanism is bubblewrap (`bwrap`, Debian's `bubblewrap`), as in Anthropic's sandbox
runtime and Flatpak: it needs unprivileged user namespaces (or root). Where it cannot run,
Landlock (`_landlock_exec.py`, as in Codex CLI) holds what it can: writes only to the
workspace's unprotected entries, a private temporary folder and /dev, no TCP; it hides
nothing from reading, and no new top-level name can be made. Where neither works there is
no sandbox (`mechanism().available` is False), and the callers ask a person for every such
process instead (they fail closed). `toolkernel doctor` says which holds and why.

A protected file that the host renames over while a sandbox runs (an editor's atomic save of
`toolkernel.toml`) loses its mount inside for the rest of that run: Linux detaches it. What
then changes is caught after the fact, by trust (a config's bytes) and by `_shadows` (a
module); a sandbox made ahead is not used once one of its mounts is gone.

This module only builds and checks the command line: what to protect is worked out above it
(`_runners/_sandbox_plan.py`), and no I/O happens here but the one probe of `bwrap`.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Sequence

BWRAP = "bwrap"
# "0" refuses the sandbox (agent host code then asks a person every time, as where none
# exists); "landlock" skips bubblewrap (tests of the fallback; a machine whose bwrap misbehaves).
DISABLE_VARIABLE = "TOOLKERNEL_SANDBOX"
_LANDLOCK_EXEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_landlock_exec.py")


@dataclass(frozen=True)
class Mechanism:
    name: str        # "bubblewrap" or "none"
    detail: str      # what was found, or why there is none
    available: bool


@dataclass(frozen=True)
class Plan:
    """What one sandboxed process may see and write. Paths are real (links resolved)."""

    writable: tuple[str, ...]            # the workspace (bound writable over a read-only root)
    read_only: tuple[str, ...] = ()      # inside `writable`: bound read-only over it
    hidden: tuple[str, ...] = ()         # folders shown empty; files shown as /dev/null
    visible: tuple[str, ...] = ()        # inside /tmp, bound read-only (the `tools` channel)
    network: bool = False

    def with_network(self, network: bool) -> "Plan":
        return Plan(self.writable, self.read_only, self.hidden, self.visible, network)


def mechanism() -> Mechanism:
    """The sandbox this machine offers now (the probes' results are kept for the process)."""
    choice = os.environ.get(DISABLE_VARIABLE, "").strip().lower()
    if choice == "0":
        return Mechanism("none", f"turned off ({DISABLE_VARIABLE}=0)", False)
    bwrap = _probe_bwrap(shutil.which(BWRAP)) if choice != "landlock" else None
    if bwrap is not None and bwrap.available:
        return bwrap
    landlock = _probe_landlock()
    if landlock.available:
        return landlock
    return Mechanism("none", "; ".join(m.detail for m in (bwrap, landlock) if m is not None), False)


@functools.lru_cache(maxsize=1)
def _probe_landlock() -> Mechanism:
    from ._landlock_exec import abi

    try:
        version = abi()
    except (OSError, AttributeError) as exc:  # no libc syscall(): not Linux
        return Mechanism("none", f"no Landlock here ({exc})", False)
    if version < 1:
        return Mechanism("none", "the kernel offers no Landlock (off, or older than Linux 5.13)", False)
    how = "writes and TCP" if version >= 4 else "writes only (no network control before ABI 4)"
    return Mechanism("landlock", f"Landlock ABI {version}: holds {how}; hides nothing from reading", True)


@functools.lru_cache(maxsize=4)
def _probe_bwrap(path: str | None) -> Mechanism:
    if path is None:
        return Mechanism("none", "bubblewrap (`bwrap`) is not installed: apt-get install bubblewrap", False)
    probe = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-ipc",
             "--unshare-net", "--die-with-parent", "--cap-drop", "ALL", "--", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Mechanism("none", f"{path} did not run: {exc}", False)
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        return Mechanism("none", f"{path} cannot make a sandbox here (user namespaces off?): {why[0]}", False)
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    return Mechanism("bubblewrap", f"{version or 'bwrap'} at {path}", True)


def wrap(argv: Sequence[str], plan: Plan) -> list[str]:
    """`argv` as it runs inside the sandbox `plan` describes (call only where `mechanism()` is
    available)."""
    if mechanism().name == "landlock":
        return _landlocked(argv, plan)
    return _bubblewrapped(argv, plan)


def _landlocked(argv: Sequence[str], plan: Plan) -> list[str]:
    protected = set(plan.read_only)
    writable = [_private_tmp(), "/dev"]
    for root in plan.writable:
        try:
            names = os.listdir(root)
        except OSError:
            continue
        writable += [path for path in (os.path.join(root, name) for name in names) if path not in protected]
    spec = json.dumps({"writable": writable, "network": plan.network})
    return [sys.executable, "-I", "-S", _LANDLOCK_EXEC, spec, "env", f"TMPDIR={_private_tmp()}", *argv]


@functools.lru_cache(maxsize=1)
def _private_tmp() -> str:
    """The one temporary folder Landlock lets an agent's processes write (this user's, 0700)."""
    return tempfile.mkdtemp(prefix="toolkernel-sandbox-tmp-")


def _bubblewrapped(argv: Sequence[str], plan: Plan) -> list[str]:
    """The order matters: later mounts go over earlier ones. What is `visible` under the new
    /tmp comes before the workspace (which may lie inside it), and again after the hidden
    places for what lies inside one (the channel in `$XDG_RUNTIME_DIR`)."""
    path = _bwrap_path()
    args = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for place in plan.visible:
        args += ["--ro-bind", place, place]
    for place in plan.writable:
        args += ["--bind", place, place]
    for place in plan.read_only:
        if os.path.lexists(place):  # a mount point that does not exist would be made on the host
            args += ["--ro-bind", place, place]
    for place in plan.hidden:
        args += _hide(place)
    for place in plan.visible:
        if any(_inside(place, hidden) for hidden in plan.hidden):
            args += ["--ro-bind", place, place]
    # No `--new-session`: the caller's process group holds bwrap and what it runs, so one
    # `killpg` still ends them all (none has a terminal to abuse: they start in a session
    # of their own).
    # Every capability dropped: run as root (a container, CI), bwrap keeps them all, and
    # CAP_SYS_ADMIN remounts the read-only binds writable (`mount -o remount,bind,rw /`).
    args += ["--unshare-pid", "--unshare-ipc", "--die-with-parent", "--cap-drop", "ALL"]
    if not plan.network:
        args += ["--unshare-net"]
    return [*args, "--", *argv]


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@functools.lru_cache(maxsize=1)
def _bwrap_path() -> str:
    return shutil.which(BWRAP) or BWRAP


def _hide(place: str) -> list[str]:
    if os.path.isdir(place) and not os.path.islink(place):
        return ["--tmpfs", place]
    if os.path.isfile(place) and not os.path.islink(place):
        return ["--ro-bind", "/dev/null", place]
    return []  # nothing there to hide (a link: its target is hidden, or read-only, in its own place)
