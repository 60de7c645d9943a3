"""A person's answers: approve or deny a stopped call, list lasting approvals, pair a notebook.

One set of functions serves the `%tools approve ...` line magics, the
Python API and the comm target the JupyterLab extension's buttons use.
"""

from __future__ import annotations

import argparse
import json
import shlex
from typing import Any, Callable, Mapping

from . import _loop
from ._approvals import rule_for
from ._policy import CallInfo, canonical_call_key

COMM_TARGET = "toolkernel.approval"
# The `%tools` words that answer or pair rather than call a tool.
SUBCOMMANDS = ("approve", "deny", "approvals", "pair", "unpair")


class AnswerError(Exception):
    """The answer cannot be applied (nothing pending, unknown rule...)."""


def approve(session, *, always: bool = False, call: Mapping[str, Any] | None = None) -> str:
    info = _take_pending(session, call)
    if always:
        rule = rule_for(info)
        session.approvals.always_allow(rule)
        return f"always allowed: {rule} (saved in {session.workdir / '.toolkernel'}; `%tools approvals` lists it)"
    session.approvals.grant_once(canonical_call_key(info.qualified_name, info.input))
    return (f"allowed once: {info.command} {json.dumps(dict(info.input))}"
            " — run a new script (or the same one again) to make the call")


def deny(session, *, call: Mapping[str, Any] | None = None) -> str:
    info = _take_pending(session, call)
    return f"denied: {info.command} {json.dumps(dict(info.input))} will keep asking"


def list_approvals(session, *, revoke: str | None = None) -> str:
    if revoke is not None:
        # The list below numbers from 1; the store counts from 0.
        target: Any = int(revoke) - 1 if revoke.isdigit() else revoke
        try:
            session.approvals.revoke(target)
        except (KeyError, IndexError):
            raise AnswerError(f"no lasting approval {revoke!r}; `%tools approvals` lists them") from None
    rules = session.approvals.lasting_rules()
    if not rules:
        return "no lasting approvals"
    return "\n".join(f"{i}. {rule}" for i, rule in enumerate(rules, 1))


def _take_pending(session, call: Mapping[str, Any] | None) -> CallInfo:
    pending: list[CallInfo] = session.pending
    if not pending:
        raise AnswerError("no call is waiting for an approval")
    index = len(pending) - 1 if call is None else find_pending(pending, call)
    return pending.pop(index)


def find_pending(pending: list[CallInfo], call: Mapping[str, Any]) -> int:
    """The index of the newest pending call with this tool and input."""
    wanted = json.dumps(call.get("input", {}), sort_keys=True)
    for i in range(len(pending) - 1, -1, -1):
        info = pending[i]
        if info.command == call.get("tool") and json.dumps(dict(info.input), sort_keys=True) == wanted:
            return i
    raise AnswerError(f"no pending call matches {call.get('tool')!r}")


# -- asking inline, before the start -------------------------------------------

MAX_QUESTIONS = 10
_ONCE, _ALWAYS = ("o", "once", "y", "yes"), ("a", "always")


def run_asking(session, script: str, sink, ask: Callable[[str], str] | None, *, read_only: bool = False):
    """Run `script`; while it does not start for want of an approval, ask with `ask(prompt)`.

    Only before the start: nothing has run yet, so running the script again after
    the answer repeats nothing. Without `ask` (headless), the first result stands.
    """
    result = session.run_script(script, sink, read_only=read_only)
    for _ in range(MAX_QUESTIONS):
        call = _before_start_call(result.report)
        if ask is None or call is None or not answer_inline(session, call, ask):
            break
        result = session.run_script(script, sink, read_only=read_only)
    return result


def _before_start_call(report: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    stopped = (report or {}).get("tools", {}).get("stopped") or {}
    if stopped.get("before_start") and stopped.get("reason") == "needs_approval":
        return stopped["call"]
    return None


def answer_inline(session, call: Mapping[str, Any], ask: Callable[[str], str]) -> bool:
    """Ask about one call; True when the person allowed it (once or always)."""
    prompt = (f"{call['tool']} {json.dumps(call['input'])} needs your approval."
              " Allow [o]nce, [a]lways, or [d]eny? ")
    reply = ask(prompt).strip().lower()
    if reply in _ONCE or reply in _ALWAYS:
        print(approve(session, always=reply in _ALWAYS, call=call))
        return True
    print(deny(session, call=call))
    return False


# -- `%tools approve | deny | approvals | pair | unpair` -----------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="%tools", add_help=False, exit_on_error=False)
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("approve", add_help=False).add_argument("--always", action="store_true")
    sub.add_parser("deny", add_help=False)
    sub.add_parser("approvals", add_help=False).add_argument("--revoke", metavar="RULE_OR_NUMBER")
    sub.add_parser("unpair", add_help=False)
    return parser


def manage(session, argv: list[str]) -> str:
    from IPython.core.error import UsageError

    if argv[:1] == ["pair"]:
        return _pair(session, argv[1:])
    try:
        args = _parser().parse_args(argv)
    except (argparse.ArgumentError, SystemExit) as exc:
        raise UsageError(f"%tools {shlex.join(argv)}: {exc}\n{_usage()}") from None
    try:
        return _apply(session, args)
    except AnswerError as exc:
        raise UsageError(str(exc)) from None


def _apply(session, args: argparse.Namespace) -> str:
    if args.what == "approve":
        return approve(session, always=args.always)
    if args.what == "deny":
        return deny(session)
    if args.what == "approvals":
        return list_approvals(session, revoke=args.revoke)
    from ._notebook import unpair

    _loop.run(unpair(session.state))
    return "unpaired"


def _pair(session, argv: list[str]) -> str:
    from IPython.core.error import UsageError

    from ._errors import CallError
    from ._notebook import pair, parse_pairing_args

    try:
        pairing = _loop.run(pair(session.state, session.workdir, **parse_pairing_args(argv)))
    except CallError as exc:
        raise UsageError(f"%tools pair: {exc.message}") from None
    return f"paired: {pairing.describe()}"


def _usage() -> str:
    return ("usage: %tools approve [--always] | %tools deny | %tools approvals [--revoke RULE]"
            " | %tools pair NOTEBOOK [--kernel NAME | --existing FILE | --server URL --token TOKEN]"
            " | %tools unpair")


# -- the comm target of the JupyterLab extension --------------------------------


def answer_message(session, data: Mapping[str, Any]) -> dict[str, Any]:
    """{"action": "allow_once" | "always" | "deny", "call": {"tool", "input"}} -> reply."""
    actions = {
        "allow_once": lambda call: approve(session, call=call),
        "always": lambda call: approve(session, always=True, call=call),
        "deny": lambda call: deny(session, call=call),
    }
    action = actions.get(data.get("action"))
    if action is None:
        return {"ok": False, "message": f"unknown action {data.get('action')!r}"}
    try:
        return {"ok": True, "message": action(data.get("call"))}
    except AnswerError as exc:
        return {"ok": False, "message": str(exc)}


def register_comm(ipython, session, handler: Callable[..., dict[str, Any]] = answer_message) -> None:
    """Answer each message on `COMM_TARGET` with `handler(session, data)`."""
    kernel = getattr(ipython, "kernel", None)
    manager = getattr(kernel, "comm_manager", None)
    if manager is None:
        return  # a terminal IPython has no frontend to talk to

    def on_open(comm, open_msg) -> None:
        @comm.on_msg
        def on_msg(msg) -> None:
            comm.send(handler(session, msg["content"]["data"]))

    manager.register_target(COMM_TARGET, on_open)
