"""For fixtures that misbehave on purpose: write straight to the protocol's stdout.

The SDK's `stdio_server` under mcp 2.x moves the wire to a private descriptor and points fd 1
and `sys.stdout` at stderr, so that a stray print cannot break the protocol; under 1.x the wire
is fd 1 itself (the SDK flushes each message it writes there). A fixture that means to break it
(a forged reply, a line that is not JSON-RPC) writes here instead."""

import os
import sys

from mcp.server import stdio

from toolkernel._mcp_sdk import MAJOR


def write_raw(text: str) -> None:
    claim = stdio._claims.get(1) if MAJOR >= 2 else None
    fd = claim.private_fd if claim is not None and claim.private_fd is not None else sys.stdout.fileno()
    data = memoryview(text.encode())
    while data:
        data = data[os.write(fd, data):]
