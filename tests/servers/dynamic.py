"""Fixture: a server whose tool list grows at run time (notifications/tools/list_changed)."""

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("dynamic")


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Add a tool called `name` that answers with its own name, and announce the change."""

    def added() -> str:
        return name

    server.add_tool(added, name=name, description=f"added at run time: {name}")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


if __name__ == "__main__":
    server.run()
