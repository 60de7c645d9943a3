"""Benchmark: a redirect into a file against a pipe, and `tools x > FILE` against `--save` (issue 44).

    python bench/bench_redirect.py [--mb 2 6.9] [--rounds 5] [--overwrite]

Per size, in a real session (`Session.run_script`, real Bashkit, the journal on), the rows
take turns within each round, so the load of the shared machine falls on all alike:
1. `cat big.txt > copy.txt` over `cat big.txt | wc -c`. Target: <= 1.5x.
2. `tools big-result size=N > out.txt` over `tools big-result size=N --save out.txt` (a
   `write-file` call, allowed by the bench's policy). Target: <= 1.5x.
Each figure is the median of the rounds' own ratios (and their spread); the files written are
removed before each run, so every run writes a new file; with --overwrite they are kept, and each
run replaces the last one's (the journal keeps the earlier content first, on both sides). Also, as a reference, bare Bashkit writing the same file under `execute_sync`.

Figures of 2026-12-07, before (main at 01ee39a, load 2.2-2.9): `cat big.txt > copy.txt` took
5.6 s for 2 MB and 51.5 s for 6.9 MB, against 0.19 s for the pipe; `tools big-result size=2MB >
out.txt` 127x `--save`. Bashkit (0.20.1) streams `cat`'s output (and a live command's) into a
redirected file 4 KiB at a time, and its real filesystem appends by writing the whole file anew
(copied to a temporary sibling, synced, renamed): 1 MB written into a file wrote 124 MB.
Since, a script that may redirect a streaming command into a file runs under `execute_sync`
with `tools` a sync builtin, where the file is written once (`_bashkit.streams_to_a_file`).
After, the same day (medians of the rounds' own ratios; rounds spread widely at this load):
- load 4.5-4.7, 5 rounds: cat > file / cat | wc -c 0.71x (2 MB), 0.47x (6.9 MB); tools > file /
  --save 0.79x, 0.63x; with --overwrite 0.78x, 0.63x and 0.71x, 0.77x.
- load 5.9-6.5, 15 rounds: cat 0.77x (2 MB), 0.52x (6.9 MB); tools 1.00x, 1.16x.
A tool result held whole for a redirect costs about three copies of it for the moment it is
written (8 MB: the process peaked 26 MB above its start; `cat` of 8 MB into a file 19 MB).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_run_cost import ours  # noqa: E402

from toolkernel import tool  # noqa: E402
from toolkernel._session import Session  # noqa: E402

LINE = "x" * 99 + "\n"
OVERWRITE = False


@tool("big-result", description="A result of `size` characters.", kind="read",
      input_schema={"type": "object", "properties": {"size": {"type": "integer"}}})
def big_result(arguments, ctx):
    return ("z" * 99 + "\n") * (arguments["size"] // 100)


def project_dir() -> Path:
    # Config in world-writable folders is ignored, so the project lives in a private one.
    root = Path(tempfile.mkdtemp(prefix="toolkernel-bench-"))
    os.environ["XDG_CONFIG_HOME"] = str(root / "xdg")
    os.environ["XDG_STATE_HOME"] = str(root / "state")
    os.environ["TOOLKERNEL_ADMIN_CONFIG"] = str(root / "no-admin.toml")
    os.environ["TOOLKERNEL_TRUST_ALL"] = "1"  # the bench trusts the config it writes itself
    project = root / "project"
    project.mkdir()
    (project / "toolkernel.toml").write_text('[policy]\nallow = ["write-file"]\n')
    return project


def timed(session: Session, script: str, leaves: Path | None) -> float:
    if leaves is not None and leaves.exists() and not OVERWRITE:
        leaves.unlink()
    return ours(session, script)


def bare(project: Path, script: str) -> float:
    from bashkit import Bash, ExecutionProfile, FileSystem

    (project / "copy.txt").unlink(missing_ok=True)
    started = time.perf_counter()
    bash = Bash(cwd=str(project), profile=ExecutionProfile.Interactive)
    bash.mount(str(project), FileSystem.real(str(project), writable=True))
    bash.execute_sync(script)
    return time.perf_counter() - started


def one_size(session: Session, project: Path, mb: float, rounds: int) -> None:
    size = int(mb * 1_000_000) // 100 * 100
    (project / "big.txt").write_text(LINE * (size // 100))
    rows = {
        "cat > file": ("cat big.txt > copy.txt", project / "copy.txt"),
        "cat | wc -c": ("cat big.txt | wc -c", None),
        "tools > file": (f"tools big-result size={size} > out.txt", project / "out.txt"),
        "tools --save": (f"tools big-result size={size} --save out.txt", project / "out.txt"),
    }
    for script, leaves in rows.values():  # warm: what the first call imports, the journal's first look
        timed(session, script, leaves)
    times: dict[str, list[float]] = {name: [] for name in rows}
    times["bare Bashkit cat > file"] = []
    for _ in range(rounds):
        for name, (script, leaves) in rows.items():
            times[name].append(timed(session, script, leaves))
        times["bare Bashkit cat > file"].append(bare(project, "cat big.txt > copy.txt"))
    print(f"{mb} MB ({size:,} bytes), median of {rounds} rounds (ms):")
    for name, values in times.items():
        print(f"  {name:24} {statistics.median(values) * 1000:9.1f}  (best {min(values) * 1000:.1f})")
    for over, under in (("cat > file", "cat | wc -c"), ("tools > file", "tools --save")):
        ratios = [a / b for a, b in zip(times[over], times[under])]
        print(f"  {over} / {under}: {statistics.median(ratios):.2f}x"
              f" (rounds {min(ratios):.2f}-{max(ratios):.2f}x; target <= 1.5x)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, nargs="+", default=[2, 6.9])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--overwrite", action="store_true", help="keep the files: each run replaces one")
    args = parser.parse_args()
    global OVERWRITE
    OVERWRITE = args.overwrite
    project = project_dir()
    session = Session(project)
    session.register_tools([big_result])
    try:
        print(f"load average before: {os.getloadavg()[0]:.1f}")
        for mb in args.mb:
            one_size(session, project, mb, args.rounds)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        session.close()


if __name__ == "__main__":
    sys.exit(main())
