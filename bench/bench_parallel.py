"""Benchmark: four 1.5 s command-tool calls made at once, against the same four one at a time,
measured in the same run, as ratios.

    python bench/bench_parallel.py [--repeat 3] [--seconds 1.5]

Rows: `xargs -P 4` in host `%%bash` (against `xargs -P 1`), `&` + `wait` in `%%tools` (against
a plain loop), and four `bash` calls a `toolkernel serve` client makes at once (against the
same four awaited one by one; over stdio, the SDK's own client). Each figure is the median (and
best) of --repeat interleaved rounds; a measure whose calls were not all made fails (each call
leaves a file). Target: at most 0.35x (four calls at once take about one call's time: 0.25x,
plus what starting the processes costs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import anyio

import toolkernel
from bench_tools import interleaved, project_dir, timed_script

from toolkernel._runners._hostbash._channel import Channel
from toolkernel._runners._hostbash._runner import HostBashRunner
from toolkernel._session import Session

TARGET = 0.35
CALLS = 4
REPO = Path(toolkernel.__file__).resolve().parent.parent  # the serve runs the toolkernel measured here


def nap_config(seconds: float, marks: Path) -> str:
    """A command tool that sleeps, then leaves a file in `marks` (so a lost call shows)."""
    program = f"import os, time; time.sleep({seconds}); open(os.path.join({str(marks)!r}, str(os.getpid())), 'w')"
    command = [sys.executable, "-c", program]
    return (f"[tools.nap]\ncommand = {json.dumps(command)}\nread_only = true\n"
            'parameters = { type = "object", properties = { n = { type = "integer" } } }\n')


def serve_rounds(project: Path, repeat: int) -> dict[str, tuple[float, float]]:
    """(median, best) seconds of four serve `bash` calls at once and one by one, interleaved."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    script = "tools nap n=1"

    async def body() -> dict[str, list[float]]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "toolkernel", "serve"], cwd=str(project),
                                       env={**os.environ, "PYTHONPATH": str(REPO)})
        samples: dict[str, list[float]] = {"serve_at_once": [], "serve_one_by_one": []}
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            await client.call_tool("bash", {"script": script})  # warm-up: the session and its catalog

            async def one() -> None:
                result = await client.call_tool("bash", {"script": script})
                if result.structured_content["exit_code"] != 0:
                    raise SystemExit(f"serve bash failed: {result.structured_content}")

            for _ in range(repeat):
                started = time.perf_counter()
                async with anyio.create_task_group() as group:
                    for _ in range(CALLS):
                        group.start_soon(one)
                samples["serve_at_once"].append(time.perf_counter() - started)
                started = time.perf_counter()
                for _ in range(CALLS):
                    await one()
                samples["serve_one_by_one"].append(time.perf_counter() - started)
        return samples

    import statistics

    return {name: (statistics.median(v), min(v)) for name, v in anyio.run(body).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.5)
    args = parser.parse_args()
    project = project_dir()
    marks = project / "marks"  # in the workspace: an agent's (serve's) sandbox has a /tmp of its own
    marks.mkdir()
    (project / "toolkernel.toml").write_text(nap_config(args.seconds, marks))
    session = Session(project)
    channel = Channel()

    def counted(measure):
        """`measure`, failing if it made fewer calls than CALLS."""
        def run() -> float:
            before = len(os.listdir(marks))
            seconds = measure()
            if len(os.listdir(marks)) - before != CALLS:
                raise SystemExit(f"calls were lost: {len(os.listdir(marks)) - before} of {CALLS} made")
            return seconds
        return run

    host = lambda script: timed_script(session, script, HostBashRunner(channel))  # noqa: E731
    try:
        host("tools nap n=0")  # warm-up
        t = interleaved(args.repeat, {name: counted(measure) for name, measure in {
            "xargs_p4": lambda: host(f"seq 1 {CALLS} | xargs -P {CALLS} -I{{}} tools nap n={{}} >/dev/null"),
            "xargs_p1": lambda: host(f"seq 1 {CALLS} | xargs -P 1 -I{{}} tools nap n={{}} >/dev/null"),
            "tools_bg": lambda: timed_script(session, f"for i in $(seq 1 {CALLS}); do tools nap n=$i >/dev/null &"
                                                      " done; wait"),
            "tools_loop": lambda: timed_script(session, f"for i in $(seq 1 {CALLS}); do tools nap n=$i >/dev/null;"
                                                        " done"),
        }.items()})
    finally:
        channel.close()
        session.close()
    t.update(serve_rounds(project, args.repeat))
    print(f"toolkernel parallel bench: {CALLS} calls of a {args.seconds:g} s command tool, {args.repeat} rounds;"
          " median, best")
    for name, (fast, slow) in (("%%bash xargs -P 4 / -P 1", ("xargs_p4", "xargs_p1")),
                               ("%%tools & + wait / loop", ("tools_bg", "tools_loop")),
                               ("serve: 4 bash calls at once / one by one", ("serve_at_once", "serve_one_by_one"))):
        ratio = t[fast][0] / t[slow][0]
        verdict = "ok" if ratio <= TARGET else "MISSED"
        print(f"  {name:<42} {t[fast][0]:6.2f} s / {t[slow][0]:6.2f} s = {ratio:5.2f}x  (best {t[fast][1]:.2f} s"
              f" / {t[slow][1]:.2f} s)  {verdict} (target <= {TARGET:g}x)")


if __name__ == "__main__":
    main()
