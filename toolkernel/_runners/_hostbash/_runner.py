"""Host bash as a script runner: `HostBashRunner` implements `_shell.ScriptRunner`.

The cell is written to a file and given to `bash` as its script (stdin is
/dev/null, so a `read` in the script never eats script lines), in a process
group of its own. Two reader threads move its stdout and stderr, apart and
as they come, into the run's events, which `_shell.execute` pumps to the
cell as for `%%tools`. `cancel` (an interrupt) ends the whole group with
IPython's ladder: SIGINT, then SIGTERM, then SIGKILL; so does a `tools` call
that stops the run (an approval needed, the call limit), and `--timeout`.
"""

from __future__ import annotations

import codecs
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from ... import _loop
from ..._command._command import ToolsCommand
from ..._errors import Unavailable
from ..._approval._bash_rules import bash_network, literal_commands
from ..._approval._run import NO_EVENTS, RunEvents
from .._preflight import preflight
from .._shell import ShellResult, workspace_before
from ..._sandbox import Plan, mechanism, wrap
from ..._approval._protected import mount_plan
from .._sandbox_plan import run_watch, sandbox_plan
from ._cell import agent_refusal
from ._channel import SECRET_ENV, Channel, RunChannel

TIMEOUT_EXIT = 124  # as timeout(1)
_LADDER = ((signal.SIGINT, 0.3), (signal.SIGTERM, 0.3), (signal.SIGKILL, 0.3))


class HostBashRunner:
    """Runs a cell with the host's bash, `tools` and `display` on its PATH."""

    def __init__(self, channel: Channel, *, timeout: float | None = None, agent: bool = False) -> None:
        self.channel = channel
        self.timeout = timeout
        self.agent = agent  # an agent started the cell: it is a `Bash` call checked first
        # What its sandbox cannot mount read-only before it exists (a new module that shadows an
        # installed one, a new `.git`) is moved aside when an agent's cell ends (`_shell._Shadows`).
        self.sandboxed = agent
        self.timed_out = False
        self._host: HostRun | None = None
        self._cancelled = False
        self._cleared: tuple[str, ToolsCommand] | None = None  # the run whose cell may start
        self._lock = threading.Lock()

    def literal_calls(self, script: str) -> list[list[str]]:
        """The `tools` calls the cell writes out in full, from the parse the `Bash(...)` rules
        use (advisory: see _preflight; every call is checked again as it runs)."""
        try:
            return [list(words) for words in literal_commands(script, "tools")]
        except Exception:  # noqa: BLE001 - a cell the parser cannot take is checked call by call as it runs
            return []

    def run(self, script: str, command: ToolsCommand, events: RunEvents) -> ShellResult:
        refused = self.refusal(script, command)
        if refused is not None:
            return ShellResult(1, "", refused)
        try:
            host = self._open(script, command, events, subprocess.PIPE)
        except Unavailable as exc:  # no bash on this host: said in the cell, not lost on this thread
            return ShellResult(1, "", exc.json_line() + "\n")
        try:
            readers = [threading.Thread(target=host.read_output, args=(err, events), daemon=True) for err in (0, 1)]
            for reader in readers:
                reader.start()
            for reader in readers:
                reader.join()
            code = host.proc.wait()
            host.said_by_sandbox(events)
        finally:
            host.close()
        if self.timed_out:
            return ShellResult(TIMEOUT_EXIT, "", f"bash: timed out after {self.timeout:g} s;"
                                                 " its process group was ended\n")
        return ShellResult(code if code >= 0 else 128 - code, "", "")

    def start(self, script: str, command: ToolsCommand, events: RunEvents, *, keep_stdout: bool,
              keep_stderr: bool, on_end: Callable[[], None] = lambda: None) -> subprocess.Popen | str:
        """`--bg`: start the cell and return its process at once (its channel closes when
        bash exits, then `on_end` runs); or the error line of an agent's cell that may not start."""
        refused = self.refusal(script, command)
        if refused is not None:
            return refused
        host = self._open(script, command, events, subprocess.PIPE if keep_stdout else subprocess.DEVNULL,
                          subprocess.PIPE if keep_stderr else subprocess.DEVNULL)
        threading.Thread(target=lambda: (host.proc.wait(), host.close(), on_end()), name="toolkernel-bash-bg",
                         daemon=True).start()
        return host.proc

    def refusal(self, script: str, command: ToolsCommand) -> str | None:
        """None when the cell may start (a person's always may). Decided once per run: a
        once-grant that let the cell start is spent when it is decided."""
        if not self.agent or self._cleared == (script, command):
            return None
        refused = agent_refusal(command, script, sandboxed=self._holds(command, script))
        if refused is None:
            self._cleared = (script, command)
        return refused

    def cancel(self) -> None:
        """End the whole process group (any thread; the ladder runs on a thread of its own).
        Once: a second cancel (`_shell.stop_run` makes two) would send each signal twice."""
        with self._lock:
            already, self._cancelled = self._cancelled, True
            host = self._host
        if host is not None and not already:
            host.end_group_soon(_LADDER)

    def _open(self, script: str, command: ToolsCommand, events: RunEvents, stdout, stderr=None) -> HostRun:
        host = HostRun(self.channel, command, events, script, command.workdir, stdout=stdout,
                       stderr=stdout if stderr is None else stderr, timeout=self.timeout,
                       on_timeout=self._timed_out, sandbox=self._sandbox(command, script))
        with self._lock:
            self._host = host
            cancelled = self._cancelled
        if cancelled:  # the interrupt came before there was a group to end
            host.end_group_soon(_LADDER)
        return host

    @staticmethod
    def _holds(command: ToolsCommand, script: str) -> bool:
        """Whether the OS sandbox holds this cell: there is one, and it is not Landlock asked to
        keep the network (which it cannot: its processes would reach the host's own services)."""
        found = mechanism()
        return found.available and not (found.name == "landlock" and bash_network(script, command.dispatcher.env.policy))

    def _sandbox(self, command: ToolsCommand, script: str) -> Plan | None:
        """An agent's cell runs in the OS sandbox, with the network (through the proxy) only
        where `[policy] network` names each of its commands; where it cannot hold the cell a
        person allowed it (`refusal`), and it runs as theirs."""
        if not self.agent or not self._holds(command, script):
            return None
        env = command.dispatcher.env
        plan = sandbox_plan(env.protection() or mount_plan(command.workdir), env.sandbox_settings,
                            visible=(str(self.channel.folder),))
        return plan.with_network(bash_network(script, env.policy))

    def _timed_out(self, host: HostRun) -> None:
        self.timed_out = True
        host.command.interrupt()
        host.end_group(_LADDER)


class HostRun:
    """One started `bash` process group, its channel and its timer."""

    def __init__(self, channel: Channel, command: ToolsCommand, events: RunEvents, script: str, workdir: Path, *,
                 stdout, stderr, timeout: float | None = None, on_timeout=None, sandbox: Plan | None = None) -> None:
        self.channel = channel
        self.command = command
        # A call that stops the run (approval, call limit) ends the group from the channel's thread.
        self.run: RunChannel = channel.open(command, events, stop=lambda: self.end_group_soon())
        self.script_file = channel.folder / f"cell-{self.run.secret[:16]}.sh"
        fd = os.open(self.script_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(script if script.endswith("\n") else script + "\n")
        env = {**os.environ, **channel.env(self.run)} if sandbox is None else \
            sandbox.environment(os.environ, channel.env(self.run))
        self._timer: threading.Timer | None = None
        # A cell whose output is read (not `--bg`'s) may run in the sandbox made ahead for it; one
        # with the network starts its own (its proxy's bridge is its first process).
        self._ahead = sandbox is not None and not sandbox.network and stdout is subprocess.PIPE \
            and stderr is subprocess.PIPE
        taken = channel.sandboxes.take(sandbox, workdir, self.script_file, env, frozenset({SECRET_ENV})) \
            if self._ahead else None
        self._taken = taken
        # The next cell's, made once this one is over (`close`), not while it runs: making one
        # (bash, bwrap, its mounts) takes CPU the cell would share on a busy machine, and an
        # agent's next cell comes long after.
        self._next = (sandbox, workdir) if self._ahead else None
        try:
            argv = ["bash", str(self.script_file)]
            self.proc = taken.proc if taken is not None else subprocess.Popen(
                argv if sandbox is None else wrap(argv, sandbox), cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                stdout=stdout, stderr=stderr, start_new_session=True)
        except OSError as exc:
            self._next = None  # none for a host where bash cannot start
            self.close()
            raise Unavailable(f"could not start bash: {exc}", retryable=False) from exc
        if timeout is not None:
            self._timer = threading.Timer(timeout, on_timeout, args=(self,))
            self._timer.daemon = True
            self._timer.start()

    def end_group_soon(self, ladder=_LADDER[1:]) -> None:
        """The first signal here, the rest of the ladder on a thread. Sent from the thread, the
        first came after the answer to the call that stopped the run (or the interrupt cancelled)
        reached the shim, and bash ran a quick `echo` after the call (one fresh-clone run)."""
        try:
            os.killpg(self.proc.pid, ladder[0][0])
        except (ProcessLookupError, PermissionError):
            return
        threading.Thread(target=self.end_group, args=(ladder, True), name="toolkernel-bash-stop", daemon=True).start()

    def end_group(self, ladder=_LADDER[1:], first_sent: bool = False) -> None:
        """Signal the whole process group (grandchildren too) up the ladder until it is gone."""
        for step, (sig, wait) in enumerate(ladder):
            try:
                if step or not first_sent:
                    os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if not _group_alive(self.proc.pid):
                    return
                time.sleep(0.02)

    def close(self) -> None:
        """The run is over: its secret stops working, its timer and script file go."""
        if self._timer is not None:
            self._timer.cancel()
        self.channel.close_run(self.run)
        self.script_file.unlink(missing_ok=True)
        if self._taken is not None:
            self._taken.close()
        if self._next is not None:
            self.channel.sandboxes.prepare(*self._next)
        self._next = None

    def read_output(self, is_stderr: int, events: RunEvents) -> None:
        """Move the cell's stdout or stderr into the run's events until it ends."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

        def take(chunk: bytes) -> None:
            text = decoder.decode(chunk, final=not chunk)
            if text:
                events.output("", text) if is_stderr else events.output(text, "")

        if self._taken is not None:
            return self._taken.read_output(is_stderr, take)
        _read((self.proc.stdout, self.proc.stderr)[is_stderr], take)

    def said_by_sandbox(self, events: RunEvents) -> None:
        """A sandbox made ahead that could not start the cell says why (as bwrap would have said)."""
        said = self._taken.sandbox_errors() if self._taken is not None else ""
        if said:
            events.output("", said)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(stream, take) -> None:
    # Raw chunks as they come (no line buffering), so a `\r` progress bar updates live.
    fd = stream.fileno()
    try:
        while True:
            chunk = os.read(fd, 65536)
            take(chunk)
            if not chunk:
                return
    finally:
        stream.close()


def start_background(session, runner: HostBashRunner, script: str, *, keep_stdout: bool,
                     keep_stderr: bool) -> subprocess.Popen | ShellResult:
    """`%%bash --bg`: the started process, or the result of a cell that did not start.
    Nobody watches a background cell, so a call in it that asks stops it ("later"), and a call
    it writes out in full that asks keeps it from starting."""
    command = _loop.run(session.prepare(agent=runner.agent))
    refused = _loop.run(preflight(runner.literal_calls(script), command))
    recorded = workspace_before(runner, command, script) if refused is None else None
    # An agent's: what it leaves at the top to run later is moved aside when it ends, unsaid
    # (nobody watches the cell), as for a cell that is watched (`_shell._Shadows`).
    watch = run_watch(command.workdir, command.dispatcher.env.protection(), runner.cancel,
                      journal=lambda: command.run.journal) if runner.sandboxed and refused is None else None
    if watch is not None:
        try:
            watch.start()
        except OSError as exc:
            command.run.end()
            return ShellResult(1, "", f"toolkernel: the workspace's top cannot be listed ({exc}), so what this cell"
                               " leaves there could not be checked: it does not start until it can\n")
        command.run.guard = watch

    def ended() -> None:  # what the cell's own commands changed, recorded when it ends
        if watch is not None:
            watch.end()
        if recorded is not None:
            recorded()
        command.run.end()

    started = refused if refused is not None else runner.start(script, command, NO_EVENTS, keep_stdout=keep_stdout,
                                                               keep_stderr=keep_stderr, on_end=ended)
    if not isinstance(started, str):
        return started
    ended()
    report = command.run.report(1) if command.run.needs_report(1) else None
    return ShellResult(1, "", started, run_report=report)
