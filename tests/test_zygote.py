"""The suite's fork server for fixture MCP servers (tests/servers/_zygote.py): a fixture run through
it behaves as the process toolkernel started, in what it is given and in how it ends."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SERVERS = Path(__file__).parent / "servers"
sys.path.insert(0, str(SERVERS))
import _zygote  # noqa: E402


@pytest.fixture
def zygote():
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(_zygote.address())
    except OSError:
        pytest.fail("conftest.py starts the fork server for every run: none listens")
    finally:
        probe.close()


def start(tmp_path, code: int = 0) -> tuple[subprocess.Popen, dict]:
    process = subprocess.Popen([sys.executable, str(SERVERS / "standin.py"), str(code)], cwd=tmp_path,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={"PATH": os.environ["PATH"], "STANDIN_MARK": "m-1", "PYTHONSAFEPATH": "1"}, start_new_session=True)
    said = json.loads(process.stdout.readline())
    return process, said


def gone(pid: int) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not os.path.exists(f"/proc/{pid}"):
            return True
        time.sleep(0.05)
    return False


def test_a_fixture_runs_in_a_fork_with_its_argv_folder_environment_and_exit_code(zygote, tmp_path):
    process, said = start(tmp_path, code=7)
    assert said["pid"] != process.pid and said["mcp"]  # a child of the fork server, which imported mcp
    assert said["argv"] == ["7"] and said["cwd"] == str(tmp_path) and said["mark"] == "m-1"
    process.stdin.close()
    assert process.wait(timeout=60) == 7 and gone(said["pid"])


def test_a_fixture_a_test_starts_itself_runs_in_place(zygote, tmp_path):
    process = subprocess.Popen([sys.executable, str(SERVERS / "standin.py"), "0"], cwd=tmp_path,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={"PATH": os.environ["PATH"]})
    said = json.loads(process.stdout.readline())
    process.stdin.close()
    assert said["pid"] == process.pid and process.wait(timeout=60) == 0


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_to_the_started_process_ends_the_fixture(zygote, tmp_path, number):
    process, said = start(tmp_path)
    os.killpg(process.pid, number)  # as toolkernel stops a server: its process group
    assert process.wait(timeout=60) == -number
    assert gone(said["pid"])


def test_a_request_for_a_script_outside_the_fixtures_is_refused(zygote, tmp_path):
    script = tmp_path / "elsewhere.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(SERVERS)!r})\nimport _zygote\n_zygote.hand_over()\n"
                      "print('ran here')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONSAFEPATH": "1"})
    assert done.returncode == 1 and "ran here" not in done.stdout


def test_a_connection_that_says_nothing_does_not_hold_up_the_next_fixture(zygote, tmp_path):
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(_zygote.address())
    try:
        process, said = start(tmp_path, code=3)  # waits out the silent one's time, then runs
        assert said["pid"] != process.pid
        process.stdin.close()
        assert process.wait(timeout=60) == 3
    finally:
        silent.close()
