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
async tool). Its config check walks from the paths no watched folder holds and looks again
only at the files that exist and at the project folders (a file missing last time in a
folder unchanged and settled since is missing still); a path missing last time is asked
about with `os.access` (no link followed), a fifth of a failed lstat's cost. A folder's
times moving (an entry made in it: an autosave, a saved output, another process's temp
file in /tmp) no longer reads the whole config again (1-2 ms, a few times in 2000 calls
here). Its mount plan is worked out only when its arguments name paths. The workspace is
left to settle (`SETTLE`) before the rounds, as a notebook's folder is between edits.

17 runs of this branch and of main's code interleaved (06:26-06:41 UTC, load 2.1-5.3 from
the other sessions' tests: never quiet), CPU ratio / wall ratio, runs under 3x of 17:
                      CPU <3x  median   wall <3x  median   direct call CPU, median (range)
  in process   new     14      2.70      15      2.54      97 us (72-146)
               main     9      2.80      12      2.67     118 us (81-166)
  kernel call  new     17      2.37      15      1.83     123 us (88-173)
               main    14      2.70      14      2.46     123 us (91-190)
  %tools       new     10      2.57       9      2.98     156 us (114-211)
               main     3      3.49       7      3.17     158 us (122-242)
A script's call: 23-85 us CPU from run to run (it is measured as a run less a run that
calls nothing, so its own noise is large), which moves every ratio more than any change
above. `%tools` still misses 3x in 7 of 17 runs by CPU. Where a `%tools` call's time goes
(py-spy in a kernel, 2400 samples): the config check 36% (its lstats 17%, its `access`
calls 7% in this /tmp workspace, whose /tmp changes all the time, so its entries are
looked for on every call), the rest of `prepare_now` 10%, the call itself as a script
makes it (`ToolsCommand.call_now`) 18%, parsing the line and the arguments 10%,
IPython's `run_line_magic` and the magic 19% (`find`, traitlets, the builtin trap).
This bench configures no MCP server. With one configured (and connected), a direct call
of an own tool went over to the private loop on every call to close servers no longer
configured; it now does only when there are some (`ServerPool.holds_other_than`): 355 us
a call before, 160 after, in this process at load 1.4.
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
