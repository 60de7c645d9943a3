"""The `tools` (and `display`) executable on a host `%%bash` cell's PATH.

It forwards argv, the working directory and, when the kernel asks for it,
stdin to the kernel over the run's Unix socket, and prints what comes back.
Started as `python -IS`, it imports only modules built into the interpreter
(`posix`, `_socket`, `sys`): the socket and json modules would triple its start.

Wire format (integers are 4-byte big-endian):
    request   count, then count fields (length + bytes): secret, kind, cwd,
              stdin-ready ("1"/"0"), argv...
    replies   b"S": send stdin as one field, then read the final reply;
              b"R" exit-code, stdout field, stderr field.
The secret comes first: the kernel reads nothing after it for a secret that
opens no run, and the rest only up to what a command line can hold (see
_channel.py). It may answer and close before it has read the whole request,
so a failed send is followed by a look for that answer.
"""

import _signal
import _socket
import posix
import sys

# ^C ends the shim as it ends any program, by the signal: bash, told of the same ^C, then stops
# the script too (a shim that exited with a status let bash run on to the next line).
_signal.signal(_signal.SIGINT, _signal.SIG_DFL)

_S_IFMT, _FIFO, _REG, _SOCK = 0o170000, 0o010000, 0o100000, 0o140000


def _field(data):
    return len(data).to_bytes(4, "big") + data


def _exact(sock, size):
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("the kernel closed the channel")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_field(sock):
    return _exact(sock, int.from_bytes(_exact(sock, 4), "big"))


def _send(sock, data):
    """Send, then read the kernel's next reply byte; one that refused the request (a
    finished run's secret, too large a command line) may have closed before reading it all."""
    try:
        sock.sendall(data)
    except OSError as exc:
        try:
            return _exact(sock, 1)
        except OSError:
            raise exc from None
    return _exact(sock, 1)


def _stdin_ready():
    """A pipe or a file on stdin may be the call's input; a tty or /dev/null never is."""
    try:
        mode = posix.fstat(0).st_mode & _S_IFMT
    except OSError:
        return False
    return mode in (_FIFO, _REG, _SOCK)


def _read_stdin():
    chunks = []
    while True:
        chunk = posix.read(0, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _write(fd, data):
    while data:
        data = data[posix.write(fd, data):]


def _fail(message):
    # The json module would double the start; a message needs only these escaped.
    text = "".join(c if c >= " " and c not in '"\\' else "\\u%04x" % ord(c) for c in message)
    line = '{"error": {"code": "unavailable", "message": "%s", "retryable": false}}\n' % text
    _write(2, line.encode())
    return 1


def main():
    env = posix.environ
    path, secret = env.get(b"TOOLKERNEL_TOOLS_SOCKET"), env.get(b"TOOLKERNEL_TOOLS_SECRET")
    if not path or not secret:
        return _fail("tools: no toolkernel channel here (run it inside a %%bash cell of a toolkernel kernel)")
    kind = b"display" if sys.argv[0].rsplit("/", 1)[-1] == "display" else b"tools"
    ready = _stdin_ready()
    fields = [secret, kind, posix.getcwd().encode("utf-8", "surrogateescape"), b"1" if ready else b"0"]
    fields += [a.encode("utf-8", "surrogateescape") for a in sys.argv[1:]]
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path)
        reply = _send(sock, len(fields).to_bytes(4, "big") + b"".join(_field(f) for f in fields))
        if reply == b"S":
            reply = _send(sock, _field(_read_stdin() if ready else b""))
        if reply != b"R":
            raise ConnectionError("the kernel sent no answer")
        code = int.from_bytes(_exact(sock, 4), "big")
        out, err = _read_field(sock), _read_field(sock)
    except (OSError, ConnectionError) as exc:
        return _fail(f"tools: the toolkernel channel failed: {exc}")
    try:
        _write(1, out)
        _write(2, err)
    except BrokenPipeError:  # `tools ... | head -1`: the reader left, as for any command
        return 141
    return code


if __name__ == "__main__":
    sys.exit(main())
