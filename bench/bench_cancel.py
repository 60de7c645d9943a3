"""Benchmark: from a client's cancel of a `bash` call to the last write of its run (issue 46).

    python bench/bench_cancel.py [--rounds N]

`toolkernel serve` over stdio, the `mcp` SDK's client, which sends `notifications/cancelled`
when the task awaiting a call is cancelled. Each row's run writes to a file in a loop; the
call is cancelled once the file has a few lines, and the run's last write is the file's
modification time once the run ended (the cancelled run's report reached the client as a log
message, and a second more passed). Rows:

- bashkit:   a Bashkit loop, `echo >> file; sleep 0.05`
- sleeping:  a Bashkit script that wrote once and sits in `sleep 30` (to the report's arrival)
- command:   a command tool whose process loops the same way in `sh`
- mcp:       an MCP call in flight (the slow fixture server; to the report's arrival)

Target: under 1 s. The baseline, measured in the same run, is the round trip of a `bash`
call that only echoes: the ratio says how the figure stands against the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parent.parent
SLOW = REPO / "tests" / "servers" / "slow.py"
LOOP = "for i in $(seq 1 2000); do echo $i >> {file}; sleep 0.05; done"


def config(marker: Path) -> str:
    shell_loop = f"while :; do echo x >> {marker.parent / 'command.txt'}; sleep 0.05; done"
    return (f"[mcp_servers.slow]\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(SLOW))}]\n\n"
            f'[tools.looper]\ncommand = ["sh", "-c", {json.dumps(shell_loop)}]\n\n'
            '[policy]\nallow = ["mcp_slow__*", "tool__looper"]\n')


async def one(client: ClientSession, logs: list, script: str, ready, written: Path | None) -> float:
    """Seconds from the cancel to the run's last write (to the report's arrival where `written` is None)."""
    seen = len(logs)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(client.call_tool, "bash", {"script": script})
        with anyio.fail_after(120):
            while not ready():
                await anyio.sleep(0.01)
        cancelled = time.time()
        tasks.cancel_scope.cancel()
    with anyio.fail_after(120):
        while not any(isinstance(d, dict) and d.get("event") == "cancelled" for d in logs[seen:]):
            await anyio.sleep(0.01)
    reported = time.time()
    if written is None:
        return reported - cancelled
    await anyio.sleep(1.0)  # anything the run still wrote, it wrote by now
    return max(0.0, written.stat().st_mtime - cancelled)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


async def main(rounds: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-cancel-"))
    marker = work / "reached.txt"
    (work / "toolkernel.toml").write_text(config(marker))
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOOLKERNEL_TRUST_ALL": "1"}
    logs: list = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    params = StdioServerParameters(command=sys.executable, args=["-m", "toolkernel", "serve"], env=env, cwd=str(work))
    rows: dict[str, list[float]] = {"baseline (echo round trip)": [], "bashkit": [], "sleeping": [],
                                    "command": [], "mcp": []}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, logging_callback=on_log) as client:
            await client.initialize()
            await client.call_tool("bash", {"script": "tools slow ping; tools --help >/dev/null"})  # warm
            for round_ in range(rounds):
                start = time.perf_counter()
                await client.call_tool("bash", {"script": "echo hi"})
                rows["baseline (echo round trip)"].append(time.perf_counter() - start)
                ticks = work / f"ticks-{round_}.txt"
                rows["bashkit"].append(await one(client, logs, LOOP.format(file=ticks.name),
                                                 lambda: lines(ticks) >= 5, ticks))
                once = work / f"once-{round_}.txt"
                rows["sleeping"].append(await one(client, logs, f"echo x > {once.name}; sleep 30",
                                                  once.exists, None))
                command = work / "command.txt"
                command.unlink(missing_ok=True)
                rows["command"].append(await one(client, logs, "tools looper", lambda: lines(command) >= 5, command))
                marker.unlink(missing_ok=True)
                script = f"tools slow wait-marked marker={json.dumps(str(marker))} steps=3000 step_seconds=0.01"
                rows["mcp"].append(await one(client, logs, script, marker.exists, None))
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    baseline = statistics.median(rows["baseline (echo round trip)"])
    print(f"cancel -> the run's last write, {rounds} rounds; {load}")
    print("| row | median s | max s | median / echo round trip |")
    print("| --- | ---: | ---: | ---: |")
    for name, values in rows.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.3f} | {max(values):.3f} | {median / baseline:.1f}x |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    anyio.run(main, parser.parse_args().rounds)
