"""Fixture: a "server" that starts and never answers (a hung start).

Each start appends a line to the file named by its first argument, so a test
can count how often it was started."""

import sys
import time

with open(sys.argv[1], "a") as log:
    log.write("started\n")
print("hang: waiting forever (on purpose)", file=sys.stderr, flush=True)
time.sleep(3600)
