"""Benchmark: the fixed cost of a run, over a bare Bashkit run of the same script (issue 44).

    python bench/bench_run_cost.py [--files 10] [--rounds 300] [--script 'echo hi'] [--phases]

In one process, in turns within each round (so the load of the shared machine falls on all
alike): toolkernel's run of the script (`Session.run_script`: config, catalog, before-start
check, journal, guard mounts, the shell on its thread, the output pumped), and bare Bashkit
running it: a new `Bash` with the workspace mounted writable, `execute_sync` ("bare") and the
async `execute` with byte sinks ("bare, byte sinks", what runs a script without `tools`).
The workspace holds --files small files. Target: toolkernel at most 2 ms over "bare", as the
median of the rounds' own differences. --phases: where a run's time goes (each part's median).

Figures of 2026-12-07, `echo hi`, 10 files (the machine shared by five, so its load is given):
- before (main at 01ee39a), load 2.2-2.7: a run 4.6-4.8 ms, bare 0.38-0.44 ms. Of the run: a
  second `Bash` built to parse the script (0.23-0.41 ms), a new thread and a new event loop with a
  thread pool and the thread that shuts the pool down (0.3-0.4 ms), two trips to the private loop
  for work that never waits (the config and catalog, the before-start check with no call to
  check), seven stand-in folders made for the protected paths (0.09 ms), the journal's look at
  the workspace before and after (0.46 ms), the async `execute` with byte sinks itself.
- after (one parser kept, the script thread and its loop kept, no needless trip, one stand-in,
  the pool made when needed), alternating with main at 77c9344 run by the same bench, load
  5.5-6.1, median over bare: main 4.9, 5.7, 6.4 ms; this 3.0, 3.8, 2.8 ms. Without the
  journal's look (the row "no journal"): main 3.7-4.4 ms, this 1.9-2.8 ms. Bashkit's own
  async `execute` with byte sinks costs 0.9-1.3 ms over `execute_sync` at this load (the row
  "bare, byte sinks"): a delivery per chunk, each a hand-off between its threads and ours.
  Of a run (--phases, load 5.0): the journal's look before 1.2 ms (it creates, writes and
  removes a run file, reads /proc for the process's start, walks, loads the index) and after
  0.13; the script 0.86; the run's Bash and mounts 0.57; the config 0.25; the look for shadowed
  modules 0.4 (0.15 before issue 48's change); the before-start check 0.03.
  The 2 ms target is not met at that load: the journal's per-run work and Bashkit's byte-sink
  bridge are most of what is left.
- main at 49bd752 (the journal watching, not walking), quiet machine, load 2.3, 300 rounds: a run
  2.29 ms, bare 0.37 ms, over bare 1.90 ms; without the journal's look 1.57 ms. Later runs the same
  evening at load 0.6-0.7 gave 2.1-3.2 ms over bare (1.7-2.7 without the journal), 49bd752 and
  6310ad3 alternating in one venv alike (2.2-2.7 against 2.3-2.4): the 2 ms target is met only in
  some runs; the journal's look before a run (0.46 ms) and Bashkit's byte-sink bridge (about 1 ms
  over execute_sync) are what is left.
- 2026-12-07 evening: a script of only quick commands and no loop (`echo hi`; `_bashkit._QUICK`)
  runs under `execute_sync`, as bare Bashkit does: the async `execute` with byte sinks bought it
  nothing and cost it 0.5-0.8 ms (`true` alone: 0.48 ms, 0.01 under `execute_sync`), and the
  thread hand-offs it made cost as much again on a busy machine. This process's start time is
  read once. `echo hi`, 300 rounds: over bare 1.29 ms (load 1.8), 1.13 (load 3.1), 1.80 (load
  0.8, bare itself 35% slower than in the run before: the machine's speed moves), 2.03 once while
  another engineer's browser tests ran (load 2.1); it was 2.70 ms just before the change (load
  2.1). A script that streams (`--script 'cat file-0.txt'`) keeps the byte sinks: 1.05-2.58 ms
  over bare, of which the byte sinks' own cost ("bare, byte sinks - bare") is 0.7-0.9 ms. What
  is left of ours, in the order of --phases: the run's Bash and its mounts (0.4-0.57 ms; 0.09 more
  than the bare row's own `Bash` when both are timed alone), the look for shadowed modules before
  and after (0.3-0.45), the journal's look before (0.19-0.34: the run's file made, its head and
  tree written), the config and catalog (0.16-0.23), and the hand-offs between the kernel's
  thread and the script's (about 0.1: running the script on the kernel's thread saved 0.1 ms in
  an A/B run, not worth a second way to run).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import inspect
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from toolkernel._session import Session


class NullSink:
    def stdout(self, text: str) -> None: ...
    def stderr(self, text: str) -> None:
        if text.strip():
            raise SystemExit(f"benchmark script failed: {text.strip()[:500]}")
    def image(self, path) -> None: ...
    def progress(self, *args) -> None: ...


def workspace(files: int) -> Path:
    # Config in world-writable folders is ignored, so the workspace lives in a private one.
    root = Path(tempfile.mkdtemp(prefix="toolkernel-bench-"))
    os.environ["XDG_CONFIG_HOME"] = str(root / "xdg")
    os.environ["XDG_STATE_HOME"] = str(root / "state")
    os.environ["TOOLKERNEL_ADMIN_CONFIG"] = str(root / "no-admin.toml")
    work = root / "work"
    work.mkdir()
    for i in range(files):
        (work / f"file-{i}.txt").write_text("x" * 100)
    return work


def ours(session: Session, script: str) -> float:
    started = time.perf_counter()
    result = session.run_script(script, NullSink())
    elapsed = time.perf_counter() - started
    if result.exit_code != 0:
        raise SystemExit(f"benchmark script exited {result.exit_code}: {result.stderr[-500:]}")
    return elapsed


def ours_without_the_journal(session: Session, script: str) -> float:
    """The same run without the journal's look at the workspace before and after it (the
    journal is issue 44's items 1-5 and 8: its per-run cost, shown apart)."""
    from toolkernel._runners import _shell

    kept = _shell.workspace_before
    _shell.workspace_before = lambda runner, command, script: None
    try:
        return ours(session, script)
    finally:
        _shell.workspace_before = kept


def bare(work: Path, script: str) -> float:
    from bashkit import Bash, FileSystem

    started = time.perf_counter()
    bash = Bash(cwd=str(work))
    bash.mount(str(work), FileSystem.real(str(work), writable=True))
    bash.execute_sync(script)
    return time.perf_counter() - started


def bare_sinks(work: Path, script: str) -> float:
    from bashkit import Bash, FileSystem

    async def sink(chunk: bytes) -> None:
        pass

    async def execute():  # Bashkit's future must be made with the loop running
        return await bash.execute(script, stdout=sink, stderr=sink)

    started = time.perf_counter()
    bash = Bash(cwd=str(work))
    bash.mount(str(work), FileSystem.real(str(work), writable=True))
    asyncio.run(execute())
    return time.perf_counter() - started


class Phases:
    """Each part's time per run, by wrapping the functions that do it (--phases)."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = collections.defaultdict(list)
        self.run: dict[str, float] = collections.defaultdict(float)

    def wrap(self, owner, name: str, label: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.run[label] += time.perf_counter() - started
        static = isinstance(inspect.getattr_static(owner, name), staticmethod)
        setattr(owner, name, staticmethod(timed) if static else timed)

    def install(self) -> None:
        from toolkernel import _session
        from toolkernel._journal import _scan
        from toolkernel._runners import _bashkit, _shadows, _shell

        self.wrap(Session, "_prepared", "config, catalog, run record")
        self.wrap(Session, "_may_start", "before-start check")
        self.wrap(_shell, "workspace_before", "journal: before")
        self.wrap(_scan.Comparison, "record", "journal: after")
        self.wrap(_shadows.Watch, "start", "shadowed modules: before")
        self.wrap(_shadows.Watch, "end", "shadowed modules: after")
        self.wrap(_bashkit, "_new_bash", "the run's Bash and its mounts")
        self.wrap(_bashkit.BashkitRunner, "run", "the runner (its Bash, the script)")
        self.wrap(_bashkit, "_streamed", "the script, streamed (async execute, its loop)")
        self.wrap(_session, "execute", "execute (the script's thread, the pump)")

    def ended(self, total: float) -> None:
        for label, seconds in self.run.items():
            self.times[label].append(seconds)
        self.times["the whole run"].append(total)
        self.run.clear()

    def show(self) -> None:
        print("where a run's time goes (median ms; 'execute' holds the parts from 'before-start' on):")
        for label, values in sorted(self.times.items(), key=lambda item: -statistics.median(item[1])):
            print(f"  {statistics.median(values) * 1000:7.3f}  {label}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--script", default="echo hi")
    parser.add_argument("--phases", action="store_true")
    args = parser.parse_args()
    work = workspace(args.files)
    session = Session(work)
    phases = Phases() if args.phases else None
    if phases:
        phases.install()
    rows = {"toolkernel": lambda: ours(session, args.script), "bare": lambda: bare(work, args.script),
            "bare, byte sinks": lambda: bare_sinks(work, args.script),
            "toolkernel, no journal": lambda: ours_without_the_journal(session, args.script)}
    try:
        for _ in range(10):  # warm: imports, the first run's journal, the kept parser
            for row in rows.values():
                row()
        if phases:
            phases.run.clear()
        print(f"{args.script!r} in a workspace of {args.files} files, {args.rounds} rounds;"
              f" load average before: {os.getloadavg()[0]:.1f}")
        times: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(args.rounds):
            for name, row in rows.items():
                times[name].append(row())
                if phases and name == "toolkernel":
                    phases.ended(times[name][-1])
                elif phases:
                    phases.run.clear()
        for name, values in times.items():
            print(f"  {name:22} median {statistics.median(values) * 1000:6.3f} ms"
                  f"  (best {min(values) * 1000:.3f})")
        for name, under in (("toolkernel", "bare"), ("toolkernel, no journal", "bare"),
                            ("bare, byte sinks", "bare")):
            over = [a - b for a, b in zip(times[name], times[under])]
            target = " (target <= 2 ms)" if name == "toolkernel" else ""
            print(f"  {name} - {under}: median {statistics.median(over) * 1000:.3f} ms{target}")
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        if phases:
            phases.show()
    finally:
        session.close()
        shutil.rmtree(work.parent, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
