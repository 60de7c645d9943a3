"""The kernel's end of the `tools` shim: a Unix socket in a private folder, one secret per run.

The folder is created 0700, so no other user reaches the socket; a caller
must also send the secret of a run that is still going (it is in that run's
environment only), so another cell, a finished run or a process that found
the socket path cannot call tools. Each connection is served on a thread of
its own, never on the kernel's main thread, which pumps output and takes
interrupts. Calls of one run are served at once (subshells, `xargs -P 4`,
background jobs); the run's one call limit and one report stay exact, as `Run`
counts and records under a lock of its own.

What a caller can make the kernel hold is bounded. The secret comes first
(after the field count) and is read alone, at most 256 bytes: a request whose
secret opens no run is answered and closed before any other field is read.
The rest of a request is held to what an `exec` can pass (`_MAX_ARGS`, Linux's
default ARG_MAX); only stdin, asked for once the secret is known, may be larger.
A connection that sends nothing for `idle` seconds while its request is read is
closed, and its count and secret must all come within `idle` of its accept.
At most `readers` connections are read at once: the accept loop waits for a
free place, so more connections wait in the socket's queue, not on threads.
Only reading is bounded so: a call being served (a tool running, stdin awaited)
is its run's own work, and a pipeline of `tools` that waits on a place held by
a call waiting for its stdin would never end.
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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ... import _loop
from ..._tempdirs import private_folder
from ..._command._command import Outcome, ToolsCommand, _failure, internal_failure
from ..._command._cli import split_command
from ..._errors import Denied, InvalidInput
from ..._approval._run import RunEvents
from ._prespawn import Prespawned

SECRET_ENV = "TOOLKERNEL_TOOLS_SECRET"
SOCKET_ENV = "TOOLKERNEL_TOOLS_SOCKET"
_SHIM = Path(__file__).with_name("shim.py")
_MAX_FIELD = 256 << 20  # stdin of one call
_MAX_SECRET = 256  # a run's secret is 64 hex digits
# The fields after the secret (kind, cwd, ready, argv), their 4-byte lengths included: Linux's default
# ARG_MAX (a quarter of the 8 MiB stack), which bounds the argv and environment the shim was started with.
_MAX_ARGS = 2 << 20
_MAX_COUNT = 100_000
IDLE = 5.0  # seconds a caller may send nothing while its request is read
READERS = 16  # connections read at once
# The names of a connection's thread: reading its request, serving its call, or ending unserved.
READING, SERVING, CLOSING = "toolkernel-bash-read", "toolkernel-bash-call", "toolkernel-bash-closed"


@dataclass
class RunChannel:
    """What one host bash run lets its `tools` calls reach."""

    command: ToolsCommand
    events: RunEvents
    stop: Callable[[], None]  # ends the run's process group
    secret: str = field(default_factory=lambda: secrets.token_hex(32))
    ended: threading.Event = field(default_factory=threading.Event)  # its secret no longer works
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

    def __init__(self, *, idle: float = IDLE, readers: int = READERS) -> None:
        self.idle = idle
        self.folder = Path(private_folder("toolkernel-bash-"))  # 0700; a killed kernel's is swept
        self.bin = self.folder / "bin"
        self.bin.mkdir(mode=0o700)
        self.socket_path = self.folder / "tools.sock"
        self._runs: dict[str, RunChannel] = {}
        self._runs_lock = threading.Lock()
        self._install_shims()
        self.sandboxes = Prespawned(self.folder)  # the agent's next cell's sandbox, made ahead
        self._server = _Server(str(self.socket_path), self, readers)
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
        run.ended.set()
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
        self._server.closing.set()  # an accept loop waiting for a free place stops waiting
        self._server.shutdown()
        self._server.server_close()
        self.sandboxes.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class _Server(socketserver.UnixStreamServer):
    # A burst of calls (`xargs -P 32 tools ...`) waits in the socket's queue while places are taken.
    request_queue_size = 64

    def __init__(self, path: str, channel: Channel, readers: int) -> None:
        self.channel = channel
        self.places = threading.BoundedSemaphore(readers)
        self.closing = threading.Event()
        super().__init__(path, _Handler)

    def process_request(self, request, client_address) -> None:
        """On the accept loop: the connection gets a thread once a place to read it is free."""
        if not self._take_place():
            self.shutdown_request(request)
            return
        place = _Place(self.places)
        try:
            threading.Thread(target=self._serve_one, args=(request, client_address, place),
                             name=READING, daemon=True).start()
        except BaseException:
            place.release()
            raise

    def _take_place(self) -> bool:
        while not self.places.acquire(timeout=0.2):
            if self.closing.is_set():
                return False
        return True

    def _serve_one(self, request, client_address, place: _Place) -> None:
        try:
            _Handler(request, client_address, self, place)
        except Exception:  # noqa: BLE001 - as socketserver's own threads: said, and the connection closed
            self.handle_error(request, client_address)
        finally:
            place.release()
            self.shutdown_request(request)


class _Place:
    """A connection's place among those being read: given back once, when its request is whole."""

    def __init__(self, places: threading.BoundedSemaphore) -> None:
        self._places = places
        self._held = True

    def release(self, *, serving: bool = False) -> None:
        """On the connection's own thread, which is no longer one of those reading (`serving`:
        it goes on to serve the call; else it ends)."""
        if self._held:
            self._held = False
            threading.current_thread().name = SERVING if serving else CLOSING
            self._places.release()


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def __init__(self, request, client_address, server: _Server, place: _Place) -> None:
        self.place = place
        super().__init__(request, client_address, server)

    def handle(self) -> None:
        sock: socket.socket = self.request
        try:
            if _same_user(sock):
                _send_result(sock, self._answer(_Wire(sock, self.server.channel.idle)))
        except (OSError, ValueError):  # ConnectionError and a timeout are OSErrors
            return  # the caller went away (its process group was ended), fell silent or sent garbage
        finally:
            _loop.close_here()  # the calls of this connection used this thread's own loop

    def _answer(self, wire: _Wire) -> Outcome:
        count, secret = wire.head()
        run = self.server.channel.find(secret)
        if run is None:  # nothing more is read: the reply, and the connection is closed
            return _failure(Denied("this process has no toolkernel channel: its run has ended, or it never had one"))
        try:
            fields = wire.fields(count - 1, _MAX_ARGS)
        except _TooLarge:
            return _failure(InvalidInput(f"the call's arguments are larger than the {_MAX_ARGS >> 20} MiB a"
                                         " command line takes; give a large input on stdin (`-`)"))
        self.place.release(serving=True)  # the request is whole: the call is the run's own work from here
        try:
            return self._serve(wire, run, fields)
        except (OSError, ValueError):
            raise  # the socket's own trouble: nobody is left to answer
        except Exception as exc:  # noqa: BLE001 - the shim still prints one error line
            return _failure(internal_failure(exc))

    def _serve(self, wire: _Wire, run: RunChannel, fields: list[bytes]) -> Outcome:
        kind, cwd, ready, *argv_bytes = fields
        argv = [a.decode("utf-8", "surrogateescape") for a in argv_bytes]
        wire.sock.settimeout(None)  # a tool may run long, and the shim reads the reply as it writes it on
        if kind == b"display":
            return _display(run, argv, Path(cwd.decode("utf-8", "surrogateescape")))
        stdin = None
        if ready == b"1" and wants_stdin(run.command, argv):
            wire.sock.sendall(b"S")
            stdin = wire.stdin(run).decode("utf-8", "replace")
        if not run.begin():
            return _failure(Denied("this process has no toolkernel channel: its run has ended"))
        try:
            return _stopping(run, run.command.handle_sync(argv, stdin, cwd.decode("utf-8", "surrogateescape")))
        finally:
            run.end()


class _TooLarge(ValueError):
    pass


class _Wire:
    """Reads one request off a connection; no read waits on a silent caller longer than `idle`."""

    def __init__(self, sock: socket.socket, idle: float) -> None:
        self.sock = sock
        self.idle = idle
        self.taken = 0  # bytes read from the caller

    def head(self) -> tuple[int, bytes]:
        """The field count and the secret, all within `idle` of now (nothing else is read)."""
        by = time.monotonic() + self.idle
        count = int.from_bytes(self._exact(4, by), "big")
        if not 4 <= count <= _MAX_COUNT:
            raise ValueError("not a tools request")
        return count, self._field(_MAX_SECRET, by)

    def fields(self, count: int, budget: int) -> list[bytes]:
        """`count` fields of at most `budget` bytes in all (their lengths included)."""
        fields = []
        for _ in range(count):
            budget -= 4
            fields.append(self._field(budget))
            budget -= len(fields[-1])
        return fields

    def stdin(self, run: RunChannel) -> bytes:
        """The stdin field the shim sends once it has read its stdin: a slow producer
        (`sleep 60; echo ...) | tools x -`) is waited for as long as the run goes on."""
        while True:
            self.sock.settimeout(self.idle)
            try:
                waiting = self.sock.recv(1, socket.MSG_PEEK)
            except TimeoutError:
                if run.ended.is_set():  # a process that outlived its run (`setsid`) is not waited for
                    raise
                continue
            if not waiting:
                raise ConnectionError("the caller left")
            return self._field(_MAX_FIELD)

    def _field(self, cap: int, by: float | None = None) -> bytes:
        size = int.from_bytes(self._exact(4, by), "big")
        if size > cap:
            raise _TooLarge("a field larger than the channel takes")
        return self._exact(size, by)

    def _exact(self, size: int, by: float | None) -> bytes:
        chunks = []
        while size:
            wait = self.idle if by is None else min(self.idle, by - time.monotonic())
            if wait <= 0:
                raise TimeoutError("the caller was too slow to say who it is")
            self.sock.settimeout(wait)
            chunk = self.sock.recv(min(size, 1 << 20))
            if not chunk:
                raise ConnectionError("the caller left")
            self.taken += len(chunk)
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)


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
