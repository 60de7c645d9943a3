"""Fixture: a server whose tool list grows at run time (notifications/tools/list_changed)."""

if __name__ == "__main__":  # the suite's fork server runs it, when there is one (see _zygote.py)
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()

import asyncio

from toolkernel._mcp_sdk import Context, MCPServer

server = MCPServer("dynamic")
_later: set[asyncio.Task] = set()


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Add a tool called `name` that answers with its own name, and announce the change."""

    def added() -> str:
        return name

    server.add_tool(added, name=name, description=f"added at run time: {name}")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool()
async def add_tool_later(name: str, ctx: Context, delay: float = 0.5) -> str:
    """Answer at once; `delay` seconds after the answer, add a tool called `name` and announce it."""
    session = ctx.session

    async def later() -> None:
        await asyncio.sleep(delay)
        def added() -> str:
            return name

        server.add_tool(added, name=name, description=f"added at run time: {name}")
        await session.send_tool_list_changed()

    task = asyncio.get_running_loop().create_task(later())
    _later.add(task)
    task.add_done_callback(_later.discard)
    return f"adding {name}"


if __name__ == "__main__":
    server.run()
