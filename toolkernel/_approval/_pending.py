"""Pending approvals other processes can read: `$XDG_STATE_HOME/toolkernel/pending/<project>/`.

They live outside the workspace, in the per-user state folder that an agent's OS sandbox
hides (`_sandbox.py`): an answer is a person's, and no process an agent starts can write one
there. `<project>` is a digest of the project folder's real path, so a terminal's
`toolkernel approve` in that folder finds the requests of a `serve` there.

A `toolkernel serve` whose client cannot be asked (no MCP elicitation) stops
the run with `needs_approval` and publishes the call here, so that a person
can answer from a terminal (`toolkernel approve`) or a notebook
(`%tools approve ID`). One file per request, written atomically:

    <id>.json          {"version": 1, "id", "tool", "input", "kind", "reason",
                        "before_start", "created", "pid", "project"}
    <id>.answer.json   {"version": 1, "id", "answer": "once"|"always"|"deny",
                        "call": <canonical key of the call the person saw>}

It holds only what the run's report already shows (the tool and its input),
never a command tool's argv, an environment or a token.

Everything read here is untrusted: any process of this user (or a cloned
repository) may have put files here. So:
- what a person is shown is derived only from `tool` and `input`, escaped
  (no terminal control characters), and "always" adds the rule that
  `rule_for` derives from that same `tool`, which the listing names;
- a once-grant is applied only by the process that published the request,
  only for an id it published itself (kept in its memory), and only when the
  answer names the exact call (tool and input) that process asked about: a
  forged or rewritten entry cannot make it grant another call;
- files must be regular files of this user that nobody else may write, ids
  are 12 hex digits, sizes are bounded; anything else is skipped and said;
- a request's `project` (the folder it was asked in) only says where to look: it counts
  only in the folder that project's digest names (`projects_under`, for JupyterLab's list),
  so a file cannot put itself in another project's list.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .._atomic import write_at
from .._checked_open import NotAFolder, named_in, open_folder_below
from .._config._trust import store_path
from .._names import display, parse_qualified
from .._config._rules import normalize_qualified_name, parse_rule
from ._policy import CallInfo, canonical_call_key

FOLDER = "pending"
DECISIONS = ("once", "always", "deny")
_VERSION = 1
_ID = re.compile(r"[0-9a-f]{12}")
_FOLDER = re.compile(r"[0-9a-f]{16}")  # a project's folder: the start of its path's sha256
# MCP tool names (and toolkernel's own) are ASCII: anything else in a name is refused.
_TOOL = re.compile(r"[A-Za-z0-9_.\-]{1,200}")
_KINDS = ("read", "edit", "execute")
_MAX_BYTES = 256 * 1024


class PendingError(Exception):
    """An answer that cannot be applied (no such request, a bad decision)."""


@dataclass(frozen=True)
class PendingRequest:
    id: str
    tool: str  # the qualified name: mcp_github__delete_branch, read_file, tool__rg
    input: Mapping[str, Any]
    kind: str
    reason: str
    before_start: bool
    created: str
    pid: int
    project: str = ""  # the real path of the project that asked; checked against its folder where read

    @property
    def command(self) -> str:
        """`tools github delete-branch`, derived from the name (never read from the file)."""
        name = parse_qualified(self.tool)
        parts = [name.server] if name.kind == "mcp" else []
        return " ".join(["tools", *(display(p) for p in [*parts, name.tool or ""])])

    def call_info(self) -> CallInfo:
        return CallInfo(self.tool, self.command, dict(self.input), self.kind)  # type: ignore[arg-type]

    def key(self) -> str:
        return canonical_call_key(self.tool, self.input)

    def alive(self) -> bool:
        """Whether the process that asked still runs (a forged pid only changes this mark)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except (PermissionError, OverflowError, ValueError):
            return True
        return True

    def describe(self) -> str:
        """One line; every character outside printable ASCII is escaped (no control sequences)."""
        return f"{_safe(self.command)} {json.dumps(self.input, ensure_ascii=True, sort_keys=True)}"

    def to_json(self) -> dict[str, Any]:
        return {"version": _VERSION, "id": self.id, "tool": self.tool, "input": dict(self.input),
                "kind": self.kind, "reason": self.reason, "before_start": self.before_start,
                "created": self.created, "pid": self.pid, "project": self.project}


class PendingStore:
    """The pending folder of one project: publish and collect (the asking process),
    list and answer (`toolkernel approve`, `%tools approve ID`)."""

    def __init__(self, project_dir: Path | str) -> None:
        # Every file is reached through the folder opened name by name from the state folder,
        # never through a link.
        self.project = os.path.realpath(project_dir)
        self._at(_digest(self.project))

    def _at(self, digest: str) -> None:
        self.root = str(store_path().parent)
        self.below = os.path.join(FOLDER, digest)
        self.folder = Path(self.root) / self.below

    # -- the asking process ------------------------------------------------------

    def publish(self, call: CallInfo, reason: str, *, before_start: bool = False) -> PendingRequest:
        request = PendingRequest(secrets.token_hex(6), normalize_qualified_name(call.qualified_name),
                                 dict(call.input), call.kind, reason, before_start, _now(), os.getpid(),
                                 self.project)
        self._write(self._entry_path(request.id), request.to_json())
        return request

    def answer_for(self, request: PendingRequest) -> str | None:
        """The person's answer to a request this process published, or None. An answer
        that names another call than `request` (a rewritten entry) is dropped."""
        data = self._read(self._answer_path(request.id))
        if data is None:
            return None
        answer = data.get("answer") if isinstance(data, dict) else None
        if data.get("id") != request.id or data.get("call") != request.key() or answer not in DECISIONS:
            self._remove(self._answer_path(request.id))
            return None
        return answer

    def withdraw(self, request_id: str) -> None:
        self._remove(self._answer_path(request_id))
        self._remove(self._entry_path(request_id))

    # -- the person ----------------------------------------------------------------

    def waiting(self) -> tuple[list[PendingRequest], list[str]]:
        """Requests not answered yet, oldest first, and one line per file skipped (why)."""
        found, skipped = [], []
        for path in [self.folder / name for name in sorted(self._names())]:
            if not path.name.endswith(".json") or path.name.endswith(".answer.json") or path.name.startswith("."):
                continue
            try:
                request = self._load(path)
            except ValueError as exc:
                skipped.append(f"{_safe(path.name)}: {exc}")
                continue
            if not self._exists(self._answer_path(request.id)):
                found.append(request)
        return sorted(found, key=lambda r: r.created), skipped

    def find(self, request_id: str) -> PendingRequest:
        if not _ID.fullmatch(request_id or ""):
            raise PendingError(f"{_safe(request_id)!s} is not a request id (12 hex digits; "
                               "`toolkernel approve` lists them)")
        path = self._entry_path(request_id)
        if not self._exists(path):
            raise PendingError(f"no request {request_id} waits for an approval (`toolkernel approve` lists them)")
        try:
            return self._load(path)
        except ValueError as exc:
            raise PendingError(f"request {request_id} is not used: {exc}") from None

    def answer(self, request: PendingRequest, decision: str) -> None:
        """Record the person's answer for the process that asked (see `answer_for`)."""
        if decision not in DECISIONS:
            raise PendingError(f"answer once, always or deny, not {_safe(decision)}")
        self._write(self._answer_path(request.id),
                    {"version": _VERSION, "id": request.id, "answer": decision, "call": request.key()})

    # -- files ---------------------------------------------------------------------

    def _entry_path(self, request_id: str) -> Path:
        return self.folder / f"{request_id}.json"

    def _answer_path(self, request_id: str) -> Path:
        return self.folder / f"{request_id}.answer.json"

    def _load(self, path: Path) -> PendingRequest:
        data = self._read(path)
        if data is None:
            raise ValueError("not a regular file of yours that only you may write, or too large, or not JSON")
        return _parse(data, path.name[: -len(".json")])

    @contextlib.contextmanager
    def _opened(self, create: bool = False):
        """The pending folder, open; None when it is not there (or is a link, which is refused)."""
        try:
            if create:
                os.makedirs(self.root, mode=0o700, exist_ok=True)
            folder = open_folder_below(self.root, self.below, create=create, mode=0o700)
        except FileNotFoundError:
            folder = None
        except NotAFolder:
            if create:
                raise
            folder = None  # read as empty: nothing is read or deleted through it
        try:
            yield folder
        finally:
            if folder is not None:
                os.close(folder)

    def _names(self) -> list[str]:
        with self._opened() as folder:
            return [] if folder is None else os.listdir(folder)

    def _exists(self, path: Path) -> bool:
        with self._opened() as folder:
            return folder is not None and named_in(folder, path.name)

    def _read(self, path: Path) -> Any:
        """The JSON in `path`, or None when it is missing, not ours, or not JSON."""
        try:
            with self._opened() as folder:
                if folder is None:
                    return None
                fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            if not _private(info):
                return None
            raw = file.read(_MAX_BYTES + 1)
        if len(raw) > _MAX_BYTES:
            return None
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # nested past the parser's depth too
            return None

    def _write(self, path: Path, data: Mapping[str, Any]) -> None:
        payload = (json.dumps(data, ensure_ascii=False, indent=1) + "\n").encode("utf-8")
        try:
            with self._opened(create=True) as folder:
                # 0o600 before the name appears: the asker reads an answer and removes it at once,
                # so nothing may be done to the file by name after it is in place.
                write_at(folder, path.name, payload, mode=0o600)
        except NotAFolder as exc:
            raise PendingError(f"{self.folder} cannot hold requests: {exc}") from None
        except OSError as exc:
            raise PendingError(f"{path} not written: {exc}") from None

    def _remove(self, path: Path) -> None:
        with contextlib.suppress(OSError), self._opened() as folder:
            if folder is not None:
                os.unlink(path.name, dir_fd=folder)


def projects_under(root: Path | str) -> list[str]:
    """The projects at or below the folder `root` (a Jupyter Server's root) with requests waiting,
    each a real path, sorted. A request names the project that asked; the name counts only when
    that project's digest is the folder it lies in, so each project's list is the one
    `toolkernel approve` run there gives, and a planted file adds no project of its choosing."""
    top = os.path.realpath(root)
    found: set[str] = set()
    for name in _project_folders():
        for request in _FolderOnly(name).waiting()[0]:
            claim = request.project
            if claim and _digest(claim) == name and _within(claim, top) and os.path.realpath(claim) == claim:
                found.add(claim)
                break
    return sorted(found)


def _project_folders() -> list[str]:
    """The names of the per-project folders under pending/ (a link, or anything odd, is skipped)."""
    root = str(store_path().parent)
    try:
        folder = open_folder_below(root, FOLDER, create=False)
    except (FileNotFoundError, NotAFolder, NotADirectoryError):
        return []
    try:
        return sorted(name for name in os.listdir(folder) if _FOLDER.fullmatch(name))
    finally:
        os.close(folder)


class _FolderOnly(PendingStore):
    """One folder under pending/ named by its digest: its requests read, to learn their project."""

    def __init__(self, digest: str) -> None:
        self.project = ""
        self._at(digest)


def _digest(project: str) -> str:
    return hashlib.sha256(os.fsencode(project)).hexdigest()[:16]


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


def _parse(data: Any, request_id: str) -> PendingRequest:
    """A request as read from a file that anyone of this user may have written."""
    if not isinstance(data, dict) or data.get("version") != _VERSION:
        raise ValueError('expected {"version": 1, ...}')
    if data.get("id") != request_id or not _ID.fullmatch(request_id):
        raise ValueError("its id does not match its file name")
    tool = data.get("tool")
    if not isinstance(tool, str) or not _TOOL.fullmatch(tool) or "*" in tool:
        raise ValueError("its tool is not a tool name")
    try:
        parse_rule(normalize_qualified_name(tool))
    except ValueError:
        raise ValueError("its tool is not a tool name") from None
    if not parse_qualified(tool).tool:  # `mcp_github` names a whole server, never one call
        raise ValueError("its tool names a whole server")
    if not isinstance(data.get("input"), dict) or data.get("kind") not in _KINDS:
        raise ValueError("its input or kind is malformed")
    pid, reason, project = data.get("pid"), data.get("reason", ""), data.get("project", "")
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(reason, str):
        raise ValueError("its pid or reason is malformed")
    return PendingRequest(request_id, tool, data["input"], data["kind"], reason[:300],
                          data.get("before_start") is True, str(data.get("created", "")), pid,
                          project if isinstance(project, str) else "")


def _private(info: os.stat_result) -> bool:
    return (stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _safe(text: str) -> str:
    """`text` with everything outside printable ASCII escaped."""
    return json.dumps(str(text), ensure_ascii=True)[1:-1]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
