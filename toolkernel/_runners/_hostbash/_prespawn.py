"""A sandbox made ahead of need for an agent's next `%%bash` cell.

Starting bubblewrap (namespaces, mounts, a process table) costs several times what bash's
own start does, and an agent's cell paid it each time. So once a sandboxed cell ends, one
sandbox is made in the background for the next: `bwrap` with the plan that cell ran under,
holding a small bash loader that waits on its stdin (a pipe only the kernel holds). It is made
after the cell, not while it runs, and `_SETTLE` later, once the kernel has replied: its making
takes CPU (and this process's own) that the cell and the reply would share on a busy machine.
It is offered to a cell only once its loader runs (bwrap has laid every mount by then) and its
mount table holds the plan: bwrap names its process before that process has made its mounts.

A cell takes it only if it was made for exactly the sandbox the cell would get now: the same
wrapped command line (every mount and the network, as `_sandbox.wrap` makes it from the plan
and what exists), the same working folder, the same file or folder at every mounted place
(device and inode: a protected folder renamed and made anew is not left writable under a
stale mount), and every read-only and hiding mount still in the sandbox's own mount table
(Linux takes a mount away in every other namespace when its file is renamed over on the host,
and a new file can get the old inode): a table just as it was when it was checked against this
plan holds, any other is checked again. Anything else ends it and the cell starts a sandbox of
its own (fail closed).
Each is used once, so each cell still has a fresh private /tmp and process table.

What waits holds nothing of a run's: its command line is the plan's and the loader's, its
environment PATH alone. When a cell takes it, the kernel writes a file with the script's path,
its output FIFOs and the run's environment (no secret in it), and sends the file's name and
the run's secret down the pipe; the loader makes stdin /dev/null and execs `bash SCRIPT` with
exactly that environment (`_LOADER`), as a sandbox started for the cell would. A cell
cannot reach one that waits: every sandbox has a process table of its own, and the pipe's
other end is in no child (`close_fds`). Only bubblewrap is prepared ahead (Landlock has no
start to save).
"""

from __future__ import annotations

import functools
import json
import os
import queue
import re
import secrets
import select
import shutil
import signal
import stat
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from ..._sandbox import Plan, mechanism, wrap
from ..._seccomp import program_file

# First says it is running (one byte on stdout: bwrap has laid every mount and the filter by
# then). Then reads NUL-ended fields from stdin: the name of the run's file in the channel's
# folder ($1), then the private variables (bash reads a pipe byte by byte, so the rest comes in
# that file, read whole: how to pass the environment, the script, the two output FIFOs and the
# environment). The cell's bash gets exactly that environment: from `env -i` (`$0`), or where
# every name is a plain one (`_plain`), from the loader itself, which then stops exporting what it
# exports (it starts with PATH alone, and bash adds PWD and SHLVL; named, not listed by `compgen`,
# whose `$(...)` would cost a fork) and exports those: one program less to start. Exit 125: told
# nothing (ended unused).
_LOADER = ("printf r || exit 125\n"
           "IFS= read -r -d '' name || exit 125\n"
           "private=(); while IFS= read -r -d '' entry; do private+=(\"$entry\"); done\n"
           "mapfile -d '' -t run < \"$1/run-$name\" && (( ${#run[@]} >= 4 )) || exit 125\n"
           "exec </dev/null >\"${run[2]}\" 2>\"${run[3]}\" || exit 125\n"
           "printf '\\0'; printf '\\0' >&2\n"  # opened: the kernel takes the FIFOs' names away
           "script=${run[1]}\n"
           "if [[ ${run[0]} == plain ]] && export -n PATH PWD SHLVL OLDPWD && export -- \"${run[@]:4}\" \"${private[@]}\"; then\n"
           "  exec bash \"$script\"\n"
           "fi\n"
           "exec \"$0\" -i -- \"${run[@]:4}\" \"${private[@]}\" bash \"$script\"\n")
# Names the loader may export itself: upper case (the loader's own variables are lower case), none
# that bash sets, computes or reads as it runs (`BASH*`, `SHELLOPTS`, `RANDOM`, `IFS`, ...).
_PLAIN_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_BASHS_OWN = frozenset({
    "BASHOPTS", "BASHPID", "CDPATH", "COLUMNS", "COMP_CWORD", "COMP_KEY", "COMP_LINE", "COMP_POINT", "COMP_TYPE",
    "COMP_WORDBREAKS", "COMP_WORDS", "COMPREPLY", "DIRSTACK", "ENV", "EPOCHREALTIME", "EPOCHSECONDS", "EUID",
    "EXECIGNORE", "FCEDIT", "FIGNORE", "FUNCNAME", "FUNCNEST", "GLOBIGNORE", "GLOBSORT", "GROUPS", "HISTCMD",
    "HISTCONTROL", "HISTFILE", "HISTFILESIZE", "HISTIGNORE", "HISTSIZE", "HISTTIMEFORMAT", "HOSTFILE", "HOSTNAME",
    "HOSTTYPE", "IFS", "IGNOREEOF", "INPUTRC", "LINENO", "LINES", "MACHTYPE", "MAIL", "MAILCHECK", "MAILPATH",
    "MAPFILE", "OLDPWD", "OPTARG", "OPTERR", "OPTIND", "OSTYPE", "PIPESTATUS", "POSIXLY_CORRECT", "PPID",
    "PROMPT_COMMAND", "PROMPT_DIRTRIM", "PS0", "PS1", "PS2", "PS3", "PS4", "PWD", "RANDOM", "READLINE_ARGUMENT",
    "READLINE_LINE", "READLINE_MARK", "READLINE_POINT", "REPLY", "SECONDS", "SHELL", "SHELLOPTS", "SHLVL",
    "SRANDOM", "TIMEFORMAT", "TMOUT", "TMPDIR", "UID", "_"})


def _plain(names) -> bool:
    return all(_PLAIN_NAME.fullmatch(name) and not name.startswith("BASH") and name not in _BASHS_OWN
               for name in names)


_NOT_OPENED_POLL = 0.2  # seconds between looks at whether a sandbox ended before the cell's output began
_MAKING = 5.0  # seconds a cell waits for the one being made before it makes its own
# Seconds a wanted sandbox waits before it is made, unless a cell wants it now: the cell that
# asked for it has ended, and the kernel is sending its reply, which the making (Popen, the
# command line, the checks: this process's own CPU, and bwrap's) would slow by 2-3 ms on a busy
# machine. An agent's next cell comes long after; one right after the last hurries it, and
# while cells come that fast (the last one came before its sandbox was ready) none waits.
_SETTLE = 0.05
_INFO_TIMEOUT = 30.0  # seconds bwrap may take to say its sandbox's process is made, and is running


@dataclass
class _Waiting:
    key: tuple
    proc: subprocess.Popen
    child: int  # the process inside (bwrap's `--info-fd`): its mount table is the sandbox's
    table: bytes = b""  # that mount table as it was checked against the plan, once it was running


class Prespawned:
    """At most one sandbox waiting for the next cell of one channel; made on a thread of its own."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder  # where a run's file is written (the channel's, 0700)
        self._lock = threading.Lock()
        self._made = threading.Condition(self._lock)  # notified when a wanted one is made (or not)
        self._pending = 0  # wanted, not made yet
        self._waiting: _Waiting | None = None
        self._wanted: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._hurry = threading.Event()  # a cell waits for the one wanted: no `_SETTLE`
        self._behind = False  # the last cell came before its sandbox was ready
        self.made = 0  # sandboxes made ahead, and taken by a cell (tests, the bench)
        self.taken = 0

    def prepare(self, plan: Plan, workdir: Path) -> None:
        """Make one for a cell with this plan and folder (in the background; any other is ended)."""
        if mechanism().name != "bubblewrap":
            return
        with self._lock:
            if self._closed:
                return
            if self._thread is None:
                # One thread for its whole life: bwrap's --die-with-parent watches the thread
                # that started it, so a sandbox made on a thread that ends would die with it.
                self._thread = threading.Thread(target=self._make_wanted, name="toolkernel-sandbox-ahead",
                                                daemon=True)
                self._thread.start()
            self._pending += 1
        self._wanted.put((plan, workdir))

    def take(self, plan: Plan, workdir: Path, script: Path, env: Mapping[str, str],
             private: frozenset[str]) -> _Taken | None:
        """The waiting sandbox, told to run `bash script` with `env`, if it was made for exactly
        this; else None (and it is ended). The `private` variables (the run's secret) are sent
        down the pipe, never written to the file (other cells of the channel can read its folder)."""
        with self._lock:
            # One being made (a cell right after the last) is nearer ready than one started now.
            self._behind = self._waiting is None and self._pending > 0
            if self._behind:
                self._hurry.set()
            self._made.wait_for(lambda: self._waiting is not None or not self._pending, timeout=_MAKING)
            waiting, self._waiting = self._waiting, None
        if waiting is None:
            return None
        if mechanism().name != "bubblewrap" or waiting.proc.poll() is not None or waiting.key != _key(plan, workdir) \
                or not _mounts_still_hold(waiting, plan):
            self._end(waiting)
            return None
        taken = _Taken.made_in(self.folder, waiting.proc)
        try:
            fields = [b"plain\0" if _plain(env) else b"env\0"]
            fields += [os.fsencode(path) + b"\0" for path in (script, *taken.fifos)]
            with os.fdopen(os.open(taken.run_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(b"".join([*fields, *(_entry(name, value) for name, value in env.items() if name not in private)]))
            told = [os.fsencode(taken.run_file.name.removeprefix("run-")) + b"\0"]
            told += [_entry(name, value) for name, value in env.items() if name in private]
            waiting.proc.stdin.write(b"".join(told))
            waiting.proc.stdin.close()
        except OSError:  # it died since: a sandbox of the cell's own
            taken.close()
            self._end(waiting)
            return None
        self.taken += 1
        return taken

    def ready(self, timeout: float = _MAKING) -> subprocess.Popen | None:
        """The sandbox waiting now, once none is being made (for tests)."""
        with self._lock:
            self._made.wait_for(lambda: not self._pending, timeout=timeout)
            return None if self._waiting is None else self._waiting.proc

    def close(self) -> None:
        with self._lock:
            self._closed = True
            waiting, self._waiting = self._waiting, None
        self._hurry.set()
        self._wanted.put(None)
        if waiting is not None:
            self._end(waiting)

    def _make_wanted(self) -> None:
        while True:
            wanted, skipped = self._wanted.get(), 0
            while wanted is not None and not self._wanted.empty():  # only the latest counts
                wanted, skipped = self._wanted.get(), skipped + 1
            if wanted is None:
                return
            if not self._behind:
                self._hurry.wait(_SETTLE)
            self._hurry.clear()
            made = self._make(*wanted)
            with self._lock:
                old, self._waiting = self._waiting, made
                if self._closed:
                    old, self._waiting = made, None
                self._pending -= 1 + skipped
                self._made.notify_all()
            if old is not None:
                self._end(old)

    def _make(self, plan: Plan, workdir: Path) -> _Waiting | None:
        # The key is taken before bwrap mounts anything: whatever moves after it, the key
        # taken when a cell comes differs, and this one is not used.
        key = _key(plan, workdir)
        info, info_w = os.pipe()
        calls = -1
        try:
            calls = os.open(program_file(), os.O_RDONLY | os.O_CLOEXEC)  # the filter, which bwrap reads
            # bwrap's own stderr (a sandbox that could not be made says why there) is read once it
            # has ended; its stdout only says the loader runs: the cell's output goes to FIFOs
            # only the cell holds.
            argv = wrap([*_loader(), str(self.folder)], plan, options=("--info-fd", str(info_w)), seccomp_fd=calls)
            proc = subprocess.Popen(argv, cwd=workdir, env={"PATH": os.environ.get("PATH", os.defpath)},
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True, pass_fds=(info_w, calls))
            os.set_blocking(proc.stderr.fileno(), False)
        except OSError:
            return None  # the cell starts its own, and says what went wrong
        finally:
            os.close(info_w)
            if calls >= 0:
                os.close(calls)
        child = _child_pid(info)
        waiting = _Waiting(key, proc, child or 0)
        # Offered only once its loader runs (every mount laid: bwrap names its process before that
        # process has made them) and its mounts hold the plan, checked here, not on a cell's time.
        if child is None or not _running(proc) or (table := _mount_table(child)) is None \
                or not _table_holds(table, plan):
            self._end(waiting)
            return None
        waiting.table = table
        self.made += 1
        return waiting

    @staticmethod
    def _end(waiting: _Waiting) -> None:
        try:
            os.killpg(waiting.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for stream in (waiting.proc.stdin, waiting.proc.stdout, waiting.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
        threading.Thread(target=waiting.proc.wait, name="toolkernel-sandbox-ended", daemon=True).start()


@dataclass
class _Taken:
    """A sandbox a cell took: its process, the run's file (what the loader is told but the
    secret; removed when the run ends), and its output FIFOs with the kernel's read ends.

    The output goes through FIFOs the loader opens, not through the pipes bwrap was given: bwrap
    holds those until its namespaces are torn down (milliseconds after the cell's end), and a
    reader waiting for their end waited for that. Only the cell's processes hold a FIFO's write
    end, so its end is the cell's end. The loader writes one NUL to each as soon as it has
    opened them, before the cell starts; the kernel drops it and removes the FIFO's name then,
    so another cell of the channel (which sees its folder) cannot open it while the cell runs."""

    proc: subprocess.Popen
    run_file: Path
    fifos: tuple[Path, Path]
    fds: tuple[int, int]

    @classmethod
    def made_in(cls, folder: Path, proc: subprocess.Popen) -> "_Taken":
        name = secrets.token_hex(8)
        fifos = (folder / f"out-{name}", folder / f"err-{name}")
        for fifo in fifos:
            os.mkfifo(fifo, 0o600)
        # Not blocking: no writer yet. `read_output` waits with poll, which tells a FIFO whose
        # writer has not come yet (nothing) from one whose writers have all gone (POLLHUP).
        fds = tuple(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK) for fifo in fifos)
        return cls(proc, folder / f"run-{name}", fifos, fds)

    def read_output(self, which: int, take: Callable[[bytes], None]) -> None:
        """Everything the cell writes to its stdout (0) or stderr (1), as it comes, until the
        last writer closes it; or until the sandbox has ended without opening it."""
        fd, seen = self.fds[which], False
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while True:
            if not poller.poll(_NOT_OPENED_POLL * 1000 if not seen else None):
                if self.proc.poll() is not None:
                    return  # ended before its loader opened the FIFO
                continue
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not seen:
                seen = True
                self.fifos[which].unlink(missing_ok=True)
                chunk = chunk[1:] if chunk else chunk  # the loader's NUL
                if not chunk:
                    continue
            take(chunk)
            if not chunk:
                return

    def sandbox_errors(self) -> str:
        """What bwrap itself said (a sandbox it could not make), read once it has ended."""
        try:
            return (self.proc.stderr.read() or b"").decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        for path in (self.run_file, *self.fifos):
            path.unlink(missing_ok=True)
        try:
            self.proc.stderr.close()
        except OSError:
            pass


def _child_pid(info: int) -> int | None:
    """The pid bwrap reports on its info pipe once the sandbox's process is made (None: it ended
    first, or said nothing in time). Closes the pipe."""
    chunks = []
    try:
        while select.select([info], [], [], _INFO_TIMEOUT)[0]:
            chunk = os.read(info, 4096)
            if not chunk:
                break
            chunks.append(chunk)
        else:
            return None
    finally:
        os.close(info)
    try:
        pid = json.loads(b"".join(chunks))["child-pid"]
    except (ValueError, KeyError, TypeError):
        return None
    return pid if isinstance(pid, int) and pid > 0 else None


def _running(proc: subprocess.Popen) -> bool:
    """Whether the loader said it runs (one byte on bwrap's stdout) in time. Closes the pipe."""
    try:
        said = select.select([proc.stdout], [], [], _INFO_TIMEOUT)[0] and os.read(proc.stdout.fileno(), 1) == b"r"
    except OSError:
        said = False
    proc.stdout.close()
    return bool(said)


def _mounts_still_hold(waiting: _Waiting, plan: Plan) -> bool:
    """Whether the waiting sandbox still has a read-only mount at every protected place, and one
    over every hidden place. A file or folder replaced on the host (renamed over, removed) takes
    its mount away in every other namespace, and the path's identity cannot tell: a new file may
    get the old inode. A mount table just as it was when it was checked against this plan (the
    key says the plan is the same) holds; any other is checked again. Unreadable counts as not
    held."""
    table = _mount_table(waiting.child)
    return table is not None and (table == waiting.table or _table_holds(table, plan))


def _mount_table(child: int) -> bytes | None:
    try:
        with open(f"/proc/{child}/mountinfo", "rb") as table:
            return table.read()
    except OSError:
        return None


def _table_holds(table: bytes, plan: Plan) -> bool:
    mounted: dict[bytes, bool] = {}
    for line in table.splitlines():
        fields = line.split()
        if len(fields) > 5:
            mounted[fields[4]] = mounted.get(fields[4], False) or b"ro" in fields[5].split(b",")
    wanted = [(place, True) for place in (*plan.read_only, *plan.stand_ins)] + [(place, False) for place in plan.hidden]
    for place, read_only in wanted:
        if not os.path.lexists(place) or (not read_only and os.path.islink(place)):
            continue  # nothing mounted there (see `_sandbox.wrap`)
        found = mounted.get(_mountinfo_path(place))
        if found is None or (read_only and not found):
            return False
    return True


def _mountinfo_path(place: str) -> bytes:
    """A path as /proc's mountinfo writes it: space, tab, newline and backslash in octal."""
    raw = os.fsencode(place)
    for char in (b"\\", b" ", b"\t", b"\n"):
        raw = raw.replace(char, b"\\%03o" % ord(char))
    return raw


def _key(plan: Plan, workdir: Path) -> tuple:
    """What the sandbox's command line is made from (`_sandbox.wrap`: the plan, and what is at
    each of its places, a link or not), without making it: a cell waits while this is taken."""
    places = (str(workdir), *plan.writable, *plan.pinned, *plan.read_only, *plan.hidden, *plan.visible, *plan.stand_ins,
              *(source for _, source, _ in plan.home_shown))
    return plan, tuple(_loader()), str(workdir), tuple(_identity(place) for place in places)


def _loader() -> list[str]:
    return _loader_in(os.environ.get("PATH", os.defpath))


@functools.lru_cache(maxsize=4)
def _loader_in(path: str) -> list[str]:
    found = functools.partial(shutil.which, path=path)
    return [found("bash") or "bash", "--norc", "--noprofile", "-c", _LOADER, found("env") or "env"]


def _identity(place: str) -> tuple[int, ...] | None:
    try:
        own = os.lstat(place)
    except OSError:
        return None
    if not stat.S_ISLNK(own.st_mode):
        return own.st_dev, own.st_ino, own.st_mode
    try:
        found = os.stat(place)
    except OSError:
        return (own.st_mode,)  # a link to nothing
    return own.st_mode, found.st_dev, found.st_ino, found.st_mode


def _entry(name: str, value: str) -> bytes:
    return os.fsencode(name) + b"=" + os.fsencode(value) + b"\0"
