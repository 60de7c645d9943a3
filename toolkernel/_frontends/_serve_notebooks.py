"""serve's notebook tools: which notebooks a `serve` reaches, and how its tools tell an agent to name one.

`--notebook PATH` pairs one notebook for the whole serve (its kernel from --kernel, --existing or
--server): every client shares it, and a call without a `notebook_path` is about it. `--server URL`
pairs per call besides (`ServerRoot`): each MCP session pairs the notebooks its calls name, by their
path from the server's root, with the kernels of their sessions there, in a `Pairings` of its own
(two sessions never reach each other's pairings, nor a kernel the other started). A call starts a
kernel session only where `[serve] start_kernels` allows it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping

from .. import _loop
from .._config._config import load_config
from .._errors import CallError, ConfigError, printable
from .._mcp_sdk import types, validated, wire
from .._providers._notebook import Pairings, pair, pairings, unpair
from .._providers._notebook._pairing import ServerRoot
from .._tool import Tool

NOTEBOOK = ("notebook_read", "notebook_edit", "notebook_run")
# How a notebook tool's message says to pair again, to an agent that cannot: the one who started serve pairs.
PAIR_AGAIN = ("ask whoever started `toolkernel serve` to start it again: its options --notebook, --kernel, "
              "--existing, --server and --server-token pair the notebook")
PAIR_FIRST = ("`toolkernel serve` reaches only the notebook its --notebook option names; another notebook "
              "needs a `toolkernel serve --notebook` of its own, started by whoever runs serve")
# How a person lets a call start a kernel, said where a call on a notebook without one is refused.
ALLOW_START = ("let serve start one: `start_kernels = true` under `[serve]` in your toolkernel.toml "
               "(~/.config/toolkernel/toolkernel.toml, or a trusted project's)")
_KERNEL_OPTIONS = ("kernel", "existing", "server", "token")


class ServeNotebooks:
    """The notebooks one `serve` reaches: `--notebook`'s pairing, shared by its clients, and with
    `--server` every notebook of that server, paired per call in each client's own `Pairings`."""

    def __init__(self, workdir: Path, options: Mapping[str, Any] | None) -> None:
        options = dict(options or {})
        self.workdir = workdir
        self._notebook: str | None = options.get("notebook")
        self._kernel_args = {key: options[key] for key in _KERNEL_OPTIONS if options.get(key)}
        server = options.get("server")
        self.root = ServerRoot(server, options.get("token"), self._may_start, ALLOW_START,
                               kernel=options.get("kernel"), pair_again=PAIR_AGAIN,
                               workdir=workdir) if server else None
        self._state: dict[str, Any] = {}  # `--notebook`'s pairing, which every client of this serve uses
        pairings(self._state).pair_first = PAIR_FIRST
        self.default: str | None = None  # its path as calls name it, once paired

    @property
    def listed(self) -> bool:
        """Whether the notebook tools are listed: a notebook is paired, or a server's are per call."""
        return self._notebook is not None or self.root is not None

    def pair(self) -> list[str]:
        """Pair `--notebook` (before any client comes) and check `--server` answers; what serve says at
        its start. Raises CallError."""
        said = []
        if self._notebook is not None:
            notebook = self.root.key(self._notebook) if self.root is not None else self._notebook
            # From the server's root: a name from serve's folder that the server lacks is refused, not made.
            pairing = _loop.run(pair(self._state, self.workdir, notebook, **self._kernel_args,
                                     pair_again=PAIR_AGAIN, missing_ok=self.root is None))
            self.default = pairing.key if self.root is not None else notebook
            said.append(pairing.describe())
        if self.root is not None:
            _loop.run(_check_server(self.root))
            said.append(self._per_call())
        return said

    def _per_call(self) -> str:
        assert self.root is not None
        root = self.root.root()
        where = f" ({printable(str(root))})" if root is not None else ""
        kernels = ("a notebook with no kernel session there gets one started ([serve] start_kernels)"
                   if self._may_start() else "a notebook runs in the kernel of its session there; [serve]"
                   " start_kernels = true lets a call start one")
        return (f"every notebook of the Jupyter Server at {self.root.base} is paired per call, by its path from its"
                f" root{where}; {kernels}")

    def registry(self) -> Pairings:
        """A client's own pairings: `--notebook`'s, shared, and those its calls make."""
        own = Pairings(self.root)
        own.pair_first = PAIR_FIRST
        for pairing in pairings(self._state):
            own.lend(pairing)
        return own

    def close(self) -> None:
        _loop.run(unpair(self._state), timeout=30)  # a kernel serve started is shut down

    def _may_start(self) -> bool:
        """The person's config lets a call start a kernel session (a config with a problem does not)."""
        try:
            return load_config(self.workdir).serve.start_kernels
        except ConfigError:
            return False

    # -- what a client sees and sends ---------------------------------------------------------

    def listed_tool(self, tool: Tool, listed: types.Tool) -> types.Tool:
        """A notebook tool as this serve lists it: its `notebook_path` said for the notebooks it reaches,
        and left out for `--notebook`'s."""
        if not self.is_notebook_tool(tool):
            return listed
        tool_json = wire(listed)  # its wire names: mcp 1.x's fields are camelCase, 2.x's snake_case
        schema = tool_json["inputSchema"] = copy.deepcopy(dict(tool_json["inputSchema"]))
        schema["properties"]["notebook_path"]["description"] = self._path_description(tool.name)
        if self.default is not None:
            schema["required"] = [key for key in schema.get("required", ()) if key != "notebook_path"]
        return validated(types.Tool, tool_json)

    def _path_description(self, name: str) -> str:
        default = f" Leave it out for {self.default}." if self.default is not None else ""
        if self.root is None:
            return f"The notebook: {self.default}, the only one this serve reaches.{default}"
        root = self.root.root()
        where = f" ({root} on this machine)" if root is not None else ""
        kernel = (" It runs in the kernel of the notebook's session on the server (the one JupyterLab shows for"
                  " it).") if name == "notebook_run" else ""
        return printable(
            f"The notebook (.ipynb) by its path from the root of the Jupyter Server at {self.root.base}{where}, e.g."
            " `reports/analysis.ipynb`, whatever folder serve runs in. A file:// URI (as a Jupyter AI attachment"
            " names the notebook) or an absolute path under that root is taken from there; one outside it is"
            f" refused.{kernel}{default}")

    def filled(self, tool: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
        """The call's input, about `--notebook`'s notebook when it names none."""
        if self.default is None or not self.is_notebook_tool(tool) or "notebook_path" in arguments:
            return arguments
        return {**arguments, "notebook_path": self.default}

    @staticmethod
    def is_notebook_tool(tool: Tool) -> bool:
        return not tool.server and tool.name in NOTEBOOK

    def kernel_projects(self, arguments: Mapping[str, Any]) -> list[Path]:
        """Where the kernel a call ran in may have published a request: the folder of the call's
        notebook (a server's kernel runs in its notebook's folder), then here."""
        notebook = arguments.get("notebook_path") or self.default
        places = [self.workdir]
        if isinstance(notebook, str) and notebook:
            if self.root is None:
                places.insert(0, (self.workdir / notebook).resolve().parent)
            elif (root := self.root.root()) is not None:
                try:
                    places.insert(0, (root / self.root.key(notebook)).parent)
                except CallError:
                    pass  # not a notebook path of that server: nothing ran there
        return list(dict.fromkeys(places))


async def _check_server(root: ServerRoot) -> None:
    """The server answers, and takes the token (a wrong one is said at the start, not at the first call)."""
    from .._providers._notebook._server import ServerApi

    api = ServerApi(root.url, root.token, root.pair_again)
    try:
        await api.request("GET", "api/sessions")
    finally:
        await api.close()
