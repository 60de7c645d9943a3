"""What an agent's host process may see and write here (`_sandbox.Plan`): hide by default,
show by allow-list.

- **The workspace** is writable but for what decides policy or runs later: the list the
  Bashkit mounts use (`_guard.protection`: config, `.toolkernel/`, `.git/`, what hooks,
  servers and command tools execute, home dotfiles when the workspace is the home folder),
  each made read-only through its top-level folder, since a folder that holds a mount point
  can still be renamed with the protected file in it; every repository's `.git` below the top
  (folder or gitdir file) with what its hooks run; the folders of the PATH that lie in the
  workspace (`~/bin` when it is the home folder); and top-level modules that shadow installed
  ones, at the top and in every `sys.path`/`PYTHONPATH` folder of the workspace. A top-level
  `.git` that does not exist is shown as an empty read-only folder (`stand_in`), so none can
  be planted while the run goes on (git passes over an empty one); what else is new at a
  protected name when the run ends is moved aside (`_shadows`).
- **The home folder** is empty but for `HOME_SHOWN` and the person's `[sandbox] home` and
  `home_writable` (read-only unless named writable); when the workspace is the home folder,
  its dot entries are hidden but those. What the kernel runs from there (its interpreter,
  the folders of its PATH and `sys.path`) is shown read-only.
- **/tmp, /run and /var/run** are private; so is every host socket still in sight (found in
  `/proc/net/unix`, shown as /dev/null): only the `tools` channel and a grant's proxy remain.
- **The environment** passes by allow-list (`_sandbox.DEFAULT_ENV` and `[sandbox] env`).
- **The network**, when granted, reaches `[sandbox] domains` (default: the package indexes)
  through the proxy (`_egress.py`).
"""

from __future__ import annotations

import functools
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Mapping

from .._config._sandbox import SandboxSettings
from .._config._trust import store_path
from .._sandbox import DEFAULT_ENV, Plan
from .._approval._git import git_config
from .._approval._links import found_in
from .._approval._protected import STATE_DIR, Protection, _inner_git, make_state_dir
from ._shadows import GIT, installed, is_stand_in, module_of, stand_in

# Credentials an agent's process has no business reading, under the home folder (hidden also
# where the home folder is the workspace, or shown through the allow-list's parent).
_SECRETS = (".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".config/gh", ".docker", ".kube",
            ".netrc", ".git-credentials", ".config/git/credentials", ".pypirc", ".npmrc")
# (`.config/git/credentials` is git-credential-store's second file, in a folder the default shows.)
# What a sandboxed process sees of the home folder unless the person's config says more:
# git's own settings, and the package caches (read-only: a cell uses them, never fills them).
HOME_SHOWN = (".gitconfig", ".config/git", ".cache/pip", ".cache/uv", ".condarc", ".inputrc")


def sandbox_plan(protection: Protection, settings: SandboxSettings = SandboxSettings(), *,
                 visible: tuple[str, ...] = (), environ: Mapping[str, str] | None = None,
                 for_a_run: bool = True) -> Plan:
    """The plan of a sandboxed process in the workspace of `protection`; `for_a_run` (not a
    description of it: `doctor`) makes what it mounts on (the stand-in of a missing `.git`)."""
    environ = os.environ if environ is None else environ
    root = protection.workdir
    make_state_dir(root / STATE_DIR)  # it must exist to be mounted read-only
    if for_a_run and not os.path.lexists(root / GIT):
        stand_in(root / GIT)
    try:
        top = os.stat(root)
    except OSError:
        top = None
    # The same while the protection (kept while nothing it looked at moved) and the top's entries do.
    status = None if top is None else (top.st_ino, top.st_mtime_ns, top.st_ctime_ns)
    home = os.path.realpath(environ.get("HOME") or Path.home())
    searched = _searched(str(root), tuple(sys.path), environ.get("PATH", ""), environ.get("PYTHONPATH", ""))
    private = _private_roots(home, str(root))
    shown = (*_runs_from(str(root), home, private, tuple(sys.path), environ.get("PATH", "")), *visible)
    repositories = tuple(_repositories(protection))
    git_copies = git_settings(home) if for_a_run else ()  # doctor makes nothing
    return _plan(protection, settings, shown, tuple(visible), hidden_places(environ), _host_sockets(), home,
                 searched, repositories, status, _domains(settings, environ), git_copies)


def _domains(settings: SandboxSettings, environ: Mapping[str, str]) -> tuple[str, ...]:
    if settings.domains:
        return settings.domains
    from .._egress import package_indexes

    return package_indexes(environ)


@functools.lru_cache(maxsize=8)
def _searched(root: str, path: tuple[str, ...], programs: str, pythonpath: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The folders of the workspace (not its top) that programs are looked up in (PATH) and
    that Python imports from first (the kernel's `sys.path`, `PYTHONPATH`): a program or module
    made there runs in the person's next shell or kernel."""
    def inside(entries) -> tuple[str, ...]:
        found = [os.path.realpath(entry) for entry in entries if entry and os.path.isabs(entry)]
        return tuple(dict.fromkeys(p for p in found if p != root and _inside(p, root)))

    return inside(programs.split(os.pathsep)), inside([*path, *pythonpath.split(os.pathsep)])


def _private_roots(home: str, root: str) -> tuple[str, ...]:
    """The places the sandbox replaces by empty folders (`_sandbox._private_places`)."""
    places = ["/tmp", "/run", os.path.realpath("/var/run")]
    if _home_apart(home, root):
        places.append(home)
    return tuple(dict.fromkeys(places))


def _home_apart(home: str, root: str) -> bool:
    """Whether the home folder is shown empty (it is no part of the workspace, nor `/`)."""
    return home != "/" and not _inside(home, root) and os.path.isdir(home)


@functools.lru_cache(maxsize=8)
def _runs_from(root: str, home: str, private: tuple[str, ...], path: tuple[str, ...], programs: str) -> tuple[str, ...]:
    """What runs from a private place: the interpreter and its environment (a venv in /tmp, a
    pyenv in the home folder), the folders Python imports from and the PATH's; shown read-only.
    Never the home folder itself, a credential or the workspace (bound apart)."""
    places = [sys.prefix, sys.exec_prefix, sys.base_prefix, os.path.dirname(sys.executable),
              os.path.dirname(os.path.realpath(sys.executable)), *path, *programs.split(os.pathsep)]
    secrets = [os.path.join(home, name) for name in _SECRETS]
    found = []
    for place in places:
        real = os.path.realpath(place) if place and os.path.isabs(place) else ""
        if not real or not os.path.isdir(real) or _inside(real, root) or real in private:
            continue
        if any(_inside(real, top) for top in private) and not any(_inside(real, s) for s in secrets):
            found.append(real)
    outer = [p for p in dict.fromkeys(found) if not any(p != q and _inside(p, q) for q in found)]
    return tuple(sorted(outer))


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@functools.lru_cache(maxsize=16)
def _plan(protection: Protection, settings: SandboxSettings, shown: tuple[str, ...], channel: tuple[str, ...],
          hidden: tuple[str, ...], sockets: tuple[str, ...], home: str,
          searched: tuple[tuple[str, ...], tuple[str, ...]], repositories: tuple[Path, ...], status: tuple | None,
          domains: tuple[str, ...], git_copies: tuple[tuple[str, str], ...] = ()) -> Plan:
    root = protection.workdir
    top = str(root)
    programs, imports = searched
    inner = [str(path) for path in _inner_git(root, list(repositories)) if os.path.lexists(path)]
    inner += _gitdirs(root, [root / GIT, *repositories])
    read_only = {_top_of(top, str(path)) for path in protection.protected}
    read_only |= {_top_of(top, folder) for folder in programs}
    read_only |= set(_shadowing(top))
    for folder in imports:
        read_only |= set(_shadowing(folder))
    for folder in _worktrees(repositories):  # git runs a `python -m` filter there (`_shadows.Watch`)
        read_only |= set(_shadowing(str(folder), at=top))
    home_shown, home_hidden = _home(home, top, settings, dict(git_copies))
    private = _private_roots(home, top)
    bound = [top, *shown, *(place for place, _, _ in home_shown)]
    in_sight = [place for place in (*hidden, *home_hidden, *sockets)
                if not any(_inside(place, p) for p in private) or any(_inside(place, b) for b in bound)]
    in_sight = [place for place in in_sight if not any(_inside(place, c) for c in channel)]
    read_only |= set(inner)
    return Plan(writable=(top,), read_only=tuple(sorted(read_only)), pinned=_above(top, read_only),
                hidden=tuple(dict.fromkeys(in_sight)), visible=shown,
                home=home if _home_apart(home, top) else None, home_shown=home_shown,
                stand_ins=(str(root / GIT),) if is_stand_in(root / GIT) else (), env=tuple(dict.fromkeys((*DEFAULT_ENV, *settings.env))),
                domains=domains)


def _above(root: str, places: set[str]) -> tuple[str, ...]:
    """The folders between `root` and each of the `places` there (both left out), outermost first,
    but those inside a read-only place already."""
    folders = set()
    for place in places:
        if os.path.lexists(place):
            parts = os.path.relpath(place, root).split(os.sep)
            folders.update(os.path.join(root, *parts[:depth]) for depth in range(1, len(parts)))
    folders = {folder for folder in folders if not any(_inside(folder, place) for place in places)}
    return tuple(sorted(folders, key=lambda folder: (folder.count(os.sep), folder)))


def _gitdirs(root: Path, gits: list[Path]) -> list[str]:
    """Where a `.git` file (a submodule's, a linked work tree's, `--separate-git-dir`'s) leads,
    when that lies in the workspace: its config and hooks run on the host as a `.git`'s do."""
    found = []
    for git in gits:
        if os.path.isfile(git) and not os.path.islink(git):
            gitdir = os.path.realpath(git_config(git.parent, []).parent)
            if _inside(gitdir, str(root)) and gitdir != str(root) and os.path.isdir(gitdir):
                found.append(gitdir)
    return found


def _top_of(root: str, path: str) -> str:
    return os.path.join(root, os.path.relpath(path, root).split(os.sep)[0])


def _home(home: str, root: str, settings: SandboxSettings,
          git_copies: Mapping[str, str] = {}) -> tuple[tuple[tuple[str, str, bool], ...], tuple[str, ...]]:
    """(what is bound back into the home folder: its place, the file or folder shown there,
    whether it is writable; what of a home folder that lies in the workspace is hidden: each
    dot entry at its top but one the allow-list names whole, and the folder above one it names
    deeper, which is bound back after it). git's settings show as their `git_copies`."""
    wanted = [(name, False) for name in (*HOME_SHOWN, *settings.home)] + [(n, True) for n in settings.home_writable]
    if not _home_apart(home, root) and not _inside(home, root):
        return (), ()
    shown = []
    for name, writable in wanted:
        place = os.path.join(home, name)
        real = os.path.realpath(place)
        # Read-only, a link may lead where it is shown from; writable, never through a link; and
        # never from the workspace, where a process of the sandbox could swap it.
        if not os.path.exists(place) or (writable and real != place) or (real != place and _inside(real, root)):
            continue
        shown.append((place, real, writable))
        shown += [(file, copy, False) for file, copy in git_copies.items() if _inside(file, place)]
    if _home_apart(home, root):
        return tuple(dict.fromkeys(shown)), ()
    whole = {name for name, _ in wanted if "/" not in name}
    try:
        dots = [name for name in os.listdir(home) if name.startswith(".") and name not in whole]
    except OSError:
        dots = []
    return tuple(dict.fromkeys(shown)), tuple(sorted(os.path.join(home, name) for name in dots if name != STATE_DIR))


# git's settings the sandbox shows (`HOME_SHOWN`), as copies without what may carry a credential:
# a token in `url.<base>.insteadOf`, an `http.extraHeader`, an inline credential helper.
_GIT_SETTINGS = (".gitconfig", ".config/git/config")
_GIT_SECRET_SECTIONS = frozenset({"credential", "http", "include", "includeif"})
_GIT_SECRET_WORD = re.compile(r"token|pass|secret|header|cookie|auth|key", re.IGNORECASE)
_USERINFO = re.compile(r"://[^/\s]*@")


def git_settings(home: str) -> tuple[tuple[str, str], ...]:
    """(the place of each of git's settings files in the home folder, its copy to show)."""
    found = []
    for name in _GIT_SETTINGS:
        place = os.path.join(home, name)
        try:
            info = os.stat(place)
        except OSError:
            continue
        content = _git_copy(os.path.realpath(place), (info.st_ino, info.st_mtime_ns, info.st_size))
        found.append((place, _kept(content)))
    return tuple(found)


@functools.lru_cache(maxsize=8)
def _git_copy(path: str, identity: tuple) -> bytes:
    """The git config file `path` (as it is at `identity`) with every entry that may carry a
    credential left out: the sections `credential`, `http`
    (`extraHeader`), `include` and `includeIf` (a hidden file's entries would come in), a key
    named like one (`github.token`), and a URL with a user in it (`url.https://TOKEN@host/`). git
    reads it (so its syntax is git's); where it cannot, the copy is empty."""
    import subprocess

    try:
        # From `/`: git looks for a repository where it starts, and the workspace's is no business of this.
        listed = subprocess.run(["git", "config", "--file", path, "--list", "-z"], capture_output=True, cwd="/",
                                timeout=10, stdin=subprocess.DEVNULL, env={"PATH": os.environ.get("PATH", os.defpath)})
        entries = listed.stdout.decode("utf-8", "replace").split("\0") if listed.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        entries = []
    lines = []
    for entry in entries:
        key, _, value = entry.partition("\n")
        section, _, rest = key.partition(".")
        subsection, _, name = rest.rpartition(".")
        if not name or section in _GIT_SECRET_SECTIONS or _GIT_SECRET_WORD.search(name) or _USERINFO.search(entry):
            continue
        head = f'[{section} "{_git_quoted(subsection)}"]' if subsection else f"[{section}]"
        lines += [head, f'\t{name} = "{_git_quoted(value)}"' if "\n" in entry else f"\t{name}"]
    return "".join(line + "\n" for line in lines).encode()


def _kept(content: bytes) -> str:
    """A file holding `content`, named by it in a private folder of this process (made again if
    something removed it: a sandbox whose source is gone does not start)."""
    import hashlib

    folder = _git_copies_folder()
    path = os.path.join(folder, f"gitconfig-{hashlib.sha256(content).hexdigest()[:32]}")
    if not os.path.isfile(path):
        if not os.path.isdir(folder):
            _git_copies_folder.cache_clear()
            folder = _git_copies_folder()
            path = os.path.join(folder, os.path.basename(path))
        fd, part = tempfile.mkstemp(dir=folder, prefix=".part-")
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        os.replace(part, path)
    return path


def _git_quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")


@functools.lru_cache(maxsize=1)
def _git_copies_folder() -> str:
    """Where the copies are kept: this user's private folder (0700) in /tmp, shared by its
    processes (the copies are named by their content: a killed kernel leaves none of its own),
    which every sandbox shows empty, and never in the workspace (a home folder's `.cache` may be,
    where a new folder would be taken for the cell's). One that is not this user's own, private
    folder (another user made the name first) is not used: a folder of this process's is."""
    import stat

    folder = os.path.join(tempfile.gettempdir(), f"toolkernel-gitconfig-{os.getuid()}")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return tempfile.mkdtemp(prefix="toolkernel-gitconfig-")
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        return tempfile.mkdtemp(prefix="toolkernel-gitconfig-")
    return folder


def _host_sockets() -> tuple[str, ...]:
    """Every Unix socket bound to a path on this machine (`/proc/net/unix` of the kernel's
    network namespace), where the sandbox could connect to it by its path: a docker daemon's, an
    ssh or password agent's. The caller hides those in sight."""
    try:
        with open("/proc/net/unix", "rb") as table:
            listed = table.read()
    except OSError:
        return ()
    found = set()
    at = listed.find(b" /")  # most lines name no path: passed over without a split
    while at != -1:
        end = listed.find(b"\n", at)
        end = len(listed) if end == -1 else end
        fields = listed[listed.rfind(b"\n", 0, at) + 1:end].split(None, 7)
        if len(fields) == 8 and fields[7].startswith(b"/"):
            found.add(os.fsdecode(fields[7]))
        at = listed.find(b" /", end)
    return tuple(sorted(found))


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


def _worktrees(repositories) -> list[Path]:
    """The work trees of the repositories below the top (a bare one has none)."""
    return [Path(git).parent for git in repositories if Path(git).name == GIT]


def _shadowing(folder: str, at: str | None = None) -> list[str]:
    """The entries of `folder` (the workspace's top, a folder Python imports from in it, or a
    repository's top: `at` the workspace's, whose installed modules count there) whose names make
    them modules that shadow installed ones."""
    found = installed(at or folder)
    try:
        entries = list(os.scandir(folder))
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


def doctor(workdir: Path, environ: Mapping[str, str] | None = None) -> str:
    """`toolkernel doctor`: which OS sandbox holds an agent's host code here, and what it shows,
    hides, passes and reaches."""
    from .._sandbox import mechanism
    from .._approval._protected import mount_plan

    environ = os.environ if environ is None else environ
    found = mechanism()
    head = f"OS sandbox for an agent's host code: {found.name} ({found.detail})"
    if not found.available:
        return "\n".join([head, "  none here: every %%bash cell an agent sends and every command tool an agent's",
                          "  run calls asks a person, whatever the Bash(...) and allow rules say"])
    settings, problem = _settings(workdir, environ)
    plan = sandbox_plan(mount_plan(Path(workdir)), settings, environ=environ, for_a_run=False)
    root = plan.writable[0]
    inside = [os.path.relpath(p, root) for p in plan.read_only if os.path.lexists(p)]
    passed = sorted(name for name in plan.environment(environ) if name in environ)
    withheld = sorted(set(environ) - set(passed))
    git = "" if os.path.lexists(Path(root, GIT)) else ", and an empty read-only .git in place of the missing one"
    lines = [
        head,
        *([f"  ({problem}: the defaults below)"] if problem else []),
        "  runs: %%bash cells an agent sends, and command tools an agent's run calls",
        f"  writable: {root} (the workspace); everything else read-only, /tmp, /run and /var/run private",
        f"  read-only in the workspace: {', '.join(inside) or '(nothing there yet)'}{git}",
        f"  hidden (shown empty): {', '.join(p for p in plan.hidden if os.path.lexists(p)) or '(none present)'}",
    ]
    if found.name == "bubblewrap":
        home = os.path.realpath(environ.get("HOME") or Path.home())
        shown = [f"{os.path.relpath(p, home)}{' (writable)' if w else ''}" for p, source, w in plan.home_shown
                 if not os.path.basename(source).startswith("gitconfig-")]
        lines += [f"  home folder: {'empty' if plan.home else 'the workspace, its dot entries hidden'} but"
                  f" {', '.join(dict.fromkeys(shown)) or 'nothing'} ([sandbox] home, home_writable add); git's"
                  " settings without what may carry a credential",
                  f"  host sockets in sight: hidden ({sum(1 for p in plan.hidden if _is_socket(p))});"
                  " only the `tools` channel and a grant's proxy are reached",
                  f"  network: off; a [policy] network grant reaches {', '.join(plan.domains)} through the proxy"
                  " ([sandbox] domains), never loopback or private addresses"]
    else:
        lines += landlock_lines()
    lines += ["  system calls refused: the kernel's keyrings (keyctl, add_key, request_key), typing into a terminal"
              " (TIOCSTI, TIOCLINUX)"]
    lines += [f"  environment passed: {', '.join(passed) or '(none)'} ([sandbox] env adds)",
              f"  environment withheld: {', '.join(withheld) or '(none)'}"]
    return "\n".join(lines)


def _settings(workdir: Path, environ: Mapping[str, str]) -> tuple[SandboxSettings, str]:
    from .._config._config import load_config
    from .._errors import ConfigError

    try:
        return load_config(Path(workdir), environ=environ).sandbox, ""
    except ConfigError as exc:
        return SandboxSettings(), f"the config has a problem ({str(exc).splitlines()[0]})"


def _is_socket(path: str) -> bool:
    import stat

    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def landlock_lines() -> list[str]:
    """What the Landlock fallback holds on this machine (`_landlock_exec.holds`)."""
    from .._landlock_exec import holds

    return [f"  landlock: {line}" for line in holds()]


def run_watch(workdir: Path, protection: Protection | None, cancel=lambda: None,
              environ: Mapping[str, str] | None = None, journal=lambda: None) -> "Watch":
    """The watch of a sandboxed run (`_shadows.Watch`): the top, the folders Python imports
    from in the workspace, every protected path that is not there yet (but what a tool call of
    the run wrote, which a person allowed: `journal()` is the run's, which knows) and a new
    `.git` anywhere below the top."""
    from ._shadows import Watch

    environ = os.environ if environ is None else environ
    root = str(workdir)
    programs, imports = _searched(root, tuple(sys.path), environ.get("PATH", ""), environ.get("PYTHONPATH", ""))
    guarded: list[str] = list(programs)
    skip: tuple[str, ...] = ()
    held: list[str] = []
    worktrees: list[str] = []
    if protection is not None:
        repositories = _repositories(protection)
        held = [str(path) for path in _inner_git(protection.workdir, repositories)]
        worktrees = [str(folder) for folder in _worktrees(repositories)]
        guarded += [*map(str, protection.protected), *held]
        skip = tuple(str(path) for path in _walk_skips(protection))

    def by_a_call(path: str) -> bool:
        kept = journal()
        return kept is not None and kept.written_by_a_call(path)

    home = _own_tops(root, environ) if os.path.realpath(environ.get("HOME") or Path.home()) == root else None
    return Watch(root, cancel, folders=imports, guarded=dict.fromkeys(guarded), deep=skip, by_a_call=by_a_call,
                 held=held, home=home, worktrees=worktrees)


def _own_tops(root: str, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The entries at the top of `root` that hold toolkernel's own cache and state folders
    (`.cache`, `.local`), which it may make while a run goes on."""
    from .._config._places import cache_folder, state_folder

    places = [os.path.realpath(folder(environ)) for folder in (cache_folder, state_folder)]
    return tuple(os.path.relpath(place, root).split(os.sep)[0] for place in places
                 if place != root and _inside(place, root))


def _walk_skips(protection: Protection) -> list[Path]:
    """The folders a walk for repositories passes by: read-only already (the guard's mounts,
    whose walk skips the same, so the walk's kept listings serve both) and the state folder."""
    return [*(mount.path for mount in protection.mounts), protection.workdir / STATE_DIR]


def _repositories(protection: Protection) -> list[Path]:
    return found_in(protection.workdir, _walk_skips(protection))[1]
