"""`%%tools` and `%tools`: thin adapters from IPython to the session.

They parse arguments (errors are `UsageError`), hand the work to functions
tested on their own (`Session.run_script`, `call_argv`, `_answers`), and
show the results.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import re
import shlex
import sys
import threading
import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import magic_arguments, parse_argstring

from .._errors import CallError, ConfigError
from ._ipython import (IPythonSink, KeptSink, ScriptFailed, _stdin_allowed, cell_about, interrupted,
                       refuse_persons_variables, shell_args, show_image, stop_after_denial)


class CallFailed(ScriptFailed):
    """A `%tools` line whose call failed; `code` is the seed's error code, as on `CallError`."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


@magics_class
class ToolsMagics(Magics):
    def __init__(self, shell, session: "concurrent.futures.Future") -> None:
        super().__init__(shell)
        self._session = session
        self._started = None
        self._not_now = None  # folders a person chose not to trust yet (`NotNow`): asked again later
        self._noted: set[str] = set()  # ignored config already named in a cell: said once

    @property
    def session(self):
        """The session, once the background start (imports, eager servers) is done."""
        started = self._started
        if started is None:  # kept once there: a future's result takes its lock on every line
            started = self._started = self._session.result()
        return started

    @magic_arguments()
    @shell_args
    @line_cell_magic
    @no_var_expand  # `{expr}` in the line would run Python before any check (a `%%tools*` rule)
    def tools(self, line: str, cell: str | None = None) -> Any:
        """%%tools: run the cell as a shell script where `tools` reaches every tool.
        %tools ...: one `tools` command; calls return their result as a Python value.
        %tools ... --jq FILTER: the result through a jq filter (one output, or a list of them)
        %tools approve [--always] | deny | approvals [--revoke RULE] | pair NOTEBOOK ... | unpair
        %tools trust [DIR]: trust a folder's toolkernel config as it is now (see the README)
        %tools lint: check the config (rules, hooks, command tools) without starting anything
        """
        if cell is None:
            return self._line(line)
        args = parse_argstring(self.tools, line)
        return self._cell(cell, args)

    def _cell(self, script: str, args) -> None:
        from ._lab import asking_with_buttons, display_report
        from .._config._untrusted import NotNow, ask_to_trust, ignored_config_notes
        from .._runners._hostbash._cell import started_by_agent

        agent = started_by_agent(self.shell)
        if agent:
            refuse_persons_variables(args)
        ask = asking_with_buttons(self.session, input) if _stdin_allowed(self.shell) else None
        try:
            for note in ignored_config_notes(self.session.workdir, self._noted):
                sys.stderr.write(note + "\n")
            self._not_now = self._not_now or NotNow()
            for said in ask_to_trust(self.session.workdir, ask, self._not_now) if ask else ():
                print(said)
            sink = KeptSink() if args.out else IPythonSink()
            result = self.session.run_script(script, sink, read_only=args.read_only, ask=ask, agent=agent,
                                             about=cell_about(self.shell, script, agent, self.session.workdir))
        except ConfigError as exc:
            raise ScriptFailed(f"configuration error: {exc}") from None
        if result.denied_by_person:  # "denied; nothing ran" was the answer's line: no report after it
            return stop_after_denial(args.no_raise_error)
        if result.run_report is not None:
            display_report(self.session, result.run_report)
        if args.out:
            self.shell.user_ns[args.out] = _parse_output(result.stdout)
        if result.interrupted:
            return interrupted(result, ask, "tools", args.no_raise_error)
        if result.exit_code != 0 and not args.no_raise_error:
            raise ScriptFailed(f"the script exited with code {result.exit_code}")

    def _line(self, line: str) -> Any:
        try:
            argv = _words(line)
        except ValueError as exc:
            raise UsageError(f"%tools: {exc}") from None
        _answers, call_argv, is_help_text = _line_parts()
        if argv and (argv[0] == "trust" or argv[0] in _answers.SUBCOMMANDS):
            return self._manage(argv)
        argv, program = _jq_option(argv)
        try:
            value = call_argv(self.session, argv, on_image=show_image,
                              ask=input if _stdin_allowed(self.shell) else None, jq=program)
        except KeyboardInterrupt:  # one line, not the traceback of the wait
            # Not "not made": the interrupt may land while the tool runs (direct calls run in place).
            sys.stderr.write("tools: interrupted; the call was cancelled"
                             " (a tool already running may have done part of its work)\n")
            return None
        except CallError as exc:
            raise CallFailed(exc.json_line(), exc.code) from None
        except ConfigError as exc:
            raise CallFailed(f"configuration error: {exc}") from None
        if is_help_text(value):
            print(value, end="")
            return None
        return value

    def _manage(self, argv: list[str]) -> None:
        """`%tools trust`, `approve` and the other lines that manage rather than call."""
        from . import _answers

        if argv[0] in ("trust", "approve", "deny"):
            _refuse_agent_approval(self.shell, argv)
        if argv[0] == "trust":
            return self._trust(argv[1:])
        print(_answers.manage(self.session, argv))
        return None

    def _trust(self, args: list[str]) -> None:
        from .._config._trust import trust_line

        try:
            print(trust_line(self.session.workdir, args))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        except ConfigError as exc:
            raise UsageError(f"%tools trust: {exc}") from None


@functools.cache
def _line_parts():
    """What a `%tools` line needs, imported at its first use (not at `%load_ext`, for a fast
    first cell), then kept: two imports on every line cost a direct call 5 us."""
    from . import _answers
    from ._direct import call_argv, is_help_text

    return _answers, call_argv, is_help_text


def _jq_option(argv: list[str]) -> tuple[list[str], Any]:
    """`--jq FILTER` (or `--jq=FILTER`) taken out of a `%tools` line, the filter compiled.
    It is the line's own option: a tool's argument named `jq` is given as `jq=...`."""
    from . import _jq

    rest, filters = [], []
    words = iter(argv)
    for word in words:
        if word == "--jq":
            filters.append(next(words, None))
        elif word.startswith("--jq="):
            filters.append(word.removeprefix("--jq="))
        else:
            rest.append(word)
    if not filters:
        return argv, None
    if len(filters) > 1 or filters[0] is None:
        raise UsageError("%tools: --jq takes one FILTER, once (--jq '.[] | .number')")
    try:
        return rest, _jq.compiled(filters[0])
    except CallError as exc:
        raise UsageError(f"%tools --jq: {exc.message}") from None


def _refuse_agent_approval(shell, argv: list[str]) -> None:
    """A request marked as an agent's (notebook-run) cannot approve, deny or trust for a person."""
    from ._answers import APPROVALS_ARE_A_PERSONS, WHERE_A_PERSON_ANSWERS, refused_to_agents

    if argv[0] == "trust":
        why = refused_to_agents("%tools trust", "trusting a folder's config is a person's", "", shell)
    else:
        why = refused_to_agents(f"%tools {argv[0]}", APPROVALS_ARE_A_PERSONS, WHERE_A_PERSON_ANSWERS, shell)
    if why is not None:
        raise UsageError(why)


# Words with no quote, backslash or whitespace between runs of the whitespace shlex splits on.
_PLAIN_LINE = re.compile(r"[^'\"\\\s]*(?:[ \t\r\n]+[^'\"\\\s]*)*")


def _words(line: str) -> list[str]:
    """`shlex.split(line)`, which takes 50 us for a line of four words (a tenth of a direct
    call); a line with nothing for it to unquote splits the same way on whitespace."""
    return line.split() if _PLAIN_LINE.fullmatch(line) else shlex.split(line)


def _parse_output(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


class IdleWatch:
    """Waits until the shell has run no cell for `settle` seconds, for the warm-up.

    The warm-up's imports are seconds of Python holding the GIL: started while a cell ran,
    they took a third of the time of a first `tools --help` on two cores, and they slow
    any user's cell the same way. A cell that needs them sooner imports them itself.
    """

    def __init__(self, shell, settle: float = 0.5) -> None:
        self._events = shell.events
        self._settle = settle
        self._idle = threading.Event()  # `load` runs inside the `%load_ext` cell: busy
        self._cells = 0  # cells started: one that begins and ends within `settle` counts
        self._events.register("pre_run_cell", self._busy)
        self._events.register("post_run_cell", self._free)

    def _busy(self, info=None) -> None:
        self._cells += 1
        self._idle.clear()

    def _free(self, result=None) -> None:
        self._idle.set()

    def wait(self) -> None:
        """Block until a cell has ended and no other started for `settle` seconds after it."""
        while True:
            self._idle.wait()
            cells = self._cells
            time.sleep(self._settle)
            if self._idle.is_set() and cells == self._cells:
                return

    def close(self) -> None:
        self._events.unregister("pre_run_cell", self._busy)
        self._events.unregister("post_run_cell", self._free)


def load(ipython) -> "concurrent.futures.Future":
    """Register the magics now; make the session and start servers in the background, then,
    once the shell is idle, import what the first tool call will need.

    The session itself is light (a first `tools --help` waits only for it); jsonschema
    and the MCP SDK are imported after it, so a first call
    made after a pause finds them loaded.
    """
    session: concurrent.futures.Future = concurrent.futures.Future()
    idle = IdleWatch(ipython)

    def start() -> None:
        try:
            from .._session import Session

            started = Session()
            started.start_eager()
            session.set_result(started)
        except BaseException as exc:  # noqa: BLE001 - shown when the magic is used
            idle.close()
            session.set_exception(exc)
            return
        idle.wait()
        idle.close()
        started.warm_up()

    from . import _lab

    _lab.register_comm(ipython, session)  # now: a page may ask while the session starts
    threading.Thread(target=start, name="toolkernel-start", daemon=True).start()
    ipython.register_magics(ToolsMagics(ipython, session))
    # hostbash (issue 13): `%%bash` runs host bash with `tools` on its PATH, replacing IPython's.
    from ._bash_magic import HostBashMagics

    ipython.register_magics(HostBashMagics(ipython, session))
    return session


def unload(session: "concurrent.futures.Future | Any") -> None:
    """Close the session's servers and kernels, then stop toolkernel's private loop."""
    from .. import _loop

    if isinstance(session, concurrent.futures.Future):
        session = session.result() if session.done() and session.exception() is None else None
    if session is not None:
        session.close()
    _loop.stop()
