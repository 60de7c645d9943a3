"""Fixture: a server that writes what no well-behaved server would to its stdout, mid-call:
replies under ids nobody used, a reply to the call's own id that is not JSON-RPC, an endless
line, a flood of log messages."""

if __name__ == "__main__":  # the suite's fork server runs it, when there is one (see _zygote.py)
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()

import json
import sys
from pathlib import Path

import anyio

from toolkernel._mcp_sdk import Context, MCPServer

sys.path.insert(0, str(Path(__file__).parent))  # run as a program, with PYTHONSAFEPATH set
from _wire import write_raw  # noqa: E402

server = MCPServer("hostile")


def _raw(text: str) -> None:
    write_raw(text)


@server.tool()
async def forged_replies(ctx: Context) -> str:
    """Before the real answer: replies to ids never asked for, and a malformed one to this call's own."""
    own = ctx.request_id
    # Near misses of a lane id ("toolkernel-N"). The server's context gives a session's int id
    # as a str ("7"), and the SDK's session takes "7" for 7 on purpose: that id gets none.
    near = [own.upper(), own + " ", f"{own}0"] if str(own).startswith("toolkernel-") else []
    for forged in ("toolkernel-999999", 999999, None, *near):
        _raw(json.dumps({"jsonrpc": "2.0", "id": forged, "result": {"content": []}}) + "\n")
    _raw(json.dumps({"jsonrpc": "2.0", "id": own, "result": "not an object"}) + "\n")
    _raw(json.dumps({"jsonrpc": "1.0", "id": own, "result": {"content": []}}) + "\n")
    return "the real answer"


@server.tool()
async def late_reply(megabytes: float, ctx: Context) -> str:
    """Before the real answer: a long reply to the lane's request before this one (long over)."""
    own = ctx.request_id
    if isinstance(own, str) and own.startswith("toolkernel-"):
        earlier = f"toolkernel-{int(own.split('-')[1]) - 1}"
        text = "late " * int(megabytes * 200_000)
        result = {"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}}
        _raw(json.dumps({"jsonrpc": "2.0", "id": earlier, "result": result}) + "\n")
    return "the real answer"


@server.tool()
async def endless_line(megabytes: int) -> str:
    """Write `megabytes` MB with no newline, then never answer."""
    for _ in range(megabytes):
        _raw("x" * 1_000_000)
    await anyio.sleep_forever()
    return "unreachable"


@server.tool()
async def flood(count: int, ctx: Context) -> str:
    """Send `count` log messages, then answer."""
    for n in range(count):
        await ctx.info(f"log {n}")
    return f"sent {count}"


@server.tool()
async def deep_reply(depth: int, megabytes: float, ctx: Context) -> str:
    """Answers this call with a reply nested `depth` deep in its content, `megabytes` long
    (structured content of rows beside it), instead of the real answer."""
    rows = [{"n": n} for n in range(int(megabytes * 100_000))]
    content = "[" * depth + "]" * depth
    _raw('{"jsonrpc": "2.0", "id": %s, "result": {"content": %s, "structuredContent": %s}}\n'
         % (json.dumps(ctx.request_id), content, json.dumps({"rows": rows})))
    await anyio.sleep(30)  # the real answer, too late to count
    return "unreachable"


@server.tool()
def ping() -> str:
    """Answer at once."""
    return "pong"


if __name__ == "__main__":
    server.run()
