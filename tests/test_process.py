"""`_process.run_capped` with real child processes: caps, timeouts and cancellation
kill the whole tree, grandchildren included; output is decoded with replacement."""

from __future__ import annotations

import asyncio
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolkernel._process import run_capped

pytestmark = pytest.mark.timeout(120)

PY = sys.executable
MiB = 1024 * 1024


def _spawner(pid_file: Path, then: str) -> list[str]:
    """A child that starts a grandchild (`sleep 300`), writes its pid, then runs `then`."""
    code = (
        "import subprocess, sys, time\n"
        "g = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(g.pid))\n"
        f"{then}\n"
    )
    return [PY, "-c", code]


def alive(pid: int) -> bool:
    """Running, not a zombie (the container's init may be slow to reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_dead(pid: int, within: float = 30) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def run(coro):
    return asyncio.run(coro)


def test_output_and_exit_code_of_a_plain_run():
    done = run(run_capped([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                          stdout_cap=MiB, stderr_cap=MiB))
    assert (done.returncode, done.stdout_text, done.stderr_text) == (3, "out\n", "err\n")
    assert done.over_cap is None and not done.timed_out


def test_stdin_is_fed_and_closed():
    done = run(run_capped([PY, "-c", "import sys; print(sys.stdin.read()[::-1])"], stdin=b"abc",
                          stdout_cap=MiB, stderr_cap=MiB))
    assert done.stdout_text == "cba\n"


def test_stdin_larger_than_a_pipe_is_fed_while_the_output_is_read():
    data = bytes(range(256)) * 16384  # 4 MiB: many times a pipe's buffer, both ways at once
    done = run(run_capped(["cat"], stdin=data, stdout_cap=16 * MiB, stderr_cap=MiB, timeout=100))
    assert done.returncode == 0 and done.stdout == data


def test_a_child_that_ignores_its_stdin_still_finishes():
    done = run(run_capped([PY, "-c", "print('no reading')"], stdin=b"x" * (4 * MiB),
                          stdout_cap=MiB, stderr_cap=MiB, timeout=100))
    assert (done.returncode, done.stdout_text) == (0, "no reading\n")


def test_the_exit_code_comes_after_the_outputs_closed_early():
    code = "import os, sys, time; os.close(1); os.close(2); time.sleep(1); sys.exit(7)"
    done = run(run_capped([PY, "-c", code], stdout_cap=MiB, stderr_cap=MiB, timeout=100))
    assert done.returncode == 7 and not done.timed_out


def test_a_grandchild_holding_the_output_is_waited_for():
    # As with subprocess.run: the output is whole only when every writer closed it.
    code = "import subprocess; subprocess.Popen(['sh', '-c', 'sleep 1; echo late'])"
    done = run(run_capped([PY, "-c", code], stdout_cap=MiB, stderr_cap=MiB, timeout=100))
    assert (done.returncode, done.stdout_text) == (0, "late\n")


def test_the_loop_runs_on_while_a_child_runs():
    async def ticks_during_a_child():
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        await run_capped(["sleep", "0.5"], stdout_cap=MiB, stderr_cap=MiB, timeout=100)
        ticker.cancel()
        return ticks

    assert run(ticks_during_a_child()) >= 5


@pytest.mark.slow
def test_a_100_mib_producer_is_killed_at_the_cap_with_its_children(tmp_path):
    pid_file = tmp_path / "grandchild"
    flood = "chunk = b'x' * 65536\nfor _ in range(1600): sys.stdout.buffer.write(chunk)\ntime.sleep(300)"
    done = run(run_capped(_spawner(pid_file, flood), stdout_cap=16 * MiB, stderr_cap=MiB, timeout=100))
    assert done.over_cap == "stdout" and done.returncode is None and not done.timed_out
    assert len(done.stdout) == 16 * MiB
    assert wait_dead(int(pid_file.read_text())), "the grandchild outlived the cap"


def test_stderr_has_its_own_cap(tmp_path):
    done = run(run_capped([PY, "-c", "import sys; sys.stderr.write('e' * 5000)"],
                          stdout_cap=MiB, stderr_cap=1000))
    assert done.over_cap == "stderr" and len(done.stderr) == 1000


@pytest.mark.slow
def test_a_timeout_kills_a_grandchild_and_keeps_stderr_so_far(tmp_path):
    pid_file = tmp_path / "grandchild"
    then = "sys.stderr.write('working on it\\n'); sys.stderr.flush(); time.sleep(300)"
    done = run(run_capped(_spawner(pid_file, then), stdout_cap=MiB, stderr_cap=MiB, timeout=3))
    assert done.timed_out and done.returncode is None
    assert "working on it" in done.stderr_text
    assert wait_dead(int(pid_file.read_text())), "the grandchild outlived the timeout"


def test_cancelling_the_call_kills_the_tree(tmp_path):
    pid_file = tmp_path / "grandchild"

    async def cancel_when_started():
        task = asyncio.ensure_future(run_capped(_spawner(pid_file, "time.sleep(300)"),
                                                stdout_cap=MiB, stderr_cap=MiB))
        for _ in range(600):
            if pid_file.exists() and pid_file.read_text():
                break
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(cancel_when_started())
    assert wait_dead(int(pid_file.read_text())), "the grandchild outlived the cancellation"


def test_non_utf8_output_is_decoded_with_replacement():
    done = run(run_capped([PY, "-c", "import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe end')"],
                          stdout_cap=MiB, stderr_cap=MiB))
    assert done.stdout_text == "ok \ufffd\ufffd end"


def test_a_missing_program_raises_oserror():
    with pytest.raises(FileNotFoundError):
        run(run_capped(["/nonexistent/program-xyz"], stdout_cap=MiB, stderr_cap=MiB))


# What the child finds: a terminal?  session leader?  group leader?
_PROBE = ("import os\n"
          "try:\n    os.close(os.open('/dev/tty', os.O_RDWR)); tty = 'tty'\n"
          "except OSError:\n    tty = 'no-tty'\n"
          "print(tty, os.getsid(0) == os.getpid(), os.getpgid(0) == os.getpid())")
_RUN_PROBE = ("import asyncio, sys\nfrom toolkernel._process import run_capped\n"
              f"done = asyncio.run(run_capped([sys.executable, '-c', {_PROBE!r}], stdout_cap=2**20,"
              " stderr_cap=2**20, timeout=60))\n"
              "print('PROBE', done.stdout_text.strip(), done.stderr_text.strip())\n")


def test_without_a_terminal_the_child_leads_its_own_group():
    # A kernel has no controlling terminal (jupyter_client starts it with a session of its own).
    out = subprocess.run([PY, "-c", _RUN_PROBE], capture_output=True, text=True, timeout=120,
                         start_new_session=True).stdout
    assert "PROBE no-tty False True" in out, out


def test_with_a_terminal_the_child_gets_a_session_without_it():
    pid, fd = pty.fork()  # the child's controlling terminal is this pty
    if pid == 0:
        os.execv(PY, [PY, "-c", _RUN_PROBE])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        out += chunk
    os.close(fd)
    os.waitpid(pid, 0)
    assert "PROBE no-tty True True" in out.decode(errors="replace"), out


@pytest.mark.slow
def test_no_run_leaves_its_child_watched_by_the_loop():
    # Every end (exit, timeout after the outputs closed, a cap, cancellation) unregisters
    # the child's pipes and pidfd: a stale fd in the selector would misfire once its number is reused.
    closes_then_sleeps = "import os, time; os.close(1); os.close(2); time.sleep(300)"

    async def each_way():
        selector = asyncio.get_running_loop()._selector
        before = set(selector.get_map())
        await run_capped(["true"], stdout_cap=MiB, stderr_cap=MiB)
        await run_capped([PY, "-c", closes_then_sleeps], stdout_cap=MiB, stderr_cap=MiB, timeout=2)
        await run_capped([PY, "-c", "print('x' * 5000)"], stdout_cap=100, stderr_cap=MiB)
        task = asyncio.ensure_future(run_capped(["sleep", "300"], stdout_cap=MiB, stderr_cap=MiB))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return before, set(selector.get_map())

    before, after = run(each_way())
    assert after == before
