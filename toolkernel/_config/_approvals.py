"""`[approvals]`: how a call that needs a person is asked about while a script runs.

    mid_run = "ask"    the call waits where it is made and the person answers there
                       (JupyterLab's buttons, the stdin prompt); the default wherever a
                       person's front end can ask
    mid_run = "stop"   the script stops at the call with the report (seed 000), and the
                       person answers on it, then runs a new script

Agents' runs (`serve`, a cell an agent sent) always stop: their person is not at the
cell. Either value asks a person, so any file may set it, trusted or not.
"""

from __future__ import annotations

from typing import Any

from ._check import known_keys, string, table
from ._sources import Source

MID_RUN = ("ask", "stop")


def approvals_section(source: Source, raw: Any) -> str | None:
    """The file's `mid_run`, or None when it says nothing (a farther file's value stands)."""
    checked = table(source, "approvals", raw)
    source.attempt(known_keys, source, "approvals", checked, ("mid_run",))
    if "mid_run" not in checked:
        return None
    value = string(source, "approvals.mid_run", checked["mid_run"])
    if value not in MID_RUN:
        raise source.error("approvals.mid_run", f'expected "ask" or "stop", not {value!r}')
    return value
