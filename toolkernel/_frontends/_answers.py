"""A person's answers: approve or deny a stopped call, list lasting approvals, pair a notebook.

One set of functions serves the `%tools approve ...` line magics, the
Python API and the comm target the JupyterLab extension's buttons use.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from .. import _loop
from .._approval._approvals import ApprovalStore, lasting_rule_covers, rule_for
from .._approval._policy import Policy
from .._config._config import load_config
from .._errors import Denied, printable
from .._approval._pending import DECISIONS, PendingError, PendingStore
from .._journal import RewindError
from .._approval._policy import CallInfo, canonical_call_key

COMM_TARGET = "toolkernel.approval"
# The `%tools` words that answer or pair rather than call a tool.
SUBCOMMANDS = ("approve", "deny", "approvals", "pair", "unpair", "lint", "doctor", "changes", "rewind")


class AnswerError(Exception):
    """The answer cannot be applied (nothing pending, unknown rule...)."""


APPROVALS_ARE_A_PERSONS = "approvals are a person's"
# What a refused answer says next: where a person does answer.
WHERE_A_PERSON_ANSWERS = ("a person answers in a cell of their own, with JupyterLab's buttons, or with"
                          " `toolkernel approve` in a terminal")


def refused_to_agents(what: str, whose: str = APPROVALS_ARE_A_PERSONS, then: str = WHERE_A_PERSON_ANSWERS,
                      shell: Any = None) -> str | None:
    """Why `what` (an answer, a trust, a hook) is refused to the code running now, or None when a
    person runs it. A cell an agent sent (notebook-run marks its request, `started_by_agent`)
    grants nothing: else `toolkernel.approve()` in the agent's next cell would answer its own
    question. `shell`: the IPython shell, when the caller has it; outside a kernel a person is at
    the keys. This stops the plain ways; code an agent may run in the kernel can do what it can."""
    if shell is None:
        ipython = sys.modules.get("IPython")  # not imported: no kernel, so no agent's request either
        shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return None
    from .._runners._hostbash._cell import started_by_agent

    if not started_by_agent(shell):
        return None
    return f"{what}: {whose}: this cell was sent by an agent (notebook-run)" + (f"; {then}" if then else "")


def refuse_agents(what: str, whose: str = APPROVALS_ARE_A_PERSONS, then: str = WHERE_A_PERSON_ANSWERS) -> None:
    """`Denied` in a cell an agent sent: every answer passes here (the Python API, `%tools`, the
    comm), whoever calls it."""
    __tracebackhide__ = True  # IPython shows the caller's line and this error, not toolkernel's frames
    why = refused_to_agents(what, whose, then)
    if why is not None:
        raise Denied(why)


def approve(session, *, always: bool = False, call: Mapping[str, Any] | None = None) -> str:
    __tracebackhide__ = True
    refuse_agents("toolkernel.approve")
    info = _take_pending(session, call)
    if always:
        try:
            rule = rule_for(info)
            _check_always_covers(session.workdir, info)
        except ValueError as exc:  # no rule names this call, or it would keep asking
            session.approvals.add_pending(info)
            raise AnswerError(str(exc)) from None
        session.approvals.always_allow(rule)
        # The tool as every other line names it; the rule's own spelling only as the rule.
        return (f"always allowed: {printable(info.command)} (the rule {rule}, saved in"
                f" {session.workdir / '.toolkernel'}; `%tools approvals` lists it)")
    session.approvals.grant_once(canonical_call_key(info.qualified_name, info.input))
    return (f"allowed once: {printable(info.command)} {json.dumps(dict(info.input))}"
            " — make the call again (run the cell again) and it goes through this once")


def deny(session, *, call: Mapping[str, Any] | None = None) -> str:
    __tracebackhide__ = True
    refuse_agents("toolkernel.deny")
    info = _take_pending(session, call)
    return f"denied: {printable(info.command)} {json.dumps(dict(info.input))} will keep asking"


def list_approvals(session, *, revoke: str | None = None) -> str:
    """The lasting approvals; with `revoke` (a rule, or its number in the list), first what was
    revoked. A rule that is not there is said, not an error: what the person wanted holds (it
    does not allow); a number names a line of the list, so one past its end is."""
    said = []
    if revoke is not None:
        # The list below numbers from 1; the store counts from 0.
        target: Any = int(revoke) - 1 if revoke.isdigit() else revoke
        try:
            said.append(f"revoked {printable(session.approvals.revoke(target))}")
        except IndexError:
            raise AnswerError(f"no lasting approval number {revoke}; `%tools approvals` lists them") from None
        except KeyError:
            said.append(f"nothing to revoke: no lasting approval {printable(revoke.strip())}")
    rules = session.approvals.lasting_rules()
    if not rules:
        return "\n".join([*said, "no lasting approvals" + (" left" if said else "")])
    return "\n".join([*said, *(["left:"] if said else []), *(f"{i}. {rule}" for i, rule in enumerate(rules, 1))])


def _take_pending(session, call: Mapping[str, Any] | None) -> CallInfo:
    info = session.approvals.take_pending(call)
    if info is not None:
        return info
    if call is None or not session.approvals.has_pending():
        raise AnswerError("no call is waiting for an approval")
    raise AnswerError(f"no pending call matches {call.get('tool')!r}")


# -- requests another process published (`toolkernel serve`) -----------------------


def waiting_requests(workdir) -> str:
    """`toolkernel approve` with no id: what waits, and what each answer would do."""
    requests, skipped = waiting_overview(workdir)
    lines = [f"ignored {line}" for line in skipped]
    if not requests:
        return "\n".join(lines + ["no call waits for an approval"])
    lines.append(f"{len(requests)} {'call waits' if len(requests) == 1 else 'calls wait'} for a person;"
                 " answer with `toolkernel approve ID once|always|deny`:")
    for request in requests:
        ended = "" if request["alive"] else " (the process that asked has ended: only `always` still counts)"
        lines.append(f"  {request['id']}  {request['line']}{ended}")
        lines.append(f"      {request['always_says']}")
    return "\n".join(lines)


def waiting_overview(workdir) -> tuple[list[dict[str, Any]], list[str]]:
    """What waits in `workdir`'s pending store, as `toolkernel approve` lists it and JupyterLab's
    notification and Tools sidebar show it: each request's id, its call (the tool as `tools` names
    it, its input), the line a terminal shows (escaped), why it asks, whether the process that
    asked still runs (a "once" needs it), and the rule "always" would save, or why it is not
    offered; then one line per file skipped."""
    requests, skipped = PendingStore(workdir).waiting()
    return [_overview(request, workdir) for request in requests], skipped


def _overview(request, workdir) -> dict[str, Any]:
    try:
        rule: str | None = _rule(request, workdir)
        says = f"always allows {printable(request.command)} from now on (the rule {rule})"
    except PendingError as exc:
        rule, says = None, str(exc)
    return {"id": request.id, "call": {"tool": request.command, "input": dict(request.input)},
            "line": request.describe(), "kind": request.kind, "reason": printable(request.reason),
            "before_start": request.before_start, "created": request.created, "alive": request.alive(),
            "always": rule, "always_says": says}


def answer_request(workdir, request_id: str, decision: str) -> str:
    """Answer request `request_id` once, always or deny. "always" saves the allow rule that
    the tool the person was shown derives (`rule_for`), here and now."""
    __tracebackhide__ = True
    refuse_agents("toolkernel approve")
    store = PendingStore(workdir)
    request = store.find(request_id)
    if decision not in DECISIONS:
        raise PendingError(f"answer once, always or deny, not {decision!r}")
    if decision == "once" and not request.alive():
        raise PendingError(f"the process that asked for {request.id} has ended, so nothing can use a once"
                           " answer; answer always or deny")
    said = {"once": "allowed once", "deny": "denied", "always": "always allowed"}[decision]
    after = " — the agent's next script may make this call once" if decision == "once" else ""
    if decision == "always":
        rule = _rule(request, workdir)
        ApprovalStore(workdir).always_allow(rule)
        after = f" (the rule {rule}, saved in {Path(workdir) / '.toolkernel'})"
    store.answer(request, decision)
    return f"{said}: {request.describe()}{after}"


def _rule(request, workdir) -> str:
    """The rule "always" saves; refused where it would not make the call run unasked
    (an ask rule, a path outside the workspace: the person would believe it allowed)."""
    try:
        rule = rule_for(request.call_info())
    except (ValueError, KeyError) as exc:
        raise PendingError(f"no rule names this call ({exc}); answer once or deny") from None
    try:
        _check_always_covers(workdir, request.call_info())
    except ValueError as exc:
        raise PendingError(str(exc)) from None
    return rule


def _check_always_covers(workdir, info: CallInfo) -> None:
    """A lasting rule the call would still ask past (an ask rule, a path outside the
    workspace) is refused: the person would believe they had allowed it."""
    config = load_config(Path(workdir))
    if not lasting_rule_covers(Policy.from_config(config.policy, config.admin_policy), info):
        raise ValueError("always would not let this call run unasked (an ask rule or the path it touches"
                         " asks anyway); answer once or deny")


# -- `%tools approve | deny | approvals | pair | unpair | lint` ----------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print and exit the kernel's process
        raise argparse.ArgumentError(None, message)


def _parser() -> argparse.ArgumentParser:
    """The one parser of every `%tools` word that is not a tool call."""
    from .._providers._notebook import add_pairing_arguments

    parser = _Parser(prog="%tools", add_help=False)
    sub = parser.add_subparsers(dest="what", required=True)
    approve_ = sub.add_parser("approve", add_help=False)
    approve_.add_argument("--always", action="store_true")
    approve_.add_argument("request", nargs="?", metavar="ID")
    sub.add_parser("deny", add_help=False).add_argument("request", nargs="?", metavar="ID")
    sub.add_parser("approvals", add_help=False).add_argument("--revoke", metavar="RULE_OR_NUMBER")
    add_pairing_arguments(sub.add_parser("pair", add_help=False))
    sub.add_parser("unpair", add_help=False).add_argument("notebook", nargs="?")
    sub.add_parser("lint", add_help=False)
    sub.add_parser("doctor", add_help=False)
    from ._changes import add_changes_arguments, add_rewind_arguments

    add_changes_arguments(sub.add_parser("changes", add_help=False))
    add_rewind_arguments(sub.add_parser("rewind", add_help=False))
    return parser


def manage(session, argv: list[str]) -> str:
    """Apply one `%tools approve|deny|approvals|pair|unpair ...` line; `--help` gives the usage."""
    from IPython.core.error import UsageError

    if any(arg in ("--help", "-h") for arg in argv):
        return usage()
    try:
        args = _parser().parse_args(argv)
    except argparse.ArgumentError as exc:
        raise UsageError(f"%tools {shlex.join(argv)}: {exc}\n{usage()}") from None
    try:
        return _apply(session, args)
    except (AnswerError, PendingError, Denied, RewindError) as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:  # `rewind` without a run
        raise UsageError(f"%tools {args.what}: {exc}") from None


def _apply(session, args: argparse.Namespace) -> str:
    if args.what in ("changes", "rewind"):
        return journal_line(session, args)
    if args.what in ("approve", "deny") and args.request:  # a request `toolkernel serve` published
        decision = "deny" if args.what == "deny" else "always" if args.always else "once"
        return answer_request(session.workdir, args.request, decision)
    if args.what == "approve":
        return approve(session, always=args.always)
    if args.what == "deny":
        return deny(session)
    if args.what == "approvals":
        return list_approvals(session, revoke=args.revoke)
    if args.what == "pair":
        return _pair(session, args)
    if args.what == "lint":
        from ._lint import check, report

        return report(*check(session.workdir)).rstrip("\n")
    if args.what == "doctor":
        from ._doctor import doctor

        return doctor(session.workdir, session)[0]
    from .._errors import CallError
    from .._providers._notebook import unpair

    try:
        problems = _loop.run(unpair(session.state, session.workdir, args.notebook))
    except CallError as exc:
        raise AnswerError(f"%tools unpair: {exc.message}") from None
    done = f"unpaired {args.notebook}" if args.notebook else "unpaired"
    return "\n".join([done, *(f"  (not closed cleanly: {problem})" for problem in problems)])


# How a notebook tool's message says to pair again, to a person at this kernel.
PAIR_AGAIN = "pair it again (`%tools pair NOTEBOOK ...`)"
def journal_line(session, args: argparse.Namespace) -> str:
    """`%tools changes` (anyone) and `%tools rewind` (a person: an agent's rewind is the `rewind`
    tool, a write that asks)."""
    from .._providers._notebook._restore import rewind_with_cells
    from ._changes import changes_text, journal_for, rewind_text

    journal = journal_for(session.workdir, getattr(session, "journal", None))
    if args.what == "changes":
        return changes_text(journal, args)
    refuse_agents("%tools rewind", "a rewind here is a person's",
                  "an agent rewinds with `tools rewind ID`, a call that asks like any write")
    return rewind_text(journal, args, cells=lambda run_id, cells: _loop.run(rewind_with_cells(
        session.state, journal, run_id, cells, force=args.force, paths=args.path, into=None)),
        undo="%tools rewind {run}")


def _pair(session, args: argparse.Namespace) -> str:
    from IPython.core.error import UsageError

    from .._errors import CallError
    from .._providers._notebook import pair, pairing_kwargs

    try:
        pairing = _loop.run(pair(session.state, session.workdir, **pairing_kwargs(args), pair_again=PAIR_AGAIN))
    except CallError as exc:
        raise UsageError(f"%tools pair: {exc.message}") from None
    return f"paired: {pairing.describe()}"


def usage() -> str:
    from .._providers._notebook import pairing_args_usage

    lines = ["%tools approve [--always] [ID]                   allow the call that asked, once or always",
             "%tools deny [ID]                                refuse it",
             "                                                (ID: a request of `toolkernel serve`;"
             " `!toolkernel approve` lists them)",
             "%tools approvals [--revoke RULE_OR_NUMBER]      list or revoke lasting approvals",
             "%tools lint                                     check the config without starting anything",
             "%tools doctor                                   check the setup: extension, kernelspec, trust, servers,"
             " sandbox",
             "%tools changes [--run ID] [--path GLOB]         what runs changed in the workspace, newest first",
             "%tools rewind ID|--last [--force] [--path GLOB]  put back the files a run changed",
             *pairing_args_usage().splitlines(),
             "%tools unpair [NOTEBOOK]                        forget one notebook's pairing (no NOTEBOOK: all)"]
    return "usage: " + "\n       ".join(lines)


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
    except (AnswerError, Denied) as exc:
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
