"""The operating system's sandbox for host code an agent starts.

An agent's `%%bash` cell and the command tools an agent's run calls run real programs on the
host. A checker of bash text cannot be the line between what the agent may do and what the
person decides (bash always has one more way to run a command), so these processes run
inside an OS sandbox that holds the line whatever the text says:

- everything outside the workspace is read-only; `/tmp`, `/run`, `/var/run` and the home
  folder (`Plan.home`) are private empty folders, with only `Plan.home_shown` and
  `Plan.visible` (what runs from there, the `tools` channel) bound back in; the workspace is
  writable except `Plan.read_only` (what decides policy or runs later);
- `Plan.hidden` (the state folder that holds approvals, pending requests and trust; the
  Jupyter runtime folder with the kernels' connection files; credentials; every host socket
  still in sight) is empty, or `/dev/null`, inside; `Plan.stand_ins` (a missing top-level
  `.git`) are empty read-only folders;
- only the environment variables `Plan.env` names pass (`Plan.environment`);
- a process table of its own (no other process's `/proc`, environment or command line), the
  kernel's settings (`/proc/sys`) read-only, no capability, no system call `_seccomp` refuses
  (the keyrings), and a network namespace of its own: with a grant (`Plan.network`), its way out
  is the proxy (`_egress.py`) for `Plan.domains`, whose socket is bound in and reached through
  `_netbridge.py` on the sandbox's own loopback.

The mechanism is bubblewrap (`bwrap`, Debian's `bubblewrap`), as in Anthropic's sandbox
runtime and Flatpak: it needs unprivileged user namespaces (or root). Where it cannot run,
Landlock (`_landlock_exec.py`, ABI 4 or later) holds what it can: writes only to the
workspace's unprotected entries (never through a link), a private temporary folder and
/dev/null and the like, no TCP, no device ioctl, no capability, the same system call filter;
it hides nothing from reading, reaches Unix sockets by path, and cannot hold a network grant
(the callers ask).
Where neither works there is no sandbox (`mechanism().available` is False), and the callers
ask a person for every such process instead (they fail closed). `toolkernel doctor` says
which holds and why.

A protected file that the host renames over while a sandbox runs (an editor's atomic save of
`toolkernel.toml`) loses its mount inside for the rest of that run: Linux detaches it. What
then changes is caught after the fact, by trust (a config's bytes) and by `_shadows` (a
module); a sandbox made ahead is not used once one of its mounts is gone.

This module only builds and checks the command line: what to protect is worked out above it
(`_runners/_sandbox_plan.py`), and no I/O happens here but the probes, the look at what is
at each place, and the start of a grant's proxy.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from typing import Mapping, Sequence

from . import _seccomp
from ._tempdirs import private_folder

BWRAP = "bwrap"
# "0" refuses the sandbox (agent host code then asks a person every time, as where none
# exists); "landlock" skips bubblewrap (tests of the fallback; a machine whose bwrap misbehaves).
DISABLE_VARIABLE = "TOOLKERNEL_SANDBOX"
_LANDLOCK_EXEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_landlock_exec.py")
_NETBRIDGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_netbridge.py")


@dataclass(frozen=True)
class Mechanism:
    name: str        # "bubblewrap" or "none"
    detail: str      # what was found, or why there is none
    available: bool


# What passes into a sandboxed process from the kernel's environment, beside the `tools`
# channel's own variables and what a `[sandbox] env` list adds (`NAME*`: a prefix).
DEFAULT_ENV = ("PATH", "HOME", "LANG", "LC_*", "TERM", "USER", "TZ")
# Inside, a network grant's programs reach the host's proxy (`_egress.py`) through a bridge
# (`_netbridge.py`) on the sandbox's own loopback, at this port, and the bridge reaches the
# proxy's Unix socket bound at PROXY_SOCKET.
PROXY_PORT = 3128
PROXY_SOCKET = "/run/toolkernel/proxy.sock"
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")


@dataclass(frozen=True)
class Plan:
    """What one sandboxed process may see and write. Paths are real (links resolved)."""

    writable: tuple[str, ...]            # the workspace (bound writable over a read-only root)
    read_only: tuple[str, ...] = ()      # inside `writable`: bound read-only over it
    # Inside `writable`, the folders above a read-only place below the top (`a` and `a/app` above
    # `a/app/.git`): each bound onto itself, writable, since a mount point cannot be renamed, and a
    # folder renamed away took the read-only `.git` along and left its path to a planted one.
    pinned: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()         # folders shown empty; files (and sockets) shown as /dev/null
    visible: tuple[str, ...] = ()        # inside /tmp, /run or the home folder, bound read-only
    network: bool = False                # through the proxy to `domains` only (never the host's own)
    home: str | None = None              # the home folder, shown empty but for `home_shown`
    home_shown: tuple[tuple[str, str, bool], ...] = ()  # (place, what shows there, writable) bound back
    stand_ins: tuple[str, ...] = ()      # missing folders shown empty and read-only (a top `.git`)
    env: tuple[str, ...] = DEFAULT_ENV   # the variables that pass (`NAME*`: every NAME...)
    domains: tuple[str, ...] = ()        # where a network grant reaches (`_egress.allows`)

    def with_network(self, network: bool) -> "Plan":
        return dataclasses.replace(self, network=network)

    def environment(self, environ: Mapping[str, str], channel: Mapping[str, str] = {}) -> dict[str, str]:
        """The variables a process in this sandbox gets: `environ`'s that the allow-list names,
        the `channel`'s, and with the network the proxy's."""
        names = tuple(name for name in self.env if not name.endswith("*"))
        prefixes = tuple(name[:-1] for name in self.env if name.endswith("*"))
        passed = {name: value for name, value in environ.items() if name in names or name.startswith(prefixes)}
        if self.network:
            passed.update(dict.fromkeys(_PROXY_VARIABLES, f"http://127.0.0.1:{PROXY_PORT}"))
            passed["NO_PROXY"] = passed["no_proxy"] = ""
        return {**passed, **channel}


def mechanism() -> Mechanism:
    """The sandbox this machine offers now (the probes' results are kept for the process)."""
    choice = os.environ.get(DISABLE_VARIABLE, "").strip().lower()
    if choice == "0":
        return Mechanism("none", f"turned off ({DISABLE_VARIABLE}=0)", False)
    calls = _seccomp.made()
    if isinstance(calls, str):  # the keyrings would stay in reach: no sandbox, the callers ask
        return Mechanism("none", calls, False)
    bwrap = _probe_bwrap(_which_bwrap(os.environ.get("PATH"))) if choice != "landlock" else None
    if bwrap is not None and bwrap.available:
        return bwrap
    landlock = _probe_landlock()
    if landlock.available:
        return landlock
    return Mechanism("none", "; ".join(m.detail for m in (bwrap, landlock) if m is not None), False)


_found_bwrap: dict[str | None, str] = {}


def _which_bwrap(path: str | None) -> str | None:
    """`shutil.which(BWRAP)` for this PATH, without walking its folders again on every cell
    while the program found last is still there (one that is gone, or not found, is looked for)."""
    found = _found_bwrap.get(path)
    if found is not None and os.access(found, os.X_OK):
        return found
    found = shutil.which(BWRAP, path=path)
    if found is not None:
        _found_bwrap[path] = found
    return found


@functools.lru_cache(maxsize=1)
def _probe_landlock() -> Mechanism:
    from ._landlock_exec import MIN_ABI, abi

    try:
        version = abi()
    except (OSError, AttributeError) as exc:  # no libc syscall(): not Linux
        return Mechanism("none", f"no Landlock here ({exc})", False)
    if version < 1:
        return Mechanism("none", "the kernel offers no Landlock (off, or older than Linux 5.13)", False)
    if version < MIN_ABI:
        return Mechanism("none", f"the kernel's Landlock (ABI {version}) cannot refuse TCP: {MIN_ABI} or later is"
                         " needed", False)
    # One real start, as a cell's: where its capabilities cannot all be dropped, none runs.
    spec = json.dumps({"writable": [], "network": False, "seccomp": _seccomp.program().hex()})
    try:
        done = subprocess.run([sys.executable, "-I", "-S", _LANDLOCK_EXEC, spec, "true"], capture_output=True,
                              timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Mechanism("none", f"the Landlock sandbox did not start ({exc})", False)
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        return Mechanism("none", f"the Landlock sandbox cannot be made here: {said[0]}", False)
    return Mechanism("landlock", f"Landlock ABI {version}: holds writes, TCP and capabilities; hides nothing"
                     " from reading", True)


@functools.lru_cache(maxsize=4)
def _probe_bwrap(path: str | None) -> Mechanism:
    if path is None:
        return Mechanism("none", "bubblewrap (`bwrap`) is not installed: apt-get install bubblewrap", False)
    probe = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys",
             "--unshare-pid", "--unshare-ipc", "--unshare-net", "--die-with-parent", "--cap-drop", "ALL", "--", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Mechanism("none", f"{path} did not run: {exc}", False)
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        return Mechanism("none", f"{path} cannot make a sandbox here (user namespaces off?): {why[0]}", False)
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    return Mechanism("bubblewrap", f"{version or 'bwrap'} at {path}", True)


def wrap(argv: Sequence[str], plan: Plan, options: Sequence[str] = (), *, seccomp_fd: int | None = None) -> list[str]:
    """`argv` as it runs inside the sandbox `plan` describes (call only where `mechanism()` is
    available; under Landlock only without the network, which it cannot hold: the callers ask).
    `options`: more of bubblewrap's (`--info-fd`). `seccomp_fd`: a descriptor open on
    `_seccomp.program_file()` that the caller passes to bubblewrap (`pass_fds`), which saves the
    shell that opens it otherwise (`_filtered`)."""
    if mechanism().name == "landlock":
        if plan.network:
            raise RuntimeError("Landlock cannot hold a network grant: the call must ask a person")
        return _landlocked(argv, plan)
    if seccomp_fd is not None:
        return _bubblewrapped(argv, plan, (*options, "--seccomp", str(seccomp_fd)))
    return _filtered(_bubblewrapped(argv, plan, options))


def _filtered(line: list[str]) -> list[str]:
    """bubblewrap's command line with the system call filter (`_seccomp`), which it reads from a
    descriptor (`--seccomp FD`): bash opens the filter's file on a free one, then is bwrap."""
    return [_bash_path(), "--norc", "--noprofile", "-c", 'exec {calls}<"$0" && exec "$1" --seccomp "$calls" "${@:2}"',
            _seccomp.program_file(), *line]


@functools.lru_cache(maxsize=1)
def _bash_path() -> str:
    return shutil.which("bash") or "/bin/bash"


def _landlocked(argv: Sequence[str], plan: Plan) -> list[str]:
    spec = json.dumps({"writable": _landlock_writable(plan), "network": False, "seccomp": _seccomp.program().hex()})
    return [sys.executable, "-I", "-S", _LANDLOCK_EXEC, spec, "env", f"TMPDIR={_private_tmp()}", *argv]


def _landlock_writable(plan: Plan) -> list[str]:
    """Every entry of the workspace but the protected ones, each granted whole, and below an
    entry that holds a protected path (an inner `.git`) its own entries again: Landlock only
    grants, so a protected path is one never granted. A link is never granted (`me -> .` would
    grant the whole workspace, `data -> /elsewhere` a place outside it)."""
    from ._landlock_exec import DEVICES

    protected = set(plan.read_only) | set(plan.hidden)
    writable = [_private_tmp(), *DEVICES]
    for root in plan.writable:
        writable += _grantable(root, protected)
    return writable


def _grantable(folder: str, protected: set[str]) -> list[str]:
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    granted = []
    for entry in entries:
        if entry.path in protected or entry.is_symlink():
            continue
        if any(_inside(place, entry.path) for place in protected) and entry.is_dir(follow_symlinks=False):
            granted += _grantable(entry.path, protected)
        else:
            granted.append(entry.path)
    return granted


@functools.lru_cache(maxsize=1)
def _private_tmp() -> str:
    """The one temporary folder Landlock lets an agent's processes write (this user's, 0700)."""
    folder = private_folder("toolkernel-sandbox-tmp-")
    # The process's own: what its agents left there goes with it (a kernel left one per start;
    # one killed leaves it to the next kernel's sweep).
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _bubblewrapped(argv: Sequence[str], plan: Plan, options: Sequence[str] = ()) -> list[str]:
    """The order matters: later mounts go over earlier ones. The private places (/tmp, /run,
    the home folder) come first, then what is shown in them again (the interpreter, the home
    folder's allow-list), the workspace (which may lie inside one), what is read-only or hidden
    in it, and again what is `visible` inside a hidden place (the channel in `$XDG_RUNTIME_DIR`)."""
    # /proc/sys read-only: bwrap covers it only where its unprivileged half may write it, and run as
    # root it may not, yet uid 0 with no capability still writes the kernel's settings as their
    # owner (`kernel.core_pattern` names a program the kernel runs as root, outside any sandbox).
    args = [_bwrap_path(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--ro-bind", "/proc/sys",
            "/proc/sys"]
    for place in _private_places(plan):
        args += ["--tmpfs", place]
    for place, source, writable in plan.home_shown:
        args += ["--bind" if writable else "--ro-bind", source, place]
    for place in plan.visible:
        args += ["--ro-bind", place, place]
    for place in plan.writable:
        args += ["--bind", place, place]
    for place in plan.pinned:
        args += ["--bind-try", place, place]
    for place in plan.read_only:
        if os.path.lexists(place):  # a mount point that does not exist would be made on the host
            args += ["--ro-bind", place, place]
    for place in plan.hidden:
        args += _hide(place)
    for place in plan.stand_ins:
        if os.path.isdir(place) and not os.path.islink(place):  # made on the host by the plan
            args += ["--tmpfs", place, "--remount-ro", place]
    for place in plan.visible:
        if any(_inside(place, hidden) for hidden in plan.hidden):
            args += ["--ro-bind", place, place]
    # What the allow-list shows in a hidden folder, or in the workspace (a home folder's; git's
    # settings are shown as a copy there, over the file itself)
    rebound = [place for place, _, _ in plan.home_shown
               if any(_inside(place, other) for other in (*plan.hidden, *plan.writable))]
    for place, source, writable in plan.home_shown:
        if place in rebound:
            args += ["--bind" if writable else "--ro-bind", source, place]
    for place in plan.hidden:  # and a secret in what was shown again (`.config/git/credentials`)
        if any(_inside(place, shown) and place != shown for shown in rebound):
            args += _hide(place)
    # No `--new-session`: the caller's process group holds bwrap and what it runs, so one
    # `killpg` still ends them all (none has a terminal to abuse: they start in a session
    # of their own).
    # Every capability dropped: run as root (a container, CI), bwrap keeps them all, and
    # CAP_SYS_ADMIN remounts the read-only binds writable (`mount -o remount,bind,rw /`).
    # The network namespace is always its own: a grant reaches the proxy's socket alone.
    args += ["--unshare-pid", "--unshare-ipc", "--unshare-net", "--die-with-parent", "--cap-drop", "ALL", *options]
    if not plan.network:
        return [*args, "--", *argv]
    from ._egress import proxy_for

    args += ["--ro-bind", proxy_for(plan.domains), PROXY_SOCKET]
    return [*args, "--", sys.executable, "-I", "-S", _NETBRIDGE, PROXY_SOCKET, str(PROXY_PORT), *argv]


def _private_places(plan: Plan) -> list[str]:
    """/tmp, /run (and /var/run where it is no link to it) and the home folder: a private empty
    folder each, where host sockets, kernels' files and credentials would be."""
    places = ["/tmp", "/run"]
    if os.path.isdir("/var/run") and not os.path.islink("/var/run"):
        places.append("/var/run")
    if plan.home is not None and os.path.isdir(plan.home):
        places.append(plan.home)
    return places


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@functools.lru_cache(maxsize=1)
def _bwrap_path() -> str:
    return shutil.which(BWRAP) or BWRAP


def _hide(place: str) -> list[str]:
    try:
        mode = os.lstat(place).st_mode
    except OSError:
        return []  # nothing there to hide
    if stat.S_ISDIR(mode):
        return ["--tmpfs", place]
    if stat.S_ISREG(mode) or stat.S_ISSOCK(mode):  # a socket as /dev/null: connecting is refused
        return ["--ro-bind", "/dev/null", place]
    return []  # a link: its target is hidden, or read-only, in its own place
