"""The first cell against a bare kernel start, and the memory toolkernel adds.

    python bench/bench_first_cell.py [--rounds 3]

Per round (interleaved): start a bare IPython kernel through jupyter_client and
time it until it answers; in that kernel, time `%load_ext toolkernel` plus a first
`%%tools` cell running `tools --help` (no servers configured), and read the
kernel's resident memory before and after. Targets: first cell <= 0.5x a bare
kernel start; toolkernel adds <= 40 MB.

The background imports of `%load_ext` (jsonschema for input checks) wait until no
cell has run for half a second, so the memory is also read after a first tool call
(`tools read-file`, which imports them itself here): "settled".

toolkernel's bytecode is compiled first, as `pip install` does: this tree has none,
and with PYTHONDONTWRITEBYTECODE set (as on the build machine) every kernel compiled
the ~80 modules of toolkernel a first cell imports, about 0.2 s of it that an installed
toolkernel never pays (nor does the bare kernel, whose modules are installed).

Figures of 2026-12-01 (2 cores, load average 2.1-5.2 from other work, so the bare start
took 0.7-3.4 s, 0.9 s when quiet; each a median of 3 rounds; runs interleaved):
- main, toolkernel compiled by every kernel (the bench before this note): 0.34-0.59x
  over 11 runs; +22 MB after the first cell, +40 MB settled.
- main, bytecode compiled: 0.18-0.41x over 13 runs; +19 MB, +39 MB. The warm-up's
  jsonschema import (seconds of Python) shared the GIL with the first cell.
- the warm-up waiting for an idle kernel (`_magic.IdleWatch`), bytecode compiled:
  0.18-0.32x over 10 runs; 0.21-0.22x in the last 3 (load 2.2-2.9), the cell
  0.15-0.20 s; +17 MB after the first cell, +39 MB settled. Compiled by every kernel:
  0.27-0.60x over 5 runs; +20 MB, +42 MB.
With bytecode, about 40% of toolkernel's import time is making its ~60 dataclasses.
Settled memory, measured step by step: jsonschema ~20 MB, 15 MB of it the Earley
parsers rfc3987_syntax builds at import for the "iri" format (installed beside JupyterLab
by jupyter-events; python-jsonschema/jsonschema#1428); bashkit ~12 MB (extension 5.5,
first `Bash` 3.4, its first run 2.8); toolkernel's own modules ~3 MB.

2026-12-05 (a Firecracker VM, load 0.2-0.5): 0.24x (best 0.22x), +17 MB after the first cell,
+39 MB after a first tool call, whose cell took 1.17 s (jsonschema's import, 1.1 s of it the
grammar above). With that grammar built only when an "iri" check first runs
(`_imports.LazyFormatGrammar`): 0.24x, +18 MB, +24 MB after the first tool call, whose cell
took 0.08 s.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client import KernelManager

REPO = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run(client, code: str) -> None:
    reply = client.execute_interactive(code, timeout=120, output_hook=lambda msg: None)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"{code!r} failed: {reply['content']}")


def one_round(work: Path, env: dict) -> tuple[float, float, float]:
    km = KernelManager(kernel_name="python3")
    start = time.perf_counter()
    km.start_kernel(cwd=str(work), env=env)
    client = km.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        bare = time.perf_counter() - start
        pid = km.provisioner.process.pid
        before = rss_mb(pid)
        start = time.perf_counter()
        run(client, "%load_ext toolkernel")
        run(client, "%%tools\ntools --help")
        first = time.perf_counter() - start
        after_first = rss_mb(pid) - before
        start = time.perf_counter()
        run(client, "%%tools\necho hi > a.txt; tools read-file path=a.txt")
        call = time.perf_counter() - start
        return bare, first, after_first, call, rss_mb(pid) - before
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    # As installed: pip compiles a package's bytecode, while this tree has none (and
    # PYTHONDONTWRITEBYTECODE, where set, would have every kernel compile toolkernel anew).
    compileall.compile_dir(REPO / "toolkernel", quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(Path(tmp) / "xdg")}
        rounds = [one_round(work, env) for _ in range(options.rounds)]
    bare, first, added, call, settled = (statistics.median(r[i] for r in rounds) for i in range(5))
    best = min(r[1] / r[0] for r in rounds)
    print(f"load average {os.getloadavg()[0]:.2f}; median of {options.rounds} rounds: bare kernel start {bare:.2f} s, %load_ext + first cell {first:.2f} s"
          f" = {first / bare:.2f}x, best {best:.2f}x (target <= 0.5x)")
    print(f"memory toolkernel adds: {added:.0f} MB after the first cell, {settled:.0f} MB after a first tool"
          f" call (target <= 40 MB); that call's cell took {call:.2f} s")


if __name__ == "__main__":
    sys.exit(main())
