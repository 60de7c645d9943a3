"""Pairings: which kernel runs a notebook's code, and where the notebook itself lives.

Every notebook tool call names its notebook; the session keeps one pairing per
notebook in a `Pairings` object in its own state (never in module globals), so
two notebooks paired at once, or two sessions, never reach each other's kernel.
Pairing a notebook again replaces its pairing (a kernel this session started is
shut down).

With --server, the notebook is read and changed through that server, never
behind its back: through its shared document when it runs jupyter-collaboration,
through the Contents API otherwise. Its path is taken from the server's root.
So is every other notebook under that root when the server runs on this machine
(`_roots`): named by a local path, however spelled, it is reached through the
server too, and a notebook another running server has open is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..._errors import CallError, ConnectionRequired, InvalidInput
from ..._tool import ServerPath
from ._connection import PAIR_AGAIN, KernelConnection
from ._roots import local_root, refuse_if_open_elsewhere, relative_path
from ._server import ServerApi, connect_server, open_notebook, server_path
from ._stores import ContentsStore, FileStore, NotebookStore
from ._zmq import connect_existing, start_kernel

STATE_KEY = "notebook_pairings"

USAGE = """\
%tools pair NOTEBOOK --kernel NAME              start a kernel (e.g. python3) for NOTEBOOK; it is shut down on unpair
%tools pair NOTEBOOK --existing CONNECTION_FILE  use a running kernel (e.g. kernel-1234.json from `jupyter --runtime-dir`)
%tools pair NOTEBOOK --server URL [--token TOKEN] [--kernel NAME]
                                                 use the kernel of NOTEBOOK's session on a Jupyter Server (the token may
                                                 also come from ?token= in URL or $JUPYTER_TOKEN; a session is started
                                                 with kernel NAME when the notebook has none)
%tools unpair [NOTEBOOK]                         forget NOTEBOOK's pairing (no NOTEBOOK: every pairing)
NOTEBOOK is relative to the working directory; with --server, to the server's root (whatever the kernel's folder),
and the notebook is read and edited through the server."""


@dataclass
class Pairing:
    notebook_arg: str  # as given, for messages
    key: str  # the notebook's local path, or its path on the server
    kind: str  # kernel | existing | server
    connection: KernelConnection
    store: NotebookStore | None = None  # None: a server notebook that does not exist yet
    api: ServerApi | None = field(default=None, repr=False)
    root: Path | None = None  # a server's root folder on this machine, when it runs here
    # The other notebooks under a server's root reached through it, by their path from the root.
    documents: dict[str, NotebookStore] = field(default_factory=dict, repr=False)
    _opening: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def describe(self) -> str:
        # A local file describes itself by the name it was paired by: said once, not twice.
        store = self.store.describe() if self.store is not None else self.notebook_arg
        where = f"; notebook {store}" if store != self.notebook_arg else ""
        return f"{self.notebook_arg} paired with {self.connection.describe()}{where}"

    async def notebook_store(self) -> NotebookStore:
        if self.store is None and self.api is not None:
            self.store = await open_notebook(self.api, self.key)
            if self.store is None:
                return self._own(ContentsStore(self.api, self.key))  # creates it; chosen again once it exists
        assert self.store is not None
        return self._own(self.store)

    async def document(self, path: str) -> NotebookStore:
        """Another notebook on this pairing's server (`path`: from its root), through the server."""
        if path == self.key:
            return await self.notebook_store()
        assert self.api is not None
        async with self._opening:  # two calls at once on a new notebook open one connection, not two
            store = self.documents.get(path)
            if store is None:
                store = await open_notebook(self.api, path)
                if store is None:
                    return self._own(ContentsStore(self.api, path))  # creates it; chosen again once it exists
                self.documents[path] = store
        return self._own(store)

    def _own(self, store: NotebookStore) -> NotebookStore:
        if isinstance(store, ContentsStore):
            store.own_channels = getattr(self.connection, "channels_to", store.own_channels)
        return store

    def local_key(self, real: str | Path) -> str | None:
        """A local path (symlinks resolved) from this server's root, when it lies under it."""
        return relative_path(real, self.root) if self.root is not None else None

    async def close(self) -> None:
        try:
            for store in [*self.documents.values(), *([self.store] if self.store is not None else [])]:
                await store.close()
        finally:
            self.documents.clear()
            await self.connection.close()


class Pairings:
    """The notebooks a session has paired, by notebook."""

    def __init__(self) -> None:
        self._by_key: dict[str, Pairing] = {}
        # What a call on a notebook that is not paired is told to do; a front end whose reader cannot
        # run `%tools pair` (serve) says its own.
        self.pair_first = "pair it first:\n" + USAGE

    def __iter__(self):
        return iter(list(self._by_key.values()))

    async def add(self, pairing: Pairing) -> None:
        previous = self._by_key.get(pairing.key)
        self._by_key[pairing.key] = pairing
        if previous is not None:
            await previous.close()

    async def remove(self, pairing: Pairing) -> str | None:
        """Forget `pairing` and close it; why closing failed (an unreachable server or
        kernel), or None. It is forgotten either way."""
        if self._by_key.get(pairing.key) is pairing:
            del self._by_key[pairing.key]
        try:
            await pairing.close()
        except CallError as exc:
            return exc.message
        return None

    def find(self, workdir: Path, notebook: str, real: str | None = None) -> Pairing | None:
        """The pairing of `notebook`: a server path, or a path relative to `workdir` (`real`:
        where it leads, as the dispatcher resolved and checked it)."""
        local = real or str(_resolve(workdir, notebook))
        return self.named(notebook) or self._by_key.get(local) or self._served(local)[1]

    def _served(self, real: str) -> tuple[Pairing | None, Pairing | None]:
        """The server pairing whose root holds the local path `real`, and that pairing again when
        `real` is its own notebook."""
        for pairing in self._by_key.values():
            key = pairing.local_key(real) if pairing.kind == "server" else None
            if key is not None:
                return pairing, pairing if key == pairing.key else None
        return None, None

    async def store(self, workdir: Path, notebook: str, real: str) -> NotebookStore:
        """Where `notebook` is read and changed: its pairing's server, the server whose root holds it,
        else its local file (`real`: where it leads, as the dispatcher resolved and checked it) unless a
        server this session is not paired with has it open."""
        pairing = self.named(notebook) or self._by_key.get(real)
        if pairing is not None:
            return await pairing.notebook_store()
        server, _ = self._served(real)
        if server is not None:
            key = server.local_key(real)
            assert key is not None
            return await server.document(key)
        await refuse_if_open_elsewhere(Path(real), [p.api.base for p in self if p.api is not None])
        return FileStore(Path(real), notebook)

    def named(self, notebook: str) -> Pairing | None:
        """The pairing `notebook` names without the working folder: its key, or a server path."""
        return self._by_key.get(notebook) or self.on_server(notebook)

    def on_server(self, notebook: str) -> Pairing | None:
        """The server pairing `notebook` names, however it is spelled (`/a.ipynb`, `./x/../a.ipynb`)."""
        try:
            key = server_path(notebook)
        except InvalidInput:
            return None  # it leaves every server's root: a local path, if anything
        return next((p for p in self._by_key.values() if p.kind == "server" and p.key == key), None)

    async def overwritten(self, seen: NotebookStore | None = None) -> list[str]:
        """This session's Contents API edits that a later save by someone else undid, in every notebook
        but `seen` (whose load said so already); each said once. A server that does not answer now
        is asked again by a later call."""
        reports = []
        for pairing in self:
            for store in [pairing.store, *pairing.documents.values()]:
                if isinstance(store, ContentsStore) and store is not seen:
                    with contextlib.suppress(CallError):
                        reports.append(await store.overwritten_since_write())
        return [report for report in reports if report]

    def require(self, workdir: Path, notebook: str) -> Pairing:
        pairing = self.find(workdir, notebook)
        if pairing is None:
            paired = ", ".join(p.notebook_arg for p in self) or "none"
            raise ConnectionRequired(
                f"{notebook} is not paired with a kernel in this session (paired: {paired}); {self.pair_first}")
        return pairing


def pairings(state: dict[str, Any]) -> Pairings:
    """The session's pairings (created on first use)."""
    found = state.get(STATE_KEY)
    if found is None:
        found = state[STATE_KEY] = Pairings()
    return found


def served_by(state: Mapping[str, Any], real: str) -> str | None:
    """The URL of the paired Jupyter Server whose root holds the local path `real` (None: none does)."""
    found = state.get(STATE_KEY)
    server = found._served(real)[0] if found is not None else None
    return server.api.base if server is not None and server.api is not None else None


def server_notebook_paths(arguments: Mapping[str, Any], state: Mapping[str, Any]) -> dict[str, ServerPath]:
    """`notebook_path`, when it names a notebook this session paired through a server: checked against
    that server's root, not the workspace (see `Tool.server_paths`)."""
    registry = state.get(STATE_KEY)
    notebook = arguments.get("notebook_path")
    if registry is None or not isinstance(notebook, str) or not notebook:
        return {}
    pairing = registry.named(notebook)  # as the tool will find it: a local pairing's own key comes first
    if pairing is None or pairing.kind != "server" or pairing.api is None:
        return {}
    return {"notebook_path": ServerPath(pairing.key, pairing.api.base)}


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
               existing: str | None = None, server: str | None = None, token: str | None = None,
               pair_again: str = PAIR_AGAIN) -> Pairing:
    """`pair_again`: how messages tell the one who reads them to pair the notebook again, in the front
    end that pairs it (an MCP client cannot run `%tools pair`)."""
    kind = _choose_kind(kernel, existing, server, token)
    if kind == "server":
        pairing = await _pair_server(notebook, server, token, kernel, pair_again)
    else:
        path = _notebook_path(workdir, notebook)
        if kind == "existing":
            connection: KernelConnection = await connect_existing(existing)
        else:
            connection = await start_kernel(kernel, path.parent if path.parent.is_dir() else workdir)
        pairing = Pairing(notebook, str(path), kind, connection, FileStore(path, notebook))
    pairing.connection.pair_again = pair_again
    await pairings(state).add(pairing)
    return pairing


async def _pair_server(notebook: str, url: str, token: str | None, kernel: str | None,
                       pair_again: str) -> Pairing:
    api = ServerApi(url, token, pair_again)
    store = None
    try:
        path = _server_key(notebook)
        store = await open_notebook(api, path)
        connection = await connect_server(api, path, kernel)
    except BaseException:
        if store is not None:
            await store.close()
        await api.close()
        raise
    return Pairing(notebook, path, "server", connection, store, api, root=local_root(api.base))


async def unpair(state: dict, workdir: Path | None = None, notebook: str | None = None) -> list[str]:
    """Forget `notebook`'s pairing, or every pairing when no notebook is named. Each is
    forgotten even when it cannot be closed cleanly; those are named in the lines returned."""
    registry = pairings(state)
    if notebook is None:
        chosen = list(registry)
    else:
        pairing = registry.find(workdir or Path.cwd(), notebook)
        if pairing is None:
            raise InvalidInput(f"{notebook} is not paired in this session")
        chosen = [pairing]
    problems = []
    for pairing in chosen:
        problem = await registry.remove(pairing)
        if problem is not None:
            problems.append(f"{pairing.notebook_arg}: {problem}")
    return problems


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


def _require_ipynb(notebook: str) -> None:
    if not notebook.endswith(".ipynb"):
        raise InvalidInput(f"{notebook!r} is not a notebook (.ipynb) path\n{USAGE}")


def _server_key(notebook: str) -> str:
    _require_ipynb(notebook)
    return server_path(notebook)


def _notebook_path(workdir: Path, notebook: str) -> Path:
    _require_ipynb(notebook)
    return _resolve(workdir, notebook)


def _resolve(workdir: Path, notebook: str) -> Path:
    path = Path(notebook).expanduser()
    return (path if path.is_absolute() else workdir / path).resolve()
