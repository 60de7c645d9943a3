"""Fixture: a slow tool that reports progress after every step."""

if __name__ == "__main__":  # the suite's fork server runs it, when there is one (see _zygote.py)
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()

import sys
from pathlib import Path

import anyio

from mcp.shared.message import ServerMessageMetadata

from toolkernel._mcp_sdk import Context, MCPServer, server_request, types

server = MCPServer("slow")
# What happened to each `wait` call, so a test can see a cancellation arrive here.
outcomes: list[str] = []


@server.tool()
async def wait(steps: int, ctx: Context, step_seconds: float = 0.1) -> str:
    """Sleep `steps` times `step_seconds`, reporting progress after each step."""
    try:
        for step in range(1, steps + 1):
            await anyio.sleep(step_seconds)
            await ctx.report_progress(step, steps, f"step {step} of {steps}")
    except anyio.get_cancelled_exc_class():
        outcomes.append("cancelled")
        raise
    outcomes.append("finished")
    return f"waited {steps} steps"


@server.tool()
async def wait_marked(marker: str, steps: int, ctx: Context, step_seconds: float = 0.1) -> str:
    """`wait`, having first written `marker` (a file): a test then knows the call reached the server."""
    Path(marker).write_text("started\n")
    return await wait(steps, ctx, step_seconds)


@server.tool()
def history() -> list[str]:
    """How each earlier `wait` call ended: "finished" or "cancelled"."""
    return outcomes


@server.tool()
async def chatty(ctx: Context) -> str:
    """Log a line and ping the client (a request it must answer) before answering."""
    await ctx.info("working")
    await ctx.session.send_ping()
    return "answered"


@server.tool()
async def asks(ctx: Context) -> str:
    """Ping the client on the call's own stream (a request it must answer) before answering."""
    await ctx.session.send_request(server_request(types.PingRequest()), types.EmptyResult,
                                   metadata=ServerMessageMetadata(related_request_id=ctx.request_id))
    return "answered on the call's stream"


@server.tool()
def ping() -> str:
    """Answer at once."""
    return "pong"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))  # run as a program, with PYTHONSAFEPATH set
    from _serve import serve  # here: tests import this module too

    serve(server)
