"""Who answers when a call needs a person: the `Approver` seam.

`_policy.decide` stays pure; when it says "ask", the dispatcher awaits the
run's approver at that point (and the before-start check asks the same
approver, with `before_start=True`). The approver is injected into the run,
as the MCP SDK injects its elicitation callback:

    stop_and_report   headless default: "later" (the run stops, the report asks)
    StdinApprover     a terminal, or a notebook frontend that offers stdin
    ElicitApprover    an MCP client, through elicitation (`toolkernel serve`)
    PendingApprover   a run nobody waits on (`serve`'s background runs): the call is published
                      where `toolkernel approve` answers it, and the run waits for the answer
    FirstAnswer       the client's elicitation and the pending store at once (`toolkernel serve`):
                      JupyterLab's notification, `toolkernel approve`; the first answer counts

Where a person is at the cell (stdin offered), a question asks there, before the start
and mid-run alike: JupyterLab's buttons answer the same stdin request. A "later" question
(nobody could answer) is answered afterwards, through the comm target `toolkernel.approval`
(`_answers.answer_message`): the kernel cannot read comm messages while the cell that asks
is still running.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, Protocol

from ._policy import CallInfo, canonical_call_key
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


# Said under a question about an edit (a person's cells): the way to stop being asked about them.
ACCEPT_EDITS_HINT = ('To run edits in this folder unasked, set mode = "accept-edits" under [policy] in'
                     " toolkernel.toml.")


def edits_hint(requests: "tuple[ApprovalRequest, ...] | list[ApprovalRequest]") -> str:
    """The hint, when a question before the start is about an edit."""
    return ACCEPT_EDITS_HINT if any(r.before_start and r.call.kind == "edit" for r in requests) else ""


def questions_text(requests: "tuple[ApprovalRequest, ...] | list[ApprovalRequest]") -> str:
    """Every call a cell's script makes that needs a person, one line each, as one question."""
    lines = [f"This script makes {len(requests)} calls that need your approval before it starts:"]
    lines += [f"  {n}. {r.question().removesuffix('.')}" for n, r in enumerate(requests, 1)]
    hint = edits_hint(requests)
    return "\n".join(lines + ([hint] if hint else []))


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


def all_choices(requests: "list[ApprovalRequest]") -> str:
    """The prompt's choices for a list: one answer for all, or a letter a call, in order."""
    always = "[a]lways / " if all(r.always_offered for r in requests) else ""
    return (f"[o]nce / {always}[d]eny for all {len(requests)}, or a letter a call in order"
            f" (e.g. {'o' * (len(requests) - 1)}d; a: always, where offered) (no default)")


def replies_answers(reply: Any, requests: "list[ApprovalRequest]") -> "list[Answer] | None":
    """The answers a typed reply gives to a list of calls: one word for all of them, or one letter
    a call (`oad`); None when it gives none (the prompt asks again). "always" is taken only for a
    call that offers it: for another one it would keep asking."""
    text = str(reply).strip().lower()
    whole = _REPLIES.get(text)
    if whole is not None:
        answers = [whole] * len(requests)
    else:
        letters = [c for c in text if c not in " ,"]
        if len(letters) != len(requests) or any(c not in "oad" for c in letters):
            return None
        answers = [_REPLIES[c] for c in letters]
    if any(a is Answer.ALWAYS and not r.always_offered for a, r in zip(answers, requests)):
        return None
    return answers


def said_all(answers: "list[Answer]") -> str:
    """The line after a list's answers: what happens now."""
    if Answer.DENY in answers:
        return "denied; nothing ran"
    if Answer.LATER in answers:
        return "no answer; nothing ran"
    kinds = [kind for answer, kind in ((Answer.ONCE, "allowed once"), (Answer.ALWAYS, "always allowed"))
             if answer in answers]
    return f"{' and '.join(kinds)} ({len(answers)} calls); running the script"


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

    def __init__(self, ask: Callable[[str, "ApprovalRequest | Questions | None"], concurrent.futures.Future],
                 tell: Callable[[str], Any] = lambda line: None, *, mid_run: bool = True) -> None:
        self._ask, self._tell, self._mid_run = ask, tell, mid_run

    async def __call__(self, request: ApprovalRequest) -> Answer:
        if not request.before_start and not self._mid_run:
            return Answer.LATER  # the script stops there and reports (seed 000); asked on the report
        hint = edits_hint([request])
        answer = await self._answer(f"{request.question()}{' ' + hint if hint else ''} Allow? {CHOICES}: ", request)
        self._tell(said(answer, request))
        return answer

    async def ask_all(self, requests: list[ApprovalRequest]) -> list[Answer]:
        """Before the start: one question for every call that needs a person (see `questions_text`),
        answered for all at once or a call at a time."""
        batch = Questions(tuple(requests))
        prompt = f"{questions_text(requests)}\nAllow? {all_choices(requests)}: "
        shown: Questions | None = batch
        answers = None
        for _ in range(_MAX_ASKS):
            try:
                reply = await asyncio.wrap_future(self._ask(prompt, shown))
            except EOFError:  # stdin closed: nobody can answer now
                break
            if (answers := replies_answers(reply, requests)) is not None:
                break
            prompt, shown = f"Please answer o, {'a, ' if all(r.always_offered for r in requests) else ''}d for all," \
                            f" or one letter a call ({len(requests)} letters): ", None
        answers = answers or [Answer.LATER] * len(requests)
        self._tell(said_all(answers))
        return answers

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


@dataclass(frozen=True)
class Questions:
    """The calls of one script asked about together before it starts (`StdinApprover.ask_all`)."""

    requests: tuple[ApprovalRequest, ...]


def reply_answer(reply: Any) -> Answer | None:
    """The answer a typed reply gives; None when it gives none (the prompt asks again)."""
    return _REPLIES.get(str(reply).strip().lower())


def asking(ask: Callable[[str], str], prompt: str, request: "ApprovalRequest | Questions | None") -> str:
    """`ask(prompt)` on the thread where it works; an `ask` with `show_question(request)`
    shows the question first (the JupyterLab extension turns it into buttons), and when it
    did, the prompt under it only asks for the answer."""
    show = getattr(ask, "show_question", None)
    if show is not None and request is not None and show(request):
        prompt = f"Allow? {all_choices(list(request.requests))}: " if isinstance(request, Questions) else ANSWER_PROMPT
    return ask(prompt)


ELICIT_SCHEMA = {
    "type": "object",
    "properties": {"decision": {"type": "string", "enum": ["once", "always", "deny"],
                              "description": "Allow this call once, allow the tool always, or deny it"}},
    "required": ["decision"],
}


class PendingApprover:
    """Asks where a person answers from a terminal (`toolkernel approve ID once|always|deny`,
    or `%tools approve ID`): the call is published as a stopped run's is (`Approvals`, which
    must share a pending store), and the call waits, polling every `poll` seconds, until the
    answer comes or the run is cancelled (the request is then withdrawn). `waiting` holds the
    ids still waiting, for whoever reports on the run."""

    def __init__(self, approvals: Any, poll: float = 0.25) -> None:
        self.approvals, self.poll = approvals, poll
        self.waiting: list[str] = []

    async def __call__(self, request: ApprovalRequest) -> Answer:
        call = request.call
        self.approvals.add_pending(call, request.reason, before_start=request.before_start)
        request_id = self.approvals.published_id(call)
        if request_id is None:  # nothing shares the pending store: nobody could answer
            return Answer.LATER
        self.waiting.append(request_id)
        answered = False
        try:
            while True:
                answer = self.approvals.take_answer(request_id)
                if answer == "":  # answered and applied meanwhile by another reader of the folder
                    key = canonical_call_key(call.qualified_name, call.input)
                    answered = True
                    return Answer.ONCE if self.approvals.consume_once(key) else Answer.LATER
                if answer is not None:
                    answered = True
                    return Answer(answer)
                await asyncio.sleep(self.poll)
        finally:
            self.waiting.remove(request_id)
            if not answered:
                self.approvals.withdraw(request_id)


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


class FirstAnswer:
    """Asks through the MCP client (an `ElicitApprover`) and, at the same time, where a person
    answers outside it: the call is published in the pending store (`Approvals`, which must share
    one), which JupyterLab shows (a notification, the Tools sidebar) and `toolkernel approve`
    answers. The first answer counts, and the other question is withdrawn: an elicitation no
    longer needed is cancelled (`first_of`), a request answered through the client is removed
    from the store. A declined elicitation leaves the request published, where the person may
    still answer it, and the run stops and reports."""

    def __init__(self, asked: ElicitApprover, approvals: Callable[[], Any], poll: float = 0.25) -> None:
        self.asked, self._approvals, self._poll = asked, approvals, poll
        self.stops_first = asked.stops_first
        self.waiting: list[str] = []  # the ids asked about now (as `PendingApprover.waiting`)

    async def __call__(self, request: ApprovalRequest) -> Answer:
        approvals = self._approvals()
        approvals.add_pending(request.call, request.reason, before_start=request.before_start)
        request_id = approvals.published_id(request.call)
        if request_id is None:  # nothing shares the pending store: the client alone can answer
            return await self.asked(request)
        self.waiting.append(request_id)
        try:
            answer, by_client = await first_of(self.asked(request), lambda: approvals.take_answer(request_id),
                                               self._poll)
        except BaseException:
            approvals.withdraw(request_id)  # the run ended (an interrupt, a cancel): nobody waits for it
            raise
        finally:
            self.waiting.remove(request_id)
        if by_client:
            if answer is not Answer.LATER:  # answered there: nobody answers the request here
                approvals.withdraw(request_id)
            return answer
        if answer is None:  # taken meanwhile by another reader of the store, which applied it
            key = canonical_call_key(request.call.qualified_name, request.call.input)
            return Answer.ONCE if approvals.consume_once(key) else Answer.LATER
        return answer


async def first_of(question: Awaitable[Answer], elsewhere: Callable[[], "str | None"],
                   poll: float = 0.25) -> "tuple[Answer | None, bool]":
    """The first answer, and whether the client gave it: the client's to `question`, or one a
    person gave elsewhere, which `elsewhere()` returns when it comes (polled every `poll` s:
    once, always or deny; "" for an answer another reader took; None while there is none; the
    answer is then None). The question that lost is cancelled: for an elicitation the SDK tells
    the client (notifications/cancelled), whose form goes away."""
    asked = asyncio.ensure_future(question)
    try:
        while True:
            done, _ = await asyncio.wait({asked}, timeout=poll)
            if done:
                return asked.result(), True
            answer = elsewhere()
            if answer is not None:
                return (Answer(answer) if answer else None), False
    finally:
        if not asked.done():
            asked.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asked
