"""Fixture: a "server" that prints non-JSON garbage to stdout and never speaks MCP."""

import sys
import time

print("Starting awesome server v1.0 ... ready!", flush=True)
sys.stdin.readline()  # the client's initialize request, never answered
print("<html>not json</html>", flush=True)
time.sleep(3600)
