"""A direct call (`%tools` / `toolkernel.call`) against the same call inside a script.

    python bench/bench_direct.py [--calls 40] [--rounds 5]

Both call an in-process no-op tool through the same dispatcher. A round times
`--calls` direct calls, then one script of `--calls` `tools noop` lines; the
rounds are interleaved and the medians compared (target: direct <= 3x script).
The script's call limit is lifted for the benchmark (see bench_tools.timed_script).
Runs in a fresh temp workspace with no config.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolkernel import tool  # noqa: E402
from toolkernel._frontends._direct import call_argv  # noqa: E402
from toolkernel._session import Session  # noqa: E402
from bench_tools import timed_script  # noqa: E402


@tool("noop", description="Do nothing.", kind="read", input_schema={"type": "object"})
def noop(arguments, ctx):
    return ""


class _Quiet:
    def stdout(self, text): pass
    def stderr(self, text): pass
    def image(self, path): pass
    def progress(self, *args): pass


def per_direct_call(session: Session, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call_argv(session, ["noop"])
    return (time.perf_counter() - start) / calls


def per_script_call(session: Session, calls: int) -> float:
    # The call limit (50 a run) is lifted, as in bench_tools; the run's fixed cost is not the calls'.
    elapsed = timed_script(session, "tools noop\n" * calls)
    return (elapsed - timed_script(session, "true")) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_CONFIG_HOME"] = str(Path(tmp) / "xdg")
        work = Path(tmp) / "work"
        work.mkdir()
        session = Session(work)
        session.register_tools([noop])
        per_direct_call(session, 10), per_script_call(session, 10)  # warm up
        direct, script = [], []
        for _ in range(options.rounds):
            direct.append(per_direct_call(session, options.calls))
            script.append(per_script_call(session, options.calls))
        d, s = statistics.median(direct), statistics.median(script)
        best = min(direct) / min(script)
        print(f"per call, median (best) of {options.rounds} interleaved rounds of {options.calls} calls")
        print(f"in a script: {s * 1e6:8.1f} us ({min(script) * 1e6:.1f})   direct: {d * 1e6:8.1f} us"
              f" ({min(direct) * 1e6:.1f})   ratio: {d / s:.1f}x ({best:.1f}x) (target <= 3x)")
        session.close()


if __name__ == "__main__":
    main()
