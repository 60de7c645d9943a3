"""Approvals: one-off ones in memory, lasting ones on disk, pending requests.

A one-off approval covers one exact call (its tool and its input, compared by
`canonical_call_key`) once: the re-run script can make it, and it is spent.
It lives in this kernel only.

A lasting approval ("always allow") is an allow rule kept in
`<project>/.toolkernel/approvals.json`:

    {"version": 1, "allow": [{"rule": "mcp_github__delete_branch",
                              "added": "2026-11-30T12:00:00+00:00"}]}

The file is read afresh on every question (it is small), so several kernels
on one project agree; changes take a lock file so two kernels adding at once
both land, and are written atomically. A file anyone may write is refused:
it would let anyone allow anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import json
import os
import stat
import threading
from pathlib import Path
from typing import Any, Iterator, Mapping

from ._approver import Answer, ApprovalRequest, Approver
from .._atomic import write_atomic
from .._checked_open import file_checked, open_folder_below
from .._errors import ConfigError
from ._bash_rules import TOOL_NAME as BASH_TOOL, rule_for_script
from ._pending import PendingRequest, PendingStore
from .._config._rules import normalize_qualified_name, parse_rule
from ._policy import CallInfo, canonical_call_key, decide
from .._config._trust import TrustStore

FOLDER = ".toolkernel"
FILE_NAME = "approvals.json"
_VERSION = 1


def rule_for(call: CallInfo) -> str:
    """The allow rule "always allow" adds: this tool, whatever its input."""
    if call.qualified_name == BASH_TOOL:  # hostbash (issue 13): an agent's %%bash cell
        return rule_for_script(call.input["command"])
    name = normalize_qualified_name(call.qualified_name)
    if "*" in name:
        raise ValueError(f"{call.qualified_name!r} cannot be named exactly by a rule")
    parse_rule(name)
    return name


class ApprovalStore:
    def __init__(self, project_dir: Path | str) -> None:
        self.project_dir = Path(project_dir)
        # Named from the real project folder and used as named: a link on the way (a cloned
        # repository's `.toolkernel`) is refused, never followed.
        self.path = Path(os.path.realpath(project_dir)) / FOLDER / FILE_NAME
        self._lock_path = self.project_dir / FOLDER / "approvals.lock"
        self._once: dict[str, None] = {}  # insertion-ordered set
        self._guard = threading.Lock()  # the kernel thread grants, the loop thread consumes
        self._file_guard = threading.Lock()

    # -- one-off -----------------------------------------------------------

    def grant_once(self, key: str) -> None:
        """Approve the call with this `canonical_call_key` once. Granting an
        unspent approval again does not make it cover two calls."""
        with self._guard:
            self._once[key] = None

    def has_once(self, key: str) -> bool:
        with self._guard:
            return key in self._once

    def consume_once(self, key: str) -> bool:
        """True (and the approval is spent) if the call was approved once."""
        with self._guard:
            if key not in self._once:
                return False
            del self._once[key]
            return True

    def pending_once(self) -> list[str]:
        with self._guard:
            return list(self._once)

    # -- lasting -----------------------------------------------------------

    def lasting_rules(self) -> list[str]:
        return [entry["rule"] for entry in self.lasting_approvals()]

    def lasting_approvals(self) -> list[dict[str, str]]:
        """Each lasting approval as {"rule", "added"}, oldest first."""
        return self._read()

    def always_allow(self, rule: str) -> str:
        """Persist `rule` as an allow rule (once); returns it as stored.
        A malformed rule raises `ValueError`."""
        rule = rule.strip() if isinstance(rule, str) else rule
        parse_rule(rule)
        with self._locked():
            entries = self._read()
            if all(entry["rule"] != rule for entry in entries):
                entries.append({"rule": rule, "added": _now()})
                self._write(entries)
        return rule

    def revoke(self, rule_or_index: str | int) -> str:
        """Remove a lasting approval, by its rule text or by its 0-based index
        in `lasting_rules()`; returns the rule removed. Raises `KeyError` /
        `IndexError` when there is no such approval."""
        with self._locked():
            entries = self._read()
            index = self._index_of(entries, rule_or_index)
            removed = entries.pop(index)
            self._write(entries)
        return removed["rule"]

    @staticmethod
    def _index_of(entries: list[dict[str, str]], rule_or_index: str | int) -> int:
        if isinstance(rule_or_index, bool) or not isinstance(rule_or_index, (int, str)):
            raise TypeError(f"revoke takes a rule or an index, not {type(rule_or_index).__name__}")
        if isinstance(rule_or_index, int):
            if not 0 <= rule_or_index < len(entries):
                raise IndexError(f"no lasting approval number {rule_or_index} (there are {len(entries)})")
            return rule_or_index
        wanted = rule_or_index.strip()
        for index, entry in enumerate(entries):
            if entry["rule"] == wanted:
                return index
        raise KeyError(f"no lasting approval {wanted!r}")

    # -- the file ----------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialize read-modify-write across kernels (and threads of this one)."""
        try:
            folder = open_folder_below(str(self.path.parents[1]), FOLDER, mode=0o700)
            try:
                lock = os.open(self._lock_path.name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                               0o600, dir_fd=folder)
            finally:
                os.close(folder)
        except OSError as exc:
            raise self._error(None, f"cannot be changed: {exc}") from None
        with self._file_guard, open(lock, "rb") as file:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(file.fileno(), fcntl.LOCK_UN)

    def _read(self) -> list[dict[str, str]]:
        try:
            file, _ = file_checked(str(self.path))
            with file:
                self._refuse_if_anyone_may_write(os.fstat(file.fileno()))
                raw = file.read()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._error(None, f"cannot be read: {exc.strerror or exc}") from exc
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise self._error(None, f"is not valid JSON ({exc})") from None
        except RecursionError:  # a cloned repository may bring the file
            raise self._error(None, "is nested too deeply to read; fix or remove it") from None
        return self._entries(data)

    def _refuse_if_anyone_may_write(self, file_stat: os.stat_result) -> None:
        folder_mode = os.stat(self.path.parent).st_mode
        if file_stat.st_mode & stat.S_IWOTH or folder_mode & stat.S_IWOTH:
            raise self._error(None, "is writable by anyone, so its approvals are not trusted; "
                                    "fix the permissions of the file and its folder")

    def _entries(self, data: Any) -> list[dict[str, str]]:
        if not isinstance(data, dict) or not isinstance(data.get("allow", []), list):
            raise self._error(None, 'expected {"version": 1, "allow": [...]}')
        entries = []
        for index, item in enumerate(data.get("allow", [])):
            entry = {"rule": item, "added": ""} if isinstance(item, str) else item
            if not isinstance(entry, dict) or not isinstance(entry.get("rule"), str):
                raise self._error(f"allow[{index}]", 'expected {"rule": "...", "added": "..."}')
            try:
                parse_rule(entry["rule"])
            except ValueError as exc:
                raise self._error(f"allow[{index}]", str(exc)) from None
            entries.append({"rule": entry["rule"], "added": str(entry.get("added", ""))})
        return entries

    def _write(self, entries: list[dict[str, str]]) -> None:
        body = (json.dumps({"version": _VERSION, "allow": entries}, indent=2, ensure_ascii=False) + "\n").encode()
        old = self.path.read_bytes() if self.path.exists() else None
        write_atomic(self.path, body, resolved=True)
        # The person's own answer: a folder they trusted stays trusted (see _trust.py).
        TrustStore().replace(self.project_dir, f"{FOLDER}/{FILE_NAME}", old, body)

    def _error(self, key: str | None, problem: str) -> ConfigError:
        return ConfigError(str(self.path), key, problem)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class Approvals(ApprovalStore):
    """The one owner of a session's approvals: once-grants, lasting rules (the
    store above), and the requests waiting for a person. The dispatcher, the
    before-start check and the person's answers talk only to this."""

    def __init__(self, project_dir: Path | str) -> None:
        super().__init__(project_dir)
        self._pending: list[CallInfo] = []  # oldest first; `%tools approve` answers the last
        self._shared: PendingStore | None = None
        self._published: dict[str, tuple[PendingRequest, CallInfo]] = {}  # by id: what this process asked

    # -- pending requests other processes answer (`toolkernel serve`) ---------------

    def share_pending(self, store: PendingStore) -> None:
        """Publish the calls left pending to `store`, where `toolkernel approve` answers them."""
        self._shared = store

    def shares_pending(self) -> bool:
        return self._shared is not None

    def published_id(self, call: CallInfo) -> str | None:
        """The id under which this process published `call` for a person, if it did."""
        key = canonical_call_key(call.qualified_name, call.input)
        with self._guard:
            return next((rid for rid, (request, _) in self._published.items() if request.key() == key), None)

    def published(self) -> list[PendingRequest]:
        """The requests this process published that wait for an answer, oldest first."""
        with self._guard:
            return [request for request, _ in self._published.values()]

    def collect_answers(self) -> None:
        """Apply the answers given in other processes to the requests this process published.
        Only those: an id found in the folder but not in this memory grants nothing, and the
        answer must name the very call asked about (see `_pending`)."""
        if self._shared is None:
            return
        for request_id, (request, call) in list(self._published.items()):
            answer = self._shared.answer_for(request)
            if answer is None:
                continue
            with self._guard:
                if self._published.pop(request_id, None) is None:
                    continue  # another thread applied it: one answer, one grant
                self._pending = [info for info in self._pending if info is not call]
            if answer == "once":
                self.grant_once(canonical_call_key(call.qualified_name, call.input))
            # "always": `toolkernel approve` saved the rule; "deny": nothing to grant.
            self._shared.withdraw(request_id)

    def take_answer(self, request_id: str) -> str | None:
        """The answer a person gave elsewhere to the request `request_id` this process published,
        taken: the request is withdrawn and nothing is granted here (its waiting caller applies
        the answer, `_approver.PendingApprover` or `_approver.FirstAnswer`); None while there is
        none. "" when the request is no longer published (answered and applied meanwhile, as
        `collect_answers` does)."""
        if self._shared is None:
            return ""
        with self._guard:
            entry = self._published.get(request_id)
        if entry is None:
            return ""
        request, call = entry
        answer = self._shared.answer_for(request)
        if answer is None:
            return None
        with self._guard:
            if self._published.pop(request_id, None) is None:
                return ""  # another thread applied it: one answer, one grant
            self._pending = [info for info in self._pending if info is not call]
        self._shared.withdraw(request_id)
        return answer

    def withdraw(self, request_id: str) -> None:
        """Remove one of this process's requests (its caller stopped waiting, or it was answered
        another way)."""
        with self._guard:
            entry = self._published.pop(request_id, None)
            if entry is not None:
                self._pending = [info for info in self._pending if info is not entry[1]]
        if entry is not None and self._shared is not None:
            self._shared.withdraw(request_id)

    def withdraw_published(self) -> None:
        """Remove this process's requests from the folder (it ends: nobody could use an answer)."""
        if self._shared is None:
            return
        with self._guard:
            ids, self._published = list(self._published), {}
        for request_id in ids:
            self._shared.withdraw(request_id)

    def _publish(self, call: CallInfo, reason: str, before_start: bool) -> None:
        key = canonical_call_key(call.qualified_name, call.input)
        with self._guard:
            if any(request.key() == key for request, _ in self._published.values()):
                return  # asked again before an answer: one request, not one per try
        request = self._shared.publish(call, reason, before_start=before_start)
        with self._guard:
            self._published[request.id] = (request, call)

    def has_once(self, key: str) -> bool:
        self.collect_answers()
        return super().has_once(key)

    def consume_once(self, key: str) -> bool:
        self.collect_answers()
        return super().consume_once(key)

    async def ask(self, request: ApprovalRequest, approver: Approver) -> Answer:
        """At the ask point: a once-grant answers first, then the approver. An answer
        that allows is applied here (a lasting rule is saved; before the start a
        once-grant is kept for the run's own check); "later" leaves the call pending."""
        key = canonical_call_key(request.call.qualified_name, request.call.input)
        if not request.before_start and self.consume_once(key):
            return Answer.ONCE
        answer = await approver(request)
        if answer is Answer.ALWAYS:
            self.always_allow(rule_for(request.call))
        if answer in (Answer.ONCE, Answer.ALWAYS) and request.before_start:
            # This run's policy was read before the answer: the call itself asks once more.
            self.grant_once(key)
        if answer is Answer.LATER:
            self.add_pending(request.call, request.reason, before_start=request.before_start)
        return answer

    def add_pending(self, call: CallInfo, reason: str = "", *, before_start: bool = False) -> None:
        with self._guard:
            self._pending.append(call)
        if self._shared is not None:
            self._publish(call, reason, before_start)

    def take_pending(self, call: Mapping[str, Any] | None = None) -> CallInfo | None:
        """The last pending call, or the last one matching {"tool", "input"}; None if none."""
        with self._guard:
            for index in range(len(self._pending) - 1, -1, -1):
                if call is None or _same_call(self._pending[index], call):
                    return self._pending.pop(index)
        return None

    def find_pending(self, call: Mapping[str, Any]) -> CallInfo | None:
        """The newest pending call matching {"tool", "input"}, left pending."""
        with self._guard:
            return next((info for info in reversed(self._pending) if _same_call(info, call)), None)

    def has_pending(self) -> bool:
        with self._guard:
            return bool(self._pending)


def lasting_rule_covers(policy, info: CallInfo) -> bool:
    """Whether "always allow" (the rule `rule_for` adds) would make this call run unasked.

    An ask rule, a path outside the workspace or a protected file asks even when an
    allow rule matches; then only a one-off answer helps. Pure: no I/O."""
    try:
        rule = rule_for(info)
    except ValueError:
        return False
    trial = dataclasses.replace(policy, allow=(*policy.allow, rule))
    return decide(info, trial).action == "allow"


def _same_call(info: CallInfo, call: Mapping[str, Any]) -> bool:
    wanted = json.dumps(call.get("input", {}), sort_keys=True)
    return info.command == call.get("tool") and json.dumps(dict(info.input), sort_keys=True) == wanted
