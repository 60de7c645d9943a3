"""Fixture: a "server" that prints non-JSON garbage to stdout and never speaks MCP."""

import sys
import time

print("Starting awesome server v1.0 ... ready!", flush=True)
if "--exit" in sys.argv:  # a program that is no server at all: one line, and it is gone
    sys.exit(0)
sys.stdin.readline()  # the client's initialize request, never answered
print("<html>not json</html>", flush=True)
time.sleep(3600)
