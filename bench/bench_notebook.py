"""Round trip of notebook_run `1+1` through each pairing kind, against a bare
jupyter_client `execute_interactive` on the same kernel.

    python bench/bench_notebook.py [--rounds 200]

Target: a ratio within 1.2 for --kernel and --existing (the client stays
connected between calls). --server adds the server's websocket hop.
The two sides alternate in small blocks so machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from jupyter_client import BlockingKernelClient, KernelManager

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolkernel._loop import run  # noqa: E402
from toolkernel._providers._notebook import notebook_run, pair, unpair  # noqa: E402
from toolkernel._tool import ToolContext  # noqa: E402

BLOCK = 10
TOKEN = "bench-token"


def bare_client(connection_file: str | None = None, info: dict | None = None) -> BlockingKernelClient:
    client = BlockingKernelClient()
    if connection_file:
        client.load_connection_file(connection_file)
    else:
        client.load_connection_info(info)
    client.start_channels()
    client.wait_for_ready(timeout=60)
    return client


def measure(ctx: ToolContext, client: BlockingKernelClient, rounds: int) -> tuple[list[float], list[float]]:
    def bare() -> None:
        reply = client.execute_interactive("1+1", output_hook=lambda msg: None, timeout=60)
        assert reply["content"]["status"] == "ok"

    def tool() -> None:
        result = run(notebook_run.call({"notebook_path": "bench.ipynb", "code": "1+1"}, ctx))
        assert result.texts == ["2"], result.texts

    for _ in range(BLOCK):  # warm up both paths
        bare(), tool()
    bare_times: list[float] = []
    tool_times: list[float] = []
    while len(bare_times) < rounds:
        for fn, times in ((bare, bare_times), (tool, tool_times)):
            for _ in range(BLOCK):
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
    return bare_times, tool_times


def measure_paired(workdir: Path, rounds: int, bare_client_for, **how):
    """Pair `bench.ipynb` as `how` says, measure against a bare client on the same kernel, unpair."""
    ctx = ToolContext(workdir, state={})
    pairing = run(pair(ctx.state, workdir, "bench.ipynb", **how), timeout=120)
    try:
        client = bare_client_for(pairing)
        try:
            return measure(ctx, client, rounds)
        finally:
            client.stop_channels()
    finally:
        run(unpair(ctx.state), timeout=60)


def bench_kernel(workdir: Path, rounds: int):
    return measure_paired(workdir, rounds,
                          lambda p: bare_client(info=p.connection.client.get_connection_info()),
                          kernel="python3")


def bench_existing(workdir: Path, rounds: int):
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel()
    try:
        return measure_paired(workdir, rounds,
                              lambda p: bare_client(connection_file=manager.connection_file),
                              existing=manager.connection_file)
    finally:
        manager.shutdown_kernel(now=True)
        manager.cleanup_resources()


def bench_server(workdir: Path, rounds: int):
    runtime = workdir / "runtime"
    port = _free_port()
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime))
    log = (workdir / "server.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", f"--ServerApp.port={port}",
         "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0", f"--IdentityProvider.token={TOKEN}",
         f"--ServerApp.root_dir={workdir}"], env=env, stdout=log, stderr=subprocess.STDOUT,
        cwd=workdir)  # the collaboration store writes its database where the server runs
    url = f"http://127.0.0.1:{port}/"
    try:
        _wait_for(url)
        return measure_paired(
            workdir, rounds,
            lambda p: bare_client(connection_file=str(runtime / f"kernel-{p.connection.kernel_id}.json")),
            server=url, token=TOKEN, kernel="python3")
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(url: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "api/status", headers={"Authorization": f"token {TOKEN}"}, timeout=5).is_success:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("jupyter server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    rows = []
    for kind, bench in (("--kernel", bench_kernel), ("--existing", bench_existing), ("--server", bench_server)):
        with tempfile.TemporaryDirectory() as tmp:
            bare, tool = bench(Path(tmp), args.rounds)
        rows.append((kind, statistics.median(bare), statistics.median(tool), statistics.mean(bare),
                     statistics.mean(tool)))
    print(f"notebook_run '1+1' vs bare execute_interactive, {args.rounds} rounds each (ms)")
    print(f"{'pairing':<11} {'bare med':>9} {'tool med':>9} {'ratio':>6}   {'bare mean':>9} {'tool mean':>9} {'ratio':>6}")
    for kind, bare_med, tool_med, bare_mean, tool_mean in rows:
        print(f"{kind:<11} {bare_med * 1e3:9.2f} {tool_med * 1e3:9.2f} {tool_med / bare_med:6.2f}   "
              f"{bare_mean * 1e3:9.2f} {tool_mean * 1e3:9.2f} {tool_mean / bare_mean:6.2f}")


if __name__ == "__main__":
    main()
