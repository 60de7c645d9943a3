"""Kernels reached over ZeroMQ: one this session starts (--kernel) or one that
runs already (--existing CONNECTION_FILE).

The client stays connected with its channels started between calls, so a call
costs one execute round trip, as a bare `execute_interactive` does.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from queue import Empty

import zmq
from jupyter_client import AsyncKernelClient, AsyncKernelManager, find_connection_file
from jupyter_client.kernelspec import NoSuchKernel

from ..._errors import InvalidInput, Unavailable
from ._connection import AGENT_METADATA, EXECUTE_CONTENT, KernelConnection, Message

READY_TIMEOUT_SECONDS = 60.0
# The heartbeat thread answers once a second; a kernel is declared dead only
# after it has been silent this long, so one slow beat is not a death.
HEARTBEAT_GRACE_SECONDS = 3.0
# How long a kernel we did not start may stay silent while it starts up.
STARTUP_GRACE_SECONDS = 20.0


class ZmqConnection(KernelConnection):
    def __init__(self, client: AsyncKernelClient, *, label: str, manager: AsyncKernelManager | None = None,
                 connection_file: str | None = None) -> None:
        super().__init__()
        self.client = client
        self.manager = manager
        self.label = label
        self.connection_file = connection_file

    @property
    def owned(self) -> bool:
        return self.manager is not None

    async def _send_execute(self, code: str) -> str:
        msg = self.client.session.msg("execute_request", {"code": code, **EXECUTE_CONTENT},
                                      metadata=AGENT_METADATA)
        self.client.shell_channel.send(msg)
        return msg["header"]["msg_id"]

    async def _next_iopub(self, timeout: float) -> Message | None:
        try:
            return await self.client.get_iopub_msg(timeout=timeout)
        except Empty:
            return None

    async def _reply(self, msg_id: str, timeout: float) -> Message | None:
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                reply = await self.client.get_shell_msg(timeout=remaining)
            except Empty:
                return None
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                return reply
        return None

    async def _interrupt(self) -> None:
        if self.manager is not None:
            await self.manager.interrupt_kernel()
            return
        # Not our process to signal: ask the kernel itself (ipykernel answers
        # interrupt_request on the control channel by signalling itself).
        msg = self.client.session.msg("interrupt_request", content={})
        self.client.control_channel.send(msg)

    async def _alive(self) -> bool:
        if self.manager is not None:
            return await self.manager.is_alive()
        return await self._heartbeat_alive()

    async def _heartbeat_alive(self) -> bool:
        hb = self.client.hb_channel
        deadline = time.monotonic() + HEARTBEAT_GRACE_SECONDS
        while not hb.is_beating():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.2)
        return True

    def restart_hint(self) -> str:
        if self.owned:
            return "Restart it with `tools notebook-run restart=true` (its variables are lost), or pair again."
        return f"It is not this session's kernel: restart it where it runs (JupyterLab), then {self.pair_again}."

    async def restart(self) -> str:
        if self.manager is None:
            return await super().restart()
        async with self._lock:
            try:
                if await self.manager.is_alive():
                    await self.manager.restart_kernel(now=True)
                else:
                    # restart_kernel insists on shutting down first; a dead kernel is simply started again.
                    await self.manager.start_kernel()
                await self.client.wait_for_ready(timeout=READY_TIMEOUT_SECONDS)
            except RuntimeError as exc:
                raise Unavailable(f"could not restart the {self.label} kernel: {exc}", retryable=True) from exc
        return ""

    async def close(self) -> None:
        self.client.stop_channels()
        if self.manager is None:
            return
        try:
            # A dead kernel still leaves ports and a connection file to clean up.
            await self.manager.shutdown_kernel(now=not await self.manager.is_alive())
        except (OSError, RuntimeError) as exc:
            raise Unavailable(f"the {self.label} kernel did not shut down cleanly: {exc}", retryable=False) from exc

    def describe(self) -> str:
        if self.owned:
            return f"{self.label} kernel started by this session"
        return f"existing kernel {self.connection_file}"


class SafeKernelManager(AsyncKernelManager):
    """A kernel this session starts.

    Its `python -m ipykernel_launcher` does not look for the launcher in its working directory
    first: the notebook's folder, where scripts write (an `ipykernel_launcher.py` there ran at
    the next start, `notebook-run restart=true` included). Once started, IPython puts that
    folder on sys.path as usual, after the standard library, for the notebook's own imports.

    Its channels are encrypted (CurveZMQ) where the kernel's spec says it can be: over plain
    TCP whoever reads loopback traffic reads the code and its outputs, and ipykernel says so
    in a warning the pairing cell showed. A jupyter_client before 8.10, or a libzmq without
    Curve, starts it unencrypted, as Jupyter itself does.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        if self.has_trait("transport_encryption") and zmq.has("curve"):
            self.transport_encryption = "auto"

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        return module_launch_command(super().format_kernel_cmd(extra_arguments))


def module_launch(module: str, first: str = "") -> str:
    """Python code that runs `module` as `python -m` would, with the working directory
    (`''`, which `-c` puts first) off sys.path while the module is found; `first` is
    imported before, the same way."""
    return (f"import sys\nif sys.path[:1] == ['']:\n    del sys.path[0]\n"
            f"import runpy{', ' + first if first else ''}\n"
            f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")


def module_launch_command(cmd: list[str]) -> list[str]:
    """`python -m MODULE ARGS...` as `python -c CODE ARGS...` (see `module_launch`)."""
    if len(cmd) > 2 and Path(cmd[0]).name.startswith("python") and cmd[1] == "-m":
        return [cmd[0], "-c", module_launch(cmd[2]), *cmd[3:]]
    return cmd


async def start_kernel(kernel_name: str, cwd: Path) -> ZmqConnection:
    manager = SafeKernelManager(kernel_name=kernel_name)
    try:
        await manager.start_kernel(cwd=str(cwd))
    except NoSuchKernel as exc:
        raise InvalidInput(f"no Jupyter kernel named {kernel_name!r}; `jupyter kernelspec list` shows the installed ones") from exc
    except (OSError, RuntimeError) as exc:
        raise Unavailable(f"the {kernel_name} kernel did not start: {exc}", retryable=True) from exc
    client = manager.client()
    connection = ZmqConnection(client, label=kernel_name, manager=manager)
    await _connect(connection)
    return connection


async def connect_existing(connection_file: str) -> ZmqConnection:
    path = _find_connection_file(connection_file)
    client = AsyncKernelClient(connection_file=path)
    try:
        client.load_connection_file()
    except (OSError, ValueError, KeyError) as exc:
        raise InvalidInput(f"{connection_file} is not a kernel connection file: {exc}") from exc
    connection = ZmqConnection(client, label=Path(path).name, connection_file=path)
    await _connect(connection)
    return connection


def _find_connection_file(name: str) -> str:
    if Path(name).expanduser().is_file():
        return str(Path(name).expanduser())
    try:
        # Like `jupyter console --existing`: a bare name or glob is looked up in the runtime dir.
        return find_connection_file(name)
    except OSError as exc:
        raise InvalidInput(
            f"no kernel connection file {name!r} here or in the Jupyter runtime directory "
            "(`jupyter --runtime-dir`; files are named kernel-<id>.json)"
        ) from exc


async def _connect(connection: ZmqConnection) -> None:
    connection.client.start_channels()
    try:
        await _wait_until_ready(connection)
    except RuntimeError as exc:
        await connection.close()
        raise Unavailable(f"the {connection.label} kernel did not answer: {exc}", retryable=True) from exc


async def _wait_until_ready(connection: ZmqConnection) -> None:
    """Wait for the kernel's first reply.

    A client with no manager (--existing) judges life by the heartbeat alone, and a
    kernel that is still starting on a loaded machine has not beaten yet: it would
    be called dead at once. Its "died" verdict is taken only after a start-up grace.
    """
    started = time.monotonic()
    while True:
        remaining = READY_TIMEOUT_SECONDS - (time.monotonic() - started)
        try:
            await connection.client.wait_for_ready(timeout=max(remaining, 1.0))
            return
        except RuntimeError as exc:
            starting = time.monotonic() - started < STARTUP_GRACE_SECONDS
            if connection.manager is not None or "died" not in str(exc) or not starting:
                raise
            await asyncio.sleep(0.5)
