"""One way to run a child process: capped output, a timeout, and the whole tree killed.

Command hooks, command tools and the rg engine of grep search all run programs
that someone else wrote. Each child is started in a new session (so it leads its
own process group) and everything it starts stays in that group, so one
`killpg` reaches grandchildren too: on timeout, when the output passes a cap, and
when the awaiting task is cancelled (an interrupt, a stopped script).

A child that leaves the group on purpose (`setsid`, a daemon) is out of reach;
that is the limit of process groups without cgroups.
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

_CHUNK = 65536

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
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        start_new_session=True,
    )
    kept = _Kept({"stdout": stdout_cap, "stderr": stderr_cap})
    finished = timed_out = False
    try:
        async with asyncio.timeout(timeout):
            await asyncio.gather(_feed(process, stdin), kept.read(process, "stdout"),
                                 kept.read(process, "stderr"))
            await process.wait()
        finished = kept.over is None
    except TimeoutError:
        timed_out = True
    finally:
        if not finished:
            # Timeout, a cap or cancellation: the child may be gone while a grandchild
            # still holds the pipes and the group, so the group is what is killed.
            kill_tree(process)
            await process.wait()
    code = process.returncode if finished else None
    return ProcessResult(code, bytes(kept.data["stdout"]), bytes(kept.data["stderr"]),
                         over_cap=kept.over, timed_out=timed_out)


class _Kept:
    """What each stream wrote so far, so a timeout still shows the end of stderr."""

    def __init__(self, caps: dict[Stream, int]) -> None:
        self.caps = caps
        self.data: dict[Stream, bytearray] = {name: bytearray() for name in caps}
        self.over: Stream | None = None

    async def read(self, process: asyncio.subprocess.Process, name: Stream) -> None:
        """Read to EOF; past the cap kill the tree rather than buffer a flood."""
        stream, kept, cap = getattr(process, name), self.data[name], self.caps[name]
        while chunk := await stream.read(_CHUNK):
            if len(kept) + len(chunk) > cap:
                kept += chunk[: cap - len(kept)]
                self.over = self.over or name
                kill_tree(process)
                # Read on to the end, keeping nothing: a stream left paused with a full buffer
                # never sees its pipe close, and `process.wait()` waits for that too.
                while await stream.read(_CHUNK):
                    pass
                return
            kept += chunk


async def _feed(process: asyncio.subprocess.Process, data: bytes | None) -> None:
    if data is None or process.stdin is None:
        return
    try:
        process.stdin.write(data)
        await process.stdin.drain()
        process.stdin.close()
        await process.stdin.wait_closed()
    except (BrokenPipeError, ConnectionResetError):
        pass  # a child may finish without reading its stdin


def kill_tree(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the child's process group (the child leads it: `start_new_session`).

    Linux does not hand out a pid that is still some group's id, so while a
    grandchild keeps the group alive the signal cannot reach a stranger.
    """
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
