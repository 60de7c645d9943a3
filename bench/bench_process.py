"""Micro-benchmark: one child process of a 5 ms command, started and waited for four ways.

    python bench/bench_process.py [--calls 300]

Per call, alternating call by call so that load from other processes falls on each alike:
1. `subprocess.run(argv, capture_output=True)`: the baseline of bench_commands.py;
2. the same with `start_new_session=True`: what a new session costs (scheduler
   autogroups make `setsid` take milliseconds on some machines);
3. `asyncio.create_subprocess_exec` + read both pipes + wait: what run_capped used before;
4. `_process.run_capped`: a pidfd and non-blocking pipes on the running loop.
Medians of wall time and of the calling thread's CPU time (the child's own is not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import time

from toolkernel._process import run_capped

ARGV = ["sleep", "0.005"]
CAP = 16 * 1024 * 1024


async def _asyncio_subprocess() -> None:
    process = await asyncio.create_subprocess_exec(
        *ARGV, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True)
    await asyncio.gather(process.stdout.read(), process.stderr.read())
    await process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    ways = {
        "subprocess.run": lambda: subprocess.run(ARGV, capture_output=True),
        "subprocess.run, new session": lambda: subprocess.run(ARGV, capture_output=True,
                                                              start_new_session=True),
        "asyncio.create_subprocess_exec": lambda: loop.run_until_complete(_asyncio_subprocess()),
        "run_capped": lambda: loop.run_until_complete(
            run_capped(ARGV, stdout_cap=CAP, stderr_cap=CAP, timeout=30)),
    }
    for way in ways.values():  # warm-up
        way()
    wall: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.calls):
        for name, way in ways.items():
            cpu_start, started = time.thread_time(), time.perf_counter()
            way()
            wall[name].append(time.perf_counter() - started)
            cpu[name].append(time.thread_time() - cpu_start)
    loop.close()
    base = statistics.median(wall["subprocess.run"])
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"one child of {ARGV}, {args.calls} calls each, load average {load}; medians")
    for name in ways:
        median = statistics.median(wall[name])
        print(f"  {name:<32} {median * 1e3:7.3f} ms  {median / base:6.3f}x"
              f"  thread CPU {statistics.median(cpu[name]) * 1e3:6.3f} ms")


if __name__ == "__main__":
    main()
