"""Benchmark: `tools read-file` in a script against `Path.read_text` of the same file.

    python bench/bench_read_file.py [--lines 200 2000] [--calls 1000] [--repeat 5]

For each file size (lines of 60 characters), per call:
1. baseline: `Path(path).read_text()` in a Python loop;
2. the read-file tool alone (`tool.call` on this thread: resolve, open, number the lines);
3. `tools read-file path=data.txt` in a script loop, minus the same loop running `:`
   (the whole path: parse, schema, policy, one path resolution, the tool, the output);
4. of which the shell's own share: a bare Bashkit builtin handing back the same text
   in the same loop (minus that loop running `:`), a floor no tool can go under.

5. the same as (3) and (1) over eight copies of the file in turn (a file read for the first
   time in a while: no cache of the machine's or ours favours the same file read again);
6. the same as (3) with the loop run by `execute_sync` and the plain sync builtin, the way
   loops ran before the relay (`_bashkit._Relay`): what the relay costs read-file, in the
   same minutes.

Each figure is the median (and the best) of --repeat interleaved rounds; the ratio is
(3) over (1). Target: at most 5x, for the median of the rounds' own ratios: in each round
the script runs between two baselines, and its ratio is against their mean. Beside it, the CPU time this process spent per call (all its
threads, median), which a loaded machine stretches far less than wall time.

Earlier stops (on the `call_now` path, which runs a sync tool with no event loop): a loop's
`tools` line is parsed once per run (`ToolsCommand._known`), each call still going through the
schema check, the policy and the path resolution and checks; the file is opened as checked
(`_checked_open`: one readlink more, and a regular-file check); lines were numbered as bytes
(BytesIO's `readlines`, memchr per newline) and only the window decoded.
A cache of the lines of the files read last (which met 5x for the same file read again, 3-5x)
was tried and left out: it served this benchmark's loop, not a first read. Not tried again.

What changed this stop (2026-12-01):
- a whole file of at most the window's lines (the common read: offset 0, the default limit)
  is numbered with no bytes object per line: one `bytes.replace` turns each newline into a
  newline and `%b` (stopping one past the window), and one `%` formatting lays the prefixes
  made once into those places. Splitting into lines and joining them with their prefixes made
  and copied an object per line; numbering 2,000 lines took about 30% less (a window of a
  longer file still goes by `readlines`, and pays the stopped replace, about 10% more);
- the look for a line over the cut jumps from newline to newline with `rfind` (a step per
  2,000 bytes, where `find` made one per 1,000): half the time, and exact;
- the tool reads the checked descriptor itself (`_checked_open.regular_checked`, the checks of
  `file_checked`): a FileIO over it asked fstat a second time. Eight system calls a call now,
  where strace counted nine (resolving the path 3; open, readlink, fstat, read, close 5).
What is left: see the figures. At 2,000 lines the numbering (the replace about 30 us, the
formatting 50, the look 14, the decode 8, at load 3) is still 2-3x `read_text` by itself, and
Bashkit passing 134 KB on is another 0.5x: under 5x there needs numbering in C. At 200 lines
the fixed path dominates: the call's Python (some 75 calls of the command, the dispatcher,
the policy and the tool, about 100 us hot) beside a `read_text` of 20-35 us; on this machine's
load the wall-time ratio spreads by 2x from round to round, the CPU ratio far less.
Figures of 2026-12-01, 06:52 UTC, machine quiet (load 0.1-0.4 on 2 CPUs), three runs each,
alternating with main's code before in a detached worktree (ratio median, CPU ratio):
  200 lines:   before 6.9x, 5.2x, 5.7x (CPU 6.8x, 4.8x, 5.3x);  after 5.9x, 5.4x, 4.0x (CPU 5.8x, 5.1x, 4.0x)
  2000 lines:  before 9.2x, 9.0x, 8.2x (CPU 9.1x, 8.4x, 8.0x);  after 7.2x, 7.7x, 7.1x (CPU 7.1x, 7.6x, 6.9x)
  8 files in turn, 200 / 2000 lines: before 6.6x, 6.8x, 4.9x / 8.2x, 8.0x, 7.5x;
                                      after 6.2x, 9.0x, 3.9x / 6.7x, 6.4x, 6.8x
The script's own time per call (best of the rounds) went from 129-133 to 118-120 us at 200
lines and from 305-470 to 248-412 us at 2,000; the ratios swing with `read_text`, which
itself measured 19 us in one run and 35 in the next at this load. 2,000 lines: missed.

2026-12-01, later (a new machine, about 3x faster on this code: `read_text` 9-10 us):
- main before the relay (`_bashkit._Relay`, loops' `tools` a shell function so that a large
  result streams): 200 lines 3.8x, 3.7x (script 36 us); 2,000 lines 6.9x, 6.8x (105 us). So on
  this machine 200 lines met 5x already; the figures above were a slower machine's.
- with the relay, same minutes, load 0.5-0.6: 200 lines 5.6x, 5.7x (53-54 us); 2,000 lines 8.7x,
  8.9x (133 us). What the relay adds per call: the byte sinks about 4 us, Bashkit's call of the
  shell function about 8 us (10-14 us with the result passing through it), and the call that
  goes by the live command every 50 ms. Missed again at both sizes, in exchange for a printed
  result in a loop peaking at 1.1x its size instead of 8x (bench_memory.py).
- tried the same day and not kept: handing the identity the resolution took (device, inode,
  ctime) to the tool, so that a file found unchanged skips the readlink in /proc: 2 us a call
  (3.6x -> 3.5x), within the spread of the runs, for a new path through the checked open that
  also accepts a file whose folder above moved after the check.

2026-12-01, night (another machine, slower for Bashkit: `tools noop` in a relayed loop 124-129 us,
against 65-67 for a sync builtin under the same async execute; `read_text` 20-35 us):
- read_file numbers in one pass of C where the package was built with a compiler
  (`_numbering.c`, `hatch_build.py`; the Python numbering is kept for builds without one).
  Same minutes, quiet (load 0.0-0.4), C against the Python numbering, two runs each:
  2,000 lines 6.5x, 5.9x against 8.3x, 8.7x (script 329-333 us against 450-549); 200 lines
  7.9x, 6.4x against 6.0x, 6.7x (159-231 us against 201-202: the spread of the runs). After the
  merges of the same night, main gave 7.9x, 8.1x, 7.0x, 6.2x, 8.1x at 200 lines and 7.6x, 7.2x,
  7.1x, 6.3x, 7.3x at 2,000 (A/B against the code before the merges: the same spread).
- What is left on this machine is the shell's: a `tools noop` in the same loop alone costs
  4-6x a `read_text` of 200 lines, and the relay's shell function about 40 us of it.
  Missed at both sizes.

2026-12-02 (`read_text` 13-20 us at 200 lines, 24-33 at 2,000; load 0.5-0.9), with row 6, the
same loop without the relay, in the same rounds, three runs:
  200 lines:   relay 6.5x, 7.2x, 6.1x;  without it 5.3x, 4.4x (and 3.9x in an A/B run of the
               whole bench with the relay switched off)
  2000 lines:  relay 7.5x, 8.1x, 6.5x;  without it 4.9x, 4.0x (and 4.6x)
Where the relay's time goes (200 lines): `_tools_now` spends 55-80 us in toolkernel's Python on
Bashkit's tokio thread (45-50 us for the same `handle_sync` on a thread of Python's own), and
Bashkit 25-35 us in the shell function and the sync builtin under the async `execute`. A
sync builtin is as cheap under the async `execute` as under `execute_sync` only without the
function (`tools noop`: 45 us, against 67 with it and 27 under `execute_sync`,
bench_builtin_paths.py), and without the function a loop's printed lines wait for the end and
a large result is copied whole. So under bashkit 0.20.1 item 6 of the issue (at most 5x) and
item 3 (a printed result at most 2x its size; bench_memory.py) cannot both hold for loops:
the way that meets 5x keeps the script's whole stdout and peaks at ~8x.

2026-12-03 (`read_text` 11-14 us at 200 lines, 17-27 at 2,000; load 0.4-0.6 unless said):
- the script and its empty loop now both begin with one call (`after_a_call`): the empty loop
  was a script with no `tools` in it, which runs without the relay, so each round charged the
  relay's one-off costs (its function defined, its first call made by the live command: a
  script of one call takes 4.5-9.7 ms in all) to the loop's 200 calls. That one-off cost is
  printed on a line of its own;
- C numbering: newlines counted in SSE2 byte lanes, prefixes counted up in place (2,000 lines
  27 -> 17 us); a path resolved once carries its file's identity, so read-file's checked open
  of that very file skips the readlink in /proc (`handle_sync` 31.6 -> 27 us at 200 lines).
  Figures, median (CPU ratio): 200 calls a round: 200 lines 4.2x (5.3x) at load 0.5, 5.8x
  (6.0x) at 0.5, 6.2x and 6.5x at load 1.7; 2,000 lines 5.1x (5.2x), 5.3x, 5.4x, 6.5x.
  2,000 calls a round: 200 lines 4.9x (5.0x), 2,000 lines 5.9x (5.8x). Without the relay in the
  same rounds: 2.9-4.2x and 4.0-4.7x. At the edge at 200 lines, and still over it at 2,000:
  missed, as a target that holds in every run.

2026-12-03, evening (same machine, load 0.1-0.8):
- the C numbering writes a window from the first line in one pass into room for the most it
  can take (no count of the lines first), copies lines 16 bytes a step with the copy inlined
  (called apart, it spent a third of its time on the call), and hands an ASCII window over as
  a str: 2,000 lines numbered and decoded in 11 us, against 16.5 + 4.6 before;
- a call's path rule forms (`rule_forms`) are worked out only when a rule asks for them.
  Not kept: glibc's `M_TOP_PAD` (Bashkit's copies of a function's output fault pages in its
  threads' heaps: in a bare Bashkit loop 134 KB through a function cost 250 us a call, 30 with
  a 1 MB pad), because in toolkernel's own process it changed nothing measurable.
  Figures, median / best of 5 interleaved rounds, eight runs: 200 lines 3.9x, 4.1x, 4.4x, 4.0x,
  4.3x, 4.2x, 4.3x, 4.6x (script 40-46 us); 2,000 lines 4.2x, 4.5x, 4.6x, 5.0x, 4.2x, 4.4x, 3.7x,
  3.5x (script 70-77 us); with one of the two CPUs kept busy: 5.0x, 3.1x, 3.7x and 4.4x, 3.6x,
  4.7x. Met at the median in every run; 2,000 lines keeps the least room.

2026-12-03/04 (an AMD EPYC Firecracker VM, about 3x slower in Python than the machine above):
- a plain name in the workspace (`data.txt`) is resolved with one lstat against the real root
  the protection plan holds (`_paths._plain_name`; a link falls back to the kernel's answer):
  lstat, open, fstat, read, close where there were eight system calls;
- the relay's rare branch is a function of its own (`_tools_after`): Bashkit costs a function
  more the longer its body, taken or not (`tools` in a loop 19.2 -> 16.4 us over an empty loop,
  bare Bashkit).
  Where a call goes at 200 lines, the machine quiet (`read_text` 20 us): the call's Python
  (`handle_sync`) 47 us on a thread of Python's own and 79 us on Bashkit's, Bashkit with a cached
  result 23 us. The gap is not the thread (pure Python runs as fast there), nor malloc's arenas
  (MALLOC_ARENA_MAX=1 changed nothing), nor waiting (thread CPU time equals wall time): it grows
  with the code and data the call touches between the interpreter's work (4 MB of data touched
  between calls on the Python thread: +15 us). No single part stands out; a frozen `CallInfo`
  is the dearest at 2.2 us (1.3 of it the freezing).
  Figures, median of 5 interleaved rounds, four runs at load 0.1-0.2: 200 lines 5.3x, 5.1x,
  5.1x, 5.0x (script 105-108 us); 2,000 lines 4.9x, 4.8x, 4.8x, 5.0x (166-175 us). At a busier
  hour the same code gave 4.0-6.9x at 200 lines. At the edge at 200 lines: missed.

2026-12-05 (a Firecracker VM again, `read_text` 13-14 us at 200 lines, 23-32 at 2,000; no code
change on this path), three runs at load 0.2-0.8, ratio at the median: 200 lines 4.5x, 7.0x,
7.5x (script 63, 93, 101 us; the CPU ratio moved with it, 4.3x to 7.6x); 2,000 lines 4.5x, 4.6x,
5.4x. Without the relay the same minutes gave 2.7-5.1x and 3.3-3.9x: the relay's function and
byte sinks are some 25 us a call. Met in one run of three: missed.

2026-12-05, later (same VM): what spreads the runs is the machine. Timed call by call, a round
of the script ran at one of two speeds, 34 or 77 us a call in toolkernel's Python and 18 or 41
in Bashkit's between calls, both alike, with CPU time equal to wall time on one thread at a
time (the kernel's other threads idle): whole stretches of some milliseconds ran 2.3x slower.
A round of 200 calls (12 ms) falls into one such stretch while the baseline's 3 ms beside it
may not, so single rounds gave 4.2x-6.0x at 200 lines. So the baseline now runs right before
and right after the script in each round, the target is the median of the rounds' own ratios
(as bench_tools.py's MCP row), and a round has 1,000 calls (60 ms), which spans those
stretches. Four runs, load 0.4-0.6: 200 lines 4.6x, 4.3x, 4.0x, 4.5x (rounds 3.8-5.1x);
2,000 lines met in each as well (see the output). With 200 calls a round, the same hour:
200 lines 5.5x, 4.4x; 2,000 lines 4.6x, 4.8x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from bench_builtin_paths import _Variant
from bench_tools import interleaved, loop_script, project_dir, timed_script

from toolkernel import _loop
from toolkernel._providers._tools.files import read_file
from toolkernel._runners._bashkit import _Builtin
from toolkernel._session import Session
from toolkernel._tool import ToolContext

TARGET = 5.0


def read_text_loop(path: Path, calls: int, files: int = 1) -> float:
    paths = [_copy(path, n) for n in range(files)] if files > 1 else [path]
    started = time.perf_counter()
    for i in range(calls):
        paths[i % files].read_text()
    return time.perf_counter() - started


def _copy(path: Path, n: int) -> Path:
    return path.with_name(f"{path.stem}{n}{path.suffix}")


# The fresh reads rotate over several files, so that no file is the one read just before.
FRESH_FILES = 8
FRESH_CALL = f"tools read-file path=data$((i % {FRESH_FILES})).txt"
FRESH_EMPTY = f": data$((i % {FRESH_FILES})).txt"


CALL = "tools read-file path=data.txt"


def after_a_call(body: str, calls: int) -> str:
    """The loop behind one call of its own, in both the script and its empty twin: what a run
    pays once (the relay's function defined, its first call made by the live command, a
    `tools` script's checks) falls on both, so their difference is the loop's calls alone."""
    return f"{CALL} >/dev/null; {loop_script(body, calls)}"


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
    for n in range(FRESH_FILES):
        _copy(path, n).write_bytes(path.read_bytes())
    timed_script(session, loop_script("tools read-file path=data.txt", 3))  # warm: plan, validators
    output = _loop.run_here(_loop.local_task(read_file.call({"path": "data.txt"}, ToolContext(session.workdir))))
    text = output.texts[0] + "\n"
    cpu: dict[str, float] = {}
    rounds: dict[str, list[float]] = {}
    t = interleaved(repeat, with_cpu({
        # The script between two baselines: its round's own ratio is against their mean.
        "baseline": lambda: read_text_loop(path, calls),
        "script": lambda: timed_script(session, after_a_call(CALL, calls)),
        "empty": lambda: timed_script(session, after_a_call(":", calls)),
        "baseline_after": lambda: read_text_loop(path, calls),
        "shell_output": lambda: bashkit_output_loop(text, calls),
        "shell_empty": lambda: bashkit_output_loop(text, calls, ":"),
        "tool": lambda: tool_loop(session, calls),
        "once": lambda: timed_script(session, CALL),
        "baseline_fresh": lambda: read_text_loop(path, calls, FRESH_FILES),
        "script_fresh": lambda: timed_script(session, after_a_call(FRESH_CALL, calls)),
        "empty_fresh": lambda: timed_script(session, after_a_call(FRESH_EMPTY, calls)),
        "script_sync": lambda: timed_script(session, after_a_call(CALL, calls),
                                            _Variant(True, _Builtin)),
        "empty_sync": lambda: timed_script(session, after_a_call(":", calls), _Variant(True, _Builtin)),
    }), cpu, rounds)
    per = {name: (median / calls * 1e6, best / calls * 1e6) for name, (median, best) in t.items()}
    own = sorted((script - empty) / ((before + after) / 2) for script, empty, before, after
                 in zip(rounds["script"], rounds["empty"], rounds["baseline"], rounds["baseline_after"]))
    per["rounds"] = own  # each round's script over the mean of the baselines around it
    # CPU seconds of this process (all its threads): a loaded machine stretches wall time, not these.
    per["cpu"] = ((cpu["script"] - cpu["empty"]) / calls * 1e6, cpu["baseline"] / calls * 1e6)
    per["cpu_fresh"] = ((cpu["script_fresh"] - cpu["empty_fresh"]) / calls * 1e6, cpu["baseline_fresh"] / calls * 1e6)
    per["script"] = (per["script"][0] - per["empty"][0], per["script"][1] - per["empty"][1])
    per["fresh"] = (per["script_fresh"][0] - per["empty_fresh"][0], per["script_fresh"][1] - per["empty_fresh"][1])
    per["shell"] = (per["shell_output"][0] - per["shell_empty"][0], per["shell_output"][1] - per["shell_empty"][1])
    per["sync"] = (per["script_sync"][0] - per["empty_sync"][0], per["script_sync"][1] - per["empty_sync"][1])
    return per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--calls", type=int, default=1000)
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
            own = per["rounds"]
            verdict = "ok" if statistics.median(own) <= TARGET else "MISSED"
            print(f"  {lines:>5} lines: Path.read_text {base[0]:7.1f} / {base[1]:7.1f} us;"
                  f" tool alone {tool[0]:7.1f} / {tool[1]:7.1f} us;"
                  f" in a script {script[0]:7.1f} / {script[1]:7.1f} us;"
                  f" ratio {ratio[0]:.1f}x / {ratio[1]:.1f}x;"
                  f" of which Bashkit passing the text on {shell[0]:7.1f} / {shell[1]:7.1f} us"
                  f" ({shell[0] / base[0]:.1f}x)")
            print(f"         the rounds' own ratios: median {statistics.median(own):.1f}x  {verdict}"
                  f" (target <= {TARGET:g}x); each {' '.join(f'{r:.1f}' for r in own)}")
            script_cpu, base_cpu = per["cpu"]
            print(f"         CPU per call (median): in a script {script_cpu:7.1f} us, Path.read_text"
                  f" {base_cpu:7.1f} us, ratio {script_cpu / base_cpu:.1f}x")
            fresh, fresh_base = per["fresh"], per["baseline_fresh"]
            fresh_cpu, fresh_base_cpu = per["cpu_fresh"]
            print(f"         {FRESH_FILES} files in turn: Path.read_text {fresh_base[0]:7.1f} /"
                  f" {fresh_base[1]:7.1f} us; in a script {fresh[0]:7.1f} / {fresh[1]:7.1f} us;"
                  f" ratio {fresh[0] / fresh_base[0]:.1f}x / {fresh[1] / fresh_base[1]:.1f}x;"
                  f" CPU ratio {fresh_cpu / fresh_base_cpu:.1f}x")
            sync = per["sync"]
            print(f"         without the relay (execute_sync, a printed result peaking at ~8x its size):"
                  f" {sync[0]:7.1f} / {sync[1]:7.1f} us; ratio {sync[0] / base[0]:.1f}x / {sync[1] / base[1]:.1f}x")
            once = per["once"][0] * args.calls / 1000
            print(f"         once a run (not in the ratios: the loops above each start with it): a script of"
                  f" that one call {once:.2f} ms")
        load = os.getloadavg()[0]
        print(f"  load average {load:.1f} on {os.cpu_count()} CPUs")
    finally:
        session.close()


if __name__ == "__main__":
    main()
