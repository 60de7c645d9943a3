"""This process's private temporary folders, and the sweep of those a killed process left.

A kernel makes a few folders of its own in the system's temporary folder (the host bash channel,
the Landlock sandbox's /tmp, the egress proxy's socket) and removes them as it ends. A kernel
killed with SIGKILL (a restart after a hang, the OOM killer) cannot, and a machine where kernels
are killed every day fills its /tmp with them. So each folder's name says whose it is (the pid
and the process's start time, which a later process given the same pid does not share), and
making a folder of a kind removes, on a thread of its own, the folders of that kind whose owner
is gone.

The owner is in the name, not in a file inside: an agent's processes write in some of these
folders (the Landlock sandbox's /tmp is one), and must not be able to make one look dead. Only
this user's own folders (no link) are removed. Processes in another pid namespace that share
this /tmp look dead from here: their folders would be removed; a kernel does not share /tmp so.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import threading

from ._process import own_start, still_running


def private_folder(kind: str) -> str:
    """A new folder (0700) named `kind` + its owner + a random part, in the system's temporary
    folder; the dead owners' folders of `kind` are removed meanwhile."""
    folder = tempfile.mkdtemp(prefix=f"{kind}{os.getpid()}.{own_start() or 0}-")
    threading.Thread(target=sweep, args=(kind,), name="toolkernel-tmp-sweep", daemon=True).start()
    return folder


def sweep(kind: str, parent: str | None = None) -> list[str]:
    """Remove the folders of `kind` in `parent` (the temporary folder) whose owner is gone: the
    paths removed. Never raises: a folder that cannot be looked at or removed is left."""
    removed = []
    try:
        entries = [entry for entry in os.scandir(parent or tempfile.gettempdir()) if entry.name.startswith(kind)]
    except OSError:
        return removed
    for entry in entries:
        owner = _owner(entry.name[len(kind):])
        if owner is None or still_running(owner) or not _own_folder(entry):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)  # removes below the folder without following links
        removed.append(entry.path)
    return removed


def _owner(rest: str) -> tuple[int, str | None] | None:
    """(pid, start time) from the part of a name after its kind ("<pid>.<start>-<random>"); None
    for a name of another form (an older version's, or not ours), which is never removed."""
    owner, dash, _ = rest.partition("-")
    pid, dot, started = owner.partition(".")
    if not (dash and dot and pid.isdigit() and started.isdigit()):
        return None
    return int(pid), (None if started == "0" else started)


def _own_folder(entry: os.DirEntry) -> bool:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
