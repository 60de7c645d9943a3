"""Benchmark: what the journal of changes (issue 38) costs a run, and what a rewind takes.

    python bench/bench_rewind.py [--repeat 3] [--files 1000] [--mb 50]
    (BENCH_DIR=folder: where the workspaces and the journal go; the temporary folder by default)

Each row is timed with recording and without (a session of the same kind, its runs given no
journal), in turns (each kind comes first as often: the disk's writeback of what one wrote lands
on whoever follows), median of the samples, each row in a workspace of its own (a run pays for
storing what moved since the run before it):
1. small files: a Bashkit cell writes --files small files, new contents each round, then a second
   cell rewrites each of them (the second run's recording stores the first run's files);
2. one large file at a person's pace: a host `%%bash` cell overwrites one --mb MB file with `dd`,
   three samples a round. The journal copies a large file a run left changed right after that
   run, while its output is read, and the next run takes that copy: how long the copying goes on
   after the cell is printed (off the cell's time, not in the ratio). A control row, not
   recorded, makes a copy of the file of its own after each run: the recorded row against it is
   the journal's own work, without the cost of the bytes it must write;
3. the same large cell run twice at once: the second waits for the copy after the first.
Then the time to rewind each recorded run (the 1,000 files back / the 50 MB file back).
Targets (issue 38): at most 1.3x for the small files and 1.1x for the large one.

Figures, 2026-12-06, this machine otherwise idle (2 CPUs, load 1-1.9), --repeat 7, BENCH_DIR in
/tmp or in a folder of the home (making a file takes 0.7-1 ms in this machine's /tmp, 0.02-0.9 ms
in the home, from one minute to the next):
- one 50 MB file, ten runs: 0.90, 0.97, 0.99, 1.00, 1.01, 1.02, 1.04, 1.06, 1.06 and 1.14x (200-270
  ms a run without recording); against the control row 0.92-1.08x. In the cell, the journal now
  takes 3-4 ms: the stat walks, the scan, taking the copy, naming its content. It used to copy
  the file as the run began (copy_file_range, 17 ms for 50 MB here) and, past the day's limit
  (every run past the twentieth at 50 MB a run, within 1 GiB a day), to drop an old run after it
  (7-12 ms): the copy after the run does both now, 80-130 ms off the cell's time. So measured
  before, six runs gave 1.04-1.30x. Rewinding it: 1.4-2.1 s.
- the same cell run twice at once: 1.14-1.57x. The second run waits for the copy after the
  first and hashes it beside its own work, as every run used to.
- 1,000 small files, eight runs: 1.12, 1.13, 1.14, 1.16, 1.19, 1.19, 1.24 and 1.51x (2.6-4.4 s a
  pair of cells without recording; the 1.51x in /tmp). A content stored before is not written
  again, and the day's limit is a running count: summed at each store, the sixth round of 1,000
  took 3.7 s to record instead of 0.2 s. Rewinding those 1,000 files: 2.4-4.0 s.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from toolkernel._journal import rewind  # noqa: E402
from toolkernel._session import Session  # noqa: E402


class _Quiet:
    def stdout(self, text: str) -> None: ...
    def stderr(self, text: str) -> None: sys.stderr.write(text)
    def image(self, path) -> None: ...
    def progress(self, *args) -> None: ...


def _unrecorded(session: Session) -> None:
    """Give this session's runs no journal: nothing is recorded, nothing compared."""
    new_run = session._new_run

    def without(*args, **kwargs):
        run = new_run(*args, **kwargs)
        run.journal = None
        return run

    session._new_run = without


def _timed(session: Session, script: str, runner=None) -> tuple[float, str | None]:
    start = time.perf_counter()
    result = session.run_script(script, _Quiet(), runner=runner)
    elapsed = time.perf_counter() - start
    assert result.exit_code == 0, result.stderr
    return elapsed, (result.changes or {}).get("run")


def small_files(session: Session, count: int) -> tuple[float, list[str]]:
    shutil.rmtree(session.workdir / "out", ignore_errors=True)
    tag = secrets.token_hex(4)  # new contents each round: none was stored before
    first, run1 = _timed(session, f"mkdir -p out\nfor i in $(seq {count}); do echo \"line $i {tag}\" > out/f$i.txt; done")
    second, run2 = _timed(session, f"for i in $(seq {count}); do echo \"again $i {tag}\" > out/f$i.txt; done")
    return first + second, [r for r in (run1, run2) if r]


def large_file(session: Session, mb: int, channel) -> tuple[float, list[str]]:
    from toolkernel._runners._hostbash._runner import HostBashRunner

    elapsed, run = _timed(session, f"dd if=/dev/urandom of=big.bin bs=1M count={mb} status=none",
                          runner=HostBashRunner(channel))
    return elapsed, [run] if run else []


def copies_after(session: Session) -> float:
    """The time the journal goes on copying after the run (off the cell's time)."""
    start = time.perf_counter()
    session.journal.wait_for_copies()
    return time.perf_counter() - start


def copy_as_the_journal_would(session: Session, into: Path) -> None:
    """For the control row: the file copied as the journal copies it after a run, without it."""
    shutil.copyfile(session.workdir / "big.bin", into)


_LARGE_SAMPLES = 3  # a large-file run takes a fraction of a second: more samples a round


def _turns(names: tuple[str, ...], turn: int) -> tuple[str, ...]:
    """`names` in the order of this turn: each comes first as often (the disk's writeback of what
    the one before wrote lands on whoever follows it)."""
    return names[turn % len(names):] + names[:turn % len(names)]


def large_rows(sessions, mb: int, channel, times, tmp: Path, round_: int) -> list[str]:
    """One round of the large file's rows; the recorded session's last run ids."""
    for sample in range(_LARGE_SAMPLES):
        for name in _turns(("recorded", "plain", "copied"), round_ * _LARGE_SAMPLES + sample):
            session = sessions[(name, "large")]
            elapsed, _ = large_file(session, mb, channel)
            times.setdefault((name, "large"), []).append(elapsed)
            if name == "recorded":
                times.setdefault((name, "after"), []).append(copies_after(session))
            elif name == "copied":
                copy_as_the_journal_would(session, tmp / "control-copy")
    last: list[str] = []
    for name in _turns(("recorded", "plain"), round_):
        # The same cell again at once: it starts while the copy after the first is made.
        session = sessions[(name, "large")]
        large_file(session, mb, channel)
        again, runs = large_file(session, mb, channel)
        times.setdefault((name, "again"), []).append(again)
        if name == "recorded":
            copies_after(session)
            last = runs
    return last


def _ratio(times, kind: str, recorded: str = "recorded", plain: str = "plain") -> tuple[float, float, float]:
    r, p = statistics.median(times[(recorded, kind)]), statistics.median(times[(plain, kind)])
    return r * 1000, p * 1000, r / p


def report(times, restore, args) -> None:
    r, p, x = _ratio(times, "small")
    print(f"{args.files} small files (write, then rewrite): {r:.0f} ms recorded, {p:.0f} ms not: {x:.2f}x;"
          f" rewind {restore['small'] * 1000:.0f} ms")
    r, p, x = _ratio(times, "large")
    print(f"one {args.mb} MB file: {r:.0f} ms recorded, {p:.0f} ms not: {x:.2f}x; rewind {restore['large'] * 1000:.0f} ms")
    _, c, y = _ratio(times, "large", plain="copied")
    print(f"  not recorded, each run followed by a {args.mb} MB copy of its own (the bytes the journal"
          f" writes, without the journal): {c:.0f} ms, so the journal's own work is {y:.2f}x")
    r, p, x = _ratio(times, "again")
    print(f"one {args.mb} MB file, its cell run again at once: {r:.0f} ms recorded, {p:.0f} ms not: {x:.2f}x")
    print(f"copying after a recorded {args.mb} MB run, off the cell's time:"
          f" {statistics.median(times[('recorded', 'after')]) * 1000:.0f} ms")
    print(f"load average: {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--mb", type=int, default=50)
    args = parser.parse_args()
    from toolkernel._runners._hostbash._channel import Channel

    with tempfile.TemporaryDirectory(prefix="rw-", dir=os.environ.get("BENCH_DIR")) as tmp:
        os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "state")
        os.environ["XDG_CONFIG_HOME"] = str(Path(tmp) / "xdg")
        os.environ["TOOLKERNEL_ADMIN_CONFIG"] = str(Path(tmp) / "no-admin.toml")
        # A workspace for each row: a run pays for storing what moved since the run before, so in
        # one workspace the large file's run stored the 1,000 files the small run had rewritten,
        # and its own 50 MB landed in the next small run.
        sessions = {}
        for name, kind in [("recorded", "small"), ("plain", "small"), ("recorded", "large"), ("plain", "large"),
                           ("copied", "large")]:
            work = Path(tmp) / f"{name}-{kind}"
            work.mkdir()
            if kind == "large":
                (work / "big.bin").write_bytes(os.urandom(args.mb * 1024 * 1024))
            sessions[(name, kind)] = Session(work)
            if name != "recorded":
                _unrecorded(sessions[(name, kind)])
        channel = Channel()
        times: dict[tuple[str, str], list[float]] = {}
        runs: dict[str, list[str]] = {"small": [], "large": []}
        try:
            for round_ in range(args.repeat):
                for name in _turns(("recorded", "plain"), round_):
                    small, small_runs = small_files(sessions[(name, "small")], args.files)
                    times.setdefault((name, "small"), []).append(small)
                    if name == "recorded":
                        runs["small"] = small_runs
                runs["large"] = large_rows(sessions, args.mb, channel, times, Path(tmp), round_)
            restore = {}
            for kind in ("large", "small"):
                journal = sessions[("recorded", kind)].journal
                start = time.perf_counter()
                for run_id in reversed(runs[kind]):
                    rewind(journal, run_id)
                restore[kind] = time.perf_counter() - start
        finally:
            channel.close()
            for session in sessions.values():
                session.close()
    report(times, restore, args)


if __name__ == "__main__":
    main()
