"""Peak memory of a run against the size of its output.

    python bench/bench_memory.py [--mb 2 8 32]

Each size and script runs in a fresh child process: it opens a session, runs
`cat` of a file of that size (the output goes through the cell's limiter and
is saved), and reports how far its peak RSS (VmHWM, reset first) rose above
its RSS after a small run in the same child, and where its RSS is after the
cell. Three scripts: one that calls no tool (Bashkit's byte sinks), the same
with a `tools` call in it (Bashkit's execute_sync, kept for cheaper calls), and
a tool whose result is that size, printed.
Past 10 MiB Bashkit cuts the script's output (the run fails, loudly): the
ratio is then against what arrived. Target: at most 2x the output's size.
Tried 2026-11-30 (bench_builtin_paths.py): every script on the byte sinks with an async
`tools` builtin took "with tools" from 8.0x to 1.1x at 8 MB, but left "tool result" at 7.6x
(so most copies of a big result are not on the output path the byte sinks fix), peaked
at 244 MB against 174 for a 32 MB result and left 60-121 MB behind after it, and cost
150-250 us more a call.
Later the same day (load 5.8-7.9): no tools 1.2x, with tools 8.0x, tool result 7.8x at
8 MB. A sync `tools` builtin under the byte sinks now costs what it costs under
execute_sync, but holds back the script's output while it runs (see
`_bashkit._streamed`), so scripts that call tools keep execute_sync and its ~8x. Where
the 63 MB of a printed 8 MB result go, by VmRSS/VmHWM marks in one run: the tool's
result 8 MB (the only copy toolkernel holds: dispatcher, render and the command pass the
same str on); `BuiltinResult` copies it into Rust at once, +15 MB at its peak; then
Bashkit's execute_sync, before its first `on_output`, +38 MB (its stdout buffers and the
str it hands over); our limiter +2 MB. Returning a plain str instead of a
`BuiltinResult` saved one copy in bare Bashkit (54 against 61 MB) but nothing in the
session (63 MB both), and kept 7 MB after the run: not taken.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHILD = """
import gc, json, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from toolkernel import tool
from toolkernel._session import Session
@tool("big-result", description="A result of `size` characters.", kind="read",
      input_schema={{"type": "object", "properties": {{"size": {{"type": "integer"}}}}}})
def big_result(arguments, ctx):
    return ("z" * 99 + "\\n") * (arguments["size"] // 100)  # built once: a second copy would be the tool's
class Quiet:
    def stdout(self, t): pass
    def stderr(self, t): pass
    def image(self, p): pass
    def progress(self, *a): pass
def status_kb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
def reset_peak():  # Linux: VmHWM starts again from VmRSS (the session's start peaked higher)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
work = Path({work!r})
s = Session(work)
s.register_tools([big_result])
s.run_script("tools big-result size=10", Quiet())  # the first call imports what calls need
gc.collect()
reset_peak()
base = before = status_kb("VmRSS")
result = s.run_script({script!r}, Quiet())
peak = status_kb("VmHWM")
arrived = (work / result.saved_output).stat().st_size if result.saved_output else 0
exit_code = result.exit_code
del result
gc.collect()
print(json.dumps({{"base_kb": base, "peak_kb": peak, "before_kb": before, "after_kb": status_kb("VmRSS"),
                  "arrived": arrived, "exit": exit_code}}))
"""
SCRIPTS = {"no tools": "cat data.txt", "with tools": "cat data.txt\ntools --help > /dev/null",
           "tool result": "tools big-result size={size}"}


def measure(mb: int, script: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        (work / "data.txt").write_text(("x" * 99 + "\n") * (mb * 10_000))
        env = {**os.environ, "XDG_CONFIG_HOME": str(Path(tmp) / "xdg")}
        child = CHILD.format(repo=str(REPO), work=str(work), script=script.format(size=mb * 1_000_000))
        out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True,
                             check=True).stdout
        return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, nargs="*", default=[2, 8, 32])
    options = parser.parse_args()
    print(f"{'output':>8} {'script':<11}{'arrived':>9}{'rise':>9}{'ratio':>7}{'after':>8}"
          "  (peak RSS above RSS before the run; RSS after the cell above before it)")
    for mb in options.mb:
        for name, script in SCRIPTS.items():
            got = measure(mb, script)
            arrived = got["arrived"] / 1e6  # nothing when a Bashkit budget ended the run first
            rise = (got["peak_kb"] - got["base_kb"]) / 1024
            after = (got["after_kb"] - got["before_kb"]) / 1024
            ratio = f"{rise / arrived:>6.1f}x" if arrived else f"{'-':>7}"
            print(f"{mb:>6}MB {name:<11}{arrived:>7.1f}MB{rise:>7.1f}MB{ratio}{after:>6.1f}MB"
                  f"  exit {got['exit']} (target <= 2x)")


if __name__ == "__main__":
    main()
