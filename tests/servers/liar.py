"""Fixture: a tool whose structured content breaks its own output schema, one that sends none,
and one that prints a line that is not JSON-RPC to stdout before it answers."""

if __name__ == "__main__":  # the suite's fork server runs it, when there is one (see _zygote.py)
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()

import sys
from pathlib import Path

from toolkernel._mcp_sdk import make_server, types

sys.path.insert(0, str(Path(__file__).parent))  # run as a program, with PYTHONSAFEPATH set
from _wire import write_raw  # noqa: E402

OUTPUT = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
INPUT = {"type": "object", "properties": {}}


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[
        types.Tool(name=name, description=f"{name}: a result against its output schema.", inputSchema=INPUT,
                   outputSchema=OUTPUT)
        for name in ("wrong_type", "no_structure", "honest", "noisy")
    ])


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = [types.TextContent(type="text", text=params.name)]
    if params.name == "wrong_type":
        return types.CallToolResult(content=text, structuredContent={"n": "seven"})
    if params.name == "no_structure":
        return types.CallToolResult(content=text)
    if params.name == "noisy":
        write_raw("<html>not json</html>\n")
    return types.CallToolResult(content=text, structuredContent={"n": 7})


server = make_server("liar", on_list_tools=list_tools, on_call_tool=call_tool)

if __name__ == "__main__":
    import anyio
    from mcp.server.stdio import stdio_server  # the same in both majors

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
