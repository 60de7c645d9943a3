"""Benchmark: `tools read-file` in a script against `Path.read_text` of the same file.

    python bench/bench_read_file.py [--lines 200 2000] [--calls 200] [--repeat 5]

For each file size (lines of 60 characters), per call:
1. baseline: `Path(path).read_text()` in a Python loop;
2. the read-file tool alone (`tool.call` on this thread: resolve, open, number the lines);
3. `tools read-file path=data.txt` in a script loop, minus the same loop running `:`
   (the whole path: parse, schema, policy, one path resolution, the tool, the output);
4. of which the shell's own share: a bare Bashkit builtin handing back the same text
   in the same loop (minus that loop running `:`), a floor no tool can go under.

Each figure is the median (and the best) of --repeat interleaved rounds; the ratio is
(3) over (1). Target: at most 5x.

Measured 2026-11-30 (2 CPUs shared with three other helpers, load 2.6-3.1, so wall figures
move by 2x between runs; main and this tree alternated in the same minutes):
- this bench, medians: 200 lines 12.5-13.3x (main 12.5-12.8x), 2,000 lines 14.6x (main 14.8-17.3x);
- the CPU time of `ToolsCommand.handle_sync` (the whole call without Bashkit; thread time,
  best of 25 rounds): 200 lines 244-253 us (main 282-442), 2,000 lines 444-550 us (main 861-1,119).
Where a call's CPU goes at 200 lines (removing each part in turn, load 4.5): the jsonschema
check about 25%, the asyncio task that runs the call on the script thread about 20%, the tool
(open, read, number) about 20%, resolving the path, the policy and the command's own steps the
rest. System calls cost 2-4 us each on this VM: a call makes 13 (the path 3, the file 5, the
loop 2 epoll waits, 3 getpid), `read_text` 9. Numbering 2,000 lines in Python (split, join) is
itself about 5x `read_text` here, so 5x is out of reach at that size without numbering in C.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from bench_tools import interleaved, loop_script, project_dir, timed_script

from toolkernel import _loop
from toolkernel._providers._tools.files import read_file
from toolkernel._session import Session
from toolkernel._tool import ToolContext

TARGET = 5.0


def read_text_loop(path: Path, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        path.read_text()
    return time.perf_counter() - started


def bashkit_output_loop(text: str, calls: int, body: str = "emit") -> float:
    """Bashkit alone: a builtin that hands back `text`, called like `tools` in the script."""
    from bashkit import Bash, BuiltinResult

    bash = Bash(custom_builtins={"emit": lambda ctx: BuiltinResult(stdout=text, stderr="", exit_code=0)})
    started = time.perf_counter()
    bash.execute_sync(loop_script(body, calls))
    return time.perf_counter() - started


def tool_loop(session: Session, calls: int) -> float:
    ctx = ToolContext(workdir=session.workdir)
    started = time.perf_counter()
    for _ in range(calls):
        _loop.run_here(_loop.local_task(read_file.call({"path": "data.txt"}, ctx)))
    return time.perf_counter() - started


def with_cpu(measures: dict[str, callable]) -> dict[str, callable]:
    """Each measure with the CPU time this process spent in it (the clock of `os.times`,
    which `interleaved` reads otherwise, ticks in 10 ms: too coarse for 200 small calls)."""
    def timed(measure):
        def run() -> tuple[float, float]:
            started = time.process_time()
            seconds = measure()
            return seconds, time.process_time() - started
        return run
    return {name: timed(measure) for name, measure in measures.items()}


def bench_size(session: Session, lines: int, calls: int, repeat: int) -> dict[str, tuple[float, float]]:
    path = session.workdir / "data.txt"
    path.write_text("".join(f"{i:>8} " + "x" * 50 + "\n" for i in range(lines)))
    timed_script(session, loop_script("tools read-file path=data.txt", 3))  # warm: plan, validators
    output = _loop.run_here(_loop.local_task(read_file.call({"path": "data.txt"}, ToolContext(session.workdir))))
    text = output.texts[0] + "\n"
    cpu: dict[str, float] = {}
    t = interleaved(repeat, with_cpu({
        "shell_output": lambda: bashkit_output_loop(text, calls),
        "shell_empty": lambda: bashkit_output_loop(text, calls, ":"),
        "baseline": lambda: read_text_loop(path, calls),
        "tool": lambda: tool_loop(session, calls),
        "script": lambda: timed_script(session, loop_script("tools read-file path=data.txt", calls)),
        "empty": lambda: timed_script(session, loop_script(":", calls)),
    }), cpu)
    per = {name: (median / calls * 1e6, best / calls * 1e6) for name, (median, best) in t.items()}
    # CPU seconds of this process (all its threads): a loaded machine stretches wall time, not these.
    per["cpu"] = ((cpu["script"] - cpu["empty"]) / calls * 1e6, cpu["baseline"] / calls * 1e6)
    per["script"] = (per["script"][0] - per["empty"][0], per["script"][1] - per["empty"][1])
    per["shell"] = (per["shell_output"][0] - per["shell_empty"][0], per["shell_output"][1] - per["shell_empty"][1])
    return per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    session = Session(project_dir())
    try:
        print(f"read-file vs Path.read_text, {args.calls} calls, {args.repeat} interleaved rounds;"
              " per call: median, best")
        for lines in args.lines:
            per = bench_size(session, lines, args.calls, args.repeat)
            base, tool, script, shell = per["baseline"], per["tool"], per["script"], per["shell"]
            ratio = (script[0] / base[0], script[1] / base[1])
            verdict = "ok" if ratio[0] <= TARGET else "MISSED"
            print(f"  {lines:>5} lines: Path.read_text {base[0]:7.1f} / {base[1]:7.1f} us;"
                  f" tool alone {tool[0]:7.1f} / {tool[1]:7.1f} us;"
                  f" in a script {script[0]:7.1f} / {script[1]:7.1f} us;"
                  f" ratio {ratio[0]:.1f}x / {ratio[1]:.1f}x  {verdict} (target <= {TARGET:g}x);"
                  f" of which Bashkit passing the text on {shell[0]:7.1f} / {shell[1]:7.1f} us"
                  f" ({shell[0] / base[0]:.1f}x)")
            script_cpu, base_cpu = per["cpu"]
            print(f"         CPU per call (median): in a script {script_cpu:7.1f} us, Path.read_text"
                  f" {base_cpu:7.1f} us, ratio {script_cpu / base_cpu:.1f}x")
        load = os.getloadavg()[0]
        print(f"  load average {load:.1f} on {os.cpu_count()} CPUs")
    finally:
        session.close()


if __name__ == "__main__":
    main()
