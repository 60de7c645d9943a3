"""Peak memory of a run against the size of its output.

    python bench/bench_memory.py [--mb 2 8 32]

Each size and script runs in a fresh child process: it opens a session, runs
`cat` of a file of that size (the output goes through the cell's limiter and
is saved), and reports how far its peak RSS (VmHWM, reset first) rose above
its RSS after a small run in the same child, and where its RSS is after the
cell. Five scripts: one that calls no tool (Bashkit's byte sinks), the same
with a `tools` call in it, a tool whose result is that size, printed, the
same call in a `for` loop (the relay: `_bashkit._Relay`), and in a loop that
reads its input (the live command). The
tool builds its result in one piece: a second copy made inside the tool would be
the tool's cost, not the shell's.
Past 10 MiB Bashkit cuts the script's output (the run fails, loudly): the
ratio is then against what arrived; the rise against the output's own size is
the figure to read. Target: at most 2x the output's size. Three more rows call an MCP server's
tool (its server started, and the SDK imported, before the measured run): a text, rows as
structured content, and a list of rows (the Python SDK sends it as `{"result": [...]}` with
an output schema, and as a text block per row beside it). Two more call the same server
over streamable HTTP (started by this bench on a loopback
port). `--only` picks rows.

History (8 MB output, peak rise over its size):
- Until 2026-11-30 evening, scripts that call `tools` ran under execute_sync with a sync
  builtin: with tools 8.0x, tool result 7.8x (no tools 1.2x). Of the 63 MB of a printed
  8 MB result: the tool's 8 MB; `BuiltinResult` copying it into Rust, +15 MB; execute_sync's
  buffers before its first `on_output`, +38 MB; the limiter, +2 MB. An async builtin on the
  byte sinks fixed "with tools" but not "tool result" (7.6x): a builtin's result is one
  whole string however it is returned.
- Since then, a script that calls `tools` outside loops runs on the byte sinks with `tools`
  as a live command (`Bash.add_command`) that writes its result in 64K chunks
  (`_bashkit._LiveTools`). Same run, load 4.4-4.9, branch against main: 2 MB with tools
  1.6x (main 8.3x), tool result 1.1x (8.6x); 8 MB with tools 1.1x (7.9x), tool result
  1.0x (7.9x); 32 MB: 31-32 MB rise on every script (1.0x the output; main 172 MB for the
  result). A script with a loop (or more than 10 calls) keeps execute_sync and its ~8x:
  a live call costs Bashkit ~380 us against ~5 (bench_builtin_paths.py).
- Since 2026-12-01, a loop's `tools` is a shell function that makes quick calls in place
  and hands a result over 256K characters to the live command (`_bashkit._Relay`); a loop
  that reads its input has the live command. Same run, load 0.3-0.6, against the code before:
  in a loop 2 MB 1.4x (8.4x), 8 MB 1.1x (7.8x), 32 MB a rise of 31 MB (172 MB, 16x what
  arrived); a loop that reads, 8 MB 1.0x. Left at about 8x: a script that reads its input
  and defines a function (execute_sync, a Bashkit trap: see `_bashkit._way`).
- 2026-12-05: two rows more, an MCP server's results (tests/servers/big.py), which no row
  measured before. Missed, far: 8 MB of text 10.7x (92 MB), 8 MB of structured rows 7.2x
  (63 MB; 12.4x before `_render.to_json` wrote MCP structured content with pydantic's encoder
  the same day), 2 MB 9.0x and 7.3x; the bare SDK client peaked at 33x on the same rows.
  Where it goes (8 MB text with multi-byte characters): the server sends the text twice (as
  text and as {"result": text}), so the reply line is 18 MB; its pieces and the joined line,
  36 MB; `json.loads` decodes the line to a str first (36 MB: UCS-2 for non-ASCII) beside it,
  then makes both strings (32 MB). Tried: pydantic_core.from_json for long lines (no str copy):
  the text reply 49 -> 33 MB at the call, but structured rows 57 -> 69 MB in a script (its
  parser holds its own tree too), so not kept. Under 2x needs a reply read as a stream
  (the duplicate never held, a result over max_result_mb written to disk as it comes):
  not built.
- 2026-12-05 evening: a long reply line's long strings go to a file as the line arrives, kept
  once when sent twice (`_providers._spool`), and the text reaches the script from there in
  pieces (`_longtext.LongText`). Same run, load ~1: 8 MB of text 0.4x (3.3 MB; it was 10.7x),
  2 MB 1.3x; 32 MB (over max_result_mb, saved whole) a rise of 2.8 MB (315 MB). Structured
  rows: 8 MB 5.5x, 2 MB 5.2x (7.2x and 7.3x before: their text copy, the JSON of the rows, now
  stays on disk, and the markers are put in place without a copy of the tree); 32 MB over the
  cap rose by 193 MB (256 MB this morning), load 0.4. They are parsed into Python objects
  (about 3.5x the printed JSON) to be printed: under 2x needs a streaming parse of the
  structured content, not built.
- 2026-12-05, later: long structured content is written indented to a file as its reply is
  parsed, a run of rows at a time (`_providers._long_json`); the line's skeleton past 256 KiB
  goes to a file of its own, walked mapped, its pages let go behind the walk; text blocks
  beside long structured content are dropped unread; an output schema made of per-member and
  per-item parts is checked a run at a time. Same run, load ~1: rows 8 MB 0.4x (5.5x), 2 MB
  1.2-1.4x (5.2x), 32 MB over the cap a rise of 4.3 MB (193 MB); the list (a new row; the code
  before: 9.3x at 8 MB, its schema's check parsing it whole, its 66,000 text blocks parsed
  too) 8 MB 0.5x, 2 MB 1.3x, 32 MB a rise of 4.7 MB. Text: 8 MB 0.4x, 2 MB 1.5x.
- 2026-12-05, later still: two HTTP rows. Missed, far: text 2 MB 25.7x, 8 MB 24.9x; rows 2 MB
  33.2x, 8 MB 30.6x, and 15-53 MB left after the cell. The MCP SDK reads and parses each SSE
  event whole (a bare SDK client alone peaks at 173 MB, traced, for 8 MB of text: pydantic's
  parse 47 MB, the SSE parser's buffers 63 MB). Under 2x needs toolkernel's own reading of a
  `tools/call` reply over HTTP, as `_stdio.Lane` reads stdio: not built. Until today a reply
  over 1 MiB failed over HTTP (the SDK's cap on one event).
- 2026-12-05, evening: a `tools/call` over streamable HTTP is sent and read past the SDK's
  session (`_providers._http_lane`, now `_mcp._http`): an SSE event or JSON body past 1 MiB goes to a `LongLine`
  as it arrives, as over stdio. HTTP text 2 MB 1.7x, 8 MB 0.4x; rows 2 MB 1.2x, 8 MB 0.3x;
  0.2-0.7 MB left after the cell; 32 MB over the cap a rise of 2.3-2.9 MB. Then the older SSE
  transport, made toolkernel's own (`_providers._sse`; the SDK's took no message over 1 MiB):
  two SSE rows. In later runs (load ~1): text 2 MB 2.2-2.4x over HTTP and SSE (1.7x over
  stdio), 8 MB 0.6x; rows 2 MB 1.7-1.8x, 8 MB 0.4-0.5x. The 1.3 MB more than over stdio was
  glibc's: the reply is read on the private loop's thread, whose malloc arena kept what the
  read freed while the script's thread printed (MALLOC_ARENA_MAX=1: 1.5-1.6x). With the free
  heap handed back after a long reply (`malloc_trim`, `_spool.give_back_heap`): text 2 MB
  1.9-2.0x, 8 MB 0.5x; rows 2 MB 1.2-1.3x, 8 MB 0.3x, both transports.
- 2026-12-07: the older SSE transport is the SDK's `sse_client` again (issue 46: the
  deprecated transport is not worth a transport of our own), which takes no message over
  1 MiB: its rows are gone (such a reply fails its call, saying so).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
CHILD = """
import gc, json, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from toolkernel import tool
from toolkernel._session import Session
@tool("big-result", description="A result of `size` characters.", kind="read",
      input_schema={{"type": "object", "properties": {{"size": {{"type": "integer"}}}}}})
def big_result(arguments, ctx):
    return ("z" * 99 + "\\n") * (arguments["size"] // 100)  # built once: a second copy would be the tool's
class Quiet:
    def stdout(self, t): pass
    def stderr(self, t): pass
    def image(self, p): pass
    def progress(self, *a): pass
def status_kb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
def reset_peak():  # Linux: VmHWM starts again from VmRSS (the session's start peaked higher)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
work = Path({work!r})
s = Session(work)
s.register_tools([big_result])
s.run_script({warm!r}, Quiet())  # the first call imports what calls need (the MCP SDK, a server started)
gc.collect()
reset_peak()
base = before = status_kb("VmRSS")
result = s.run_script({script!r}, Quiet())
peak = status_kb("VmHWM")
arrived = (work / result.saved_output).stat().st_size if result.saved_output else 0
exit_code = result.exit_code
del result
gc.collect()
print(json.dumps({{"base_kb": base, "peak_kb": peak, "before_kb": before, "after_kb": status_kb("VmRSS"),
                  "arrived": arrived, "exit": exit_code}}))
"""
SCRIPTS = {"no tools": "cat data.txt", "with tools": "cat data.txt\ntools --help > /dev/null",
           "tool result": "tools big-result size={size}",
           "in a loop": "for i in 1; do tools big-result size={size}; done",  # the relay
           "read loop": "echo 1 | while read i; do tools big-result size={size}; done",  # live
           # An MCP server's results (tests/servers/big.py), read whole from its pipe: a text result
           # (an MCPServer sends it twice, as text and as {"result": text}), and structured content.
           "MCP text": "tools big blob megabytes={mb}",
           "MCP rows": "tools big rows megabytes={mb}", "MCP list": "tools big listing megabytes={mb}",
           # The same server over streamable HTTP: each reply read as it streams (`_mcp._http`).
           "HTTP text": "tools big blob megabytes={mb}", "HTTP rows": "tools big rows megabytes={mb}"}
REMOTE_POLICY = """[policy]
allow = ["big blob", "big rows", "big ping"]
"""
HTTP_CONFIG = """[mcp_servers.big]
url = "http://127.0.0.1:{port}/mcp"

""" + REMOTE_POLICY
SSE_CONFIG = {"mcpServers": {"big": {"type": "sse", "url": "http://127.0.0.1:{port}/sse"}}}
MCP_CONFIG = """[mcp_servers.big]
command = {python}
args = [{server}]
env = {{ PYTHONPATH = {repo} }}

[policy]
allow = ["big blob", "big rows", "big listing", "big ping"]
"""


def measure(mb: int, script: str, remote: tuple[str, int] | None = None) -> dict:
    """One row's figures; `remote`: the big fixture over ("HTTP" or "SSE", on this port)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        (work / "data.txt").write_text(("x" * 99 + "\n") * (mb * 10_000))
        env = {**os.environ, "XDG_CONFIG_HOME": str(Path(tmp) / "xdg"), "TOOLKERNEL_TRUST_ALL": "1",
               "TOOLKERNEL_ADMIN_CONFIG": str(Path(tmp) / "no-admin.toml")}
        warm = "tools big-result size=10"
        if "tools big " in script:
            (work / "toolkernel.toml").write_text(MCP_CONFIG.format(
                python=json.dumps(sys.executable), server=json.dumps(str(REPO / "tests" / "servers" / "big.py")),
                repo=json.dumps(str(REPO))))
            warm = "tools big ping; tools big rows megabytes=0.01 > /dev/null"
        if remote is not None and remote[0] == "HTTP":
            (work / "toolkernel.toml").write_text(HTTP_CONFIG.format(port=remote[1]))
        elif remote is not None:
            (work / "toolkernel.toml").write_text(REMOTE_POLICY)
            (work / ".mcp.json").write_text(json.dumps(SSE_CONFIG).replace("{port}", str(remote[1])))
        child = CHILD.format(repo=str(REPO), work=str(work), warm=warm,
                             script=script.format(size=mb * 1_000_000, mb=mb))
        out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True,
                             check=True).stdout
        return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, nargs="*", default=[2, 8, 32])
    parser.add_argument("--only", nargs="*", choices=list(SCRIPTS), metavar="SCRIPT",
                        help=f"these rows alone (of: {', '.join(SCRIPTS)})")
    options = parser.parse_args()
    print(f"{'output':>8} {'script':<11}{'arrived':>9}{'rise':>9}{'ratio':>7}{'after':>8}"
          "  (peak RSS above RSS before the run; RSS after the cell above before it)")
    names = [name for name in SCRIPTS if not options.only or name in options.only]
    kinds = {name.split()[0] for name in names} & {"HTTP", "SSE"}
    with contextlib.ExitStack() as servers:
        ports = {kind: servers.enter_context(http_server(kind)) for kind in kinds}
        for mb in options.mb:
            for name in names:
                kind = name.split()[0]
                show(mb, name, measure(mb, SCRIPTS[name], (kind, ports[kind]) if kind in ports else None))


@contextlib.contextmanager
def http_server(kind: str) -> Iterator[int]:
    """tests/servers/big.py serving streamable HTTP ("HTTP") or the older SSE transport ("SSE")
    on a free loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "servers" / "big.py"), f"--{kind.lower()}",
                               str(port)],
                              env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not listening(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the HTTP fixture server did not start")
            time.sleep(0.1)
        yield port
    finally:
        server.kill()
        server.wait()


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def show(mb: int, name: str, got: dict) -> None:
    arrived = got["arrived"] / 1e6  # nothing when a Bashkit budget ended the run first
    rise = (got["peak_kb"] - got["base_kb"]) / 1024
    after = (got["after_kb"] - got["before_kb"]) / 1024
    ratio = f"{rise / arrived:>6.1f}x" if arrived else f"{'-':>7}"
    print(f"{mb:>6}MB {name:<11}{arrived:>7.1f}MB{rise:>7.1f}MB{ratio}{after:>6.1f}MB"
          f"  exit {got['exit']} (target <= 2x)")


if __name__ == "__main__":
    main()
