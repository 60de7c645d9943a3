"""Fixture: structured results, error results and resource blocks."""

if __name__ == "__main__":  # the suite's fork server runs it, when there is one (see _zygote.py)
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()

from pydantic import BaseModel

from toolkernel._mcp_sdk import types
from toolkernel._mcp_sdk import MCPServer
from toolkernel._mcp_sdk import ToolError

server = MCPServer("structured")


class Stats(BaseModel):
    count: int
    total: float
    maximum: float


@server.tool()
def stats(numbers: list[float]) -> Stats:
    """Count, total and maximum of a list of numbers (an object output schema)."""
    if not numbers:
        raise ToolError("need at least one number")
    return Stats(count=len(numbers), total=sum(numbers), maximum=max(numbers))


@server.tool()
def evens(limit: int) -> list[int]:
    """The even numbers below `limit` (a list, which the SDK wraps in {"result": ...})."""
    return list(range(0, limit, 2))


@server.tool()
def greet(name: str) -> str:
    """A plain text greeting (the SDK also sends it as {"result": text})."""
    return f"hello, {name}"


@server.tool()
def listing(path: str) -> types.CallToolResult:
    """A directory listing as server-filesystem sends it: text, and the same text as {"content": ...}."""
    text = f"[FILE] {path}/a.txt\n[DIR] {path}/sub"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structuredContent={"content": text})


@server.tool()
def read_text_file(lines: int) -> types.CallToolResult:
    """A text file of `lines` lines as server-filesystem's read_text_file sends it: text, and the
    same text as {"content": ...}."""
    text = "\n".join(f"line {n} of the file" for n in range(1, lines + 1))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structuredContent={"content": text})


@server.tool(structured_output=False)
def resources() -> list:
    """An embedded text resource and a resource link."""
    return [
        types.EmbeddedResource(
            type="resource",
            resource=types.TextResourceContents(uri="memo://notes/1", mimeType="text/plain", text="first note"),
        ),
        types.ResourceLink(type="resource_link", uri="memo://notes/2", name="second note"),
    ]


if __name__ == "__main__":
    server.run()
