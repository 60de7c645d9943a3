"""A large output's memory stays proportional to it during the run and comes back down
after it (toolkernel/_runners/_shell.py, _outputs.py, _bashkit.py), and a large tool result
streams whole to the cell, a file or a pipe. Memory is measured in a child process with a
real session, so the test runner's own memory does not blur it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_helpers import RecordingSink, isolated_env
from toolkernel import tool
from toolkernel._session import Session

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[1]
CHILD = """
import gc, json, sys
from pathlib import Path
from toolkernel import tool
from toolkernel._session import Session

@tool("big-result", description="A result of `size` characters.", kind="read",
      input_schema={"type": "object", "properties": {"size": {"type": "integer"}}})
def big_result(arguments, ctx):
    return ("z" * 99 + "\\n") * (arguments["size"] // 100)

def status_mb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024

class Quiet:
    def stdout(self, t): pass
    def stderr(self, t): pass
    def image(self, p): pass
    def progress(self, *a): pass

work = Path(sys.argv[1])
session = Session(work)
session.register_tools([big_result])
session.run_script("tools big-result size=100", Quiet())  # what a call imports, imported
gc.collect()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from here: the session's start peaked higher
before = status_mb("VmRSS")
result = session.run_script(sys.argv[2], Quiet())
rise = status_mb("VmHWM") - before
size = (work / result.saved_output).stat().st_size
del result
gc.collect()
print(json.dumps({"before": before, "after": status_mb("VmRSS"), "rise": rise, "size": size}))
"""


def peak_of(tmp_path, script: str) -> dict:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "data.txt").write_text(("x" * 99 + "\n") * 80_000)  # 8 MB
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    out = subprocess.run([sys.executable, "-c", CHILD, str(work), script], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("script", ["cat data.txt", "cat data.txt\ntools --help > /dev/null",
                                    "tools big-result size=8000000",
                                    "for i in 1; do tools big-result size=8000000; done"])
def test_a_large_output_peaks_near_its_size_and_its_memory_comes_back(tmp_path, script):
    # With a `tools` call in the script, or a tool's result printed, the peak was about 8x
    # (Bashkit's execute_sync and the result's copies into Rust); in a loop until the relay
    # (`_bashkit._Relay`) too.
    got = peak_of(tmp_path, script)
    assert got["size"] == 8_000_000
    # The target is 2x; 2.5x leaves room for the allocator.
    assert got["rise"] < 2.5 * 8, got
    # Held at its peak, the process stays about 9 MB above where it was (glibc keeps what was freed).
    assert got["after"] - got["before"] < 4, got


@tool("big-result", description="A result of `size` characters.", kind="read",
      input_schema={"type": "object", "properties": {"size": {"type": "integer"}}})
def big_result(arguments, ctx):
    return ("z" * 99 + "\n") * (arguments["size"] // 100)


@pytest.fixture
def session(tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "work"
    work.mkdir()
    s = Session(work)
    s.register_tools([big_result])
    yield s
    s.close()


@pytest.mark.slow
def test_a_large_result_streams_whole_to_a_file_a_pipe_and_a_substitution(session):
    sink = RecordingSink()
    # 1 MB to the file: Bashkit (0.20.1) appends each streamed piece of a redirected output by
    # rewriting the whole file (its real filesystem's `append`), so 8 MB took over a minute.
    result = session.run_script("tools big-result size=1000000 > big.txt\nwc -c < big.txt\n"
                                "tools big-result size=8000000 | wc -c\n"
                                "x=$(tools big-result size=3000000); echo ${#x}", sink)
    assert result.exit_code == 0, sink.stderr_text
    assert sink.stdout_text.split() == ["1000000", "8000000", "2999999"]  # $(...) drops the last newline
    assert (session.workdir / "big.txt").read_text() == ("z" * 99 + "\n") * 10_000


def test_a_reader_that_stops_early_ends_the_result_quietly(session):
    # A reader that leaves (`head`) ends the writer as SIGPIPE would: no error line.
    sink = RecordingSink()
    result = session.run_script("tools big-result size=2000000 | head -c 5; echo; echo next", sink)
    assert result.exit_code == 0, sink.stderr_text
    assert sink.stdout_text == "zzzzz\nnext\n"
    assert sink.stderr_text == ""
