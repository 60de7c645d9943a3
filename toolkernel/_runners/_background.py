"""Runs that go on in the background (seed 002's `run_in_background`, `BashOutput`, `KillShell`).

A background run is an ordinary run (`Session.run_script`) on a thread of its own, held
through its `RunControl`: `kill` ends it as an interrupt does, and the session's end kills
every run still going. What it prints is kept as it comes, the most recent `KEEP` characters
of it unread (`KeptOutput`), and read in parts: each read takes what came since the last one.
A model module for its callers: no MCP and no IPython here.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ._shell import RunControl, ScriptEvents, ShellResult

KEEP = 200_000  # characters of unread output a run keeps (seed 002: its most recent 200 KB)
RUNNING, EXITED, KILLED, TIMED_OUT = "running", "exited", "killed", "timed_out"


class KeptOutput:
    """A run's output not read yet, its oldest part dropped past `keep` characters."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._parts: list[str] = []
        self._size = 0
        self._dropped = 0  # characters dropped since the last read
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        if not text:
            return
        with self._lock:
            self._parts.append(text)
            self._size += len(text)
            if self._size > self.keep:
                self._trim()

    def _trim(self) -> None:
        whole = "".join(self._parts)
        cut = len(whole) - self.keep
        newline = whole.find("\n", cut, cut + 4096)  # at a line's start, where one is near
        cut = newline + 1 if newline >= 0 else cut
        self._dropped += cut
        self._parts, self._size = [whole[cut:]], len(whole) - cut

    def read(self) -> tuple[str, int]:
        """What came since the last read, and how many characters before it were dropped unread."""
        with self._lock:
            text, dropped = "".join(self._parts), self._dropped
            self._parts, self._size, self._dropped = [], 0, 0
        return text, dropped


class KeepingEvents(ScriptEvents):
    """A run's events, its output also kept (`KeptOutput`) and its newest line noted, as it comes."""

    def __init__(self, kept: KeptOutput | None = None, on_output: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.kept = kept
        self.on_output = on_output

    def output(self, stdout: str, stderr: str) -> None:
        super().output(stdout, stderr)
        for text in (stdout, stderr):
            if text:
                if self.kept is not None:
                    self.kept.write(text)
                if self.on_output is not None:
                    self.on_output(text)


@dataclass
class BackgroundRun:
    """One run started in the background."""

    id: str
    script: str
    description: str | None
    control: RunControl
    output: KeptOutput = field(default_factory=KeptOutput)
    started: float = field(default_factory=time.time)
    status: str = RUNNING
    exit_code: int | None = None
    result: ShellResult | None = None
    failure: str | None = None  # an exception the run raised (a bug of ours, or a config error)
    ended: threading.Event = field(default_factory=threading.Event)
    killed: bool = False
    waiting: list[str] | None = None  # the requests it waits on for a person (`PendingApprover.waiting`)

    def kill(self, reason: str) -> bool:
        """End it as an interrupt does; False when it was over already."""
        if self.ended.is_set():
            return False
        self.killed = True
        return self.control.stop(reason)

    def read(self, pattern: re.Pattern[str] | None = None) -> dict[str, Any]:
        """What it printed since the last read (only the lines `pattern` finds, the rest consumed
        all the same), its status and exit code."""
        text, dropped = self.output.read()
        if pattern is not None:
            text = "".join(line for line in text.splitlines(keepends=True) if pattern.search(line))
        body: dict[str, Any] = {"id": self.id, "status": self.status, "exit_code": self.exit_code, "output": text}
        if dropped:
            body["dropped"] = dropped
        if self.description:
            body["description"] = self.description
        return body


class BackgroundRuns:
    """A session's background runs, by id (`bash-1`, `bash-2`, ...)."""

    def __init__(self, prefix: str = "bash") -> None:
        self.prefix = prefix
        self._runs: dict[str, BackgroundRun] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.closed = False

    def start(self, script: str, control: RunControl, run: Callable[[BackgroundRun], ShellResult], *,
              description: str | None = None, on_end: Callable[[BackgroundRun], None] = lambda run: None,
              after: Callable[[], None] = lambda: None) -> BackgroundRun:
        """Start `run(background)` on a thread of its own; `after`, then `on_end`, when it is
        over. RuntimeError once the runs are closed (the session ended)."""
        with self._lock:
            if self.closed:
                raise RuntimeError("the session ended: no run starts in it any more")
            background = BackgroundRun(f"{self.prefix}-{next(self._ids)}", script, description, control)
            self._runs[background.id] = background

        def body() -> None:
            try:
                background.result = run(background)
                background.exit_code = background.result.exit_code
            except Exception as exc:  # noqa: BLE001 - said in the run's status, never lost on its thread
                background.failure = f"{type(exc).__name__}: {exc}"
                background.exit_code = 1
            finally:
                background.status = (KILLED if background.killed else TIMED_OUT if control.timed_out
                                     else EXITED)
                background.ended.set()
                after()
                on_end(background)

        threading.Thread(target=body, name=f"toolkernel-{background.id}", daemon=True).start()
        return background

    def get(self, run_id: str) -> BackgroundRun | None:
        with self._lock:
            return self._runs.get(run_id)

    def all(self) -> list[BackgroundRun]:
        with self._lock:
            return list(self._runs.values())

    def close(self, reason: str = "killed: the session ended", wait: float = 10.0) -> None:
        """Kill every run still going, and wait (at most `wait` seconds) for them to end."""
        with self._lock:
            self.closed = True
            runs = list(self._runs.values())
        for run in runs:
            run.kill(reason)
        deadline = time.monotonic() + wait
        for run in runs:
            run.ended.wait(max(0.0, deadline - time.monotonic()))
