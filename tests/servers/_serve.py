"""How a fixture server runs: over stdio, or on 127.0.0.1:PORT given `--http PORT` (streamable
HTTP; with `--json` too, it answers each request with one JSON body instead of an SSE stream)
or `--sse PORT` (the older SSE transport)."""

import sys

from toolkernel._mcp_sdk import MCPServer, run_server


def serve(server: MCPServer) -> None:
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        run_server(server, "streamable-http", port=port, json_response="--json" in sys.argv)
    elif "--sse" in sys.argv:
        run_server(server, "sse", port=int(sys.argv[sys.argv.index("--sse") + 1]))
    else:
        run_server(server)
