"""The soak curve: open descriptors and resident memory over thousands of runs in one session.

    python bench/bench_soak.py [--runs 5000] [--every 500]

One `Session` with no servers runs `echo hi; tools --help > /dev/null` again and
again (the run path itself: a Bashkit shell, the `tools` builtin, the catalog),
after 100 warm-up runs. Every `--every` runs it prints the count of open
descriptors and the resident memory, each against the first reading. Target:
flat (the leak this guards against was 3 descriptors a run; tests/test_runners.py
asserts the bound, this prints the curve).
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

from bench_tools import project_dir

from toolkernel._session import Session


class _Quiet:
    def stdout(self, text: str) -> None: ...
    def stderr(self, text: str) -> None: ...
    def image(self, path) -> None: ...
    def progress(self, *args) -> None: ...


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--every", type=int, default=500)
    options = parser.parse_args()
    project = project_dir()
    (project / "toolkernel.toml").unlink()  # no servers: the run path alone
    session, sink, script = Session(project), _Quiet(), "echo hi; tools --help > /dev/null"
    try:
        for _ in range(100):
            session.run_script(script, sink)
        fd0, rss0, started = descriptors(), rss_mb(), time.perf_counter()
        print(f"toolkernel soak: {options.runs} runs after 100 warm-up runs")
        print(f"  {'runs':>6} {'descriptors':>12} {'change':>7} {'RSS MB':>8} {'change':>8}")
        for done in range(1, options.runs + 1):
            session.run_script(script, sink)
            if done % options.every == 0:
                fd, rss = descriptors(), rss_mb()
                print(f"  {done:>6} {fd:>12} {fd - fd0:>+7} {rss:>8.1f} {rss - rss0:>+8.1f}", flush=True)
        per_run = (time.perf_counter() - started) / options.runs * 1000
        print(f"  {per_run:.2f} ms a run; target: flat descriptors and memory")
    finally:
        session.close()
        shutil.rmtree(project.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
