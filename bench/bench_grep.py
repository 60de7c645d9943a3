"""grep_search against plain `rg` on the same tree of 20,000 small files.

    python bench/bench_grep.py [--files 20000] [--reps 5]

Builds the tree in a temp folder, then times, for content and
files_with_matches modes, the grep_search tool (rg engine, through the Tool
call the dispatcher makes) and a plain `rg` subprocess with the flags the tool
gives it (`--no-ignore --hidden`: the tool searches every file), and prints the
median times and their ratio (target: <= 1.5x). The rounds are interleaved (rg,
tool, built-in, rg, ...), so a burst of load on the shared machine hits all
three alike. The built-in engine is timed too, for reference.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolkernel._tool import ToolContext  # noqa: E402
from toolkernel._providers._tools.search import grep_search  # noqa: E402

WORDS = "alpha beta gamma delta epsilon zeta theta lambda sigma omega import return value".split()
PATTERN = r"needle_\d+"


def build_tree(root: Path, count: int) -> None:
    rng = random.Random(7)
    for i in range(count):
        folder = root / f"d{i % 50:02}" / f"s{i % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(rng.randint(5, 40))]
        if i % 10 == 0:
            lines.insert(rng.randrange(len(lines)), f"x = needle_{i}")
        (folder / f"f{i}.{['py', 'txt', 'md', 'js'][i % 4]}").write_text("\n".join(lines) + "\n")


def time_tool(root: Path, args: dict, engine: str) -> float:
    settings = {"grep_search": {"engine": "builtin"}} if engine == "builtin" else {}
    ctx = ToolContext(workdir=root, settings=settings)
    start = time.perf_counter()
    result = asyncio.run(grep_search.call(args, ctx))
    elapsed = time.perf_counter() - start
    assert not result.is_error, result.texts
    return elapsed


def time_rg(root: Path, flags: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(["rg", "--no-config", "--no-ignore", "--hidden", *flags, "-e", PATTERN, "."], cwd=root, check=True,
                   stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    return time.perf_counter() - start


def interleaved_medians(fns: list, reps: int) -> list[float]:
    """Each function once per round, `reps` rounds, after one warm-up round (page cache)."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(reps):
        for fn, got in zip(fns, times):
            got.append(fn())
    return [statistics.median(got) for got in times]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=5)
    options = parser.parse_args()
    if shutil.which("rg") is None:
        sys.exit("rg is not installed; nothing to compare with")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_tree(root, options.files)
        modes = {
            "content": ({"pattern": PATTERN, "output_mode": "content", "head_limit": 0}, ["-n"]),
            "files_with_matches": ({"pattern": PATTERN, "head_limit": 0}, ["-l"]),
        }
        print(f"{options.files} files, {options.reps} reps, median seconds")
        print(f"{'mode':<20}{'rg':>9}{'grep_search':>13}{'ratio':>8}{'built-in':>10}{'ratio':>8}")
        for mode, (args, flags) in modes.items():
            plain, tool, builtin = interleaved_medians(
                [lambda: time_rg(root, flags), lambda: time_tool(root, args, "rg"),
                 lambda: time_tool(root, args, "builtin")], options.reps)
            print(f"{mode:<20}{plain:>9.3f}{tool:>13.3f}{tool / plain:>7.2f}x{builtin:>10.3f}{builtin / plain:>7.1f}x")


if __name__ == "__main__":
    main()
