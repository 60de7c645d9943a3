"""One run's record and report, and the events a run sends out while it goes.

A model module: no IPython, no runner, no I/O. The report is the seed's JSON
(`exit_code`, `success`, `tools.done`, `read_only_calls`, `stopped`,
`not_reached`) plus `version`, and `changes` ({"run", "files"}) where the run changed
files (issue 38: `%tools rewind ID` undoes them); fields are only ever added. Its JSON Schema is
`docs/report.schema.json`, read by the JupyterLab renderer and MCP clients.
"""

from __future__ import annotations

import json
import threading
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from .._config._limits import CALL_LIMIT
from .._errors import printable
from .._tool import Recorder

REPORT_VERSION = 1
NOT_REACHED = "the stopped call and everything after it; write a new script for the rest"


class RunEvents(Protocol):
    """What a run sends out while it goes. Passed into the run; every method may be
    called from the script's thread (or the private loop), never blocks."""

    def output(self, stdout: str, stderr: str) -> None: ...

    def image(self, path: Path) -> None: ...

    def progress(self, tool: str, progress: float, total: float | None, message: str | None) -> None: ...

    def stopped(self, stderr: str) -> None:
        """A call stopped the script (approval, call limit); `stderr` is its error line."""


class NoEvents:
    """For runs nobody watches while they go (direct calls show their result afterwards)."""

    def output(self, stdout: str, stderr: str) -> None:
        pass

    def image(self, path: Path) -> None:
        pass

    def progress(self, tool: str, progress: float, total: float | None, message: str | None) -> None:
        pass

    def stopped(self, stderr: str) -> None:
        pass


NO_EVENTS = NoEvents()


@dataclass(frozen=True)
class CallRecord:
    """A call that may have changed something (read-only calls are only counted)."""

    tool: str
    input: Mapping[str, Any]
    ok: bool
    result: Any = None
    error: Mapping[str, Any] | None = None
    # Makes `result` when a report asks for it: most runs end without one, and the value of
    # a text result is a JSON parse of the whole text.
    make_result: Callable[[], Any] | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"tool": self.tool, "input": dict(self.input), "ok": self.ok}
        if self.error is not None:
            body["error"] = dict(self.error)
        else:
            body["result"] = self.make_result() if self.make_result is not None else self.result
        return body


@dataclass(frozen=True)
class StopInfo:
    """Why and where a script stopped (or did not start: `before_start`)."""

    reason: str  # needs_approval | call_limit
    tool: str
    input: Mapping[str, Any]
    approval: str | None = None  # "requested" when a person is asked
    before_start: bool = False
    # What the person is shown beside the input (a command tool's filled `argv`).
    shown: Mapping[str, Any] = field(default_factory=dict)
    request: str | None = None  # the pending request published for a person (an agent's run)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"reason": self.reason}
        if self.approval is not None:
            body["approval"] = self.approval
        body["call"] = {"tool": self.tool, "input": dict(self.input), **self.shown}
        if self.before_start:
            body["before_start"] = True
        if self.request is not None:
            body["request"] = self.request
        return body


# What a person answered, in the words every line uses; a question the run's end left open
# (an interrupt) was cancelled.
ANSWER_WORDS = {"once": "allowed once", "always": "always allowed", "deny": "denied"}
CANCELLED = "cancelled"


@dataclass
class AskRecord:
    """A question put to a person while the script ran: the call, and the answer once given."""

    tool: str
    input: Mapping[str, Any]
    shown: Mapping[str, Any] = field(default_factory=dict)
    answer: str | None = None  # one of ANSWER_WORDS' words; None while the question is open

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "input": dict(self.input), **self.shown, "answer": self.answer or CANCELLED}


@dataclass(frozen=True)
class RunReport:
    exit_code: int
    done: tuple[CallRecord, ...]
    read_only_calls: int
    stopped: StopInfo | None = None
    changes: Mapping[str, Any] | None = None  # the journal's run, where the run changed files
    version: int = REPORT_VERSION
    asked: tuple[AskRecord, ...] = ()
    cancelled: str | None = None  # why the run was ended from outside: an interrupt, a cancel, a time limit
    description: str | None = None  # the run's label, as its caller gave it

    @property
    def success(self) -> bool:
        return self.exit_code == 0 and self.stopped is None and self.cancelled is None

    def to_json(self) -> dict[str, Any]:
        tools: dict[str, Any] = {"done": [d.to_json() for d in self.done], "read_only_calls": self.read_only_calls}
        if self.asked:
            tools["asked"] = [asked.to_json() for asked in self.asked]
        if self.stopped is not None:
            tools["stopped"] = self.stopped.to_json()
            tools["not_reached"] = NOT_REACHED
        body = {"version": self.version, "exit_code": self.exit_code, "success": self.success, "tools": tools}
        if self.changes is not None:
            body["changes"] = dict(self.changes)
        if self.cancelled is not None:
            body["cancelled"] = self.cancelled
        if self.description is not None:
            body["description"] = self.description
        return body


@dataclass
class Run:
    """The calls of one shell run (or one direct call): the count, the limit, the record.

    A script's calls may run at once (background jobs, `xargs -P`, host bash's connections,
    each on a thread of its own): the count, the stop and the record change under one lock,
    so the limit holds exactly and no call made is left out of the report."""

    limit: int = CALL_LIMIT
    calls: int = 0
    done: list[CallRecord] = field(default_factory=list)
    read_only_calls: int = 0
    stopped: StopInfo | None = None
    # Interrupted, cancelled or out of time: a tool still working sees it (`ToolContext.check_cancelled`).
    cancelled: bool = False
    cancel_reason: str | None = None  # the first reason given (`cancel`)
    description: str | None = None  # the run's label (serve's `description`): in its report
    asked: list[AskRecord] = field(default_factory=list)  # questions a person was asked mid-run
    # The journal of the files this run changes; None: nothing records.
    journal: Recorder | None = None
    # A direct call's run: it ends with its one call.
    one_call: bool = False
    changes: Mapping[str, Any] | None = None  # {"run": ID, "files": N} once ended ({} when nothing changed)
    # A sandboxed run's watch (`_runners/_shadows.Watch`): `before_call()` moves aside what the
    # script made at a protected name before a call may run it; `after_call()` takes what the
    # call itself made as the call's.
    guard: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def is_cancelled(self) -> bool:
        return self.cancelled

    def cancel(self, reason: str) -> None:
        """The run is ended from outside (an interrupt, a client's cancel, a time limit): the
        first reason stands, and the report says it."""
        with self._lock:
            self.cancelled = True
            if self.cancel_reason is None:
                self.cancel_reason = reason

    def admit(self, tool: str, input: Mapping[str, Any]) -> str | None:
        """Count a call about to be made: None when it may go on, else why not ("stopped": an
        earlier call stopped the run; "call_limit": this call passed the limit and stops it)."""
        with self._lock:
            if self.stopped is not None:
                return "stopped"
            self.calls += 1
            if self.calls <= self.limit:
                return None
            self._stop("call_limit", tool, input)
            return "call_limit"

    def uncount(self) -> None:
        """A call counted by `admit` that is not made here after all (it will be counted again)."""
        with self._lock:
            self.calls -= 1

    def stop(self, reason: str, tool: str, input: Mapping[str, Any], *, approval: str | None = None,
             before_start: bool = False, shown: Mapping[str, Any] | None = None, request: str | None = None) -> None:
        """The only writer of the stop: the first stop stands."""
        with self._lock:
            self._stop(reason, tool, input, approval, before_start, shown, request)

    def _stop(self, reason: str, tool: str, input: Mapping[str, Any], approval: str | None = None,
              before_start: bool = False, shown: Mapping[str, Any] | None = None, request: str | None = None) -> None:
        if self.stopped is None:
            self.stopped = StopInfo(reason, tool, dict(input), approval, before_start, dict(shown or {}), request)

    def record(self, tool: str, arguments: Mapping[str, Any], *, read_only: bool, ok: bool,
               result: Any = None, error: Mapping[str, Any] | None = None,
               make_result: Callable[[], Any] | None = None) -> None:
        if read_only:
            with self._lock:
                self.read_only_calls += 1
        else:
            record = CallRecord(tool, dict(arguments), ok, result, error, make_result)
            with self._lock:
                self.done.append(record)
        if self.one_call:
            self.end()

    def end(self) -> Mapping[str, Any] | None:
        """End the run's journal (each file's state after the run is written); the changes it holds."""
        if self.journal is not None and self.changes is None:
            files = self.journal.finish()
            dropped = [tomb["run"] for tomb in self.journal.dropped]
            self.changes = {"run": self.journal.id, "files": files} if files or dropped else {}
            if dropped:  # the day's limit dropped these runs to make room for this one: said, not silent
                self.changes["dropped"] = dropped
        return self.changes or None

    def asking(self, tool: str, input: Mapping[str, Any], shown: Mapping[str, Any]) -> AskRecord:
        """A person is about to be asked about this call (the record stays open until `answered`)."""
        asked = AskRecord(tool, dict(input), dict(shown))
        with self._lock:
            self.asked.append(asked)
        return asked

    def answered(self, asked: AskRecord, answer: str) -> None:
        """The answer ("once", "always", "deny"); "later" (nobody answered) leaves no record:
        the call stops the run, and the report's `stopped` names it."""
        with self._lock:
            if answer in ANSWER_WORDS:
                asked.answer = ANSWER_WORDS[answer]
            elif asked in self.asked:
                self.asked.remove(asked)

    def needs_report(self, exit_code: int) -> bool:
        return self.stopped is not None or bool(self.asked) or (exit_code != 0 and bool(self.done))

    def report(self, exit_code: int) -> RunReport:
        with self._lock:
            asked = tuple(dataclasses.replace(record) for record in self.asked)  # as they stand now
            return RunReport(exit_code, tuple(self.done), self.read_only_calls, self.stopped,
                             self.changes or None, asked=asked, cancelled=self.cancel_reason,
                             description=self.description)


def described_call(call: Mapping[str, Any]) -> str:
    """`tools x {...}`, and for a command tool the argv that would run: it may differ."""
    text = f"{printable(call['tool'])} {json.dumps(call['input'])}"  # a server names its tools
    if "argv" in call:
        # Letters stay readable; a bidi override or a zero-width character from the input is
        # shown escaped, so the argv the person approves reads as it runs.
        text += f" (runs {printable(json.dumps(call['argv'], ensure_ascii=False))})"
    if "code" in call:  # a notebook cell run by its id: the code it holds
        text += f" (runs the code {printable(json.dumps(call['code'], ensure_ascii=False))})"
    return text
