"""What no script and no unasked tool call may write: whatever decides policy or runs on the host.

Protected are: `toolkernel.toml` and `.mcp.json` (by name, anywhere, for tool
calls; in the sandbox, at the top of the workspace),
`.toolkernel/`, `.git/` (its config and hooks run on the host the next time git
does) and what its hooks run in the work tree (`_git.py`), the editors' folders at the top and
beside every repository's `.git` (`EDITOR_CONFIG`: VS Code runs a task of `.vscode/tasks.json`
as the folder opens, and its settings name the programs its terminals start), the user config folder, the admin
file and the trust records when they lie in the workspace, in a workspace that is the home folder every dot entry at its
top (shell, IPython, ssh and git config), and every workspace file a configured
server, hook or command tool executes (named in its `command` or `args`, or a place its PATH
lookup tries before it finds the program, even an empty one; for Node and its package
runners also `node_modules`, `package.json` and `.npmrc` where they look, for uv its
`.venv` and settings; the venv or `node_modules` a program lies in), and the same for each project inside the workspace whose config the
person trusted (its config files, its `.toolkernel/`, what it executes).

Tool calls that would write a protected path ask a person (`touches_protected`, used by the
dispatcher for every call). In the sandbox the plan's read-only mounts refuse those writes up
front (`mount_plan` here, laid by `_runners/_guard.py`); where protection cannot be set up (a
protected folder is a symlink, for instance), `mount_plan` raises `Unprotectable` and the
script does not run.
"""

from __future__ import annotations

import os
import site
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .._errors import ConfigError
from .._tool import Tool
from .._providers._tools._paths import is_inside, real_path, real_paths
from .._config._trust import store_path
from ._git import GIT, hook_places, in_inner_hooks
from .._pycode import imported_places

STATE_DIR = ".toolkernel"
CONFIG_FILES = ("toolkernel.toml", ".mcp.json")
# Editors' project config that runs programs on the host when the folder is opened: VS Code's
# tasks (`"runOn": "folderOpen"`) and settings (a terminal's shell and its environment), JetBrains'
# startup tasks. A person opens the workspace, or a repository in it.
EDITOR_CONFIG = (".vscode", ".idea")


class Unprotectable(ConfigError):
    """A path that must be protected cannot be: the script is not run."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(str(path), None, f"{problem}; scripts do not run until this is fixed")


@dataclass(frozen=True)
class Mount:
    """One read-only mount over the workspace: the host folder itself (`real`),
    or an empty stand-in that hides a protected file (one that exists)."""

    path: Path
    real: bool


@dataclass(frozen=True)
class Protection:
    workdir: Path                 # the real path of the workspace
    protected: tuple[Path, ...]   # real paths no script or unasked tool call may write
    mounts: tuple[Mount, ...]

    def covers(self, path: str | Path) -> bool:
        """Whether writing `path` (a real path) would change something protected: a `.git`
        anywhere too (an inner repository's: git runs what it says there)."""
        if os.path.basename(path) in CONFIG_FILES or GIT in os.fspath(path).split(os.sep):
            return True
        if any(is_inside(path, p) for p in (*self.protected, *_inner_hook_places(self.workdir, self.protected))):
            return True
        return in_inner_hooks(os.fspath(path), self.workdir)


def protection(workdir: Path, config: Any = None, environ: Mapping[str, str] | None = None,
               looked_at: list[str] | None = None) -> Protection:
    """What to protect in `workdir` for a run under `config` (a `Config`). `looked_at` collects
    every path whose state on disk the answer depends on (see _guard_cache)."""
    environ = os.environ if environ is None else environ
    looked_at = [] if looked_at is None else looked_at
    root = _real(Path(workdir), looked_at)
    paths = [root / STATE_DIR, *(root / name for name in (*CONFIG_FILES, *EDITOR_CONFIG)), root / ".git"]
    paths += [_user_config_dir(environ), store_path(environ).parent, _admin_file(environ)]
    paths += _home_dotfiles(root, environ, looked_at)
    paths += _own_code(root)
    paths += hook_places(root, looked_at)
    if config is not None:
        paths += executed_files(_commands(config, environ, root), looked_at=looked_at)
    paths += _inner_projects(root, environ, looked_at)
    reals = {_real(p, looked_at) for p in paths}
    inside = sorted(p for p in reals if p != root and is_inside(p, root))
    return Protection(root, tuple(inside), ())


def _home_dotfiles(root: Path, environ: Mapping[str, str], looked_at: list[str]) -> list[Path]:
    """In a workspace that is the home folder, every entry at its top whose name starts with a
    dot: shells, IPython, git and ssh read their config there and run what it says on the host;
    and `bin`, which Debian's stock `.profile` puts first on a login shell's PATH."""
    if root != _real(Path(environ.get("HOME") or Path.home()), looked_at):
        return []
    try:
        present = [name for name in os.listdir(root) if name.startswith(".")]
    except OSError:
        present = []
    # The usual ones even before they exist (a plan is kept while no path it names moves).
    return [root / name for name in sorted({*present, *_HOME_CONFIG, "bin"})]


def _inner_projects(root: Path, environ: Mapping[str, str], looked_at: list[str]) -> list[Path]:
    """What decides the policy of a project inside the workspace whose config the person
    trusted, or runs on the host for it: its config files, its `.toolkernel/` (lasting
    approvals, the answers a `serve` there waits for) and what its config executes. A notebook
    in that folder runs its kernel there, under that config; a script of this workspace that
    rewrote its hook, or answered its waiting call, acted for it. (`TOOLKERNEL_TRUST_ALL` trusts
    folders no record names: nothing can be found for it here.)"""
    from .._config._config import load_config
    from .._config._trust import TrustStore

    store = TrustStore(environ=environ)
    looked_at.append(str(store.path))
    try:
        folders = store.folders()
    except ConfigError:
        return []  # a broken store trusts nothing, so no inner config counts
    found: list[Path] = []
    for inner in map(Path, folders):
        if inner == root or not is_inside(inner, root):
            continue
        found += [inner / STATE_DIR, *(inner / name for name in CONFIG_FILES)]
        try:
            config = load_config(inner, environ=environ)
        except ConfigError:
            continue  # a config with a problem starts nothing
        found += executed_files(_commands(config, environ, inner), looked_at=looked_at)
    return found


def _own_code(root: Path) -> list[Path]:
    """What this Python runs without being asked: a kernel's start (`python -m
    ipykernel_launcher`, then `%load_ext toolkernel`, each looking in the working directory
    first: what a script left there under those names ran at the next start), and the
    interpreter's installed packages when they lie in the workspace (a project's `.venv`),
    from which toolkernel imports lazily."""
    own = [root / name for name in ("toolkernel", "toolkernel.py", "ipykernel_launcher", "ipykernel_launcher.py")]
    installed = {sys.prefix, sys.exec_prefix, *site.getsitepackages(), site.getusersitepackages()}
    return own + [Path(folder) for folder in sorted(installed) if folder]


_HOME_CONFIG = (".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc", ".zshenv",
                ".zprofile", ".zlogin", ".config", ".local", ".ssh", ".ipython", ".jupyter", ".gitconfig",
                ".pythonstartup", ".inputrc")


def _real(path: Path, looked_at: list[str]) -> Path:
    looked_at.append(str(path))
    return real_path(path)


def mount_plan(workdir: Path, config: Any = None, environ: Mapping[str, str] | None = None,
               looked_at: list[str] | None = None) -> Protection:
    """`protection` plus the read-only mounts that enforce it; raises `Unprotectable`. A
    protected name that does not exist gets no mount: a mount would show it (`ls -a` listed a
    `toolkernel.py/` that is nowhere), so what a run makes there is moved aside as it ends
    (`_runners/_shadows.Watch`) and a new config file is never trusted."""
    found = protection(workdir, config, environ, looked_at)
    make_state_dir(found.workdir / STATE_DIR)
    tops: dict[Path, Mount] = {}
    for path in found.protected:
        top = found.workdir / path.relative_to(found.workdir).parts[0]
        mount = _mount_for(top, path)
        if mount is not None:
            tops[top] = mount
    return Protection(found.workdir, found.protected, tuple(tops.values()))


def _mount_for(top: Path, path: Path) -> Mount | None:
    if top.is_symlink():
        raise Unprotectable(top, f"is a symlink, so {path} cannot be protected through it;"
                            " replace it by the folder or file itself")
    if top.is_dir():
        return Mount(top, real=True)
    if top.exists():
        return Mount(top, real=False)  # a file: Bashkit mounts only folders, so a stand-in covers it
    return None


def make_state_dir(state: Path) -> None:
    """Make the state folder, private; raises `Unprotectable` where a link or a file holds its name."""
    if os.path.lexists(state) and (state.is_symlink() or not state.is_dir()):
        raise Unprotectable(state, "is not a folder (a script may have put it there);"
                            " remove it, toolkernel creates the folder itself")
    try:
        state.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        pass  # a folder we may not write to: a stand-in covers the name (scripts run as we do)


def _user_config_dir(environ: Mapping[str, str]) -> Path:
    home = Path(environ.get("HOME") or Path.home())
    return Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "toolkernel"


def _admin_file(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("TOOLKERNEL_ADMIN_CONFIG") or "/etc/toolkernel/toolkernel.toml")


def _commands(config: Any, environ: Mapping[str, str],
              root: Path) -> Iterable[tuple[Sequence[str], Path, str | None, str | None]]:
    """(argv, working folder, PATH, PYTHONPATH) of every configured server, hook and command
    tool: what the host will execute, where, the PATH its program is looked up on (None: none
    is given) and the PYTHONPATH a Python program imports from first."""
    kernel_path = environ.get("PATH")
    for server in config.servers.values():
        if not server.command:
            continue
        # The SDK's environment (the kernel's PATH) with the config's env over it. Without a
        # `cwd` it starts where the kernel is now, which need not be the workspace (`%cd`).
        path = server.env.get("PATH", kernel_path)
        for cwd in dict.fromkeys([Path(server.cwd)] if server.cwd else [root, _here()]):
            yield (server.command, *server.args), cwd, path, server.env.get("PYTHONPATH")
    for hook in config.hooks:
        yield hook.command, Path(hook.cwd), kernel_path, None  # hooks get the kernel's PATH alone
    for tool in getattr(config, "commands", {}).values():
        # A word filled from the input names no file now; the fixed words may (`./run.sh`).
        # Started in the workspace, or in its `cwd` there; an `env` allow-list is all it sees.
        cwd = root / Path(tool.cwd).expanduser() if tool.cwd else root
        env = environ if tool.env is None else tool.env
        yield tuple(word for word in tool.command if "{{" not in word), cwd, env.get("PATH"), env.get("PYTHONPATH")


def _here() -> Path:
    try:
        return Path(os.getcwd())
    except OSError:  # the kernel's folder is gone: nothing can start there
        return Path("/")


def executed_files(commands: Iterable[tuple[Sequence[str], Path, str | None, str | None]],
                   looked_at: list[str] | None = None) -> list[Path]:
    """Files that running `commands` would execute or read as code: each place the lookup of
    the program on its PATH tries before it finds one, every argument that names a file,
    or a path that does not exist yet (a script must not be the one to create it), and what a
    Python program imports from its PYTHONPATH or runs with `-m` (_pycode.py)."""
    looked_at = [] if looked_at is None else looked_at
    found: list[Path] = []
    for argv, base, path, pythonpath in commands:
        if not argv:
            continue
        found += [_real(place, looked_at) for place in imported_places(argv, base, pythonpath, looked_at)]
        programs = _lookup(argv[0], path, base, looked_at) if "/" not in argv[0] else []
        found += [_real(program, looked_at) for program in programs]
        found += _environment(programs[-1] if programs else base / argv[0], looked_at)
        for word in argv:
            looked_at.append(str(base / word))
            if "/" in word or os.path.lexists(base / word):
                found.append(_real(base / word, looked_at))
        looked_up = _LOOKED_UP.get(os.path.basename(argv[0]), ())
        found += [_real(folder / name, looked_at) for folder in (base, *base.parents) for name in looked_up]
    return found


def _environment(program: Path, looked_at: list[str]) -> list[Path]:
    """The environment a program runs from, by where it lies (links not followed: a venv's
    `bin/python` is a link to the base interpreter): the venv or conda environment above it
    (`pyvenv.cfg`, `conda-meta/`), whose site-packages it imports and whose `.pth` files run at
    its start, and the `node_modules` folder it lies in, whose packages it requires."""
    found = []
    for folder in Path(os.path.abspath(program)).parents:
        looked_at += [str(folder / "pyvenv.cfg"), str(folder / "conda-meta")]
        if (folder.name == "node_modules" or os.path.isfile(folder / "pyvenv.cfg")
                or os.path.isdir(folder / "conda-meta")):
            found.append(_real(folder, looked_at))
    return found


# Programs that run code they look up in their working directory and every folder above it.
# Node's package runners: `npx -y pkg` runs the bin of a `node_modules/pkg` it finds there (or
# of the project itself, named in package.json) before fetching anything, and npm reads
# `.npmrc`, whose `node-options` loads any file; a script that wrote them ran code on the host.
# uv: `uv run` runs in the project's `.venv`, and its settings (`pyproject.toml`, `uv.toml`)
# say where packages come from.
_NODE_FILES = ("node_modules", "package.json", ".npmrc")
_UV_FILES = (".venv", "pyproject.toml", "uv.toml", "uv.lock")
_LOOKED_UP = {**dict.fromkeys(("node", "nodejs", "npx", "npm", "pnpm", "pnpx", "yarn", "bun", "bunx"), _NODE_FILES),
              **dict.fromkeys(("uv", "uvx"), _UV_FILES)}


def _lookup(program: str, path: str | None, base: Path, looked_at: list[str]) -> list[Path]:
    """Every place the start of a bare `program` tries, in order, up to the first that holds
    an executable file (all of them when none does): a script that made one of them first
    would be the program. A relative folder of the PATH, and an empty one (the program's own
    folder), lead from `base`, where the child looks them up (it starts there)."""
    tried = []
    for folder in (path if path is not None else os.defpath).split(os.pathsep):
        place = base / (folder or ".") / program
        looked_at.append(str(place))
        tried.append(place)
        if place.is_file() and os.access(place, os.X_OK):
            break
    return tried


def touches_protected(tool: Tool, arguments: Mapping[str, Any], workdir: Path,
                      guarded: Protection | None = None, paths: Mapping[str, str | Path] | None = None) -> bool:
    """True when a call that may write names a protected path (`paths`: the call's
    `real_paths`, when the caller has them)."""
    if tool.read_only or not tool.path_keys:
        return False
    guarded = guarded or protection(workdir)
    paths = real_paths(tool, arguments, workdir) if paths is None else paths
    return any(guarded.covers(path) for path in paths.values())


# What the inner repositories' hooks run, by workspace (its real path), as the last run found
# it laying its mounts: a write's check looks here, where reading every repository's config and
# hooks again made a write-file call 4x dearer beside 30 repositories. A repository's hooks may
# run a folder of the workspace outside it (`hooksPath = ../../shared-hooks`), which the walk
# up from the written path (`in_inner_hooks`, for a repository cloned since) cannot find.
_inner_hooks: dict[str, tuple[Path, ...]] = {}


def _inner_hook_places(root: Path, skip: Iterable[Path]) -> tuple[Path, ...]:
    """`_inner_hooks` of `root`; where no run has walked it yet (a direct call, `serve`), walked now."""
    kept = _inner_hooks.get(str(root))
    if kept is None:
        from ._links import found_in

        kept = _inner_hooks[str(root)] = tuple(_inner_git(root, found_in(root, skip)[1]))
    return kept


def _inner_git(root: Path, repositories: list[Path]) -> list[Path]:
    """Each inner repository's `.git` (a folder, or a file naming the gitdir), and the folder
    what its hooks run in its work tree, as the top's are protected (`_git.hook_places`); a
    bare repository's folder whole (its config and hooks are in it)."""
    found = []
    for git in repositories:
        found.append(git)
        if git.name != GIT:
            continue
        found += [git.parent / name for name in EDITOR_CONFIG]
        hooks = [real_path(folder) for folder in hook_places(git.parent, [])]
        found += [_mountable(folder) for folder in hooks if folder != root and is_inside(folder, root) and folder != git]
    return found


def _mountable(path: Path) -> Path:
    """`path`, or where it does not exist yet, its first folder missing: each folder above a
    mount is mounted itself (`mount_links`), which needs it there (Bashkit's run failed to
    start), and what the stand-in hides cannot be made."""
    while not os.path.lexists(path.parent):
        path = path.parent
    return path
