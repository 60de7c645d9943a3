"""What no script may write: whatever decides policy or runs on the host.

The shell mounts the working directory writable, and the config is re-read
at the start of every run. A script that could write `toolkernel.toml`, the
lasting approvals, the trust records or a hook it knows will run could give
itself permissions nobody granted. So the sandbox's view of the workspace is
built to refuse those writes up front (prevention, not undo):

- a protected file at the top of the workspace is covered by a read-only
  stand-in folder holding only a note, `PROTECTED` (a mount point: it cannot
  be written, removed, renamed over or linked to; scripts read the file with
  `tools read-file`), since Bashkit mounts only folders;
- a protected name that does not exist gets no mount, so a listing shows only
  what is on disk: what a script makes there (`toolkernel.toml` in a fresh
  project, `toolkernel.py`, `.git`) is moved aside when the run ends
  (`_shadows.Watch`; a new config file is untrusted besides). In an agent's run
  (`serve`, a cell an agent sent) a missing top-level `.git` is made as an empty
  folder on disk and mounted read-only, as the OS sandbox of an agent's host
  bash does (`_shadows.stand_in`): git passes over it, and nothing can be
  planted in it for a git poller to run while the run goes on;
- a protected path deeper down makes its top-level folder read-only, since a
  folder that holds a mount point can still be renamed or replaced by a
  symlink on the host, the protected file with it;
- `.toolkernel/` is created before the run and mounted read-only, so it can
  neither be written nor replaced (`ln -s grants .toolkernel`);
- `chmod` refuses the workspace folder and protected paths, because modes set
  through a real mount reach the host.

What is protected, and the plan of mounts that refuses it, is
`_approval/_protected.py`'s (`mount_plan`). Config files a script
creates deeper in the tree cannot be refused this way; they are caught by
workspace trust instead (a new file is never trusted, see `_trust`). Nor can the
hundreds of names under which a Python module at the top would shadow an installed
one (`json.py`, `pandas/`): the run's end moves those aside instead (`_shadows`).
"""

from __future__ import annotations

import concurrent.futures
import os
import shlex
import threading
from pathlib import Path

from .._approval._git import GIT
from .._approval._protected import Protection, Unprotectable, _inner_git, _inner_hooks
from ._shadows import is_stand_in, stand_in
from .._providers._tools._paths import is_inside, real_path


# -- in the sandbox --------------------------------------------------------------------

def mount(bash, plan: Protection, *, agent: bool = False) -> None:
    """Lay the read-only mounts of `plan` over the writable workspace (an agent's run: and
    the empty `.git` that stands in for a missing one)."""
    for item in plan.mounts:
        _mount(bash, item.path, real=item.real)
    git = plan.workdir / GIT
    if agent and not os.path.lexists(git):
        stand_in(git)
    if agent and is_stand_in(git):
        _mount(bash, git, real=True)


def mount_links(bash, plan: Protection) -> None:
    """A read-only mount over each link in the workspace that leads to a folder in it (see
    _approval/_links.py): Bashkit would otherwise follow it past the mounts of `mount`.

    Each folder between the top and a link is a mount of its own too, writable: a mount point
    cannot be moved, and a folder above the link, moved (`mv deep deep2`), took the link along
    to a path no mount covers, where Bashkit followed it on the host again."""
    from .._approval._links import found_in

    links, repositories = found_in(plan.workdir, [item.path for item in plan.mounts])
    git = _inner_git(plan.workdir, repositories)
    _inner_hooks[str(plan.workdir)] = tuple(git)
    # A link inside what is mounted read-only below leads nowhere writable (as under the plan's
    # mounts); the writable mounts of the folders above it would reopen that part.
    links = [(link, real) for link, real in links if not any(is_inside(link, path) for path in git)]
    for folder in _folders_above(plan.workdir, [link for link, _ in links] + git):
        _mount(bash, folder, real=True, writable=True)
    for link, real in links:
        _mount(bash, link, real=real)
    for path in git:  # an inner repository's .git and hooks folder: git runs what they say
        if os.path.lexists(path):  # one not there yet is moved aside if a run makes it (`_shadows`)
            _mount(bash, path, real=path.is_dir())


def _mount(bash, path: Path, *, real: bool, writable: bool = False) -> None:
    """One mount: the host folder at `path` (`real`), or an empty stand-in hiding it. A place
    that cannot be mounted (gone since it was looked at) stops the run, naming it: Bashkit's
    error names no path, and the run must not start unprotected."""
    from bashkit import FileSystem

    try:
        fs = FileSystem.real(str(path), writable=writable) if real else _stand_in()
        bash.mount(str(path), fs, read_only=not writable)
    except RuntimeError as exc:
        raise Unprotectable(path, f"cannot be mounted over ({exc})") from exc


def _folders_above(root: Path, links: list[Path]) -> list[Path]:
    """The folders between `root` and each link (both left out), outermost first."""
    folders: dict[Path, None] = {}
    for link in links:
        parts = link.relative_to(root).parts
        folders.update((root.joinpath(*parts[:depth]), None) for depth in range(1, len(parts)))
    return sorted(folders, key=lambda folder: len(folder.parts))


_stand_ins: list = []  # the one stand-in, made once: a run lays it at every place it hides
_stand_in_lock = threading.Lock()


def _stand_in():
    """The folder laid over a protected path: only a note. One serves every place and every run:
    it is only ever mounted read-only, so no script can change it (making one for each place cost
    a run about 0.1 ms)."""
    with _stand_in_lock:
        if not _stand_ins:
            _stand_ins.append(_new_stand_in())
        return _stand_ins[0]


def _new_stand_in():
    from bashkit import FileSystem

    fs = FileSystem()
    # A new FileSystem holds Bashkit's skeleton (/dev, /home, /tmp): every `find .` or `grep -r`
    # of the workspace listed it under each protected name.
    for entry in fs.read_dir("/"):
        fs.remove(f"/{entry['name']}", recursive=True)
    fs.write_file("/PROTECTED", b"toolkernel hides this path from scripts so that none can change it:"
                  b" it decides policy or runs on the host. Read it with `tools read-file`.\n")
    return fs


def refuse_links(ctx):
    """`ln` and `link` for scripts: refused. Bashkit resolves a link inside the workspace on
    the host, past the read-only mounts laid over the protected paths (`ln -s . me` and then
    `me/toolkernel.toml` is the host file), and a link from a relative one can be moved to
    where it leads anywhere in the workspace, so no link a script makes is safe to allow."""
    from bashkit import BuiltinResult

    return BuiltinResult("", "ln: toolkernel does not let scripts make links (one could lead a write"
                         " past the files it keeps read-only); copy the file instead\n", 1)


class GuardedChmod:
    """`chmod` for scripts: the workspace folder and protected paths are refused
    (a mode set through a real mount changes the host); the rest is Bashkit's
    own `chmod`, run in a fresh shell with the same mounts."""

    def __init__(self, plan: Protection, read_only: bool) -> None:
        self.plan, self.read_only = plan, read_only

    def __call__(self, ctx):
        from bashkit import BuiltinResult

        refused = [word for word in ctx.argv if self._refuses(word, ctx.cwd)]
        if refused:
            return BuiltinResult("", f"chmod: {refused[0]}: toolkernel does not let scripts change the"
                                 " mode of the workspace folder or of its protected files\n", 1)
        # Its own thread: a Bashkit callback cannot start another shell's runtime.
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="toolkernel-chmod") as pool:
            result = pool.submit(self._chmod, ctx.cwd, list(ctx.argv)).result()
        return BuiltinResult(result.stdout, result.stderr, result.exit_code)

    def _chmod(self, cwd: str, argv: list[str]):
        return self._shell(cwd).execute_sync(shlex.join(["chmod", *argv]))

    def _refuses(self, word: str, cwd: str) -> bool:
        if word.startswith("-"):
            return False  # an option, or a mode like -w; the modes are harmless paths anyway
        path = real_path(Path(cwd) / word)
        return path == self.plan.workdir or self.plan.covers(path)

    def _shell(self, cwd: str):
        from bashkit import Bash, FileSystem

        bash = Bash(cwd=cwd)
        workdir = str(self.plan.workdir)
        bash.mount(workdir, FileSystem.real(workdir, writable=not self.read_only))
        mount(bash, self.plan)
        return bash
