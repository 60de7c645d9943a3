"""Fixture: a server whose backend refuses the token it was handed, and says so, naming it."""

if __name__ == "__main__":  # the suite's fork server runs it, when there is one (see _zygote.py)
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()

import os

from toolkernel._mcp_sdk import types
from toolkernel._mcp_sdk import MCPServer

server = MCPServer("refused")


def _refused() -> str:
    return f"the backend refused the token {os.environ.get('FIXTURE_TOKEN', '')}"


@server.tool()
def login() -> types.CallToolResult:
    """An error result naming the token."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=_refused())], isError=True)


@server.tool()
def login_structured() -> types.CallToolResult:
    """The same refusal, as an error result whose structured content says it."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=_refused())],
                                structuredContent={"error": _refused()}, isError=True)


if __name__ == "__main__":
    server.run()
