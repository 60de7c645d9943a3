"""Who answers when a call needs a person: the `Approver` seam.

`_policy.decide` stays pure; when it says "ask", the dispatcher awaits the
run's approver at that point (and the before-start check asks the same
approver, with `before_start=True`). The approver is injected into the run,
as the MCP SDK injects its elicitation callback:

    stop_and_report   headless default: "later" (the run stops, the report asks)
    StdinApprover     a terminal, or a notebook frontend that offers stdin
    ElicitApprover    an MCP client, through elicitation (`toolkernel serve`)

A JupyterLab frontend answers "later" questions afterwards, through the comm
target `toolkernel.approval` (`_answers.answer_message`): the kernel cannot
read comm messages while the cell that asks is still running.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, Protocol

from ._policy import CallInfo
from ._run import described_call


class Answer(enum.Enum):
    ONCE = "once"  # this exact call, this one time
    ALWAYS = "always"  # this tool from now on (a lasting rule)
    DENY = "deny"  # not this call
    LATER = "later"  # nobody answers now: stop, report, and let the person answer afterwards


@dataclass(frozen=True)
class ApprovalRequest:
    call: CallInfo
    reason: str  # why the policy asks
    before_start: bool = False  # True: nothing of the script has run yet
    # Whether "always" would make the call run unasked (an ask rule, a path outside the
    # workspace or a protected file asks whatever is allowed): else offer once or deny only.
    always_offered: bool = True

    def question(self) -> str:
        call = {"tool": self.call.command, "input": dict(self.call.input), **self.call.shown()}
        return f"{described_call(call)} needs your approval ({self.reason})."


class Approver(Protocol):
    async def __call__(self, request: ApprovalRequest) -> Answer: ...


async def stop_and_report(request: ApprovalRequest) -> Answer:
    """The headless default: nobody can answer now."""
    return Answer.LATER


_REPLIES = {"o": Answer.ONCE, "once": Answer.ONCE, "y": Answer.ONCE, "yes": Answer.ONCE,
            "a": Answer.ALWAYS, "always": Answer.ALWAYS}


class StdinApprover:
    """Asks with a prompt function such as `input` (on the thread where it works:
    `ask` returns a future, e.g. `ScriptEvents.on_pump_thread`). Anything but
    once/always is a deny."""

    def __init__(self, ask: Callable[[str, ApprovalRequest], concurrent.futures.Future]) -> None:
        self._ask = ask

    async def __call__(self, request: ApprovalRequest) -> Answer:
        prompt = f"{request.question()} Allow [o]nce, [a]lways, or [d]eny? "
        reply = await asyncio.wrap_future(self._ask(prompt, request))
        return _REPLIES.get(str(reply).strip().lower(), Answer.DENY)


ELICIT_SCHEMA = {
    "type": "object",
    "properties": {"decision": {"type": "string", "enum": ["once", "always", "deny"],
                              "description": "Allow this call once, allow the tool always, or deny it"}},
    "required": ["decision"],
}


class ElicitApprover:
    """Asks an MCP client: `elicit(message, schema)` returns the accepted content,
    or None when the person declined or cancelled (then the run stops and reports).
    With `stops_first` (a served `bash` script) a call that asks mid-run is not made:
    the script stops there and the report's `approval` carries the answer (seed 000)."""

    def __init__(self, elicit: Callable[[str, Mapping[str, Any]], Awaitable[Mapping[str, Any] | None]],
                 *, stops_first: bool = False) -> None:
        self._elicit = elicit
        self.stops_first = stops_first

    async def __call__(self, request: ApprovalRequest) -> Answer:
        content = await self._elicit(request.question(), ELICIT_SCHEMA)
        if content is None:
            return Answer.LATER
        try:
            return Answer(content.get("decision"))
        except ValueError:
            return Answer.DENY
