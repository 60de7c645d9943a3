"""Guardrails around every call: pre-call hooks decide, post-call hooks redact.

A hook is matched by a tool pattern, the same syntax as a policy rule
(`"github *"`, `"mcp_github__get_pull(repo=acme/*)"`, `"*"`). Hooks run in a
fixed order: the command hooks from the config first (in config order), then
the Python hooks (in registration order).

Pre-call hooks (`run_before`) each see the call as the previous hook left it.
A hook returns a `HookOutcome` (or None = continue): `deny` stops at once (the
first deny wins), `input` rewrites the input for the next hooks and the call,
`ask` and `allow` are remembered (`ask` wins over `allow`) and handed to
`decide()`, where they act as an ask or allow rule. A hook that raises, times
out or answers nonsense denies the call: a broken guardrail never lets a call
through.

Post-call hooks (`run_after`) see the result before the script does and may
return a replacement (`redact()` helps). A hook that fails withholds the
result: the script gets an error result, never the unredacted one.

Command hooks (`add_command_hook`) run as child processes with a minimal
environment (PATH, HOME, LANG, TOOLKERNEL_HOOK_EVENT, TOOLKERNEL_HOOK_TOOL;
nothing else of the kernel's environment). The protocol:

stdin, one JSON object:
    {"event": "before_call" | "after_call",
     "tool": "mcp_github__get_pull", "command": "tools github get-pull",
     "input": {...}, "kind": "read" | "edit" | "execute",
     "outside_workspace": false,
     "result": {"texts": [...], "structured": ..., "is_error": false,
                "images": [{"mime_type": "image/png", "size": 1234}]}}  # after_call only

stdout, one JSON object (empty output is the same as `{}`, i.e. continue):
    before_call: {"action": "continue" | "allow" | "ask" | "deny",
                  "reason": "text shown to the person or the script",
                  "input": {...}}                    # every key optional
    after_call:  {"redact": ["secret", ...]}         # each string -> [redacted]
                 {"result": "text" | <JSON>, "is_error": false}   # replace
                 {"action": "deny", "reason": "..."} # withhold the result
                 (`result` and `redact` may be combined: replace, then redact;
                 a replaced result drops the tool's images)

Exit code 0 is required. A non-zero exit, a timeout, output that is not such
an object (unknown keys included, so a typo fails closed) denies the call
before it runs, or withholds the result after it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping

from .._config._rules import Rule, parse_rule
from ._policy import _ACTIONS, CallInfo, HookOutcome, rule_matches
from .._process import ProcessResult, run_capped
from .._tool import ToolResult

EVENTS = ("before_call", "after_call")
_EVENT_ALIASES = {"pre_call": "before_call", "post_call": "after_call"}  # the config's names
REDACTED = "[redacted]"

_STDOUT_LIMIT = 16 * 1024 * 1024  # as the custom command tools cap their output
_STDERR_LIMIT = 64 * 1024
_STDERR_SHOWN = 300
_ENV_PASSED = ("PATH", "HOME", "LANG")


class HookFailed(Exception):
    """A hook that could not give a usable answer (the call is then denied)."""


@dataclass(frozen=True)
class _Hook:
    name: str
    pattern: Rule
    run: Callable[..., Awaitable[Any]]
    timeout: float


class Hooks:
    def __init__(self) -> None:
        self._python: dict[str, list[_Hook]] = {event: [] for event in EVENTS}
        self._commands: dict[str, list[_Hook]] = {event: [] for event in EVENTS}

    # -- registration ------------------------------------------------------

    def before_call(self, pattern: str | Callable[..., Any] = "*", *, timeout: float = 30.0):
        """Register `fn(call: CallInfo) -> HookOutcome | None`, sync or async.
        Usable bare (`@hooks.before_call`) or with a pattern."""
        return self._decorator("before_call", pattern, timeout)

    def after_call(self, pattern: str | Callable[..., Any] = "*", *, timeout: float = 30.0):
        """Register `fn(call: CallInfo, result: ToolResult) -> ToolResult | None`
        (None keeps the result as it is), sync or async."""
        return self._decorator("after_call", pattern, timeout)

    def _decorator(self, event: str, pattern: Any, timeout: float):
        if callable(pattern):
            return self._register_python(event, "*", timeout, pattern)
        _check_pattern_and_timeout(pattern, timeout)  # fail at the decorator line, not later

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            return self._register_python(event, pattern, timeout, fn)

        return register

    def _register_python(self, event: str, pattern: str, timeout: float, fn: Callable[..., Any]):
        rule = _check_pattern_and_timeout(pattern, timeout)
        name = getattr(fn, "__qualname__", None) or repr(fn)
        self._python[event].append(_Hook(name, rule, _as_async(fn), timeout))
        return fn

    def add_command_hook(
        self,
        event: str,
        pattern: str,
        argv: list[str],
        timeout: float = 30,
        cwd: str | Path | None = None,
    ) -> None:
        """Run `argv` for each matching call (the protocol is in the module doc).
        `event` is before_call / after_call (the config's pre_call / post_call too)."""
        event = _EVENT_ALIASES.get(event, event)
        hook = _command_hook(event, pattern, argv, timeout, cwd)
        self._commands[event].append(hook)

    def set_command_hooks(self, hooks: list[tuple[str, str, list[str], float, str | Path | None]]) -> None:
        """The config's hooks (event, pattern, argv, timeout, cwd each) in place of the ones before,
        in one step: a run going on meanwhile (a serve client's runs overlap) sees the old set or
        the new one, never none."""
        commands: dict[str, list[_Hook]] = {event: [] for event in EVENTS}
        for event, pattern, argv, timeout, cwd in hooks:
            event = _EVENT_ALIASES.get(event, event)
            commands[event].append(_command_hook(event, pattern, argv, timeout, cwd))
        self._commands = commands

    def clear_command_hooks(self) -> None:
        """Forget the config's hooks."""
        self.set_command_hooks([])

    def _hooks(self, event: str) -> tuple[_Hook, ...]:
        return tuple(self._commands[event]) + tuple(self._python[event])

    def any(self, event: str) -> bool:
        """Whether a hook is registered for `event` (lets callers skip the hook machinery)."""
        return bool(self._commands[event] or self._python[event])

    # -- running -----------------------------------------------------------

    async def run_before(self, call: CallInfo) -> HookOutcome:
        current, rewritten = call, False
        verdict = HookOutcome()
        for hook in self._hooks("before_call"):
            if not rule_matches(hook.pattern, current, grants=False):
                continue
            try:
                outcome = _checked_outcome(await _within(hook, hook.run(current)))
            except HookFailed as exc:
                return HookOutcome("deny", f"the pre-call hook {hook.name} {exc}; the call was not made",
                                   dict(current.input) if rewritten else None)
            if outcome.input is not None:
                current, rewritten = dataclasses.replace(current, input=dict(outcome.input)), True
            if outcome.action == "deny":
                reason = outcome.reason or "no reason given"
                return HookOutcome("deny", f"denied by the hook {hook.name}: {reason}",
                                   dict(current.input) if rewritten else None)
            if outcome.action == "ask" or (outcome.action == "allow" and verdict.action == "continue"):
                verdict = HookOutcome(outcome.action, outcome.reason or _default_reason(outcome.action, hook))
        return HookOutcome(verdict.action, verdict.reason, dict(current.input) if rewritten else None)

    async def run_after(self, call: CallInfo, result: ToolResult) -> ToolResult:
        for hook in self._hooks("after_call"):
            if not rule_matches(hook.pattern, call, grants=False):
                continue
            try:
                replaced = await _within(hook, hook.run(call, result))
            except HookFailed as exc:
                return ToolResult.error(f"the post-call hook {hook.name} {exc}; the result was withheld")
            if replaced is None:
                continue
            if not isinstance(replaced, ToolResult):
                return ToolResult.error(
                    f"the post-call hook {hook.name} returned {type(replaced).__name__}, "
                    "not a ToolResult or None; the result was withheld")
            result = replaced
        return result


def _command_hook(event: str, pattern: str, argv: list[str], timeout: float, cwd: str | Path | None) -> _Hook:
    if event not in EVENTS:
        raise ValueError(f"a hook event is one of {', '.join(EVENTS)}, not {event!r}")
    if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("a command hook's argv is a non-empty list of strings")
    rule = _check_pattern_and_timeout(pattern, timeout)
    runner = _CommandHook(event, list(argv), None if cwd is None else Path(cwd))
    return _Hook(runner.name, rule, runner, timeout)


def _default_reason(action: str, hook: _Hook) -> str:
    if action == "ask":
        return f"the hook {hook.name} asks for approval"
    return f"the hook {hook.name} allows the call"


def redact(result: ToolResult, secrets: list[str], mask: str = REDACTED) -> ToolResult:
    """`result` with every occurrence of each secret replaced, in its texts and
    in every string (and key) of its structured content. Images are kept."""
    secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def scrub(value: Any) -> Any:
        if isinstance(value, str):
            for secret in secrets:
                value = value.replace(secret, mask)
            return value
        if isinstance(value, Mapping):
            return {scrub(k): scrub(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [scrub(v) for v in value]
        return value

    return ToolResult(
        texts=[scrub(t) for t in result.texts],
        images=list(result.images),
        structured=scrub(result.structured),
        is_error=result.is_error,
    )


# -- helpers -------------------------------------------------------------------


def _check_pattern_and_timeout(pattern: str, timeout: float) -> Rule:
    rule = parse_rule(pattern)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise ValueError(f"a hook timeout is a positive number of seconds, not {timeout!r}")
    return rule


def _as_async(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    async def run(*args: Any) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(*args)
        # A sync hook may block (files, network): keep it off the event loop.
        value = await asyncio.to_thread(fn, *args)
        if inspect.isawaitable(value):
            value = await value
        return value

    return run


async def _within(hook: _Hook, running: Awaitable[Any]) -> Any:
    """Run one hook; whatever goes wrong becomes `HookFailed` naming why."""
    try:
        return await asyncio.wait_for(running, hook.timeout)
    except (asyncio.TimeoutError, TimeoutError):
        raise HookFailed(f"timed out after {hook.timeout:g} s") from None
    except HookFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - a broken hook must deny, whatever broke
        raise HookFailed(f"failed: {type(exc).__name__}: {exc}") from exc


def _checked_outcome(value: Any) -> HookOutcome:
    if value is None:
        return HookOutcome()
    if not isinstance(value, HookOutcome):
        raise HookFailed(f"returned {type(value).__name__}, not a HookOutcome or None")
    if value.input is not None and not _is_json_object(value.input):
        raise HookFailed("returned an input that is not a JSON object")
    return value


def _is_json_object(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(k, str) for k in value)


# -- command hooks ---------------------------------------------------------------


class _CommandHook:
    """One configured command, run once per matching call."""

    def __init__(self, event: str, argv: list[str], cwd: Path | None) -> None:
        self.event, self.argv, self.cwd = event, argv, cwd
        label = shlex.join(argv)
        # The tail names the script; the interpreter's path matters less.
        self.name = "`" + (label if len(label) <= 80 else "..." + label[-77:]) + "`"

    async def __call__(self, call: CallInfo, result: ToolResult | None = None) -> Any:
        reply = await self._exchange(_payload(self.event, call, result), call)
        if self.event == "before_call":
            return _before_reply(reply)
        return _after_reply(reply, result)

    async def _exchange(self, payload: dict[str, Any], call: CallInfo) -> dict[str, Any]:
        data = json.dumps(payload, ensure_ascii=False, default=str).encode()
        try:
            done = await run_capped(self.argv, stdin=data, env=_child_env(self.event, call),
                                    cwd=self.cwd, stdout_cap=_STDOUT_LIMIT,
                                    stderr_cap=_STDERR_LIMIT)
        except OSError as exc:
            raise HookFailed(f"could not start: {exc.strerror or exc}") from exc
        if done.over_cap:
            limit = _STDOUT_LIMIT if done.over_cap == "stdout" else _STDERR_LIMIT
            raise HookFailed(f"wrote more than {limit} bytes to {done.over_cap}")
        if done.returncode != 0:
            raise HookFailed(f"exited with code {done.returncode}{_stderr_tail(done)}")
        return _parse_reply(done.stdout)


def _child_env(event: str, call: CallInfo) -> dict[str, str]:
    env = {key: os.environ[key] for key in _ENV_PASSED if key in os.environ}
    env.setdefault("PATH", os.defpath)
    env["TOOLKERNEL_HOOK_EVENT"] = event
    env["TOOLKERNEL_HOOK_TOOL"] = call.qualified_name
    return env


def _payload(event: str, call: CallInfo, result: ToolResult | None) -> dict[str, Any]:
    payload = {
        "event": event,
        "tool": call.qualified_name,
        "command": call.command,
        "input": dict(call.input),
        "kind": call.kind,
        "outside_workspace": call.outside_workspace,
    }
    if result is not None:
        payload["result"] = {
            "texts": list(result.texts),
            "structured": result.structured,
            "is_error": result.is_error,
            "images": [{"mime_type": i.mime_type, "size": len(i.data)} for i in result.images],
        }
    return payload


def _stderr_tail(done: ProcessResult) -> str:
    text = done.stderr_tail(_STDERR_SHOWN)
    return f": {text}" if text else ""


def _parse_reply(out: bytes) -> dict[str, Any]:
    text = out.decode("utf-8", "replace").strip()
    if not text:
        return {}
    try:
        reply = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HookFailed(f"wrote output that is not JSON ({exc.msg})") from None
    except RecursionError:
        raise HookFailed("wrote JSON nested too deeply to read") from None
    if not isinstance(reply, dict):
        raise HookFailed(f"wrote JSON {type(reply).__name__}, not an object")
    return reply


def _unknown_keys(reply: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(reply) - allowed)
    if unknown:
        raise HookFailed(f"answered with unknown keys {', '.join(map(repr, unknown))}")


def _before_reply(reply: Mapping[str, Any]) -> HookOutcome:
    _unknown_keys(reply, {"action", "reason", "input"})
    action = reply.get("action", "continue")
    reason = reply.get("reason", "")
    new_input = reply.get("input")
    if action not in _ACTIONS:
        raise HookFailed(f"answered with the action {action!r}")
    if not isinstance(reason, str):
        raise HookFailed("answered with a reason that is not a string")
    if new_input is not None and not isinstance(new_input, dict):
        raise HookFailed("answered with an input that is not a JSON object")
    return HookOutcome(action, reason, new_input)


def _after_reply(reply: Mapping[str, Any], result: ToolResult | None) -> ToolResult | None:
    assert result is not None
    _unknown_keys(reply, {"action", "reason", "redact", "result", "is_error"})
    action = reply.get("action", "continue")
    if action == "deny":
        reason = reply.get("reason") or "no reason given"
        return ToolResult.error(f"the result was withheld by a post-call hook: {reason}")
    if action != "continue":
        raise HookFailed(f"answered with the action {action!r} (after a call: continue or deny)")
    if "result" in reply:
        result = _replacement(reply["result"], reply.get("is_error", False))
    elif "is_error" in reply:
        raise HookFailed("answered with is_error but no result")
    secrets = reply.get("redact")
    if secrets is not None:
        if not isinstance(secrets, list) or not all(isinstance(s, str) for s in secrets):
            raise HookFailed("answered with a redact value that is not a list of strings")
        result = redact(result, secrets)
    return result


def _replacement(value: Any, is_error: Any) -> ToolResult:
    if not isinstance(is_error, bool):
        raise HookFailed("answered with is_error that is not true or false")
    replaced = ToolResult.text(value) if isinstance(value, str) else ToolResult.json(value)
    replaced.is_error = is_error
    return replaced
