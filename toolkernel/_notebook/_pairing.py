"""Pairing: which notebook the notebook tools work on, and which kernel runs its code.

One pairing per session, kept in `state["notebook"]`. Pairing again replaces
the previous pairing (a kernel this session started is shut down).
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import ConnectionRequired, InvalidInput
from ._connection import KernelConnection
from ._server import connect_server
from ._zmq import connect_existing, start_kernel

STATE_KEY = "notebook"

USAGE = """\
%tools pair NOTEBOOK --kernel NAME              start a kernel (e.g. python3) for NOTEBOOK; it is shut down on unpair
%tools pair NOTEBOOK --existing CONNECTION_FILE  use a running kernel (e.g. kernel-1234.json from `jupyter --runtime-dir`)
%tools pair NOTEBOOK --server URL [--token TOKEN] [--kernel NAME]
                                                 use the kernel of NOTEBOOK's session on a Jupyter Server (the token may
                                                 also come from ?token= in URL or $JUPYTER_TOKEN; a session is started
                                                 with kernel NAME when the notebook has none)
%tools unpair                                    forget the pairing
NOTEBOOK is relative to the working directory (and, with --server, to the server's root)."""


@dataclass
class Pairing:
    notebook: Path  # absolute; the local file notebook-read/edit and cell runs use
    notebook_arg: str  # as given, for messages and for the server session path
    kind: str  # kernel | existing | server
    connection: KernelConnection

    def describe(self) -> str:
        return f"{self.notebook_arg} paired with {self.connection.describe()}"


def pairing_args_usage() -> str:
    return USAGE


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print and exit the kernel's process
        raise InvalidInput(f"{message}\n{USAGE}")


def add_pairing_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `%tools pair`, for the `%tools` parser tree (and `parse_pairing_args`)."""
    parser.add_argument("notebook", nargs="*", metavar="NOTEBOOK")
    parser.add_argument("--kernel", metavar="NAME")
    parser.add_argument("--existing", metavar="CONNECTION_FILE")
    parser.add_argument("--server", metavar="URL")
    parser.add_argument("--token", metavar="TOKEN")


def pairing_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Parsed `%tools pair` arguments -> keyword arguments for `pair`."""
    for option in ("kernel", "existing", "server", "token"):
        if getattr(args, option) == "":
            raise InvalidInput(f"--{option} needs a value\n{USAGE}")
    if len(args.notebook) != 1:
        raise InvalidInput(f"name exactly one notebook to pair\n{USAGE}")
    parsed = {k: getattr(args, k) for k in ("kernel", "existing", "server", "token") if getattr(args, k)}
    return {"notebook": args.notebook[0], **parsed}


def parse_pairing_args(args: str | list[str]) -> dict[str, Any]:
    """`NOTEBOOK --kernel NAME ...` (a string or argv list) → keyword arguments for `pair`."""
    argv = shlex.split(args) if isinstance(args, str) else list(args)
    parser = _Parser(prog="%tools pair", add_help=False)
    add_pairing_arguments(parser)
    return pairing_kwargs(parser.parse_args(argv))


async def pair(state: dict, workdir: Path, notebook: str, *, kernel: str | None = None,
               existing: str | None = None, server: str | None = None, token: str | None = None) -> Pairing:
    kind = _choose_kind(kernel, existing, server, token)
    path = _notebook_path(workdir, notebook)
    if kind == "server":
        connection: KernelConnection = await connect_server(server, token, notebook, kernel)
    elif kind == "existing":
        connection = await connect_existing(existing)
    else:
        connection = await start_kernel(kernel, path.parent if path.parent.is_dir() else workdir)
    pairing = Pairing(path, notebook, kind, connection)
    previous = state.get(STATE_KEY)
    state[STATE_KEY] = pairing
    if previous is not None:
        await previous.connection.close()
    return pairing


async def unpair(state: dict) -> None:
    pairing = state.pop(STATE_KEY, None)
    if pairing is not None:
        await pairing.connection.close()


def current_pairing(state: dict) -> Pairing:
    pairing = state.get(STATE_KEY)
    if pairing is None:
        raise ConnectionRequired(
            "no notebook is paired with a kernel in this session; pair one first:\n" + USAGE
        )
    return pairing


def _choose_kind(kernel: str | None, existing: str | None, server: str | None, token: str | None) -> str:
    if server:
        if existing:
            raise InvalidInput(f"--server and --existing name different kernels; give one\n{USAGE}")
        return "server"
    if token:
        raise InvalidInput(f"--token goes with --server\n{USAGE}")
    if kernel and existing:
        raise InvalidInput(f"--kernel and --existing name different kernels; give one\n{USAGE}")
    if existing:
        return "existing"
    if kernel:
        return "kernel"
    raise InvalidInput(f"say which kernel runs the notebook's code\n{USAGE}")


def _notebook_path(workdir: Path, notebook: str) -> Path:
    if not notebook.endswith(".ipynb"):
        raise InvalidInput(f"{notebook!r} is not a notebook (.ipynb) path\n{USAGE}")
    path = Path(notebook).expanduser()
    return (path if path.is_absolute() else workdir / path).resolve()
