"""Running code in a kernel, whichever way it is reached.

`KernelConnection.execute` speaks the Jupyter message protocol: send an
execute_request, collect the IOPub messages whose parent is that request until
the kernel goes idle, then take the reply. Subclasses only move messages
(ZeroMQ for --kernel/--existing, a websocket for --server).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import socket
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from nbformat import NotebookNode
from nbformat.v4 import output_from_msg

from ..._errors import InvalidInput, Unavailable

Message = dict[str, Any]

# How long to wait for the kernel to settle after an interrupt before giving up on it.
INTERRUPT_GRACE_SECONDS = 10.0
# How long to wait for the execute_reply once the kernel reported idle.
REPLY_WAIT_SECONDS = 10.0
# How often a silent kernel is checked for being alive while code runs.
LIVENESS_POLL_SECONDS = 1.0
# How long the kernel's IOPub may stay silent after its execute_reply came before its outputs
# count as lost (nbclient waits as long): a server that reconnects its channels to a kernel
# that replaced a dead one can miss what the new kernel published first.
IOPUB_AFTER_REPLY_SECONDS = 4.0
# How long one look for the execute_reply waits, while IOPub is silent.
REPLY_PEEK_SECONDS = 0.01

OUTPUT_TYPES = {"stream", "display_data", "execute_result", "error"}
# Messages after which a live view of the outputs (or the execution count) changes.
SHOWN_TYPES = OUTPUT_TYPES | {"execute_input", "clear_output", "update_display_data"}

OnOutput = Callable[["Execution"], Awaitable[None]]

# How a message says to pair a notebook again when the front end that paired it said nothing (the
# front ends give their own way: `%tools pair` in a kernel, starting `toolkernel serve` again).
PAIR_AGAIN = "pair the notebook again"


@dataclass
class Execution:
    outputs: list[NotebookNode] = field(default_factory=list)
    execution_count: int | None = None
    status: str = "ok"  # ok | error | aborted | timeout
    settled: bool = True  # False: the kernel was still busy after the interrupt
    restarted: bool = False  # the kernel was replaced after the request left; the new one ran it
    outputs_lost: bool = False  # the kernel replied, but its IOPub messages (outputs, idle) never came
    notice: str = ""  # what became of the kernel before the code ran (a new one replaced one that was gone)

    @property
    def timed_out(self) -> bool:
        return self.status == "timeout"


class OutputCollector:
    """Builds notebook outputs from IOPub messages, as a notebook frontend would."""

    def __init__(self, execution: Execution, on_output: OnOutput | None = None) -> None:
        self.execution = execution
        self._on_output = on_output
        self.reply: Message | None = None  # the execute_reply, when it came before the kernel's idle
        self.replied_at = 0.0
        self._clear_pending = False
        self._display_index: dict[str, list[int]] = {}

    async def feed(self, msg: Message) -> bool:
        """Take one message of our request; True once the kernel is idle."""
        kind = msg["header"]["msg_type"]
        content = msg.get("content") or {}
        if kind == "status":
            return content.get("execution_state") == "idle"
        self._take(kind, msg, content)
        if self._on_output is not None and kind in SHOWN_TYPES:
            await self._on_output(self.execution)
        return False

    def _take(self, kind: str, msg: Message, content: dict[str, Any]) -> None:
        if kind == "execute_input":
            self.execution.execution_count = content.get("execution_count")
        elif kind == "clear_output":
            self._clear(wait=bool(content.get("wait")))
        elif kind == "update_display_data":
            self._update_display(content)
        elif kind in OUTPUT_TYPES:
            self._append(msg)

    def _append(self, msg: Message) -> None:
        if self._clear_pending:
            self._clear(wait=False)
        outputs = self.execution.outputs
        output = output_from_msg(msg)
        previous = outputs[-1] if outputs else None
        if (output.output_type == "stream" and previous is not None
                and previous.output_type == "stream" and previous.name == output.name):
            previous.text += output.text  # a notebook shows consecutive stream chunks as one output
        else:
            outputs.append(output)
        display_id = (msg["content"].get("transient") or {}).get("display_id")
        if display_id:
            self._display_index.setdefault(display_id, []).append(len(outputs) - 1)

    def _clear(self, *, wait: bool) -> None:
        if wait:
            self._clear_pending = True
            return
        self._clear_pending = False
        self.execution.outputs.clear()
        self._display_index.clear()

    def _update_display(self, content: dict[str, Any]) -> None:
        display_id = (content.get("transient") or {}).get("display_id")
        for index in self._display_index.get(display_id, []):
            output = self.execution.outputs[index]
            output.data = content.get("data", {})
            output.metadata = content.get("metadata", {})


class KernelConnection(ABC):
    """A kernel we can run code in. One execution at a time per connection."""

    label: str = "kernel"

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self.pair_again = PAIR_AGAIN  # set by `pair`, as the front end that paired says it

    async def execute(self, code: str, timeout: float, on_output: OnOutput | None = None) -> Execution:
        """Run `code`; `on_output` is awaited each time the outputs so far change (to stream them)."""
        async with self._lock:
            await self._require_alive()
            msg_id = await self._send_execute(agent_code(code))
            execution = Execution()
            collector = OutputCollector(execution, on_output)
            try:
                finished = await self._collect(msg_id, collector, timeout)
            except asyncio.CancelledError:
                # The caller stopped (an interrupted cell, a stopped shell run): the
                # code must not keep running in the kernel behind their back.
                await self._interrupt_quietly()
                raise
            if finished:
                reply = collector.reply or await self._reply(msg_id, REPLY_WAIT_SECONDS)
                self._apply_reply(execution, reply)
                return execution
            self._check_not_replaced(execution)
            execution.status = "timeout"
            await self._interrupt()
            execution.settled = await self._collect(msg_id, collector, INTERRUPT_GRACE_SECONDS)
            return execution

    async def _interrupt_quietly(self) -> None:
        try:
            await asyncio.wait_for(self._interrupt(), INTERRUPT_GRACE_SECONDS)
        except Exception:  # noqa: BLE001 - best effort while the caller is already leaving
            pass

    async def _collect(self, msg_id: str, collector: OutputCollector, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            msg = await self._next_iopub(min(remaining, LIVENESS_POLL_SECONDS))
            if msg is None:
                if await self._replied_without_outputs(msg_id, collector):
                    return True
                if not await self._alive():
                    raise self._died_while_running(collector.execution)
                continue
            if (msg.get("parent_header") or {}).get("msg_id") != msg_id:
                self._notice_other(msg)
                continue
            if await collector.feed(msg):
                return True
        return False

    async def _replied_without_outputs(self, msg_id: str, collector: OutputCollector) -> bool:
        """True once the kernel's execute_reply came and IOPub then stayed silent for
        IOPUB_AFTER_REPLY_SECONDS: the code ran, and what it published was lost on the way."""
        if collector.reply is None:
            collector.reply = await self._reply(msg_id, REPLY_PEEK_SECONDS)
            collector.replied_at = time.monotonic()  # counts only once a reply came
            return False
        if time.monotonic() - collector.replied_at < IOPUB_AFTER_REPLY_SECONDS:
            return False
        collector.execution.outputs_lost = True
        return True

    @staticmethod
    def _apply_reply(execution: Execution, reply: Message | None) -> None:
        if reply is None:
            return
        content = reply.get("content") or {}
        execution.status = content.get("status", "ok")
        if content.get("execution_count") is not None:
            execution.execution_count = content["execution_count"]

    async def _require_alive(self) -> None:
        if not await self._alive():
            raise Unavailable(self.dead_message(), retryable=True)

    def dead_message(self) -> str:
        return f"the paired kernel ({self.label}) is not running. {self.restart_hint()}"

    def restart_hint(self) -> str:
        return f"To reach a running kernel, {self.pair_again}."

    def _died_while_running(self, execution: Execution) -> Unavailable:
        shown = len(execution.outputs)
        return Unavailable(
            f"the paired kernel ({self.label}) died while the code ran ({shown} output(s) before that). "
            + self.restart_hint(),
            retryable=True,
        )

    def _notice_other(self, msg: Message) -> None:
        """A message that is not about our request (another client's, or the server's)."""

    def _check_not_replaced(self, execution: Execution) -> None:
        """At the run's timeout: raise when the time went to a kernel replaced under the request,
        not to the code (its result will never come, and interrupting the new kernel helps no one)."""

    async def restart(self) -> str:
        """Restart the kernel; returns what the result says besides that it was restarted (or "")."""
        raise InvalidInput(f"this session cannot restart the {self.label} kernel: it belongs to someone else. "
                           + self.restart_hint())

    @abstractmethod
    async def _send_execute(self, code: str) -> str: ...

    @abstractmethod
    async def _next_iopub(self, timeout: float) -> Message | None: ...

    @abstractmethod
    async def _reply(self, msg_id: str, timeout: float) -> Message | None: ...

    @abstractmethod
    async def _interrupt(self) -> None: ...

    @abstractmethod
    async def _alive(self) -> bool: ...

    @abstractmethod
    async def close(self) -> None:
        """Disconnect; shut the kernel down if this session started it."""

    def describe(self) -> str:
        return self.label


# stop_on_error is off: a failure (or interrupt) of our code must not abort
# requests that a person queued in the same kernel from JupyterLab.
EXECUTE_CONTENT = {"silent": False, "store_history": True, "user_expressions": {},
                   "allow_stdin": False, "stop_on_error": False}
# hostbash (issue 13): marks the request as an agent's, never a person's; a `%%bash`
# cell that sees it in its parent message is checked against Bash(...) rules.
AGENT_METADATA = {"toolkernel": {"started_by": "agent"}}
# The cell magic only a kernel with toolkernel loaded defines (`_frontends/_bash_magic.py`): it
# runs a `%%bash` cell as an agent's, whatever the request's metadata says.
AGENT_BASH_MAGIC = "toolkernel_agent_bash"


def agent_code(code: str) -> str:
    """`code` as an agent's request sends it: a `%%bash` cell, as IPython reads it, becomes a
    call of `AGENT_BASH_MAGIC`. The mark alone fails open: a kernel without toolkernel loaded
    (a plain `--kernel python3`, or any kernel after `restart`) runs IPython's own `%%bash`,
    unchecked, while it finds no such magic and runs nothing."""
    if "%%" not in code:  # no cell magic without it: spares importing IPython's transformer
        return code
    from IPython.core.inputtransformer2 import TransformerManager

    # IPython's own reading (blank lines, indents and prompts dropped), as the kernel does it.
    call = _cell_magic_call(TransformerManager().transform_cell(code))
    if call is None or call[0] != "bash":
        return code
    _, line, body = call
    return f"get_ipython().run_cell_magic({AGENT_BASH_MAGIC!r}, {line!r}, {body!r})\n"


def _cell_magic_call(python: str) -> tuple[str, str, str] | None:
    """(name, line, body) when `python` is IPython's `get_ipython().run_cell_magic(...)` line."""
    try:
        tree = ast.parse(python)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return None
    call = tree.body[0].value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "run_cell_magic" and len(call.args) == 3):
        return None
    try:
        name, line, body = (ast.literal_eval(arg) for arg in call.args)
    except ValueError:
        return None
    return (name, line, body) if all(isinstance(v, str) for v in (name, line, body)) else None


def ack_at_once(sock: socket.socket | None) -> None:
    """Acknowledge received data at once instead of after Linux's 40 ms delayed-ACK timer.

    Jupyter Server's websocket leaves Nagle's algorithm on, so after a small
    frame ("busy") it holds the next one until that frame is acknowledged; with
    delayed ACKs every execution (and every acknowledged edit) then waits about
    40 ms. Linux turns quick-ack mode off again by itself, so it is set after
    each frame.
    """
    if sock is not None and _QUICKACK is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)


_QUICKACK = getattr(socket, "TCP_QUICKACK", None)
