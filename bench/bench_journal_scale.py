"""Benchmark: what a cell costs as the kernel's folder grows, and what the journal holds (issue 44).

    python bench/bench_journal_scale.py [--sizes 10,100000] [--repeat 7] [--kb 4]
    (BENCH_DIR=folder: where the folders go; the temporary folder by default)

For each size, a folder of that many files (--kb KB of CSV-like text each, 1,000 a folder) and a
real kernel started in it (jupyter_client), `%load_ext toolkernel`, then:
- the first `%%tools echo hi` (the journal learns the folder: one walk, an inotify watch a folder,
  its record on disk) and the first `%%bash true` (a host cell: the most recently changed files
  kept ahead of it, up to `[rewind] shell_mb`), each timed alone;
- then --repeat rounds of `%%tools echo hi`, `%%bash true` and a plain Python cell, in turns;
  the median of each, from the second cell on, as the client sees it (a round trip);
- the journal's size on disk after those cells, against the folder's.
Ratios are against the 10-file folder measured in the same run. Targets (issue 44): from the
second cell on, each shell cell at 100,000 files at most 1.3x the same cell at 10; the first
cell at 100,000 files at most 3 s; the journal at most 10% of the folder.

Figures: see the end of this docstring, with the load they were taken at.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from kernel_helpers import started_kernel  # noqa: E402


def build(root: Path, count: int, kb: int) -> int:
    """`count` files of about `kb` KB each (distinct contents), 1,000 a folder; their bytes."""
    row = "2026-12-07,sensor-{i},{v:.6f},ok\n"
    total = 0
    for i in range(count):
        folder = root / "data" / f"part{i // 1000:04d}"
        if i % 1000 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        lines = max(1, kb * 1024 // 36)
        body = "".join(row.format(i=i, v=(i * 7919 + j) % 1000 / 7.0) for j in range(lines)).encode()
        (folder / f"r{i % 1000:03d}.csv").write_bytes(body)
        total += len(body)
    (root / "toolkernel.toml").write_text('[policy]\nmode = "accept-edits"\n')
    return total


def du(path: Path) -> int:
    """Bytes on disk (blocks) of everything below `path`."""
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                pass
    return total


def timed(client, code: str) -> float:
    start = time.perf_counter()
    reply = client.execute_interactive(code, timeout=600, allow_stdin=False, output_hook=lambda msg: None)
    elapsed = time.perf_counter() - start
    assert reply["content"]["status"] == "ok", reply["content"]
    return elapsed


CELLS = {"tools": "%%tools\necho hi", "bash": "%%bash\ntrue", "python": "pass"}


def measure(root: Path, state: Path, repeat: int) -> dict[str, float]:
    env = {**os.environ, "XDG_STATE_HOME": str(state), "PYTHONPATH": str(REPO)}
    manager, client = started_kernel(root, env)
    try:
        timed(client, "%load_ext toolkernel")
        found = {"first tools": timed(client, CELLS["tools"]), "first bash": timed(client, CELLS["bash"])}
        samples: dict[str, list[float]] = {name: [] for name in CELLS}
        for round_ in range(repeat):
            names = list(CELLS)
            names = names[round_ % 3:] + names[:round_ % 3]
            for name in names:
                samples[name].append(timed(client, CELLS[name]))
        found.update({name: statistics.median(values) for name, values in samples.items()})
        doctor = client.execute_interactive("%tools doctor", timeout=60, allow_stdin=False,
                                            output_hook=lambda msg: found.setdefault("doctor", "")
                                            if msg["msg_type"] != "stream" else
                                            found.__setitem__("doctor", found.get("doctor", "") + msg["content"]["text"]))
        assert doctor["content"]["status"] == "ok"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,100000")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--kb", type=int, default=4)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    results = {}
    with tempfile.TemporaryDirectory(prefix="jscale-", dir=os.environ.get("BENCH_DIR")) as tmp:
        for size in sizes:
            root, state = Path(tmp) / f"ws-{size}", Path(tmp) / f"state-{size}"
            root.mkdir()
            start = time.perf_counter()
            data = build(root, size, args.kb)
            made = time.perf_counter() - start
            found = measure(root, state, args.repeat)
            found["folder MB"] = du(root) / 1e6
            found["journal MB"] = du(state) / 1e6
            found["data MB"] = data / 1e6
            found["built s"] = made
            results[size] = found
            shutil.rmtree(root, ignore_errors=True)
    base = results[sizes[0]]
    for size, found in results.items():
        print(f"{size:>9} files ({found['folder MB']:.0f} MB on disk, built in {found['built s']:.0f} s): "
              f"first %%tools {found['first tools']:.2f} s, first %%bash {found['first bash']:.2f} s; "
              f"then %%tools {found['tools'] * 1000:.1f} ms ({found['tools'] / base['tools']:.2f}x), "
              f"%%bash {found['bash'] * 1000:.1f} ms ({found['bash'] / base['bash']:.2f}x), "
              f"Python {found['python'] * 1000:.1f} ms; journal {found['journal MB']:.1f} MB "
              f"({100 * found['journal MB'] / max(found['folder MB'], 1e-9):.1f}% of the folder)")
        print("   " + found.get("doctor", "").strip().splitlines()[-1] if found.get("doctor") else "")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
