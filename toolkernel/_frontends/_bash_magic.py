"""`%%bash`: IPython's magic of that name, on the host, with `tools` on its PATH (thin)."""

from __future__ import annotations

import atexit
import subprocess
import sys
import threading

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from . import _lab
from .._errors import ConfigError, Unavailable
from ._ipython import (IPythonSink, ScriptFailed, _stdin_allowed, cell_about, interrupted, refuse_persons_variables,
                       shell_args, stop_after_denial)

# The name toolkernel's notebook-run gives an agent's `%%bash` cell (`_notebook/_connection.py`).
AGENT_BASH_MAGIC = "toolkernel_agent_bash"


class _CapturingSink(IPythonSink):
    """`--out`/`--err`: that stream goes into the variable instead of the cell, as in IPython."""

    def __init__(self, keep_out: bool, keep_err: bool) -> None:
        super().__init__()
        self.keep_out, self.keep_err = keep_out, keep_err

    def stdout(self, text: str) -> None:
        if not self.keep_out:
            super().stdout(text)

    def stderr(self, text: str) -> None:
        if not self.keep_err:
            super().stderr(text)


@magics_class
class HostBashMagics(Magics):
    def __init__(self, shell, session) -> None:
        super().__init__(shell)
        self._session = session  # a Future: the session starts in the background
        self._channel = None
        self._lock = threading.Lock()

    @property
    def channel(self):
        with self._lock:
            if self._channel is None:
                from .._runners._hostbash._channel import Channel

                self._channel = Channel()
                atexit.register(self._channel.close)
            return self._channel

    @magic_arguments()
    @shell_args
    @argument("--err", metavar="VAR", help="keep stderr in VAR instead of showing it (with --bg: the pipe)")
    @argument("--bg", action="store_true", help="run in the background; see its output only through --out/--err")
    @argument("--proc", metavar="VAR", help="with --bg: keep the subprocess.Popen in VAR")
    @argument("--timeout", type=float, metavar="SECONDS", help="end the whole process group after SECONDS")
    @cell_magic
    @no_var_expand  # `{expr}` in the line would run Python before the cell's Bash rules are checked
    def bash(self, line: str, cell: str):
        """%%bash: run the cell with the host's bash; `tools` inside it reaches every tool.

        The script can do whatever you can (there is no sandbox); every `tools` call
        goes through toolkernel's approvals and the run's call limit. `--out VAR`
        keeps stdout in VAR as text instead of showing it (with --bg: the pipe).
        `display FILE` shows an image in the cell. Interrupting ends the whole
        process group.
        """
        from .._runners._hostbash._cell import started_by_agent

        return self._bash(line, cell, agent=started_by_agent(self.shell))

    @cell_magic(AGENT_BASH_MAGIC)
    @no_var_expand
    def agent_bash(self, line: str, cell: str):
        """An agent's `%%bash` cell as toolkernel's notebook-run sends it: always checked
        against the Bash(...) rules (a kernel without toolkernel has no such magic)."""
        return self._bash(line, cell, agent=True)

    def _bash(self, line: str, cell: str, *, agent: bool):
        args = parse_argstring(self.bash, line)
        if args.read_only:
            raise UsageError("%%bash: --read-only needs the sandbox, host bash has none; use %%tools --read-only")
        if args.timeout is not None and args.timeout <= 0:
            raise UsageError("%%bash: --timeout takes a number of seconds above 0")
        if args.proc and not args.bg:
            raise UsageError("%%bash: --proc needs --bg")
        if agent:
            refuse_persons_variables(args)
        from .._runners._hostbash._runner import HostBashRunner

        runner = HostBashRunner(self.channel, timeout=args.timeout, agent=agent)
        try:
            if args.bg:
                return self._background(cell, args, runner)
            return self._foreground(cell, args, runner)
        except ConfigError as exc:
            raise ScriptFailed(f"configuration error: {exc}") from None
        except Unavailable as exc:  # no bash on this host
            raise ScriptFailed(exc.message) from None

    def _foreground(self, cell: str, args, runner) -> None:
        sink = _CapturingSink(bool(args.out), bool(args.err))
        # The question with its buttons ("Always allow" where it would hold), as a %%tools cell asks.
        ask = _lab.asking_with_buttons(self._session.result(), input) if _stdin_allowed(self.shell) else None
        session = self._session.result()
        result = session.run_script(cell, sink, runner=runner, ask=ask, agent=runner.agent,
                                    about=cell_about(self.shell, cell, runner.agent, session.workdir))
        if result.denied_by_person:  # the person was told "denied; nothing ran": no report after it
            return stop_after_denial(args.no_raise_error)
        if result.run_report is not None:  # with "Always allow" offered as a %%tools cell's report has it
            _lab.display_report(self._session.result(), result.run_report)
        if args.out:
            self.shell.user_ns[args.out] = result.stdout
        if args.err:
            self.shell.user_ns[args.err] = result.stderr
        if result.interrupted:
            return interrupted(result, ask, "bash", args.no_raise_error, "; its process group was ended")
        if result.exit_code != 0 and not args.no_raise_error:
            if result.run_report is not None and result.run_report.to_json()["tools"].get("stopped"):
                raise ScriptFailed("bash was stopped at a call: the report above says which and why")
            raise ScriptFailed(f"bash exited with code {result.exit_code}")

    def _background(self, cell: str, args, runner) -> None:
        from .._runners._hostbash._runner import start_background

        started = start_background(self._session.result(), runner, cell, keep_stdout=bool(args.out),
                                   keep_stderr=bool(args.err))
        if not isinstance(started, subprocess.Popen):  # an agent's cell that may not start
            sys.stderr.write(started.stderr)
            if started.run_report is not None:
                _lab.display_report(self._session.result(), started.run_report)
            if not args.no_raise_error:
                raise ScriptFailed("bash did not start")
            return
        if args.out:
            self.shell.user_ns[args.out] = started.stdout
        if args.err:
            self.shell.user_ns[args.err] = started.stderr
        if args.proc:
            self.shell.user_ns[args.proc] = started

