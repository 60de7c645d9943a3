"""Inside a sandbox with a network grant: `python -I -S _netbridge.py SOCKET PORT PROGRAM [ARG...]`.

The sandbox keeps a network namespace of its own (only its own loopback), so its programs
reach the host only through the proxy (`_egress.py`), whose Unix socket is bound in at
SOCKET. Programs speak to an HTTP proxy over TCP (`HTTPS_PROXY=http://127.0.0.1:PORT`), so
this listens on the sandbox's own 127.0.0.1:PORT, starts PROGRAM, relays each connection to
SOCKET as it is, and ends with PROGRAM's status once PROGRAM has ended. It decides nothing:
what may be reached is the proxy's to say, outside the sandbox.

Standard library only, started with `-I -S`: it runs before the program.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading

_CHUNK = 65536


def pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy one way until `source` ends, then end `sink`'s writing (the other way goes on)."""
    try:
        while chunk := source.recv(_CHUNK):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _relay(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    other = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
    other.start()
    pipe(client, upstream)
    other.join()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_relay, args=(client, path), daemon=True).start()


def main(argv: list[str]) -> None:
    path, port, program = argv[1], int(argv[2]), argv[3:]
    listener = socket.create_server(("127.0.0.1", port))  # before the program: it may connect at once
    child = os.fork()
    if child == 0:
        listener.close()
        try:
            os.execvp(program[0], program)
        except OSError as exc:
            sys.stderr.write(f"{program[0]}: {exc.strerror}\n")
            os._exit(127)
    # The program (in this process group) takes an interrupt as it would alone; this one
    # only follows it out.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128 + os.WTERMSIG(status))


if __name__ == "__main__":
    main(sys.argv)
