"""Fixture: results of any size, a call that never answers, a server that never starts."""

if __name__ == "__main__":  # the suite's fork server runs it, when there is one (see _zygote.py)
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()

import hashlib
import json
import sys
import time

from typing import Any

from pathlib import Path

import anyio

from toolkernel._mcp_sdk import MCPServer
from toolkernel._mcp_sdk import types

server = MCPServer("big")
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def blob_text(megabytes: float) -> str:
    """The same text for the same size in every process: a test checks it arrived whole."""
    size = int(megabytes * 1_000_000)
    line = "0123456789abcdefghijklmnopqrstuvwxyz\u00e9\u4e2d\n"  # multi-byte characters too
    return (line * (size // len(line) + 1))[:size]


@server.tool()
def blob(megabytes: float) -> str:
    """A text result of about `megabytes` MB."""
    return blob_text(megabytes)


@server.tool()
def rows(megabytes: float) -> dict[str, Any]:
    """Structured content of about `megabytes` MB when printed as indented JSON: rows of a table."""
    count = int(megabytes * 1_000_000) // 120
    return {"rows": [{"id": n, "name": f"row {n}", "tags": ["a", "b"], "score": n / 2} for n in range(count)]}


@server.tool()
def listing(megabytes: float) -> list[dict[str, Any]]:
    """The rows of `rows` as a list: the SDK sends it as {"result": [...]}, with an output schema."""
    return rows(megabytes)["rows"]


@server.tool()
def pictured_rows(megabytes: float) -> types.CallToolResult:
    """The rows of `rows` with a picture beside them (a one-pixel PNG)."""
    table = rows(megabytes)
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(table)),
                                         types.ImageContent(type="image", data=PIXEL, mimeType="image/png")],
                                structuredContent=table)


@server.tool()
def record(megabytes: float) -> dict[str, Any]:
    """Structured content with a long text in it beside other keys."""
    return {"body": blob_text(megabytes), "lines": blob_text(megabytes).count("\n")}


@server.tool()
def fail_long(megabytes: float, echo: str = "") -> types.CallToolResult:
    """Fails with a message of about `megabytes` MB that starts with `echo`."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=echo + blob_text(megabytes))],
                                isError=True)


@server.tool()
def digest(megabytes: float) -> str:
    """The sha256 of `blob(megabytes)`, computed here."""
    return hashlib.sha256(blob_text(megabytes).encode()).hexdigest()


@server.tool()
async def hang() -> str:
    """Never answers."""
    await anyio.sleep_forever()
    return "unreachable"


@server.tool()
def ping() -> str:
    """Answer at once."""
    return "pong"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))  # run as a program, with PYTHONSAFEPATH set
    from _serve import serve  # here: tests import this module too

    if "--hang-at-start" in sys.argv:
        print("big: waiting for a database that never comes (on purpose)", file=sys.stderr, flush=True)
        time.sleep(3600)
    serve(server)
