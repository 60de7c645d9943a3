"""Benchmark: a large MCP tool result over stdio, per MB, against reading the same bytes from a pipe.

    python bench/bench_mcp_big.py [--sizes 10 40 100] [--sdk-up-to 10]

For each size, one server (tests/servers/big.py) is asked for a text result of that
many MB three ways, in the same run:

- baseline: the raw JSON-RPC exchange over the server's pipes, the answer read with
  one blocking readline (what the bytes cost to make and move, with no MCP client);
- toolkernel: a call through toolkernel's server pool (its own stdio transport);
- sdk: the same call through the SDK's `stdio_client` (quadratic; only up to
  --sdk-up-to MB, as 100 MB takes minutes).

Printed: seconds per MB of result text for each, and toolkernel's ratio to the baseline.
A linear reader keeps the per-MB figure flat as the size grows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from toolkernel import _loop  # noqa: E402
from toolkernel._config._servers import ServerConfig  # noqa: E402
from toolkernel._providers._mcp import ServerPool  # noqa: E402
from toolkernel._tool import ToolContext  # noqa: E402

SERVER = str(REPO / "tests" / "servers" / "big.py")
ENV = {"PYTHONPATH": str(REPO)}


def baseline(megabytes: float) -> float:
    child = subprocess.Popen([sys.executable, SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**ENV, "PATH": "/usr/bin:/bin"})

    def send(message: dict) -> None:
        child.stdin.write((json.dumps(message) + "\n").encode())
        child.stdin.flush()

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}})
        child.stdout.readline()
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        started = time.perf_counter()
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "blob", "arguments": {"megabytes": megabytes}}})
        answer = json.loads(child.stdout.readline())
        elapsed = time.perf_counter() - started
        assert len(answer["result"]["content"][0]["text"]) == int(megabytes * 1_000_000)
        return elapsed
    finally:
        child.kill()
        child.wait()


def toolkernel(megabytes: float) -> float:
    pool = ServerPool()
    cfg = ServerConfig("big", "stdio", command=sys.executable, args=(SERVER,), env=ENV)
    try:
        tools = {t.name: t for t in _loop.run(pool.tools(cfg), timeout=600)}
        _loop.run(tools["ping"].call({}, ToolContext(REPO)), timeout=600)  # warm: first-call imports
        started = time.perf_counter()
        result = _loop.run(tools["blob"].call({"megabytes": megabytes}, ToolContext(REPO)), timeout=3600)
        elapsed = time.perf_counter() - started
        assert len(result.texts[0]) == int(megabytes * 1_000_000)
        return elapsed
    finally:
        _loop.run(pool.close(), timeout=60)


def sdk(megabytes: float) -> float:
    async def call() -> float:
        params = StdioServerParameters(command=sys.executable, args=[SERVER], env=ENV)
        with tempfile.TemporaryFile("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    await session.call_tool("ping", {})
                    started = time.perf_counter()
                    result = await session.call_tool("blob", {"megabytes": megabytes})
                    elapsed = time.perf_counter() - started
                    assert len(result.content[0].text) == int(megabytes * 1_000_000)
                    return elapsed

    return asyncio.run(call())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[10, 40, 100])
    parser.add_argument("--sdk-up-to", type=float, default=10)
    args = parser.parse_args()
    print(f"{'MB':>6} {'baseline s/MB':>14} {'toolkernel s/MB':>16} {'ratio':>6} {'sdk s/MB':>9}")
    for size in args.sizes:
        base, ours = baseline(size) / size, toolkernel(size) / size
        theirs = f"{sdk(size) / size:9.3f}" if size <= args.sdk_up_to else f"{'-':>9}"
        print(f"{size:6g} {base:14.3f} {ours:16.3f} {ours / base:6.2f} {theirs}", flush=True)


if __name__ == "__main__":
    main()
