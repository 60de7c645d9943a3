"""Bashkit's hard output caps, told apart from ordinary errors so none passes silently.

Bashkit's Interactive profile lifts most of its caps to what data work needs
(script output to 10 MiB, `jq` output with it), but some stay hard: `seq`
stops at 100,000 lines, a pipe holds at most 32 MB at once, a run reads at
most 100 MB through its pipes, and the script's own output stops at 10 MiB.
Bashkit prints a note for some and goes on with exit 0 (in a pipe that ends
in `wc` nobody sees it), so a run that met one ends non-zero here, with a
last line that names the cap and what to do instead. Pure functions: no I/O.
"""

from __future__ import annotations

import re

# A note Bashkit prints on stderr when a builtin cut its output and went on.
_BUILTIN_CAP = re.compile(r"^(?P<who>[\w.-]+): (?:.*limit \(\d+\) exceeded; output truncated"
                          r"|output (?:size )?limit exceeded.*)$", re.MULTILINE)
# The run's own budget (`error` of the result): the script ended there.
_BUDGET = re.compile(r"resource limit exceeded|execution budget exhausted")

TO_FILE = ("save a tool's result with `tools <tool> ... --save PATH`, or write large data to a file"
           " inside the script (`... > data.txt`) and read it in parts")


def builtin_cap(stderr: str) -> str | None:
    """The name of the builtin whose output Bashkit cut, if `stderr` carries such a note."""
    match = _BUILTIN_CAP.search(stderr)
    return match.group("who") if match else None


def cap_line(*, builtin: str | None = None, stdout_cut: bool = False, budget: str | None = None) -> str:
    """The last line of a run that met a hard cap (empty when it met none)."""
    if budget and _BUDGET.search(budget):
        return f"toolkernel: the script stopped at a Bashkit limit ({budget.strip()}); {TO_FILE}\n"
    if stdout_cut:
        return ("toolkernel: the script's output stopped at Bashkit's 10 MiB cap, so the saved output is"
                f" only its first 10 MiB; {TO_FILE}\n")
    if builtin:
        hint = " (split the range: `seq 1 100000; seq 100001 200000`)" if builtin == "seq" else ""
        return (f"toolkernel: `{builtin}` cut its output at a Bashkit cap and the script went on{hint};"
                f" the run counts as failed. {TO_FILE}\n")
    return ""
