"""Notebook tools paired with a live kernel: notebook_read, notebook_edit, notebook_run.

    tools = notebook_tools()                       # three Tool objects for the registry
    await pair(state, workdir, "nb.ipynb", kernel="python3")   # on toolkernel's loop
    await unpair(state, workdir, "nb.ipynb")                   # or unpair(state): every pairing

`state` is the session's state dict (the same one tools see as `ctx.state`):
the session's pairings live in a `Pairings` object there (`pairings(state)`),
one per notebook; what each notebook looked like when read is kept there too.
"""

from ._tools import notebook_edit, notebook_read, notebook_run, notebook_tools

_PAIRING = ("Pairing", "Pairings", "add_pairing_arguments", "pair", "pairing_args_usage", "pairing_kwargs",
            "pairings", "parse_pairing_args", "unpair")


def __getattr__(name: str):
    # The pairing side (kernel clients, server stores, nbformat) is imported when first named:
    # a session lists the notebook tools on every run, and most never pair a notebook.
    if name in _PAIRING:
        from . import _pairing

        return getattr(_pairing, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "Pairing", "Pairings", "add_pairing_arguments", "pair", "pairing_args_usage", "pairing_kwargs", "pairings",
    "parse_pairing_args", "unpair",
    "notebook_edit", "notebook_read", "notebook_run", "notebook_tools",
]
