"""The kernel side of the JupyterLab extension: the questions, the comm, the sidebars.

Two ways the page talks to the kernel:

- While a cell asks (before the start, or mid-run where a call waits), the kernel's main
  thread waits, so it reads no comm message (those wait on the shell channel behind the cell).
  It displays the question as an `application/vnd.toolkernel.approval+json` bundle (one
  question for every call of a script before it starts; the trust question is
  `application/vnd.toolkernel.trust+json`) with an id, and waits. The page that sent the cell,
  if it has the extension, says on the kernel's control channel (read on a thread of its own:
  `PageAnswers`, `CONTROL_REQUEST`) that it shows it, and its buttons answer there with the key
  of the text prompt: no stdin box appears. Where no page says so in time (another front end,
  the extension missing), the text prompt asks with `input()`, and a page that draws the
  question late answers that box for the person. When the question ends (answered,
  interrupted), the kernel updates its display with `answered`, and the buttons go off.
- After the cell has finished (a stop report, the "Tools" and "Changes" sidebars), the
  page opens a comm on `COMM_TARGET` and sends one request per message:
  the answers of `_answers.answer_message`, plus `overview`, `search`,
  `revoke`, `changes`, `diff` and `rewind` for the sidebars. Every reply is
  {"ok": bool, ...}.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import html
import itertools
import json
import queue
import threading
import time
import uuid
from typing import Any, Callable, Mapping

from .. import _loop
from . import _answers
from ._answers import AnswerError, answer_message, list_approvals
from .._approval._approvals import lasting_rule_covers
from .._approval._approver import (ApprovalRequest, Questions, edits_hint, questions_text, replies_answers,
                                   reply_answer)
from .._errors import CallError, ConfigError
from .._journal import RewindError, diff_of, rewound_by
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
                    answered: str | None = None, *, hint: str = "", question_id: str | None = None) -> dict[str, Any]:
    """The question for the buttons, with `text` for every other front end. `answered`, once
    the question ended ("once", "always", "deny", "later" or "cancelled"), turns the buttons off.
    `question_id`: the page answers it over the control channel (`PageAnswers`)."""
    question: dict[str, Any] = {"call": dict(call), "always_offered": always, "keys": PROMPT_KEYS}
    return _bundle(question, text or f"{described_call(call)} needs your approval.", answered, hint, question_id)


def questions_bundle(calls: list[dict[str, Any]], text: str, answered: Any = None, *, hint: str = "",
                     question_id: str | None = None) -> dict[str, Any]:
    """Every call of a script that needs a person, before it starts, as one question: each line
    {"call", "always_offered", "reason"}; `answered`, once it ended, one word, or one a line."""
    return _bundle({"calls": calls, "keys": PROMPT_KEYS}, text, answered, hint, question_id)


def _bundle(question: dict[str, Any], text: str, answered: Any, hint: str, question_id: str | None) -> dict[str, Any]:
    if hint:
        question["hint"] = hint
    if question_id is not None:
        question["id"] = question_id
    if answered is not None:
        question["answered"] = answered
        if isinstance(answered, str) and answered in ENDED_UNANSWERED:  # an answer has its own line; these none
            text = f"{text}\n{ENDED_UNANSWERED[answered]}"
    return {APPROVAL_MIME: question, "text/plain": text, "text/html": f"<pre>{html.escape(text)}</pre>"}


# A question that ended with no answer, in the words the buttons show.
ENDED_UNANSWERED = {"cancelled": "cancelled; the call was not made", "later": "no answer; the call was not made"}


class ButtonsAsk:
    """`ask` for the stdin approver that first shows the question for the extension's
    buttons (the session calls `show_question(request)` right before `ask(prompt)`), and
    when the question ends (answered, interrupted, stdin closed) updates what it showed, so
    no button stays live past it.

    Where the page that ran the cell has the extension, it says it sees the question over the
    control channel (`PageAnswers`), and its buttons answer there: no stdin box shows. A page
    that does not say so in time (another front end, the extension missing) gets the text prompt."""

    def __init__(self, ask: Callable[[str], str], pages: "PageAnswers | None" = None) -> None:
        self._ask = ask
        self._pages = pages
        self._open: tuple[Any, Callable[[Any], dict[str, Any]], Any] | None = None  # (display, bundle(answered), what)
        self._waiting: OpenQuestion | None = None  # the page's question, if it may answer it
        self.cancelled: Mapping[str, Any] | None = None  # the call of a question an interrupt ended

    def __call__(self, prompt: str) -> str:
        waiting, self._waiting = self._waiting, None
        try:
            reply = self._reply(waiting, prompt)
        except KeyboardInterrupt:
            self._end("cancelled")
            raise
        except EOFError:
            self._end("later")
            raise
        finally:
            if waiting is not None:
                waiting.close()
        self._answered(reply)
        return reply

    def _reply(self, waiting: "OpenQuestion | None", prompt: str) -> str:
        if waiting is not None and waiting.seen():
            return waiting.reply()
        return self._ask(prompt)

    def show_question(self, request: "ApprovalRequest | Questions") -> bool:
        """Whether the question was shown (a terminal shows the text prompt alone)."""
        if isinstance(request, Questions):
            return self._show_questions(request)
        call = {"tool": request.call.command, "input": dict(request.call.input), **request.call.shown()}
        text, hint = request.question(), edits_hint([request])
        if hint:
            text = f"{text}\n{hint}"
        return self._show(lambda answered, qid: approval_bundle(call, request.always_offered, text, answered,
                                                                 hint=hint, question_id=qid), call)

    def _show_questions(self, batch: "Questions") -> bool:
        requests = list(batch.requests)
        calls = [{"call": {"tool": r.call.command, "input": dict(r.call.input), **r.call.shown()},
                  "always_offered": r.always_offered, "reason": r.reason} for r in requests]
        text, hint = questions_text(requests), edits_hint(requests)
        return self._show(lambda answered, qid: questions_bundle(calls, text, answered, hint=hint, question_id=qid),
                          batch)

    def _show(self, bundle: Callable[[Any, str | None], dict[str, Any]], what: Any) -> bool:
        from IPython import get_ipython
        from IPython.display import display

        shell = get_ipython()
        if getattr(shell, "kernel", None) is None:
            return False
        self._waiting = self._pages.open(shell.kernel) if self._pages is not None else None
        qid = self._waiting.id if self._waiting is not None else None
        handle = display(bundle(None, qid), raw=True, display_id=True)
        self._open = (handle, lambda answered: bundle(answered, qid), what)
        return True

    def _answered(self, reply: str) -> None:
        if self._open is None:
            return
        what = self._open[2]
        if isinstance(what, Questions):
            answers = replies_answers(reply, list(what.requests))
            if answers is not None:
                values = {a.value for a in answers}
                self._end(values.pop() if len(values) == 1 else [a.value for a in answers])
        elif isinstance(what, dict) and what.get("trust") is not None:
            self._end("trust" if reply.strip().lower() in ("y", "yes") else "not_now")
        elif (answer := reply_answer(reply)) is not None:  # else the prompt asks again, under the same question
            self._end(answer.value)

    def _end(self, answered: Any) -> None:
        if self._open is None:
            return
        handle, bundle, what = self._open
        self._open = None
        if isinstance(answered, str) and answered == "cancelled":
            if isinstance(what, Questions):  # the cell's line names the first call asked about
                request = what.requests[0]
                what = {"tool": request.call.command, "input": dict(request.call.input)}
            if isinstance(what, Mapping) and "tool" in what:
                self.cancelled = what
        handle.update(bundle(answered), raw=True)

    def show_trust(self, question: Mapping[str, Any]) -> bool:
        """The trust question (`_untrusted.ask_to_trust`), shown for the extension's buttons
        ("Trust this folder's config", "Not now") right before the text prompt they answer;
        a front end without the extension shows its text. False: not shown (a terminal)."""
        return self._show(lambda answered, qid: trust_bundle(question, answered, qid), {"trust": question})


def trust_bundle(question: Mapping[str, Any], answered: str | None = None,
                 question_id: str | None = None) -> dict[str, Any]:
    text = question["text"]
    shown = dict(question)
    if question_id is not None:
        shown["id"] = question_id
    if answered is not None:
        shown["answered"] = answered
    return {TRUST_MIME: shown, "text/plain": text, "text/html": f"<p>{html.escape(text)}</p>"}


def asking_with_buttons(session, ask: Callable[[str], str]) -> ButtonsAsk:
    return ButtonsAsk(ask, PAGES)


# -- the page's answers over the control channel -------------------------------

# The kernel reads its control channel on a thread of its own while a cell runs (ipykernel 6+);
# comm messages wait on the shell channel behind the running cell. So the page says it shows a
# question, and answers it, with a message of this type there (`toolkernel_reply` answers it).
CONTROL_REQUEST = "toolkernel_request"
CONTROL_REPLY = "toolkernel_reply"
# How long a question waits for the page to say it shows it, before the text prompt: a page not
# heard from yet may still be drawing it; one that answered before draws it in milliseconds.
SEEN_WAIT_NEW = 3.0
SEEN_WAIT_KNOWN = 20.0


class OpenQuestion:
    """A question the page that ran the cell (`session`, its client id) may answer."""

    def __init__(self, pages: "PageAnswers", session: str, wait: float) -> None:
        self.id = uuid.uuid4().hex
        self.session, self._pages, self._wait = session, pages, wait
        self._seen = threading.Event()
        self._replies: queue.SimpleQueue = queue.SimpleQueue()

    def seen(self) -> bool:
        """Whether the page said it shows the question (waited for a while; an interrupt lands)."""
        seen = self._wait > 0 and self._seen.wait(self._wait)
        self._pages.heard(self.session, seen)
        return seen

    def reply(self) -> str:
        return self._replies.get()  # waits in C: an interrupt lands here (see _shell.ScriptEvents)

    def close(self) -> None:
        self._pages.close(self.id)


class PageAnswers:
    """The questions open in this kernel that a page may answer over the control channel."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, OpenQuestion] = {}
        self._seen: set[str] = set()  # client sessions whose page said it saw a question
        self._silent: set[str] = set()  # ... and those that never did

    def open(self, kernel) -> OpenQuestion | None:
        """A question for the page that sent the running cell, or None where no page with the
        extension may show it: the text prompt asks at once."""
        parent = _parent(kernel)
        session = str((parent.get("header") or {}).get("session") or "")
        # JupyterLab (and Notebook 7) send these with every cell they run; nbclient, VS Code and
        # the console do not, so their prompt never waits for a page that is not there.
        if not session or "deletedCells" not in (parent.get("metadata") or {}) or not _installed(kernel):
            return None
        with self._lock:
            wait = SEEN_WAIT_KNOWN if session in self._seen else 0.0 if session in self._silent else SEEN_WAIT_NEW
            question = OpenQuestion(self, session, wait)
            self._open[question.id] = question
        return question

    def heard(self, session: str, seen: bool) -> None:
        with self._lock:
            if seen:
                self._seen.add(session)
                self._silent.discard(session)
            elif session not in self._seen:
                self._silent.add(session)

    def close(self, question_id: str) -> None:
        with self._lock:
            self._open.pop(question_id, None)

    def handle(self, session: str, content: Mapping[str, Any]) -> dict[str, Any]:
        """A page's message: "seen" (it shows the question) or "answer" (a button's reply: the
        key of the text prompt). Only the page that sent the cell answers its question, as only
        it gets the cell's stdin request."""
        with self._lock:
            question = self._open.get(str(content.get("question")))
            if question is not None and question.session == session:
                self._seen.add(session)
                self._silent.discard(session)
        if question is None or question.session != session:
            return {"ok": False, "message": "this question is no longer waiting"}
        if content.get("action") == "seen":
            question._seen.set()
            return {"ok": True}
        if content.get("action") == "answer" and isinstance(content.get("reply"), str):
            question._replies.put(content["reply"])
            return {"ok": True}
        return {"ok": False, "message": f"unknown action {content.get('action')!r}"}


PAGES = PageAnswers()


def _parent(kernel) -> Mapping[str, Any]:
    try:
        return kernel.get_parent("shell") or {}
    except Exception:  # noqa: BLE001 - an unknown parent: the text prompt, which always works
        return {}


def _installed(kernel) -> bool:
    return CONTROL_REQUEST in getattr(kernel, "control_handlers", {})


def install_control(kernel) -> None:
    """Take the page's `CONTROL_REQUEST` messages on the kernel's control channel (at `%load_ext`)."""
    handlers = getattr(kernel, "control_handlers", None)
    session = getattr(kernel, "session", None)
    if not isinstance(handlers, dict) or session is None:
        return  # not an ipykernel we know: the text prompt answers

    def on_request(stream, idents, msg) -> None:
        try:
            reply = PAGES.handle(str(msg["header"].get("session") or ""), msg.get("content") or {})
        except Exception as exc:  # noqa: BLE001 - the control thread must go on: said to the page
            reply = {"ok": False, "message": f"{type(exc).__name__}: {exc}"}
        session.send(stream, CONTROL_REPLY, reply, parent=msg, ident=idents)

    handlers[CONTROL_REQUEST] = on_request


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
    """The sidebar's "Changes": the runs (where each came from, which a rewind put back), one
    file's diff (a notebook's cell by cell), and "Rewind", which is `%tools rewind ID` itself (a
    person's; refused, touching nothing, when a file changed since the run, unless `force`, which
    the page asks the person to confirm first)."""
    from ._changes import journal_for, notebook_diff

    journal = journal_for(session.workdir, getattr(session, "journal", None))
    run = str(data.get("run", ""))
    if action == "diff":
        return {"diff": diff_of(journal, run, str(data.get("path", "")), notebook=notebook_diff)}
    if action == "rewind":
        if not run:
            raise RewindError("name the run to rewind")
        args = argparse.Namespace(what="rewind", run=run, last=False, force=data.get("force") is True, path=[])
        return {"message": _answers.journal_line(session, args)}
    runs = journal.runs()  # newest first, as `iter_changes` lists them
    by = rewound_by(runs)
    listed = itertools.islice((run for run in runs if run.entries or run.cells), SHOWN_RUNS)
    return {"runs": [_run(record, by.get(record.id)) for record in listed]}


def _run(record, rewound_by_run: str | None = None) -> dict[str, Any]:
    files = [{"path": e.path, "kind": e.kind, "to": e.to, "after_the_fact": e.after_the_fact,
              "not_restorable": e.not_restorable, "folder": e.folder} for e in record.files().values()]
    files += [{"path": c.name, "kind": "cell", "to": None, "after_the_fact": False, "not_restorable": None}
              for c in record.cells]
    return {"id": record.id, "time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.time)),
            "route": record.route, "ended": record.after is not None, "files": files,
            "about": dict(record.about), "rewound_by": rewound_by_run, "rewinds": list(record.rewinds),
            "dropped": record.dropped is not None}


def _search(session, words: str) -> str:
    from ._direct import call_argv

    return str(call_argv(session, ["search", *words.split()]))


def register_comm(ipython, starting: "concurrent.futures.Future") -> None:
    """Register at `%load_ext`; a request made while the session starts waits for it. The
    control channel's answers too (`install_control`)."""
    _answers.register_comm(ipython, starting, lambda future, data: handle(future.result(), data))
    kernel = getattr(ipython, "kernel", None)
    if kernel is not None:
        install_control(kernel)
