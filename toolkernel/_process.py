"""One way to run a child process: capped output, a timeout, and the whole tree killed.

Command hooks, command tools and the rg engine of grep search all run programs
that someone else wrote. Each child leads a process group of its own and
everything it starts stays in that group, so one `killpg` reaches grandchildren
too: on timeout, when the output passes a cap, and when the awaiting task is
cancelled (an interrupt, a stopped script).

The group is a new session only when this process has a controlling terminal,
so that a child can never read from it or be stopped by it. A kernel has none
(jupyter_client starts it in a session of its own), and there the child skips
`setsid`: with scheduler autogroups on (as on the machines we measured), a new
session is a new scheduling group, and on a busy machine the child then waits
for a CPU inside `setsid`: 2.5 ms median at load 5-6 (27 us idle), where
`setpgid` took 45 us; half a 5 ms command.

A child that leaves the group on purpose (`setsid`, a daemon) is out of reach;
that is the limit of process groups without cgroups.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

_CHUNK = 65536
# Python puts the working directory (`-m`, `-c`) or the script's folder first on sys.path.
# Programs toolkernel starts run in the workspace, where scripts write: a `json.py` a script
# left there ran on the host inside the next Python server, hook or command tool that
# imported json. PYTHONSAFEPATH (Python 3.11+) leaves that path out; a config `env` that
# names it (`PYTHONSAFEPATH = ""`) decides for itself.
SAFE_PATH = "PYTHONSAFEPATH"


def program_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The environment of a program toolkernel starts: `env` (None: this process's), with
    PYTHONSAFEPATH set unless `env` names it."""
    base = os.environ if env is None else env
    return {**base} if SAFE_PATH in base else {**base, SAFE_PATH: "1"}

Stream = Literal["stdout", "stderr"]


@dataclass(frozen=True)
class ProcessResult:
    # None when the child was killed by us (timeout, a cap) before it exited.
    returncode: int | None
    stdout: bytes
    stderr: bytes
    over_cap: Stream | None = None  # which output passed its cap (the tree was killed)
    timed_out: bool = False

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    def stderr_tail(self, limit: int) -> str:
        """The last `limit` characters of stderr, stripped; `...` marks a cut."""
        text = self.stderr_text.strip()
        return text if len(text) <= limit else "..." + text[-limit:]


async def run_capped(
    argv: Sequence[str],
    *,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    stdout_cap: int,
    stderr_cap: int,
) -> ProcessResult:
    """Run `argv` (no shell) and collect its output; `OSError` when it cannot start.

    Output past a cap is not kept: the tree is killed at once and `over_cap` says
    which stream. `stdin=None` gives the child an empty stdin (never the kernel's).
    """
    child = _Child(argv, stdin, env, cwd, {"stdout": stdout_cap, "stderr": stderr_cap}, timeout)
    try:
        await child.done
    finally:
        # Timeout, a cap or cancellation: the child may be gone while a grandchild
        # still holds the pipes and the group, so the group is what is killed.
        await child.end(kill=not child.finished)
    code = child.popen.returncode if child.finished else None
    return ProcessResult(code, bytes(child.kept["stdout"]), bytes(child.kept["stderr"]),
                         over_cap=child.over, timed_out=child.timed_out)


class _Child:
    """One child watched from the running loop: its pipes with add_reader, its exit with a pidfd.

    asyncio's own subprocess transport costs about a millisecond more per child
    than `subprocess.run` on Python 3.11 (a thread per child to wait for it, and a
    transport and protocol per pipe): for a 5 ms command that is 15-20 %.
    The child is not reaped before the end, so while its group may still be
    signalled its pid cannot be handed to another process.
    """

    def __init__(self, argv: Sequence[str], stdin: bytes | None, env: Mapping[str, str] | None,
                 cwd: str | os.PathLike[str] | None, caps: dict[Stream, int],
                 timeout: float | None) -> None:
        self.loop = asyncio.get_running_loop()
        self.popen = subprocess.Popen(
            argv, bufsize=0, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=program_env(env), cwd=cwd, **_own_group())
        try:
            self.pidfd = os.pidfd_open(self.popen.pid)
        except OSError:
            kill_tree(self.popen.pid)
            self.popen.wait()
            self._close_pipes()
            raise
        self.caps = caps
        self.kept: dict[Stream, bytearray] = {name: bytearray() for name in caps}
        self.over: Stream | None = None
        self.timed_out = False
        self.finished = False  # it exited and every output ended, within the time and the caps
        self.done = self.loop.create_future()  # finished, or a cap or the time was passed
        self._exited = False
        self._exit_seen: asyncio.Future[None] | None = None
        self._reading: dict[int, Stream] = {}
        for name in caps:
            fd = getattr(self.popen, name).fileno()
            os.set_blocking(fd, False)
            self._reading[fd] = name
            self.loop.add_reader(fd, self._on_output, fd)
        self._timer = None if timeout is None else self.loop.call_later(timeout, self._time_out)
        if stdin is not None:
            self._feed(memoryview(stdin))

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _stop(self, finished: bool = False) -> None:
        if not self.done.done():  # (cancelled with the task that awaited it)
            self.finished = finished
            self.done.set_result(None)

    def _on_output(self, fd: int) -> None:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._stop_reading(fd)
            if not self._reading:
                self._on_outputs_ended()
            return
        name = self._reading[fd]
        kept, cap = self.kept[name], self.caps[name]
        if len(kept) + len(chunk) <= cap:
            kept += chunk
            return
        kept += chunk[: cap - len(kept)]
        self.over = self.over or name
        self._stop_reading(fd)
        kill_tree(self.pid)
        self._stop()

    def _stop_reading(self, fd: int) -> None:
        self.loop.remove_reader(fd)
        del self._reading[fd]

    def _on_outputs_ended(self) -> None:
        # The output ends just before the exit shows, so asking now usually spares
        # watching the pidfd at all; a child that closed its outputs and runs on is waited for.
        if self._has_exited():
            self._stop(finished=True)
        else:
            self._watch_exit()

    def _watch_exit(self) -> asyncio.Future[None]:
        if self._exit_seen is None:
            self._exit_seen = self.loop.create_future()
            self.loop.add_reader(self.pidfd, self._on_exit)
        return self._exit_seen

    def _on_exit(self) -> None:
        self.loop.remove_reader(self.pidfd)
        self._exited = True
        if not self._exit_seen.done():
            self._exit_seen.set_result(None)
        if not self._reading:
            self._stop(finished=True)

    def _has_exited(self) -> bool:
        """Exited (a zombie, not reaped yet), asked now rather than when the loop gets to it."""
        if not self._exited:
            try:
                self._exited = os.waitid(os.P_PIDFD, self.pidfd,
                                         os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            except ChildProcessError:  # reaped by someone else (a waitpid(-1) elsewhere): gone
                self._exited = True
        return self._exited

    def _time_out(self) -> None:
        self.timed_out = True
        self._stop()

    def _feed(self, data: memoryview) -> None:
        """Write stdin without blocking the loop, then close it; a child may not read it all."""
        stdin = self.popen.stdin
        fd = stdin.fileno()
        os.set_blocking(fd, False)
        left = data

        def write() -> None:
            nonlocal left
            try:
                if left:
                    left = left[os.write(fd, left):]
            except BlockingIOError:
                return
            except OSError:  # the child closed its stdin or ended
                left = left[:0]
            if not left:
                self.loop.remove_writer(fd)
                stdin.close()

        self.loop.add_writer(fd, write)
        write()

    async def end(self, kill: bool) -> None:
        """Kill the tree when asked and wait for the child's exit; reap it, close every pipe."""
        try:
            if self._timer is not None:
                self._timer.cancel()
            if kill:
                kill_tree(self.pid)
                if not self._has_exited():
                    await self._watch_exit()
        finally:
            for fd in list(self._reading):
                self._stop_reading(fd)
            if self._exit_seen is not None:
                self.loop.remove_reader(self.pidfd)  # (False when the exit was seen)
            self._close_pipes()
            os.close(self.pidfd)
            self.popen.poll()  # reaps it; one still running (cancelled twice) subprocess reaps later

    def _close_pipes(self) -> None:
        stdin = self.popen.stdin
        if stdin is not None and not stdin.closed:
            self.loop.remove_writer(stdin.fileno())
        for pipe in (stdin, self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                pipe.close()


@functools.cache
def _own_group() -> dict[str, Any]:
    """Popen's options for a child that leads its own process group (see the module's docstring)."""
    try:
        os.close(os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY))
    except OSError:  # no controlling terminal
        return {"process_group": 0}
    return {"start_new_session": True}


def kill_tree(pid: int) -> None:
    """SIGKILL the child's process group (the child leads it: `_own_group`).

    Linux does not hand out a pid that is still some group's id (or an unreaped
    child's), so the signal cannot reach a stranger.
    """
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# -- which process ------------------------------------------------------------------------

def process_start(pid: int) -> str | None:
    """What tells a process from a later one given the same pid: its start time (Linux; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


_own: tuple[int, str | None] | None = None  # (pid, start) of this process, read once (a fork reads its own)


def own_start() -> str | None:
    """This process's start time, read once per process: it cannot change."""
    global _own
    pid = os.getpid()
    own = _own
    if own is None or own[0] != pid:
        own = _own = (pid, process_start(pid))
    return own[1]


def still_running(owner: tuple[int, str | None] | None) -> bool:
    """Whether the process `owner` names (pid, start time or None) is still there."""
    if owner is None:
        return False
    pid, started = owner
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return started is None or process_start(pid) in (None, started)
