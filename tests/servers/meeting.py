"""Fixture: calls that count themselves, and calls that only answer once `size` of them are
in at once (each waits for the others, up to `patience` seconds): a test of parallel calls
proves they overlapped by the answer, not by a clock."""

if __name__ == "__main__":  # the suite's fork server runs it, when there is one (see _zygote.py)
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()

import sys
from pathlib import Path

import anyio

from toolkernel._mcp_sdk import MCPServer

server = MCPServer("meeting")
ticks: list[int] = []
arrived: dict[str, int] = {}
everyone: dict[str, anyio.Event] = {}


@server.tool()
async def tick(n: int) -> str:
    """Count one call (after a short wait, so that calls overlap)."""
    await anyio.sleep(0.02)
    ticks.append(n)
    return f"tick {n}"


@server.tool()
def count() -> list[int]:
    """The `n` of every `tick` call so far."""
    return ticks


@server.tool()
async def meet(size: int, room: str = "a", patience: float = 30.0) -> str:
    """Answer "met" once `size` calls of `room` are in at once, or "alone" after `patience` s."""
    arrived[room] = arrived.get(room, 0) + 1
    event = everyone.setdefault(room, anyio.Event())
    if arrived[room] >= size:
        event.set()
    with anyio.move_on_after(patience):
        await event.wait()
        return "met"
    return "alone"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))  # run as a program, with PYTHONSAFEPATH set
    from _serve import serve  # here: tests import this module too

    serve(server)
