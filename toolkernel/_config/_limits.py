"""`[shell]`: the sandbox's limits, what one shell run may use before it is ended.

A model module (no I/O). Bashkit's own defaults (10,000 loop iterations,
10,000 commands, 30 s) are set for agents' small scripts and end ordinary loops
over data early (`seq 1 30000 | while read ...`), so toolkernel sets its own,
and a `[shell]` table in toolkernel.toml changes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._check import known_keys, table

if TYPE_CHECKING:
    from ._sources import Source

CALL_LIMIT = 50

# What `[shell]` may set, and what each key means in `tools --help`/the README.
SHELL_KEYS = {
    "max_loop_iterations": "iterations of one loop",
    "max_commands": "commands in one run",
    "max_memory_mb": "megabytes of files the script itself creates in memory",
    "timeout": "seconds one run may take",
    "call_limit": "tool calls in one run",
    "max_result_mb": "millions of characters of one tool result a sandbox script takes in",
}


@dataclass(frozen=True)
class ShellLimits:
    max_loop_iterations: int = 10_000_000
    max_commands: int = 100_000_000
    max_memory_mb: int = 1024
    # A person stops a cell with an interrupt; this only bounds a run nobody watches,
    # and a short one would cut a tool call that is still waiting on a slow server.
    timeout: int = 24 * 3600
    call_limit: int = CALL_LIMIT
    # Above this a result goes to a file, not into Bashkit, which would hold several whole
    # copies of it, and whose pipes fail at 32 MB anyway (see `ToolsCommand._kept_out`).
    max_result_mb: int = 32

    def bashkit_options(self) -> dict[str, int]:
        """Bashkit's constructor arguments for these limits."""
        return {"max_loop_iterations": self.max_loop_iterations, "max_commands": self.max_commands,
                "max_memory": self.max_memory_mb * 1024 * 1024, "timeout_seconds": self.timeout}


def limit_notice(error: str) -> str:
    """The last line of a run a limit ended: which limit, and where to raise it."""
    return (f"toolkernel: the script was ended by a sandbox limit ({error}). "
            "Raise it in the [shell] table of toolkernel.toml, or split the work.\n")


def shell_section(source: "Source", raw: Any) -> dict[str, int]:
    """`[shell]`: the limits a file sets (the rest keep their defaults)."""
    checked = table(source, "shell", raw)
    source.attempt(known_keys, source, "shell", checked, tuple(SHELL_KEYS))
    limits = {}
    for key, value in checked.items():
        if key not in SHELL_KEYS:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            source.problems.append(source.error(f"shell.{key}", f"expected a whole number greater than 0 ({SHELL_KEYS[key]})"))
        else:
            limits[key] = value
    return limits
