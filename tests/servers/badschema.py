"""Fixture: tools whose inputSchema is broken in the ways real servers break it."""

if __name__ == "__main__":  # the suite's fork server runs it, when there is one (see _zygote.py)
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()

from toolkernel._mcp_sdk import make_server, types

BAD_SCHEMAS = {
    "bad_type": {"type": "object", "properties": {"n": {"type": "integr"}}},
    "bad_ref": {"type": "object", "properties": {"n": {"$ref": "#/$defs/missing"}}},
    "bad_pattern": {"type": "object", "properties": {"s": {"type": "string", "pattern": "(unclosed"}}},
    "bad_remote_ref": {"type": "object", "properties": {"n": {"$ref": "https://example.invalid/s.json"}}},
    "good": {"type": "object", "properties": {"n": {"type": "integer"}}},
}



async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[
        types.Tool(name=name, description=f"A tool whose schema is {name}.", inputSchema=schema)
        for name, schema in BAD_SCHEMAS.items()
    ])


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = f"{params.name} ran with {sorted(params.arguments or {})}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


server = make_server("badschema", on_list_tools=list_tools, on_call_tool=call_tool)

if __name__ == "__main__":
    import anyio
    from mcp.server.stdio import stdio_server  # the same in both majors

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
