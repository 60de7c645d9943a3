"""Peak memory of a run against the size of its output.

    python bench/bench_memory.py [--mb 8]

Each size runs in a fresh child process: it opens a session, runs `cat` of a
file of that size (the output goes through the cell's limiter and is saved),
and reports how far its peak RSS rose above the same process after an empty
run (the baseline of the same child). Target: at most 2x the output's size.
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
import json, resource, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from toolkernel._session import Session
class Quiet:
    def stdout(self, t): pass
    def stderr(self, t): pass
    def image(self, p): pass
    def progress(self, *a): pass
s = Session(Path({work!r}))
s.run_script("true", Quiet())
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = s.run_script("cat data.txt", Quiet())
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"base_kb": base, "peak_kb": peak, "exit": result.exit_code}}))
"""


def measure(mb: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        (work / "data.txt").write_text(("x" * 99 + "\n") * (mb * 10_000))
        env = {**os.environ, "XDG_CONFIG_HOME": str(Path(tmp) / "xdg")}
        out = subprocess.run([sys.executable, "-c", CHILD.format(repo=str(REPO), work=str(work))],
                             env=env, capture_output=True, text=True, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, nargs="*", default=[2, 8])
    options = parser.parse_args()
    print(f"{'output':>8}{'rise':>10}{'ratio':>8}  (peak RSS above an empty run in the same process)")
    for mb in options.mb:
        got = measure(mb)
        rise_mb = (got["peak_kb"] - got["base_kb"]) / 1024
        print(f"{mb:>6}MB{rise_mb:>8.1f}MB{rise_mb / mb:>7.1f}x  exit {got['exit']} (target <= 2x)")


if __name__ == "__main__":
    main()
