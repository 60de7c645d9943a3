"""Benchmark: a `tools` call from host `%%bash` against the same call in `%%tools`, and
against starting a bare interpreter (`python -I -S -c pass`), in one run.

    python bench/bench_hostbash.py [--calls 100] [--repeat 3]

Each figure is per call, the loop's own cost taken off (the same loop running `:`),
the median (and best) of --repeat interleaved runs. Target: the cost `%%bash` adds
per call over `%%tools` is at most 1.5x a bare interpreter start, since the shim is
one interpreter start plus one round trip over the kernel's socket.
"""

from __future__ import annotations

import argparse
import sys

from bench_tools import interleaved, loop_script, noop, project_dir, timed_script

from toolkernel._runners._hostbash._channel import Channel
from toolkernel._runners._hostbash._runner import HostBashRunner
from toolkernel._session import Session

TARGET = 1.5


def timed_host(session: Session, channel: Channel, script: str) -> float:
    return timed_script(session, script, HostBashRunner(channel))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    session = Session(project_dir())
    session.register_tools([noop])
    channel = Channel()
    n = args.calls
    try:
        timed_host(session, channel, loop_script("tools noop", 5))  # warm-up
        t = interleaved(args.repeat, {
            "host_tools": lambda: timed_host(session, channel, loop_script("tools noop", n)),
            "host_loop": lambda: timed_host(session, channel, loop_script(":", n)),
            "python": lambda: timed_host(session, channel, loop_script(f"{sys.executable} -I -S -c pass", n)),
            "sandbox_tools": lambda: timed_script(session, loop_script("tools noop", n)),
            "sandbox_loop": lambda: timed_script(session, loop_script(":", n)),
        })
    finally:
        channel.close()
        session.close()
    ms = {k: tuple(v[i] / n * 1e3 for i in (0, 1)) for k, v in t.items()}
    host = tuple(ms["host_tools"][i] - ms["host_loop"][i] for i in (0, 1))
    python = tuple(ms["python"][i] - ms["host_loop"][i] for i in (0, 1))
    sandbox = tuple(ms["sandbox_tools"][i] - ms["sandbox_loop"][i] for i in (0, 1))
    added = tuple(host[i] - sandbox[i] for i in (0, 1))
    ratio = tuple(added[i] / python[i] for i in (0, 1))
    print(f"toolkernel hostbash bench: {n} calls, {args.repeat} interleaved runs; per call: median, best")
    for name, pair in (("tools noop from %%bash", host), ("tools noop in %%tools", sandbox),
                       ("python -I -S -c pass from %%bash", python), ("added by %%bash over %%tools", added)):
        print(f"  {name:<34} {pair[0]:8.2f} ms {pair[1]:8.2f} ms")
    verdict = "ok" if ratio[0] <= TARGET else "MISSED"
    print(f"  {'added / bare interpreter start':<34} {ratio[0]:8.2f} x  {ratio[1]:8.2f} x  "
          f"{verdict} (target <= {TARGET:g}x)")


if __name__ == "__main__":
    main()
