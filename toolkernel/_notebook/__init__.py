"""Notebook tools paired with a live kernel: notebook_read, notebook_edit, notebook_run.

    tools = notebook_tools()                       # three Tool objects for the registry
    await pair(state, workdir, "nb.ipynb", kernel="python3")   # on toolkernel's loop
    await unpair(state)

`state` is the session's state dict (the same one tools see as `ctx.state`):
the pairing lives in state["notebook"], read fingerprints in state["notebook_reads"].
"""

from ._pairing import (
    Pairing, add_pairing_arguments, current_pairing, pair, pairing_args_usage, pairing_kwargs, parse_pairing_args,
    unpair,
)
from ._tools import notebook_edit, notebook_read, notebook_run, notebook_tools

__all__ = [
    "Pairing", "add_pairing_arguments", "current_pairing", "pair", "pairing_args_usage", "pairing_kwargs",
    "parse_pairing_args", "unpair",
    "notebook_edit", "notebook_read", "notebook_run", "notebook_tools",
]
