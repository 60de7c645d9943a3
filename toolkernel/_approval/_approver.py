"""Who answers when a call needs a person: the `Approver` seam.

`_policy.decide` stays pure; when it says "ask", the dispatcher awaits the
run's approver at that point (and the before-start check asks the same
approver, with `before_start=True`). The approver is injected into the run,
as the MCP SDK injects its elicitation callback:

    stop_and_report   headless default: "later" (the run stops, the report asks)
    StdinApprover     a terminal, or a notebook frontend that offers stdin
    ElicitApprover    an MCP client, through elicitation (`toolkernel serve`)

Where a person is at the cell (stdin offered), a question asks there, before the start
and mid-run alike: JupyterLab's buttons answer the same stdin request. A "later" question
(nobody could answer) is answered afterwards, through the comm target `toolkernel.approval`
(`_answers.answer_message`): the kernel cannot read comm messages while the cell that asks
is still running.
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
            "a": Answer.ALWAYS, "always": Answer.ALWAYS,
            "d": Answer.DENY, "deny": Answer.DENY, "n": Answer.DENY, "no": Answer.DENY}
CHOICES = "[o]nce / [a]lways / [d]eny (no default)"
# The prompt under a question already on the screen (JupyterLab's buttons, a notebook's text):
# the question is shown once, not again in the prompt.
ANSWER_PROMPT = f"Allow? {CHOICES}: "
ASK_AGAIN = "Please answer o (allow once), a (allow always) or d (deny): "
# A person mistypes; a stream that never says o, a or d is not a person: stop and report.
_MAX_ASKS = 5


def said(answer: Answer, request: ApprovalRequest) -> str:
    """The line that follows an answer: what happens now."""
    if answer is Answer.LATER:
        return "no answer; nothing ran" if request.before_start else "no answer; the call was not made"
    if answer is Answer.DENY:
        return "denied; nothing ran" if request.before_start else "denied; the call was not made"
    allowed = "allowed once" if answer is Answer.ONCE else "always allowed"
    return f"{allowed}; {'running the script' if request.before_start else 'making the call'}"


class StdinApprover:
    """Asks with a prompt function such as `input` (on the thread where it works:
    `ask` returns a future, e.g. `ScriptEvents.on_pump_thread`), and `tell`s what
    the answer did. An empty or unknown reply asks again: never a silent deny."""

    tells_the_answer = True  # the person reads what happened from `tell`: nothing needs repeating it

    def __init__(self, ask: Callable[[str, ApprovalRequest | None], concurrent.futures.Future],
                 tell: Callable[[str], Any] = lambda line: None, *, mid_run: bool = True) -> None:
        self._ask, self._tell, self._mid_run = ask, tell, mid_run

    async def __call__(self, request: ApprovalRequest) -> Answer:
        if not request.before_start and not self._mid_run:
            return Answer.LATER  # the script stops there and reports (seed 000); asked on the report
        answer = await self._answer(f"{request.question()} Allow? {CHOICES}: ", request)
        self._tell(said(answer, request))
        return answer

    async def _answer(self, prompt: str, request: ApprovalRequest) -> Answer:
        shown: ApprovalRequest | None = request  # the question is shown once; asking again is text
        for _ in range(_MAX_ASKS):
            try:
                reply = await asyncio.wrap_future(self._ask(prompt, shown))
            except EOFError:  # stdin closed: nobody can answer now
                return Answer.LATER
            if (answer := reply_answer(reply)) is not None:
                return answer
            prompt, shown = ASK_AGAIN, None
        return Answer.LATER


def reply_answer(reply: Any) -> Answer | None:
    """The answer a typed reply gives; None when it gives none (the prompt asks again)."""
    return _REPLIES.get(str(reply).strip().lower())


def asking(ask: Callable[[str], str], prompt: str, request: ApprovalRequest | None) -> str:
    """`ask(prompt)` on the thread where it works; an `ask` with `show_question(request)`
    shows the question first (the JupyterLab extension turns it into buttons), and when it
    did, the prompt under it only asks for the answer."""
    show = getattr(ask, "show_question", None)
    if show is not None and request is not None and show(request):
        prompt = ANSWER_PROMPT
    return ask(prompt)


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
