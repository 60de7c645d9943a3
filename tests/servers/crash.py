"""Fixture: a server that dies hard mid-call, or at start with --die-at-start."""

if __name__ == "__main__":  # the suite's fork server runs it, when there is one (see _zygote.py)
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()

import os
import sys

from toolkernel._mcp_sdk import MCPServer

server = MCPServer("crash")


@server.tool()
def crash(code: int = 3) -> str:
    """Make the server process exit at once, without answering."""
    print(f"crash: exiting with code {code} on purpose", file=sys.stderr, flush=True)
    os._exit(code)


@server.tool()
def echo(text: str) -> str:
    """Give the text back."""
    return text


@server.tool()
def pid() -> int:
    """The server's process id, to tell one server process from the next."""
    return os.getpid()


if __name__ == "__main__":
    if "--die-at-start" in sys.argv:
        token = os.environ.get("FIXTURE_TOKEN", "")
        print(f"crash: login with token {token} failed (on purpose)", file=sys.stderr)
        print(f"crash: started as {sys.argv[1:]}", file=sys.stderr)
        print("crash: cannot open /nonexistent/database.db (on purpose)", file=sys.stderr, flush=True)
        sys.exit(2)
    server.run()
