"""The `%%bash` channel under hostile and idle callers: real Unix sockets against a real
`Channel`, and real cells (host bash, the real shim, the github fixture server) through
`Session.run_script` with a short idle timeout, so no test waits long.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from kernel_helpers import RecordingSink, error_lines, github_toml, isolated_env, policy_toml, write_config

pytestmark = pytest.mark.timeout(180)

IDLE = 0.4  # seconds: short, so the tests that wait for it wait little


@pytest.fixture
def session_and_channel(tmp_path, monkeypatch):
    from toolkernel._runners._hostbash._channel import Channel
    from toolkernel._session import Session

    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "work"
    work.mkdir()
    write_config(work, github_toml(load="on-demand") + policy_toml())
    session, channel = Session(work), Channel(idle=IDLE, readers=4)
    yield session, channel
    channel.close()
    session.close()


@pytest.fixture
def open_run(session_and_channel):
    """A run whose secret the channel knows, as while a cell runs."""
    from toolkernel import _loop
    from toolkernel._approval._run import NO_EVENTS

    session, channel = session_and_channel
    run = channel.open(_loop.run(session.prepare()), NO_EVENTS, stop=lambda: None)
    yield channel, run
    channel.close_run(run)


def run_cell(session_and_channel, script: str):
    from toolkernel._runners._hostbash._runner import HostBashRunner

    session, channel = session_and_channel
    sink = RecordingSink()
    result = session.run_script(script, sink, runner=HostBashRunner(channel))
    return result, "".join(sink.out), "".join(sink.err)


def connect(channel) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(60)  # only a guard: every wait below ends on the server's own act
    sock.connect(str(channel.socket_path))
    return sock


def field(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def until_closed(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (waits on that close)."""
    received = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:  # it closed with our unread bytes in its queue
            return received
        if not chunk:
            return received
        received += chunk


def reply_codes(reply: bytes) -> list[str]:
    assert reply[:1] == b"R", reply
    out_size = int.from_bytes(reply[5:9], "big")
    return [e["code"] for e in error_lines(reply[9 + out_size + 4:].decode())]


# -- what is read before the secret is known ----------------------------------------


def test_a_request_without_a_runs_secret_is_answered_from_its_head_and_never_read_on(open_run):
    channel, _ = open_run
    for secret in (b"0" * 64, b""):
        sock = connect(channel)
        # It declares 200 MB of arguments: the kernel must not wait for (or hold) them.
        sock.sendall((5).to_bytes(4, "big") + field(secret) + (200 << 20).to_bytes(4, "big") + b"x" * 65536)
        assert reply_codes(until_closed(sock)) == ["denied"]
        with pytest.raises(OSError):  # closed: the rest of the request has nowhere to go
            sock.sendall(b"x" * (1 << 20))
        sock.close()


def test_a_secret_larger_than_a_secret_is_not_read_at_all(open_run):
    channel, _ = open_run
    sock = connect(channel)
    sock.sendall((5).to_bytes(4, "big") + (200 << 20).to_bytes(4, "big") + b"x" * 65536)
    assert until_closed(sock) == b""
    with pytest.raises(OSError):
        sock.sendall(b"x" * (1 << 20))


def test_a_runs_call_is_held_to_what_a_command_line_can_pass(open_run):
    from toolkernel._runners._hostbash._channel import _MAX_ARGS

    channel, run = open_run
    sock = connect(channel)
    head = (6).to_bytes(4, "big") + field(run.secret.encode()) + field(b"tools") + field(b"/") + field(b"0")
    sock.sendall(head + field(b"github") + (_MAX_ARGS + 1).to_bytes(4, "big") + b"x" * 65536)
    reply = until_closed(sock)
    assert reply_codes(reply) == ["invalid_input"] and b"stdin" in reply
    with pytest.raises(OSError):
        sock.sendall(b"x" * (_MAX_ARGS + 1))


# -- idle and slow callers -------------------------------------------------------------


def test_a_silent_or_half_sent_request_is_closed_after_the_idle_time(open_run):
    channel, run = open_run
    partial = [b"", (5).to_bytes(4, "big") + b"\x00\x00", (5).to_bytes(4, "big") + field(b"0" * 64)[:20],
               # the secret is right, but the request never ends
               (6).to_bytes(4, "big") + field(run.secret.encode()) + field(b"tools") + field(b"/")]
    for sent in partial:
        sock = connect(channel)
        sock.sendall(sent)
        assert until_closed(sock) == b"", sent
        sock.close()


def test_a_caller_dripping_its_head_is_closed_within_the_idle_time_of_its_start(open_run):
    channel, _ = open_run
    sock = connect(channel)
    head = (5).to_bytes(4, "big") + field(b"0" * 64)
    for byte in head:  # each byte well inside the idle time, all of them far beyond it
        try:
            sock.send(bytes([byte]))
        except OSError:
            break
        time.sleep(IDLE / 4)  # the drip is the test's caller, not a wait for the server
    assert until_closed(sock) == b""  # no answer: it was closed before its secret was whole


def test_many_idle_connections_take_no_more_threads_than_the_readers(session_and_channel, open_run):
    from toolkernel._runners._hostbash._channel import READING, SERVING

    channel, _ = open_run
    reading, serving, done = [0], [0], threading.Event()
    earlier = {t.ident for t in threading.enumerate()}  # an earlier test's call may still be ending

    def watch() -> None:
        while not done.is_set():
            names = [t.name for t in threading.enumerate() if t.ident not in earlier]
            reading[0], serving[0] = max(reading[0], names.count(READING)), max(serving[0], names.count(SERVING))
            done.wait(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        idle = [connect(channel) for _ in range(40)]
        # A real call made while they wait is served in its turn, not refused.
        result, out, err = run_cell(session_and_channel, "tools github get-pull repo=acme/api number=101 | jq .number")
        assert (result.exit_code, out) == (0, "101\n"), err
        for sock in idle:
            assert until_closed(sock) == b""
            sock.close()
    finally:
        done.set()
        watcher.join()
    assert 1 <= reading[0] <= 4 and serving[0] <= 1  # the real call's thread, once its request was read


def test_a_call_waiting_on_a_slow_stdin_is_not_idle(session_and_channel):
    # The shim reads its stdin only once the kernel asks for it: the producer may take long.
    slow = f"sleep {IDLE * 4}; echo '{{\"repo\": \"acme/api\", \"number\": 101}}'"
    result, out, err = run_cell(session_and_channel, f"{{ {slow}; }} | tools github get-pull | jq .number")
    assert (result.exit_code, out) == (0, "101\n"), err


def test_a_finished_runs_caller_is_told_so_whatever_the_size_of_its_call(session_and_channel, tmp_path):
    import os
    import subprocess

    session, channel = session_and_channel
    result, out, _ = run_cell(session_and_channel, 'echo "$TOOLKERNEL_TOOLS_SECRET"; command -v tools')
    secret, shim = out.split()
    env = {"PATH": os.environ["PATH"], "TOOLKERNEL_TOOLS_SOCKET": str(channel.socket_path),
           "TOOLKERNEL_TOOLS_SECRET": secret}
    big = ["x" * 100_000] * 15  # 1.5 MB: more than the socket's buffers, less than a command line
    for argv in ([], big):
        called = subprocess.run([shim, "github", "list-pulls", *argv], env=env, capture_output=True, text=True,
                                timeout=60, stdin=subprocess.DEVNULL)
        assert called.returncode == 1 and [e["code"] for e in error_lines(called.stderr)] == ["denied"]
