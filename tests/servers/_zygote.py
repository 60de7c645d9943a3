"""A fork server for the fixture MCP servers: the suite's cost of `import mcp`, paid once.

`import mcp` (2.x) takes 0.7 s of CPU, whatever is imported from it, and a full run starts about
300 fixture servers: a fifth of the suite's CPU on a 2-core machine. So the suite starts one
process that has imported it (`python _zygote.py --serve`, from conftest.py), and a fixture
server's first line hands its process over to it (`hand_over()`): the zygote forks a child that
takes the fixture's stdin, stdout and stderr, folder, environment and argv, and runs the script
as `python script.py` would. The process toolkernel started stays as the child's stand-in until
the child ends, and exits as the child did:

- the child's exit code, or the signal that ended it, is the stand-in's;
- a SIGTERM, SIGINT or SIGHUP sent to the stand-in (its process group, as toolkernel sends them)
  goes to the child's process group;
- a stand-in killed outright (SIGKILL) has the child's process group killed.

So a fixture server is still a real process on real pipes, started by toolkernel's own code.
Without a zygote (a fixture run by hand, or another checkout's), and for a fixture that a test
starts itself, `hand_over()` returns and the script imports what it needs itself.
"""

from __future__ import annotations

import array
import hashlib
import json
import os
import signal
import socket
import struct
import sys

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_serving = False  # set in the zygote and its children: their `hand_over()` is a no-op


def address() -> str:
    """An abstract socket of this checkout and this Python: nothing on disk to clean or guard."""
    key = f"{os.path.realpath(__file__)}\0{os.path.realpath(sys.executable)}\0{os.getuid()}"
    return "\0toolkernel-test-zygote-" + hashlib.sha256(key.encode()).hexdigest()[:24]


# -- the stand-in: the process toolkernel started -------------------------------------------------


def hand_over() -> None:
    """Run this fixture in a child of the zygote and exit as it does; return when there is none.

    Only for a fixture toolkernel started (it sets PYTHONSAFEPATH for its programs): it stops one
    through its process group, whose signals the stand-in passes on and outlives. A test that
    starts an HTTP fixture itself kills the process and starts another on the same port: a child
    killed only once its stand-in was would still hold the port (one run failed so)."""
    if _serving or not os.environ.get("PYTHONSAFEPATH"):
        return
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(address())
        request = json.dumps({"argv": [os.path.abspath(sys.argv[0]), *sys.argv[1:]], "cwd": os.getcwd(),
                              "env": dict(os.environ)}).encode()
        conn.sendmsg([struct.pack("!I", len(request))],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
        conn.sendall(request)
    except OSError:
        conn.close()
        return  # no zygote: run here
    _stand_in(conn)


def _stand_in(conn: socket.socket) -> None:
    # The pipes are the child's now: toolkernel sees their end when the child's ends.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    for number in _FORWARDED:
        signal.signal(number, lambda number, frame: conn.sendall(b"K%d\n" % number))
    said = b""
    while not said.endswith(b"\n"):
        try:
            piece = conn.recv(64)
        except InterruptedError:
            continue
        if not piece:
            os._exit(1)  # the zygote went away
        said += piece
    ended = json.loads(said)
    if "signal" in ended:
        signal.signal(ended["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), ended["signal"])
    os._exit(ended["exit"])


# -- the zygote ------------------------------------------------------------------------------------


def serve(ready_fd: int) -> None:
    import selectors

    global _serving
    _serving = True
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address())
    except OSError:
        os.write(ready_fd, b"taken\n")  # another run of this checkout serves: its zygote is used
        return
    listener.listen(64)
    os.write(ready_fd, b"ready\n")
    os.close(ready_fd)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, ("listener", None))
    children: dict[int, tuple[socket.socket, int]] = {}  # pid -> (stand-in's connection, pidfd)
    while True:
        for key, _ in selector.select():
            kind, pid = key.data
            if kind == "listener":
                _accept(listener, selector, children)
            elif kind == "stand-in":
                _heard(key.fileobj, pid)
            else:
                _ended(pid, selector, children)


def _preload() -> None:
    """What the fixture servers import, imported once (forks share it)."""
    import anyio  # noqa: F401
    import mcp.server.stdio  # noqa: F401

    import toolkernel._mcp_sdk  # noqa: F401  (the SDK's client, servers and types, either major)


_REQUEST_SECONDS = 2  # a stand-in sends its request as it connects


def _accept(listener, selector, children) -> None:
    import selectors

    conn, _ = listener.accept()
    # One request at a time: a connection that says nothing must not hold every fixture start up.
    conn.settimeout(_REQUEST_SECONDS)
    try:
        request, fds = _request(conn)
    except (OSError, ValueError):
        conn.close()
        return
    conn.settimeout(None)
    if not _ours(conn, request):
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    pid = os.fork()
    if pid == 0:
        listener.close()
        _child(request, fds)  # never returns
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    children[pid] = (conn, pidfd)
    selector.register(conn, selectors.EVENT_READ, ("stand-in", pid))
    selector.register(pidfd, selectors.EVENT_READ, ("child", pid))


def _request(conn: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    head, ancillary, _, _ = conn.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if len(head) != 4 or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ValueError("not a stand-in's request")
    size, body = struct.unpack("!I", head)[0], b""
    while len(body) < size:
        piece = conn.recv(size - len(body))
        if not piece:
            raise ValueError("cut short")
        body += piece
    return json.loads(body), list(fds)


def _ours(conn: socket.socket, request: dict) -> bool:
    """A process of this user, running one of these fixtures: an abstract socket has no permissions
    of its own, and anyone else's request would run their script as this user."""
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    argv = request.get("argv")
    return (uid == os.getuid() and isinstance(argv, list) and bool(argv) and all(isinstance(a, str) for a in argv)
            and os.path.dirname(os.path.realpath(argv[0])) == os.path.dirname(os.path.realpath(__file__))
            and isinstance(request.get("cwd"), str) and isinstance(request.get("env"), dict))


def _heard(conn: socket.socket, pid: int) -> None:
    """A signal the stand-in was sent, for the child's group; or the stand-in gone: the group killed."""
    try:
        said = conn.recv(64)
    except OSError:
        said = b""
    for line in said.split(b"\n"):
        if line.startswith(b"K") and line[1:].isdigit():
            _signal_group(pid, int(line[1:]))
    if not said:
        _signal_group(pid, signal.SIGKILL)


def _signal_group(pid: int, number: int) -> None:
    try:
        os.killpg(pid, number)
    except (ProcessLookupError, PermissionError):
        pass


def _ended(pid: int, selector, children) -> None:
    conn, pidfd = children.pop(pid)
    selector.unregister(conn)
    selector.unregister(pidfd)
    os.close(pidfd)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    try:
        conn.sendall(json.dumps({"signal": -code} if code < 0 else {"exit": code}).encode() + b"\n")
    except OSError:
        pass
    conn.close()


def _child(request: dict, fds: list[int]) -> None:
    """In the fork: become the fixture server the stand-in was started as."""
    code = 1
    try:
        os.setsid()  # a group of its own, signalled as the stand-in's was
        for number in _FORWARDED:
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.closerange(3, 1 << 16)
        sys.stdin = open(0, encoding="utf-8", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False, buffering=1)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        code = _run(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - shown as Python would, then the exit code Python gives
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _run(argv: list[str]) -> int:
    import runpy

    sys.argv = list(argv)
    # As `python script.py` makes it: the script's folder first, unless PYTHONSAFEPATH (which
    # toolkernel sets for the programs it starts) leaves it out.
    if os.environ.get("PYTHONSAFEPATH"):
        del sys.path[0]
    else:
        sys.path[0] = os.path.dirname(argv[0])
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--serve"]:
    import _zygote  # the module the fixtures import, so that they see it serving

    _zygote.serve(int(sys.argv[2]))
