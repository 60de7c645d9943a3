"""Benchmark: what one `tools` call costs under each way Bashkit can run a script.

    python bench/bench_builtin_paths.py [--calls 2000] [--mcp-calls 300] [--repeat 5]

Five ways, each with the real `tools` command (session, catalog, dispatcher):
1. `execute_sync` with the sync builtin (what ran scripts that call `tools` in a loop until
   2026-12-01; now only a script that reads its input and defines a function);
2. the async `execute` with byte sinks (what runs scripts that call no tool) and the same
   sync builtin;
3. the async `execute` with an async builtin: Bashkit runs it on the caller's loop (the
   script thread's own), where it awaits `ToolsCommand.handle` in place, or on the private
   loop through `asyncio.wrap_future` for a tool bound there (MCP);
4. the async `execute` with `tools` as a live command (scripts without a loop; see below);
5. the async `execute` with the relay (`_bashkit._Relay`: `tools` a shell function over a
   sync builtin and the live command), what runs loops since 2026-12-01.

Per call: a loop of `tools noop` (an in-process tool) and a loop of an MCP call, minus
the same loop running `:`. Median and best of --repeat interleaved rounds. Also the raw
cost of Bashkit's dispatch alone (a builtin that returns at once, no toolkernel).
The question the figures answer: is (2) or (3) as cheap as (1)? If so every script could take the
byte sinks (an output peaks at ~1.2x its size instead of ~8x: bench_memory.py).

Before 2026-11-30 it was not (bashkit 0.20.1, 2 CPUs at load 3.5, median / best of 7):
`tools noop` cost 266 / 180 us under (1), 787 / 396 under (2) and 499 / 360 under (3).
The cause of (2): Bashkit calls a sync builtin on its tokio threads, which Python did not
start, so each call made a fresh Python thread state (three times a call) and, with it,
a new event loop for the call (`threading.local` was empty each time). With the thread
state kept (`_bashkit._keep_thread_state`) and the loops kept by thread id (`_loop`),
the same day at load 3.3, median / best of 7:
    (1) 224 / 114 us, (2) 168 / 149 us, (3) 298 / 294 us; an MCP call 6.5 / 6.2 / 7.0 ms;
    Bashkit alone: 6.5 us under (1), 7.8 us under (2), 156 us under (3);
and again at load 4.4: (1) 417 / 307 us, (2) 498 / 364 us, (3) 871 / 411 us; Bashkit
alone 19.0 / 20.1 / 350 us. (2) against (1): 0.75x and 1.19x at the median, so within
this machine's noise; Bashkit's own dispatch is the same on both.
The code before, in the same hour at load 3-8.5, median of 5: (2) was 2.1x (1).
So (2) costs what (1) costs. Scripts that call `tools` still keep (1), for a reason
this benchmark does not show: under (2) a sync builtin blocks the thread that hands the
script's earlier output on, so output waits for the interpreter's next real wait (see
`_bashkit._streamed`). (3) lets it through, at two thread hand-offs a call.
(4), `Bash.add_command`, is what scripts without a loop run since the evening of
2026-11-30, because only a live command can write a large result in chunks
(bench_memory.py: 1.0x against 7.8x). Same day, load 3.9-4.6, median / best of 3:
`tools noop` 922 / 782 us against 166 / 159 under (1); an MCP call 4.3 / 3.8 ms against
3.3 / 2.7; Bashkit alone 386 / 336 us (a call and a write, each a trip between Bashkit's
thread and the loop) against 3.6 under (1). So scripts with a loop, or more than 10
calls, keep (1) (`_bashkit._way`).
The relay (5), 2026-12-01, load 0.5-0.9, median / best of 3: `tools noop` 22.3 / 22.1 us
(23.5 / 23.2 in a second run) against 15.6-16.4 under (1): the shell function costs Bashkit
about 7 us a call; an MCP call 861 / 853 us against 836 / 828 under (1). Before MCP calls
were made in place too (the first version handed every call that waits on another loop to
the live command), an MCP call cost 1,262 us under (5).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import weakref
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tools import NullSink, loop_script, noop, project_dir  # noqa: E402

from toolkernel import _loop  # noqa: E402
from toolkernel._command._cli import split_command  # noqa: E402
from toolkernel._runners import _bashkit  # noqa: E402
from toolkernel._runners._bashkit import (BashkitRunner, _Builtin, _CapWatch, _ended, _LiveTools,  # noqa: E402
                                          _new_bash, _Relay, _streamed)
from toolkernel._runners._shell import ScriptEvents, execute  # noqa: E402
from toolkernel._session import Session  # noqa: E402

MCP_BODY = "tools github get-pull repo=acme/api number=101"


class _AsyncBuiltin(_Builtin):
    """The `tools` builtin as a coroutine: Bashkit's `execute` awaits it on the caller's loop."""

    async def __call__(self, ctx) -> object:
        from bashkit import BuiltinResult

        command = self.command
        argv = list(ctx.argv)
        parsed = split_command(argv, command.catalog.is_server, command.catalog.split_qualified)
        coro = command.handle(argv, ctx.stdin, parsed)
        if command._runs_here(parsed):
            outcome = await coro
        else:
            outcome = await asyncio.wrap_future(_loop.submit(coro))
        return BuiltinResult(stdout=outcome.stdout, stderr=outcome.stderr, exit_code=outcome.exit_code)


class _Variant(BashkitRunner):
    """A runner forced onto one way: `sync_execute` picks execute_sync, `builtin` the callback,
    `how` "builtin", "live" (tools a live command) or "relay" (`_bashkit._Relay`)."""

    def __init__(self, sync_execute: bool, builtin: type[_Builtin], how: str = "builtin") -> None:
        super().__init__()
        self.sync_execute, self.builtin, self.how = sync_execute, builtin, how

    def run(self, script, command, events):
        watch = _CapWatch(events)
        builtin = self.builtin(command, events, weakref.ref(self))
        live = _LiveTools(builtin, watch)
        relay = _Relay(builtin, live) if self.how == "relay" else None
        bash = _new_bash(builtin, live if self.how == "live" else None, relay, command.workdir,
                         command.dispatcher.env.guarded, False, command.dispatcher.env.shell)
        result = bash.execute_sync(script, on_output=watch.output) if self.sync_execute \
            else _streamed(bash, script, watch, prelude=_Relay.FUNCTION if relay else "")
        return _ended(result, watch)


VARIANTS = {
    "execute_sync + sync builtin (loops until 12-01)": lambda: _Variant(True, _Builtin),
    "execute + sync builtin": lambda: _Variant(False, _Builtin),
    "execute + async builtin": lambda: _Variant(False, _AsyncBuiltin),
    "execute + live command (today, no loop)": lambda: _Variant(False, _Builtin, "live"),
    "execute + relay (today, loops)": lambda: _Variant(False, _Builtin, "relay"),
}


def timed(session: Session, script: str, runner) -> float:
    events = ScriptEvents()
    command = _loop.run(session.prepare(events))
    command.run.limit = 10**9
    started = time.perf_counter()
    result = execute(runner, command, script, events, NullSink())
    elapsed = time.perf_counter() - started
    if result.exit_code != 0:
        raise SystemExit(f"benchmark script exited {result.exit_code}: {result.stderr[-500:]}")
    return elapsed


def raw_dispatch(calls: int, mode: str) -> float:
    """Seconds for `calls` builtin calls that do nothing, by Bashkit alone (no toolkernel)."""
    from bashkit import Bash

    def sync_builtin(ctx):
        return "ok\n"

    async def async_builtin(ctx):
        return "ok\n"

    async def sink(chunk: bytes) -> None:
        pass

    async def live_command(ctx) -> int:
        await ctx.stdout.write(b"ok\n")
        return 0

    def run(script: str) -> float:
        if mode == "live":
            bash = Bash()
            bash.add_command("tools", live_command)
        else:
            bash = Bash(custom_builtins={"tools": async_builtin if mode == "async" else sync_builtin})
        started = time.perf_counter()
        if mode == "sync":
            bash.execute_sync(script)
        else:
            _loop.run_here(_loop.local_task(_executed(bash, script, sink)))
        return time.perf_counter() - started

    return run(loop_script("tools x", calls)) - run(loop_script(":", calls))


async def _executed(bash, script: str, sink):
    return await bash.execute(script, stdout=sink, stderr=sink)  # made with the loop running


def median_best(values: list[float], calls: int) -> str:
    return f"{statistics.median(values) / calls * 1e6:8.1f} us {min(values) / calls * 1e6:8.1f} us"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--mcp-calls", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    session = Session(project_dir())
    session.register_tools([noop])
    rows: dict[str, list[float]] = {}
    try:
        for make in VARIANTS.values():  # warm-up: imports, caches, the MCP server
            timed(session, loop_script("tools noop", 10) + "\n" + loop_script(MCP_BODY, 3), make())
        for _ in range(args.repeat):
            for name, make in VARIANTS.items():
                empty = timed(session, loop_script(":", args.calls), make())
                rows.setdefault(f"noop | {name}", []).append(
                    timed(session, loop_script("tools noop", args.calls), make()) - empty)
                empty = timed(session, loop_script(":", args.mcp_calls), make())
                rows.setdefault(f"MCP  | {name}", []).append(
                    (timed(session, loop_script(MCP_BODY, args.mcp_calls), make()) - empty)
                    * args.calls / args.mcp_calls)  # per call below, like the noop rows
            for mode in ("sync", "exec+sync", "async", "live"):
                rows.setdefault(f"raw  | bashkit alone, {mode}", []).append(raw_dispatch(args.calls, mode))
    finally:
        session.close()
    print(f"per `tools` call (loop minus an empty loop): median, best of {args.repeat};"
          f" {args.calls} in-process calls, {args.mcp_calls} MCP calls")
    width = max(map(len, rows))
    for name in sorted(rows, key=lambda n: (n[:4], list(rows).index(n))):
        print(f"  {name:<{width}}  {median_best(rows[name], args.calls)}")
    print(f"  load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
