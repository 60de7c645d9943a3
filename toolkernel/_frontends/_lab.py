"""The kernel side of the JupyterLab extension: the approval question and the comm.

Two ways the page talks to the kernel:

- While a cell asks (before the start, or mid-run where a call waits), the kernel
  is blocked in `input()`, so it cannot read a comm message. Just before asking,
  it displays the question as an `application/vnd.toolkernel.approval+json`
  bundle; the extension shows the buttons and answers the pending stdin request
  with the key of the plain prompt (`o`, `a`, `d`), which then asks only for the
  answer. When the question ends (answered, interrupted), the kernel updates that
  display with `answered`, and the buttons go off. Frontends without the
  extension show the text.
- After the cell has finished (a stop report, the "Tools" sidebar), the
  page opens a comm on `COMM_TARGET` and sends one request per message:
  the answers of `_answers.answer_message`, plus `overview`, `search`,
  `revoke`, `changes`, `diff` and `rewind` for the sidebar. Every reply is
  {"ok": bool, ...}.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import html
import itertools
import json
import time
from typing import Any, Callable, Mapping

from .. import _loop
from . import _answers
from ._answers import AnswerError, answer_message, list_approvals
from .._approval._approvals import lasting_rule_covers
from .._approval._approver import ApprovalRequest, reply_answer
from .._errors import CallError, ConfigError
from .._journal import RewindError, diff_of, iter_changes
from .._approval._run import RunReport, described_call

APPROVAL_MIME = "application/vnd.toolkernel.approval+json"
TRUST_MIME = "application/vnd.toolkernel.trust+json"  # the trust question: its own renderer (trust.ts)
# The replies the plain text prompt understands (see `_answers.answer_inline`).
PROMPT_KEYS = {"once": "o", "always": "a", "deny": "d"}


def always_offered(session, call: Mapping[str, Any]) -> bool:
    """For a report's stopped call: whether "Always allow" would make it run unasked."""
    info = session.approvals.find_pending(call)
    if info is None:
        return False
    try:
        command = _loop.run(session.prepare())
    except ConfigError:
        return False
    return lasting_rule_covers(command.dispatcher.env.policy, info)


# -- a question while the cell runs, shown as buttons ---------------------------


def approval_bundle(call: Mapping[str, Any], always: bool, text: str | None = None,
                    answered: str | None = None) -> dict[str, Any]:
    """The question for the buttons, with `text` for every other front end. `answered`, once
    the question ended ("once", "always", "deny", "later" or "cancelled"), turns the buttons off."""
    question = {"call": dict(call), "always_offered": always, "keys": PROMPT_KEYS}
    text = text or f"{described_call(call)} needs your approval."
    if answered is not None:
        question["answered"] = answered
        if answered in ENDED_UNANSWERED:  # an answer has its own line after it; these have none
            text = f"{text}\n{ENDED_UNANSWERED[answered]}"
    return {APPROVAL_MIME: question, "text/plain": text, "text/html": f"<p>{html.escape(text)}</p>"}


# A question that ended with no answer, in the words the buttons show.
ENDED_UNANSWERED = {"cancelled": "cancelled; the call was not made", "later": "no answer; the call was not made"}


class ButtonsAsk:
    """`ask` for the stdin approver that first shows the question for the extension's
    buttons (the session calls `show_question(request)` right before `ask(prompt)`), and
    when the question ends (answered, interrupted, stdin closed) updates what it showed, so
    no button stays live past it."""

    def __init__(self, ask: Callable[[str], str]) -> None:
        self._ask = ask
        self._open: tuple[Any, Mapping[str, Any], bool, str] | None = None  # (display, call, always, text)
        self.cancelled: Mapping[str, Any] | None = None  # the call of a question an interrupt ended

    def __call__(self, prompt: str) -> str:
        try:
            reply = self._ask(prompt)
        except KeyboardInterrupt:
            self._end("cancelled")
            raise
        except EOFError:
            self._end("later")
            raise
        answer = reply_answer(reply)
        if answer is not None:  # else the prompt asks again, under the same question
            self._end(answer.value)
        return reply

    def show_question(self, request: ApprovalRequest) -> bool:
        """Whether the question was shown (a terminal shows the text prompt alone)."""
        from IPython import get_ipython
        from IPython.display import display

        if getattr(get_ipython(), "kernel", None) is None:
            return False
        call = {"tool": request.call.command, "input": dict(request.call.input), **request.call.shown()}
        text = request.question()
        handle = display(approval_bundle(call, request.always_offered, text), raw=True, display_id=True)
        self._open = (handle, call, request.always_offered, text)
        return True

    def _end(self, answered: str) -> None:
        if self._open is None:
            return
        handle, call, always, text = self._open
        self._open = None
        if answered == "cancelled":
            self.cancelled = call
        handle.update(approval_bundle(call, always, text, answered), raw=True)

    def show_trust(self, question: Mapping[str, Any]) -> bool:
        """The trust question (`_untrusted.ask_to_trust`), shown for the extension's buttons
        ("Trust this folder's config", "Not now") right before the text prompt they answer;
        a front end without the extension shows its text. False: not shown (a terminal)."""
        from IPython import get_ipython
        from IPython.display import display

        if getattr(get_ipython(), "kernel", None) is None:
            return False
        display(trust_bundle(question), raw=True)
        return True


def trust_bundle(question: Mapping[str, Any]) -> dict[str, Any]:
    text = question["text"]
    return {TRUST_MIME: dict(question), "text/plain": text, "text/html": f"<p>{html.escape(text)}</p>"}


def asking_with_buttons(session, ask: Callable[[str], str]) -> ButtonsAsk:
    return ButtonsAsk(ask)


def display_report(session, report: RunReport) -> None:
    """The stop report, with whether "Always allow" is offered in its metadata
    (the report itself stays the seed's JSON)."""
    from IPython.display import display

    from . import _report

    metadata = {_report.MIME: report_metadata(session, report.to_json())}
    display(_report.bundle(report), metadata=metadata, raw=True)


def report_metadata(session, report: dict[str, Any]) -> dict[str, Any]:
    stopped = report.get("tools", {}).get("stopped")
    if not stopped or stopped.get("reason") != "needs_approval":
        return {"always_offered": False}
    return {"always_offered": always_offered(session, stopped["call"])}


# -- the comm ------------------------------------------------------------------


def handle(session, data: Mapping[str, Any]) -> dict[str, Any]:
    action = data.get("action")
    try:
        if action == "overview":
            return {"ok": True, **_loop.run(_overview(session))}
        if action == "search":
            return {"ok": True, "text": _search(session, data.get("words", ""))}
        if action == "revoke":
            return {"ok": True, "message": list_approvals(session, revoke=str(data.get("rule", "")))}
        if action in ("changes", "diff", "rewind"):
            return {"ok": True, **_journal_action(session, action, data)}
    except (AnswerError, CallError, ConfigError, RewindError) as exc:
        return {"ok": False, "message": getattr(exc, "message", None) or str(exc)}
    return answer_message(session, data)


async def _overview(session) -> dict[str, Any]:
    command = await session.prepare()
    catalog = command.catalog
    await catalog.load_listed()  # what `tools --help` loads: eager and already running servers
    servers = [_server(entry) for entry in catalog.servers.values()]
    own = [_tool(tool) for tool in catalog.own.values()]
    return {"servers": servers, "own_tools": own, "approvals": session.approvals.lasting_approvals()}


def _server(entry) -> dict[str, Any]:
    provider = entry.provider
    error = entry.error or provider.error  # this run's failure, or the last start's
    if entry.tools is not None:
        state, tools = "running", [_tool(tool) for tool in entry.tools]
    elif error is not None:
        state, tools = "failed", []
    else:
        state, tools = "not loaded", []
    return {"name": provider.name, "description": provider.description or "", "state": state,
            "error": error.message if error is not None else None, "tools": tools}


def _tool(tool) -> dict[str, Any]:
    return {"command": tool.command, "description": tool.description or "",
            "kind": tool.kind, "schema": json.loads(json.dumps(tool.input_schema, default=str))}


# The sidebar's "Changes": the newest runs only (`%tools changes` lists every one).
SHOWN_RUNS = 30


def _journal_action(session, action: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The sidebar's "Changes": the runs, one file's diff, and "Rewind", which is `%tools rewind ID`
    itself (a person's; refused, touching nothing, when a file changed since the run)."""
    from ._changes import journal_for

    journal = journal_for(session.workdir, getattr(session, "journal", None))
    run = str(data.get("run", ""))
    if action == "diff":
        return {"diff": diff_of(journal, run, str(data.get("path", "")))}
    if action == "rewind":
        if not run:
            raise RewindError("name the run to rewind")
        args = argparse.Namespace(what="rewind", run=run, last=False, force=False, path=[])
        return {"message": _answers.journal_line(session, args)}
    return {"runs": [_run(record) for record in itertools.islice(iter_changes(journal), SHOWN_RUNS)]}


def _run(record) -> dict[str, Any]:
    files = [{"path": e.path, "kind": e.kind, "to": e.to, "after_the_fact": e.after_the_fact,
              "not_restorable": e.not_restorable} for e in record.files().values()]
    return {"id": record.id, "time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.time)),
            "route": record.route, "ended": record.after is not None, "files": files,
            "dropped": record.dropped is not None}


def _search(session, words: str) -> str:
    from ._direct import call_argv

    return str(call_argv(session, ["search", *words.split()]))


def register_comm(ipython, starting: "concurrent.futures.Future") -> None:
    """Register at `%load_ext`; a request made while the session starts waits for it."""
    _answers.register_comm(ipython, starting, lambda future, data: handle(future.result(), data))
