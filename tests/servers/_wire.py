"""For fixtures that misbehave on purpose: write straight to the protocol's stdout.

The SDK's `stdio_server` (mcp 2.x) moves the wire to a private descriptor and points fd 1
and `sys.stdout` at stderr, so that a stray print cannot break the protocol. A fixture that
means to break it (a forged reply, a line that is not JSON-RPC) writes here instead."""

import os
import sys

from mcp.server import stdio


def write_raw(text: str) -> None:
    claim = stdio._claims.get(1)
    fd = claim.private_fd if claim is not None and claim.private_fd is not None else sys.stdout.fileno()
    data = memoryview(text.encode())
    while data:
        data = data[os.write(fd, data):]
