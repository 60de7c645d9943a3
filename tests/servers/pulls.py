"""Fixture: the demo "github" server, plus one tool that shows a request header.

`python tests/servers/pulls.py` serves stdio; `--http PORT` serves streamable
HTTP on 127.0.0.1:PORT (path /mcp). `request_header` lets a test see that the
client sent the configured headers.
"""

if __name__ == "__main__":  # the suite's fork server runs it, when there is one (see _zygote.py)
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()

from toolkernel._mcp_sdk import Context

from toolkernel.demo_server import READ_ONLY, build_server, main

server = build_server()


@server.tool(annotations=READ_ONLY)
def request_header(name: str, ctx: Context) -> str:
    """The value of an HTTP request header (empty over stdio)."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    return headers.get(name, "") if headers is not None else ""


if __name__ == "__main__":
    main(server=server)
