"""Benchmark: what a command-tool call costs over `subprocess.run` of the same argv.

    python bench/bench_commands.py [--calls 100] [--repeat 5]

The command sleeps about 5 ms (`python -c` would cost more than that to start, so
the argv is the `sleep` program). Measured, per call:
1. `subprocess.run(argv, capture_output=True)` in a loop: the baseline.
2. `tools sleep5 ms=5` in a script loop, minus the same loop running `:` (the shell's
   own loop cost). This is the whole path: parse, schema, policy, template, slots,
   run_capped, result. Target: within 1.2x of the baseline.
3. `toolkernel.call("sleep5", ms=5)`-like direct calls (`_direct.call_argv`), no shell.

Each figure is the median (and the best) of --repeat interleaved runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time

from bench_tools import interleaved, loop_script, project_dir, timed_script

from toolkernel._frontends._direct import call_argv
from toolkernel._session import Session

TARGET_RATIO = 1.2
ARGV = ["sleep", "0.005"]
CONFIG = """\
[tools.sleep5]
description = "sleep a few milliseconds (benchmark tool)"
command = ["sleep", "0.00{{ input.ms }}"]
parameters = { type = "object", properties = { ms = { type = "integer", minimum = 1, maximum = 9 } } }
read_only = true
"""


def baseline(calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        subprocess.run(ARGV, capture_output=True, check=True)
    return time.perf_counter() - started


def direct(session: Session, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call_argv(session, ["sleep5", "ms=5"])
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    project = project_dir()
    (project / "toolkernel.toml").write_text(CONFIG)
    session = Session(project)
    try:
        timed_script(session, loop_script("tools sleep5 ms=5", 5))  # warm-up: imports, caches
        t = interleaved(args.repeat, {
            "baseline": lambda: baseline(args.calls),
            "script": lambda: timed_script(session, loop_script("tools sleep5 ms=5", args.calls)),
            "empty": lambda: timed_script(session, loop_script(":", args.calls)),
            "direct": lambda: direct(session, args.calls),
        })
    finally:
        session.close()
    ms = {name: tuple(v / args.calls * 1e3 for v in pair) for name, pair in t.items()}
    script = tuple(ms["script"][i] - ms["empty"][i] for i in (0, 1))
    ratio = script[0] / ms["baseline"][0]
    rows = [
        ("subprocess.run of the argv (baseline)", ms["baseline"]),
        ("tools sleep5 in a script (minus the bare loop)", script),
        ("direct call (_direct.call_argv, no shell)", ms["direct"]),
    ]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())  # the machine may be shared
    print(f"command-tool bench: {args.calls} calls of {ARGV}, {args.repeat} interleaved runs,"
          f" load average {load}; per call: median, best")
    for name, (median, best) in rows:
        print(f"  {name:<48}  {median:8.2f} ms  {best:8.2f} ms")
    verdict = "ok" if ratio <= TARGET_RATIO else "MISSED"
    print(f"  {'script / baseline':<48}  {ratio:8.3f}x  {verdict} (target <= {TARGET_RATIO:g}x)")
    print(f"  {'direct / baseline':<48}  {ms['direct'][0] / ms['baseline'][0]:8.3f}x")


if __name__ == "__main__":
    main()
