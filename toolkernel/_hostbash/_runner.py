"""Running a `%%bash` cell with the host's real bash, `tools` on its PATH.

The cell is written to a file and given to `bash` as its script (stdin is
/dev/null, so a `read` in the script never eats script lines), in a process
group of its own. Two reader threads move its stdout and stderr, apart and
as they come, into the same pump `%%tools` uses; the kernel's main thread
only pumps, so an interrupt lands there and ends the whole group with
IPython's ladder: SIGINT, then SIGTERM, then SIGKILL. A call that stops
the run (an approval needed, the call limit) ends the group the same way.
"""

from __future__ import annotations

import concurrent.futures
import codecs
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .._command import ToolsCommand
from .._errors import Unavailable
from .._guard import ConfigGuard
from .._shell import ShellResult, Sink, _Pump
from ._channel import Channel, RunChannel

TIMEOUT_EXIT = 124  # as timeout(1)
_LADDER = ((signal.SIGINT, 0.3), (signal.SIGTERM, 0.3), (signal.SIGKILL, 0.3))


@dataclass
class _Exit:
    """What the pump reads off a finished run (the shape of Bashkit's result)."""

    exit_code: int
    error: None = None


class HostRun:
    """One started `bash` process group and its channel."""

    def __init__(self, channel: Channel, command: ToolsCommand, script: str, workdir: Path, *,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> None:
        self.channel = channel
        self.command = command
        self.run: RunChannel = channel.open(command)
        self.script_file = channel.folder / f"cell-{self.run.secret[:16]}.sh"
        fd = os.open(self.script_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(script if script.endswith("\n") else script + "\n")
        events = self.run.events
        command.on_image = lambda path: events.put(("image", path))
        command.run.on_progress = lambda *args: events.put(("progress", args))
        command.on_stop_stderr = lambda text: events.put(("output", ("", text)))
        # Called on the channel's thread inside the call that stops the run.
        command.run.on_stop = lambda: threading.Thread(target=self.end_group, daemon=True).start()
        env = {**os.environ, **channel.env(self.run)}
        try:
            self.proc = subprocess.Popen(["bash", str(self.script_file)], cwd=workdir, env=env,
                                         stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                         start_new_session=True)
        except OSError as exc:
            self.close()
            raise Unavailable(f"could not start bash: {exc}", retryable=False) from exc

    def end_group(self, ladder=_LADDER[1:]) -> None:
        """Signal the whole process group (grandchildren too) up the ladder until it is gone."""
        for sig, wait in ladder:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if not _group_alive(self.proc.pid):
                    return
                time.sleep(0.02)

    def close(self) -> None:
        """The run is over: its secret stops working, its script file goes."""
        self.channel.close_run(self.run)
        self.script_file.unlink(missing_ok=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_foreground(channel: Channel, command: ToolsCommand, script: str, sink: Sink, workdir: Path,
                   *, timeout: float | None = None) -> ShellResult:
    guard = ConfigGuard(workdir)
    host = HostRun(channel, command, script, workdir)
    events = host.run.events
    finished = _watch(host, events)
    timer = _Timer(host, timeout)
    pump = _Pump(sink, workdir)
    interrupted = False
    try:
        pump.until_done(events, finished)
    except KeyboardInterrupt:
        interrupted = True
        command.interrupt()
        host.end_group(_LADDER)
        pump.drain(events, deadline=time.monotonic() + 1.0, future=finished)
    finally:
        timer.cancel()
        host.close()
    result = pump.finish(finished, interrupted or timer.fired)
    if timer.fired:
        message = f"bash: timed out after {timeout:g} s; its process group was ended\n"
        sink.stderr(message)
        result.stderr += message
        result.exit_code, result.interrupted = TIMEOUT_EXIT, False
    for message in guard.undo_changes():
        sink.stderr(message)
        result.stderr += message
    if command.run.needs_report(result.exit_code):
        result.report = command.run.report(result.exit_code)
    return result


def start_background(channel: Channel, command: ToolsCommand, script: str, workdir: Path, *,
                     keep_stdout: bool, keep_stderr: bool, timeout: float | None = None) -> subprocess.Popen:
    """Start the cell and return at once; its channel closes when bash exits."""
    host = HostRun(channel, command, script, workdir,
                   stdout=subprocess.PIPE if keep_stdout else subprocess.DEVNULL,
                   stderr=subprocess.PIPE if keep_stderr else subprocess.DEVNULL)
    timer = _Timer(host, timeout)

    def wait() -> None:
        host.proc.wait()
        timer.cancel()
        host.close()

    threading.Thread(target=wait, name="toolkernel-bash-bg", daemon=True).start()
    return host.proc


def _watch(host: HostRun, events) -> concurrent.futures.Future:
    """Readers for stdout and stderr; the future is done when both ended and bash exited."""
    finished: concurrent.futures.Future = concurrent.futures.Future()
    readers = [threading.Thread(target=_read, args=(stream, events, i), daemon=True)
               for i, stream in enumerate((host.proc.stdout, host.proc.stderr))]
    for reader in readers:
        reader.start()

    def wait() -> None:
        for reader in readers:
            reader.join()
        code = host.proc.wait()
        finished.set_result(_Exit(code if code >= 0 else 128 - code))
        events.put(("done", None))

    threading.Thread(target=wait, name="toolkernel-bash-wait", daemon=True).start()
    return finished


def _read(stream, events, which: int) -> None:
    # Raw chunks as they come (no line buffering), so a `\r` progress bar updates live.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    fd = stream.fileno()
    try:
        while chunk := os.read(fd, 65536):
            text = decoder.decode(chunk)
            if text:
                events.put(("output", (text, "") if which == 0 else ("", text)))
        tail = decoder.decode(b"", final=True)
        if tail:
            events.put(("output", (tail, "") if which == 0 else ("", tail)))
    finally:
        stream.close()


class _Timer:
    def __init__(self, host: HostRun, timeout: float | None) -> None:
        self.fired = False
        self._timer = None
        if timeout is not None:
            self._timer = threading.Timer(timeout, self._fire, args=(host,))
            self._timer.daemon = True
            self._timer.start()

    def _fire(self, host: HostRun) -> None:
        self.fired = True
        host.command.interrupt()
        host.end_group(_LADDER)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

