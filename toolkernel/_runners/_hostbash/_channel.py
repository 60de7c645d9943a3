"""The kernel's end of the `tools` shim: a Unix socket in a private folder, one secret per run.

The folder is created 0700, so no other user reaches the socket; a caller
must also send the secret of a run that is still going (it is in that run's
environment only), so another cell, a finished run or a process that found
the socket path cannot call tools. Each connection is served on a thread of
its own, never on the kernel's main thread, which pumps output and takes
interrupts. Calls of one run are served at once (subshells, `xargs -P 4`,
background jobs); the run's one call limit and one report stay exact, as `Run`
counts and records under a lock of its own.
"""

from __future__ import annotations

import hmac
import os
import secrets
import shutil
import socket
import socketserver
import struct
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ... import _loop
from ..._command._command import Outcome, ToolsCommand, _failure, internal_failure
from ..._command._cli import split_command
from ..._errors import Denied, InvalidInput
from ..._approval._run import RunEvents
from .shim import _exact  # the shim's own framing, so both ends read alike

SECRET_ENV = "TOOLKERNEL_TOOLS_SECRET"
SOCKET_ENV = "TOOLKERNEL_TOOLS_SOCKET"
_SHIM = Path(__file__).with_name("shim.py")
_MAX_FIELD = 256 << 20  # stdin of one call; argv words are far smaller


@dataclass
class RunChannel:
    """What one host bash run lets its `tools` calls reach."""

    command: ToolsCommand
    events: RunEvents
    stop: Callable[[], None]  # ends the run's process group
    secret: str = field(default_factory=lambda: secrets.token_hex(32))
    # The calls being served, which the run's end awaits (`close`): a call still going when
    # bash ends (its group ended by another call's stop) is recorded before the report is made.
    calls: int = 0
    closed: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)

    def begin(self) -> bool:
        """A call starts to be served; False once the run has ended."""
        with self.changed:
            if self.closed:
                return False
            self.calls += 1
            return True

    def end(self) -> None:
        with self.changed:
            self.calls -= 1
            self.changed.notify_all()

    def close(self) -> None:
        """No call starts from now on; the calls going on are awaited."""
        with self.changed:
            self.closed = True
            self.changed.wait_for(lambda: self.calls == 0)


class Channel:
    """One per session: the private folder (shims + socket) and the socket server."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="toolkernel-bash-"))  # mkdtemp makes it 0700
        self.bin = self.folder / "bin"
        self.bin.mkdir(mode=0o700)
        self.socket_path = self.folder / "tools.sock"
        self._runs: dict[str, RunChannel] = {}
        self._runs_lock = threading.Lock()
        self._install_shims()
        self._server = _Server(str(self.socket_path), self)
        os.chmod(self.socket_path, 0o600)
        threading.Thread(target=self._server.serve_forever, name="toolkernel-bash-channel", daemon=True).start()

    def _install_shims(self) -> None:
        # `-IS`: isolated, no site: the interpreter starts in about half the time. The real
        # interpreter behind a venv's link: the shim needs none of the venv's packages.
        text = f"#!{os.path.realpath(sys.executable)} -IS\n" + _SHIM.read_text()
        for name in ("tools", "display"):
            path = self.bin / name
            path.write_text(text)
            path.chmod(0o700)

    def env(self, run: RunChannel) -> dict[str, str]:
        """The variables that give a run's processes the channel."""
        return {"PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
                SOCKET_ENV: str(self.socket_path), SECRET_ENV: run.secret}

    def open(self, command: ToolsCommand, events: RunEvents, stop: Callable[[], None]) -> RunChannel:
        run = RunChannel(command, events, stop)
        with self._runs_lock:
            self._runs[run.secret] = run
        return run

    def close_run(self, run: RunChannel) -> None:
        with self._runs_lock:
            self._runs.pop(run.secret, None)
        run.close()

    def find(self, secret: bytes) -> RunChannel | None:
        with self._runs_lock:
            runs = list(self._runs.values())
        # Compared in constant time, against every open run.
        found = None
        for run in runs:
            if hmac.compare_digest(run.secret.encode(), secret):
                found = run
        return found

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        shutil.rmtree(self.folder, ignore_errors=True)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, channel: Channel) -> None:
        self.channel = channel
        super().__init__(path, _Handler)


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        try:
            if _same_user(sock):
                _send_result(sock, self._answer(sock))
        except (OSError, ValueError):  # ConnectionError is an OSError
            return  # the caller went away (its process group was ended) or sent garbage
        finally:
            _loop.close_here()  # the calls of this connection used this thread's own loop

    def _answer(self, sock: socket.socket) -> Outcome:
        fields = _read_request(sock)
        try:
            return self._serve(sock, fields)
        except (OSError, ValueError):
            raise  # the socket's own trouble: nobody is left to answer
        except Exception as exc:  # noqa: BLE001 - the shim still prints one error line
            return _failure(internal_failure(exc))

    def _serve(self, sock: socket.socket, fields: list[bytes]) -> Outcome:
        secret, kind, cwd, ready, *argv_bytes = fields
        run = self.server.channel.find(secret)
        if run is None:
            return _failure(Denied("this process has no toolkernel channel: its run has ended, or it never had one"))
        argv = [a.decode("utf-8", "surrogateescape") for a in argv_bytes]
        if kind == b"display":
            return _display(run, argv, Path(cwd.decode("utf-8", "surrogateescape")))
        stdin = None
        if ready == b"1" and wants_stdin(run.command, argv):
            sock.sendall(b"S")
            stdin = _read_field(sock).decode("utf-8", "replace")
        if not run.begin():
            return _failure(Denied("this process has no toolkernel channel: its run has ended"))
        try:
            return _stopping(run, run.command.handle_sync(argv, stdin, cwd.decode("utf-8", "surrogateescape")))
        finally:
            run.end()


def _stopping(run: RunChannel, outcome: Outcome) -> Outcome:
    """A call that stopped the run ends its process group, as Bashkit's builtin cancels."""
    if outcome.stops_script:
        # The error line goes by the run's events: the shim is ended with its group and
        # may never print it.
        run.events.stopped(outcome.stderr)
        outcome.stderr = ""
        run.stop()
    return outcome


def wants_stdin(command: ToolsCommand, argv: list[str]) -> bool:
    """The builtin's rule: stdin is the input with `-`, or when the call has no input argument."""
    try:
        parsed = split_command(argv, command.catalog.is_server, command.catalog.split_qualified)
    except Exception:  # noqa: BLE001 - the call itself reports the error
        return False
    return parsed.action == "call" and ("-" in parsed.args or not parsed.args)


def _display(run: RunChannel, argv: list[str], cwd: Path) -> Outcome:
    if not argv:
        return _failure(InvalidInput("usage: display FILE... (an image file to show in the cell)"))
    paths = [cwd / name for name in argv]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        return _failure(InvalidInput(f"display: no such file: {', '.join(missing)}"))
    for path in paths:
        run.events.image(path)
    return Outcome()


def _same_user(sock: socket.socket) -> bool:
    # The folder's mode already keeps other users out; this holds if it is ever loosened.
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


def _read_field(sock: socket.socket) -> bytes:
    size = int.from_bytes(_exact(sock, 4), "big")
    if size > _MAX_FIELD:
        raise ValueError("a field larger than the channel takes")
    return _exact(sock, size)


def _read_request(sock: socket.socket) -> list[bytes]:
    count = int.from_bytes(_exact(sock, 4), "big")
    if not 4 <= count <= 100_000:
        raise ValueError("not a tools request")
    return [_read_field(sock) for _ in range(count)]


def _send_result(sock: socket.socket, outcome: Outcome) -> None:
    out, err = outcome.stdout, outcome.stderr.encode()
    head = b"R" + (outcome.exit_code & 0xFF).to_bytes(4, "big")
    if type(out) is str:
        data = out.encode()
        sock.sendall(head + len(data).to_bytes(4, "big") + data + len(err).to_bytes(4, "big") + err)
        return
    # A long text (`LongText`) goes from its file in pieces: read once to count its bytes, again to send.
    size = sum(len(piece.encode()) for piece in out.pieces())
    sock.sendall(head + size.to_bytes(4, "big"))
    for piece in out.pieces():
        sock.sendall(piece.encode())
    sock.sendall(len(err).to_bytes(4, "big") + err)
