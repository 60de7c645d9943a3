"""A direct call (`%tools` / `toolkernel.call`) against the same call inside a script.

    python bench/bench_direct.py [--calls 200] [--rounds 5] [--kernel]

Both call an in-process no-op tool through the same dispatcher. A round times
`--calls` direct calls, then one script of `--calls` `tools noop` lines (less a
script that calls nothing); the rounds are interleaved and the medians compared
(target: direct <= 3x script). The script's call limit is lifted. `--kernel` also
times, inside a real kernel (stdin offered, as JupyterLab does), `%tools noop` and
`toolkernel.call("noop")` against a `%%tools` cell of `tools noop` lines. Wall
clock and CPU (all threads) per call are printed with the load. Runs in a fresh
temp workspace with no project config.

Figures (2026-12-01, 2 shared cores). A direct call runs on the calling thread with no
hand-off, and a plain sync own tool, with no hook registered, is called as a script calls
it: from sync code (`Session.prepare_now`, `ToolsCommand.call_now`, the dispatcher's same
checks in the same order), with no event loop unless something waits (a person asked, an
async tool). Its config check looks again only at the files that exist and at the project
folders (a file missing last time in a folder unchanged and settled since is missing
still), with plain lstats (8 in this temp workspace, whose project folders go up to `/`);
its mount plan is worked out only when its arguments name paths. The workspace is left to
settle (`SETTLE`) before the rounds, as a notebook's folder is between edits. Night of
2026-11-30/12-01, load 0.9-4.0 from the other sessions' tests (never quiet), this branch
then main's code in the same minutes, wall ratio / CPU ratio:
  in process  1.77/1.79 1.68/1.69 1.89/1.88 1.60/1.60 2.14/2.49 1.30/1.78 1.67/1.71 1.92/1.71 1.64/1.68 1.47/1.48
         main 3.19/3.23 2.74/2.78 3.07/3.07 3.56/3.61 3.70/3.31 3.01/3.50 3.24/2.79 3.07/3.24 3.31/3.37 3.17/3.13
  kernel call  1.55/1.60 1.81/1.79 1.55/1.84 1.73/1.69 1.67/1.93 2.60/1.75 1.51/1.46 1.62/1.58 1.69/1.61 1.47/1.58
         main 2.62/3.36 2.31/2.56 2.69/2.72 1.43/3.07 3.17/3.23 4.48/4.46 2.13/3.82 2.16/2.45 2.54/2.64 3.03/3.02
  %tools       2.27/2.30 2.31/2.38 2.15/2.50 2.44/2.40 3.06/3.27 3.30/2.37 2.35/2.09 2.51/2.16 2.44/2.21 2.04/2.12
         main 5.29/4.06 3.01/3.26 3.49/3.56 4.03/4.77 7.49/4.02 3.75/3.71 4.99/6.16 2.90/3.29 3.40/3.49 3.35/3.43
(the first three runs before the last cut, a plain lstat for the check, worth about 5 us).
A direct call's CPU: 114-173 us in this process (main 195-328), `toolkernel.call` in a
kernel 121-205 (main 228-305), `%tools` 166-278 (main 254-415); a script's call 58-111. By
the CPU ratio the in-process call and `toolkernel.call` meet 3x in every run with room to
spare; `%tools` met it in 9 of 10 runs (3.27x at load 3.4), and by the wall clock in 8 of 10
(the two misses at load 3.4-4.0; the last two runs, at load 1, gave 2.04-2.44x). What is
left of a direct call beyond the call itself (about 70 us at these loads): the config check
about 35 us (8 lstats, 3-4 us each on this VM, and 6 us of Python), the rest of
`prepare_now` about 8, the line's parse 5. `%tools` pays IPython's `run_line_magic` on top,
30-70 us measured in a kernel: its variable expansion (5 us), and most likely its builtin
trap: it adds and removes names of the `builtins` module on every line, which voids Python's
specialised lookups of builtin names for that call (an empty magic costs 6 us, yet the same
`toolkernel.call` inside one costs about 30 us more than outside, and 10-20 us more inside
the trap alone). In a round, `%tools` is timed first after the cell starts; timed second,
its gap to `toolkernel.call` shrank. This bench configures no MCP server. With one
configured (and connected), a direct call of an own tool went over to the private loop on
every call to close servers no longer configured; it now does only when there are some
(`ServerPool.holds_other_than`): 355 us a call before, 160 after, in this process at load 1.4.
"""

from __future__ import annotations

import argparse
import json
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


# A new workspace's folders have just changed; a notebook's have mostly not changed for a while,
# and a config check does not look again for files missing in such folders (_config/_cache.py).
SETTLE = 2.2


def per_direct_call(session: Session, calls: int) -> tuple[float, float]:
    """Seconds of wall clock and of CPU (all threads) per call."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        call_argv(session, ["noop"])
    return (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls


def per_script_call(session: Session, calls: int) -> tuple[float, float]:
    # The call limit (50 a run) is lifted, as in bench_tools; the run's fixed cost is not the calls'.
    cpu = time.process_time()
    elapsed = timed_script(session, "tools noop\n" * calls)
    cpu_calls, cpu = time.process_time() - cpu, time.process_time()
    base = timed_script(session, "true")
    return (elapsed - base) / calls, (cpu_calls - (time.process_time() - cpu)) / calls


KERNEL_SETUP = """
import time, toolkernel
@toolkernel.tool("noop", description="Do nothing.", kind="read", input_schema={"type": "object"})
def noop(arguments, ctx):
    return ""
toolkernel.register_tools(noop)
_ip = get_ipython()
def _per_call(fn, calls):
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls
def _cell(script):
    wall, cpu = time.perf_counter(), time.process_time()
    _ip.run_cell_magic("tools", "", script)
    return time.perf_counter() - wall, time.process_time() - cpu
def _script(calls):
    (wall, cpu), (base_wall, base_cpu) = _cell("tools noop\\n" * calls), _cell("true\\n")
    return (wall - base_wall) / calls, (cpu - base_cpu) / calls
"""

KERNEL_ROUND = """
import json
print(json.dumps({{"line": _per_call(lambda: _ip.run_line_magic("tools", "noop"), {calls}),
                  "call": _per_call(lambda: toolkernel.call("noop"), {calls}),
                  "script": _script({calls})}}))
"""


def in_a_kernel(tmp: Path, calls: int, rounds: int) -> dict[str, list[float]]:
    """Per-call seconds of `%tools noop`, `toolkernel.call("noop")` and a `%%tools` cell's
    `tools noop`, timed inside a real kernel (stdin offered, as JupyterLab does)."""
    from jupyter_client.manager import start_new_kernel

    work = tmp / "kernel"
    work.mkdir()
    user = Path(os.environ["XDG_CONFIG_HOME"]) / "toolkernel"  # a project's [shell] counts only once trusted
    user.mkdir(parents=True, exist_ok=True)
    (user / "toolkernel.toml").write_text("[shell]\ncall_limit = 100000000\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(work), env=env, startup_timeout=120)
    try:
        def run(code: str) -> list[str]:
            out: list[str] = []
            reply = client.execute_interactive(
                code, allow_stdin=True, timeout=600, stdin_hook=lambda msg: client.input(""),
                output_hook=lambda m: out.append(m["content"]["text"]) if m["msg_type"] == "stream" else None)
            if reply["content"]["status"] != "ok":
                print("".join(out)[-2000:], file=sys.stderr)
                raise SystemExit(f"kernel cell failed: {reply['content']}")
            return out

        run("%load_ext toolkernel")
        run(KERNEL_SETUP)
        run(KERNEL_ROUND.format(calls=10))  # warm up
        time.sleep(SETTLE)
        times: dict[str, list[tuple[float, float]]] = {"line": [], "call": [], "script": []}
        for _ in range(rounds):
            for key, value in json.loads("".join(run(KERNEL_ROUND.format(calls=calls))).splitlines()[-1]).items():
                times[key].append(tuple(value))
        return times
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def report(label: str, direct: list[tuple[float, float]], script: list[tuple[float, float]]) -> None:
    """Wall clock: median (best); CPU per call: median."""
    d, s = statistics.median(w for w, _ in direct), statistics.median(w for w, _ in script)
    best = min(w for w, _ in direct) / min(w for w, _ in script)
    d_cpu, s_cpu = statistics.median(c for _, c in direct), statistics.median(c for _, c in script)
    print(f"  {label:29s} {d * 1e6:6.0f} us  script {s * 1e6:5.0f} us  ratio {d / s:.2f}x ({best:.2f}x)"
          f"   CPU {d_cpu * 1e6:4.0f} / {s_cpu * 1e6:4.0f} us = {d_cpu / s_cpu:.2f}x   (target <= 3x)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kernel", action="store_true", help="also time the calls inside a real kernel")
    options = parser.parse_args()
    print(f"per call, median (best) of {options.rounds} interleaved rounds of {options.calls} calls;"
          f" load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_CONFIG_HOME"] = str(Path(tmp) / "xdg")
        work = Path(tmp) / "work"
        work.mkdir()
        session = Session(work)
        session.register_tools([noop])
        per_direct_call(session, 10), per_script_call(session, 10)  # warm up
        time.sleep(SETTLE)
        direct, script = [], []
        for _ in range(options.rounds):
            direct.append(per_direct_call(session, options.calls))
            script.append(per_script_call(session, options.calls))
        session.close()
        report("in this process, call_argv", direct, script)
        if options.kernel:
            times = in_a_kernel(Path(tmp), options.calls, options.rounds)
            report("in a kernel, %tools", times["line"], times["script"])
            report("in a kernel, toolkernel.call", times["call"], times["script"])
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
