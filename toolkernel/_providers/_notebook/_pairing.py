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

`serve --server URL` with no notebook (`ServerRoot`) pairs per call: each notebook a call
names, by its path from the server's root, is paired in that session with the kernel of its
session on the server when a run first needs one; a new session is started only when the
person's config allows it, and a kernel one MCP session started is never another's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import unquote, urlsplit

from ..._errors import CallError, ConnectionRequired, InvalidInput, ToolInputError, printable
from ..._tool import ServerPath
from ._connection import PAIR_AGAIN, KernelConnection
from ._nearest import missing_notebook
from ._roots import local_root, refuse_if_open_elsewhere, relative_path
from ._server import (ServerApi, ServerConnection, connect_server, live_session, open_notebook, server_path,
                      split_token, start_session)
from ._stores import ContentsStore, FileStore, NotebookStore

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
    connection: KernelConnection | None  # None: a notebook paired per call, until a run needs its kernel
    store: NotebookStore | None = None  # None: a server notebook that does not exist yet
    api: ServerApi | None = field(default=None, repr=False)
    root: Path | None = None  # a server's root folder on this machine, when it runs here
    # The other notebooks under a server's root reached through it, by their path from the root.
    documents: dict[str, NotebookStore] = field(default_factory=dict, repr=False)
    # How a notebook paired per call finds its kernel (`ServerRoot`); None: `connection` is set.
    server_kernel: "_ServerKernel | None" = field(default=None, repr=False)
    # What the next run's result says once: the kernel a call paired, found or started.
    news: str = ""
    _opening: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    _connecting: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def describe(self) -> str:
        # A local file describes itself by the name it was paired by: said once, not twice.
        store = self.store.describe() if self.store is not None else self.notebook_arg
        where = f"; notebook {store}" if store != self.notebook_arg else ""
        kernel = self.connection.describe() if self.connection is not None else "its kernel when a run needs it"
        return f"{self.notebook_arg} paired with {kernel}{where}"

    async def kernel(self) -> KernelConnection:
        """The kernel that runs this notebook's code; a notebook paired per call finds it now."""
        async with self._connecting:  # two runs at once pair one kernel, not two
            if self.connection is None:
                assert self.server_kernel is not None
                self.connection, self.news = await self.server_kernel.connect()
        return self.connection

    async def kernel_ready(self) -> None:
        """Refuses, before anyone is asked to allow a run, a run that would find no kernel."""
        if self.connection is None and self.server_kernel is not None:
            await self.server_kernel.session()

    def take_news(self) -> str:
        news, self.news = self.news, ""
        return news

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
            store.own_channels = self._own_channels
        return store

    def _own_channels(self, kernel_id: str) -> int:
        """How many of the server's connections to kernel `kernel_id` are this pairing's (asked when
        checked: a notebook paired per call connects its kernel later)."""
        channels_to = getattr(self.connection, "channels_to", None)
        return channels_to(kernel_id) if channels_to is not None else 0

    def local_key(self, real: str | Path) -> str | None:
        """A local path (symlinks resolved) from this server's root, when it lies under it."""
        return relative_path(real, self.root) if self.root is not None else None

    async def close(self) -> None:
        try:
            for store in [*self.documents.values(), *([self.store] if self.store is not None else [])]:
                await store.close()
        finally:
            self.documents.clear()
            if self.connection is not None:
                await self.connection.close()  # and its server's API with it
            elif self.api is not None:
                await self.api.close()


class Pairings:
    """The notebooks a session has paired, by notebook; with a `ServerRoot`, every notebook of that
    server, each paired when a call first names it."""

    def __init__(self, server: ServerRoot | None = None) -> None:
        self._by_key: dict[str, Pairing] = {}
        self._lent: set[str] = set()  # keys of pairings another registry owns: forgotten here, never closed
        self.server = server
        # What a call on a notebook that is not paired is told to do; a front end whose reader cannot
        # run `%tools pair` (serve) says its own.
        self.pair_first = "pair it first:\n" + USAGE
        self._pairing = asyncio.Lock()  # two calls at once on a new notebook pair it once
        self._owner = object()  # who started a server session, for `ServerRoot.started`

    def __iter__(self):
        return iter(list(self._by_key.values()))

    def lend(self, pairing: Pairing) -> None:
        """Reach `pairing` from this registry too (serve's `--notebook`, which every client of it shares);
        it stays its owner's to close."""
        self._by_key[pairing.key] = pairing
        self._lent.add(pairing.key)

    async def add(self, pairing: Pairing) -> None:
        previous = self._by_key.get(pairing.key)
        self._by_key[pairing.key] = pairing
        if previous is not None and pairing.key not in self._lent:
            await previous.close()
        self._lent.discard(pairing.key)

    async def remove(self, pairing: Pairing) -> str | None:
        """Forget `pairing` and close it (unless it was lent); why closing failed (an unreachable
        server or kernel), or None. It is forgotten either way."""
        if self._by_key.get(pairing.key) is pairing:
            del self._by_key[pairing.key]
            if pairing.key in self._lent:
                self._lent.discard(pairing.key)
                return None
        try:
            await pairing.close()
        except CallError as exc:
            return exc.message
        return None

    def find(self, workdir: Path, notebook: str, real: str | None = None) -> Pairing | None:
        """The pairing of `notebook`: a server path, or a path relative to `workdir` (`real`:
        where it leads, as the dispatcher resolved and checked it). Paired per call, every path is
        the server's."""
        if self.server is not None:
            return self.named(notebook)
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

    async def store(self, workdir: Path, notebook: str, real: str, *, missing_ok: bool = False) -> NotebookStore:
        """Where `notebook` is read and changed: its pairing's server, the server whose root holds it,
        else its local file (`real`: where it leads, as the dispatcher resolved and checked it) unless a
        server this session is not paired with has it open. `missing_ok`: a notebook the call creates."""
        if self.server is not None:
            return await (await self.pairing_for(workdir, notebook, missing_ok=missing_ok)).notebook_store()
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

    async def pairing_for(self, workdir: Path, notebook: str, *, missing_ok: bool = False) -> Pairing:
        """The pairing of `notebook`; with a `ServerRoot`, paired now when this is its first call."""
        if self.server is None:
            return self.require(workdir, notebook)
        key = self.server.key(notebook)
        async with self._pairing:
            found = self._by_key.get(key)
            if found is None:
                found = self._by_key[key] = await self.server.pair(key, owner=self._owner,
                                                                               missing_ok=missing_ok)
        return found

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

    def reachable(self, workdir: Path, notebook: str) -> None:
        """Refuses, before anyone is asked, a notebook no pairing of this session can reach."""
        if self.server is None:
            self.require(workdir, notebook)

    def require(self, workdir: Path, notebook: str) -> Pairing:
        pairing = self.find(workdir, notebook)
        if pairing is None:
            paired = ", ".join(p.notebook_arg for p in self) or "none"
            raise ConnectionRequired(
                f"{notebook} is not paired with a kernel in this session (paired: {paired}); {self.pair_first}")
        return pairing


@dataclass
class ServerRoot:
    """Every notebook of one Jupyter Server, paired per call by its path from the server's root
    (`serve --server URL` with no --notebook). One per serve; each MCP session pairs through it in
    a `Pairings` of its own."""

    url: str
    token: str | None
    may_start: Callable[[], bool]  # whether the person's config lets a call start a kernel session
    allow_start: str  # how the person allows that, in the front end's words
    kernel: str | None = None  # the kernel a session started gets (None: the server's default)
    pair_again: str = PAIR_AGAIN
    workdir: Path | None = None  # the front end's folder: a path from there is a guess at what was meant
    # The server sessions a call started, by id, and the `Pairings` that started each: that one's alone.
    started: dict[str, object] = field(default_factory=dict, repr=False)
    _root: Path | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.base = split_token(self.url)[0]

    def root(self) -> Path | None:
        """The server's root folder on this machine (None: it does not run here, as far as its runtime
        folder says)."""
        if self._root is None:
            self._root = local_root(self.base)
        return self._root

    def key(self, notebook: str) -> str:
        """`notebook` as the server names it: a path from its root; a `file://` URI (a Jupyter AI
        attachment) or an absolute path of this machine under its root is taken from there."""
        local = _file_uri_path(notebook) if notebook.startswith("file:") else None
        if local is None and not os.path.isabs(notebook):
            return _notebook_on_server(notebook)
        root = self.root()
        relative = relative_path(os.path.realpath(local or notebook), root) if root is not None else None
        if relative is not None:
            return _notebook_on_server(relative)
        if local is None:
            return _notebook_on_server(notebook)  # `/a.ipynb`: from the server's root, as every server path
        if root is None:
            raise InvalidInput(printable(
                f"{notebook}: the Jupyter Server at {self.base} does not run on this machine (it is not in "
                "`jupyter --runtime-dir`), so where a file:// URI lies on it is unknown; give the notebook's "
                "path from the server's root"))
        raise InvalidInput(printable(f"{notebook} is outside the root of the Jupyter Server at {self.base} ({root}):"
                                     " only the notebooks that server serves are reached"))

    async def pair(self, key: str, *, owner: object, missing_ok: bool = False) -> Pairing:
        """`key`'s pairing for `owner`: its document now, its kernel when a run needs it. A notebook the
        server does not have is refused, with the nearest it has (unless `missing_ok`: the call makes it)."""
        api = ServerApi(self.url, self.token, self.pair_again)
        try:
            store = await open_notebook(api, key)
            if store is None and not missing_ok:
                raise ToolInputError(await missing_notebook(api, key, workdir=self.workdir, root=self.root()))
        except BaseException:
            await api.close()
            raise
        return Pairing(key, key, "server", None, store, api, root=self.root(),
                       server_kernel=_ServerKernel(self, api, key, owner))


@dataclass
class _ServerKernel:
    """How a notebook paired per call finds its kernel: its session's on the server; a new session
    only when the person's config allows it; never a session another MCP session started."""

    root: ServerRoot
    api: ServerApi
    key: str
    owner: object  # the `Pairings` of the MCP session that pairs it

    async def session(self) -> dict[str, Any] | None:
        """The notebook's session on the server; None when there is none and a call may start one."""
        session = await live_session(self.api, self.key)
        if session is not None:
            if self.root.started.get(session["id"], self.owner) is not self.owner:
                raise ConnectionRequired(
                    f"the kernel of {self.key} on the Jupyter Server at {self.root.base} was started by another MCP "
                    "session of this serve: it is that session's until it ends (each session reaches its own "
                    "kernels and those of the server's own sessions, such as a notebook open in JupyterLab)")
            return session
        self.may_start()
        return None

    def may_start(self) -> None:
        """Refuses a new kernel session unless the person's config allows it."""
        if not self.root.may_start():
            raise ConnectionRequired(
                f"{self.key} has no kernel session on the Jupyter Server at {self.root.base}: open it in JupyterLab "
                f"(which starts its kernel) and call again, or {self.root.allow_start}")

    async def start(self, kernel_id: str = "", name: str | None = None) -> dict[str, Any]:
        """A new session for the notebook, this MCP session's (on kernel `kernel_id` when the server can
        take it up; a new kernel `name`, else serve's --kernel, else the server's default)."""
        self.may_start()
        session = await start_session(self.api, self.key, name or self.root.kernel, kernel_id)
        self.root.started[session["id"]] = self.owner
        return session

    async def connect(self) -> tuple[KernelConnection, str]:
        """The kernel connection, and what the run's result says about it."""
        session = await self.session()
        created = session is None
        if session is None:
            session = await self.start()
        connection = _PerCallConnection(self, session, created=created)
        connection.pair_again = self.root.pair_again
        try:
            await connection.open()
        except BaseException:
            if created:  # no kernel of ours is left running on the person's server
                with contextlib.suppress(CallError):
                    await self.api.request("DELETE", "api/sessions", session["id"], missing_ok=True)
            raise
        if created:
            news = (f"(started a new {connection.label} kernel session for {self.key} on the Jupyter Server at "
                    f"{self.root.base}: it had none, and the config's [serve] start_kernels allows it; it ends "
                    "with this MCP session)")
        else:
            news = (f"(ran in the {connection.label} kernel of {self.key}'s session on the Jupyter Server at "
                    f"{self.root.base}, the kernel JupyterLab shows for it: its variables are there)")
        return connection, printable(news)


class _PerCallConnection(ServerConnection):
    """A per-call pairing's kernel: one that is gone is replaced by a new session only where a call
    may start one (the person who shut their notebook's kernel down gets no new one from a run)."""

    def __init__(self, kernel: _ServerKernel, session: dict[str, Any], *, created: bool) -> None:
        super().__init__(kernel.api, session, created=created)
        self._per_call = kernel

    async def new_session(self, path: str, kernel_id: str) -> dict[str, Any]:
        return await self._per_call.start(kernel_id, self.label)


def _notebook_on_server(notebook: str) -> str:
    if not notebook.endswith(".ipynb"):
        raise InvalidInput(printable(f"{notebook!r} is not a notebook (.ipynb) path"))
    return server_path(notebook)


def _file_uri_path(uri: str) -> str:
    """The local path of a `file://` URI (`file:///home/me/a%20b.ipynb`, `file://localhost/...`)."""
    parts = urlsplit(uri)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
        raise InvalidInput(printable(f"{uri!r} is not a file:// URI of this machine; give the notebook's path"))
    return unquote(parts.path)


def pairings(state: dict[str, Any]) -> Pairings:
    """The session's pairings (created on first use)."""
    found = state.get(STATE_KEY)
    if found is None:
        found = state[STATE_KEY] = Pairings()
    return found


def served_by(state: Mapping[str, Any], real: str) -> str | None:
    """The URL of the paired Jupyter Server whose root holds the local path `real` (None: none does)."""
    found = state.get(STATE_KEY)
    if found is None:
        return None
    server = found._served(real)[0]
    if server is not None and server.api is not None:
        return server.api.base
    root = found.server.root() if found.server is not None else None
    return found.server.base if root is not None and relative_path(real, root) is not None else None


def server_notebook_paths(arguments: Mapping[str, Any], state: Mapping[str, Any]) -> dict[str, ServerPath]:
    """`notebook_path`, when it names a notebook this session paired through a server, or pairs per call
    (`ServerRoot`: every notebook path is the server's): checked against that server's root, not the
    workspace (see `Tool.server_paths`). A path that leaves the root, or a URI outside it, is refused."""
    registry = state.get(STATE_KEY)
    notebook = arguments.get("notebook_path")
    if registry is None or not isinstance(notebook, str) or not notebook:
        return {}
    if registry.server is not None:
        return {"notebook_path": ServerPath(registry.server.key(notebook), registry.server.base)}
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
               pair_again: str = PAIR_AGAIN, missing_ok: bool = True) -> Pairing:
    """`pair_again`: how messages tell the one who reads them to pair the notebook again, in the front
    end that pairs it (an MCP client cannot run `%tools pair`). `missing_ok`: a server notebook that
    does not exist yet is paired (an insert makes it); otherwise refused, with the nearest it has."""
    kind = _choose_kind(kernel, existing, server, token)
    if kind == "server":
        assert server is not None
        pairing = await _pair_server(notebook, server, token, kernel, pair_again,
                                     missing_in=None if missing_ok else workdir)
    else:
        path = _notebook_path(workdir, notebook)
        # Here, not with the module: `serve` imports this module at its start, and jupyter_client
        # with zmq (0.04 s) is needed only once a kernel is paired over ZMQ.
        from ._zmq import connect_existing, start_kernel

        if kind == "existing":
            connection: KernelConnection = await connect_existing(existing)
        else:
            connection = await start_kernel(kernel, path.parent if path.parent.is_dir() else workdir)
        pairing = Pairing(notebook, str(path), kind, connection, FileStore(path, notebook))
    pairing.connection.pair_again = pair_again
    await pairings(state).add(pairing)
    return pairing


async def _pair_server(notebook: str, url: str, token: str | None, kernel: str | None,
                       pair_again: str, missing_in: Path | None = None) -> Pairing:
    """`missing_in`: a notebook the server does not have is refused, the guess from this folder among
    the nearest it has."""
    api = ServerApi(url, token, pair_again)
    store = None
    try:
        path = _server_key(notebook)
        store = await open_notebook(api, path)
        if store is None and missing_in is not None:
            raise InvalidInput(await missing_notebook(api, path, workdir=missing_in, root=local_root(api.base)))
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
