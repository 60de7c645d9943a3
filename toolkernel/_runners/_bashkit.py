"""Bashkit as a script runner: the only module that imports `bashkit`.

Each run gets a fresh `Bash` whose `tools` command (a live command, or in scripts
with many calls a sync builtin that relays to one: see `_way`) calls the
runner-free `ToolsCommand`. Nothing the `Bash` holds may hold the `Bash` back: such a cycle
runs through Rust, where the garbage collector cannot see it, and every run
would leak the interpreter and three file descriptors. So the builtin reaches
the runner (which alone holds the `Bash`) through a weak reference.
"""

from __future__ import annotations

import asyncio
import codecs
import concurrent.futures
import ctypes
import re
import threading
import time
import weakref
from pathlib import Path

from ._caps import builtin_cap, cap_line
from .._command._command import ToolsCommand
from .._longtext import LongText, pieces, whole
from .._approval._protected import Protection
from ._guard import GuardedChmod, mount, mount_links, refuse_links
from .._config._limits import ShellLimits, limit_notice
from .._approval._run import RunEvents
from ._shell import ShellResult, kept_here

CALLS_AT_ONCE = 8  # a script's calls of sync tools at once, as of command tools (seed 003)
# Characters of one result a sync builtin returns: Bashkit (0.20.1) holds three copies of it
# against a budget of 32 MB ("live intermediate bytes"), and past that fails the run, the
# result lost. Above this a result is saved whole instead (`ToolsCommand._kept_out`).
WHOLE_RESULT = 10_000_000
WHOLE_RESULT_WHY = ("10,000,000, the most a call returns where it is held whole: in a script that writes a"
                    " file with `>` (or pipes a function in a loop that reads)")


class BashkitRunner:
    """Runs scripts in Bashkit's virtual shell, the workspace mounted (read-only on request)."""

    # Its scripts are untrusted code: a module one leaves at the workspace's top in place of an
    # installed one is moved aside when the run ends (`_shell.execute`, _shadows.py).
    sandboxed = True
    # Its commands are the shell's own builtins: they write only what they name (the journal
    # stores what a script names just before it runs, `_journal/_named.py`).
    builtins_only = True

    def __init__(self, *, read_only: bool = False) -> None:
        self.read_only = read_only
        self._bash = None
        self._lock = threading.Lock()
        self._parsed: tuple[str, object] | None = None  # the last script and its analysis

    def literal_calls(self, script: str) -> list[list[str]]:
        """The `tools` calls the script writes out in full (advisory: see _preflight)."""
        analysis = self._analysis(script)
        if analysis is None:
            return []
        return [
            list(c.args)
            for c in analysis.commands
            if c.name == "tools" and c.context != "function_body" and all(a is not None for a in c.args)
        ]

    def _analysis(self, script: str):
        """Bashkit's analysis of `script` (None: it cannot be parsed), made once for the
        before-start check and the way the script runs."""
        parsed = self._parsed
        if parsed is None or parsed[0] != script:
            parsed = self._parsed = (script, _analyze(script))
        return parsed[1]

    def run(self, script: str, command: ToolsCommand, events: RunEvents) -> ShellResult:
        env = command.dispatcher.env
        way = _way(script, self._analysis(script))
        command.result_limit = env.shell.max_result_mb * 1_000_000
        if way == "sync" and command.result_limit > WHOLE_RESULT:
            command.result_limit, command.result_limit_why = WHOLE_RESULT, WHOLE_RESULT_WHY
        watch = _CapWatch(events)
        builtin = _Builtin(command, events, weakref.ref(self))
        live = _LiveTools(builtin, watch)
        relay = _Relay(builtin, live) if way == "relayed" else None
        bash = _new_bash(builtin, live if way == "live" else None, relay, command.workdir,
                         env.guarded, self.read_only, env.shell, agent=env.agent)
        with self._lock:
            self._bash = bash
        if command.interrupted:  # the interrupt came before there was a Bash to cancel
            bash.cancel()
        try:
            result = (bash.execute_sync(script, on_output=watch.output) if way == "sync"
                      else _streamed(bash, script, watch, prelude=_Relay.FUNCTION if relay else "",
                                     settle=live.settle))
        finally:
            with self._lock:
                self._bash = None
        return _ended(result, watch)

    def run_timeout(self, command: ToolsCommand) -> float:
        """Seconds a run may take, a tool call still running included ([shell] timeout:
        Bashkit ends a script between commands, `_shell.execute` a call past it)."""
        return command.dispatcher.env.shell.timeout

    def cancel(self) -> None:
        """Stop the script at its next command (any thread)."""
        with self._lock:
            bash = self._bash
        if bash is not None:
            bash.cancel()


class _Builtin:
    """The `tools` builtin as Bashkit calls it, on the script's thread."""

    def __init__(self, command: ToolsCommand, events: RunEvents, runner: "weakref.ref[BashkitRunner]") -> None:
        from bashkit import BuiltinResult  # imported by `run` already: not imported again per call

        self.command, self.events, self.runner = command, events, runner
        self.script_thread = threading.get_ident()  # made on the script's thread, by `run`
        self.result = BuiltinResult

    def __call__(self, ctx) -> object:
        _keep_thread_state_here(self.script_thread)
        return self.returned(self.command.handle_sync(ctx.argv, ctx.stdin, ctx.cwd))  # argv: a new list each time

    def returned(self, outcome) -> object:
        """A call's outcome as the builtin returns it (whole), the script ended at a stop."""
        if outcome.stops_script:
            self.stop(outcome.stderr)
        return self.result(stdout=whole(outcome.stdout), stderr=outcome.stderr, exit_code=outcome.exit_code)

    def stop(self, error: str) -> None:
        """End the script at a call that stopped it. Bashkit drops a cancelled script's
        buffered output, so the error of the call reaches the cell by this side door."""
        self.events.stopped(error)
        runner = self.runner()
        if runner is not None:
            runner.cancel()


class _LiveTools:
    """The `tools` command as a live byte command of Bashkit's async `execute`.

    It writes a result to the script's stdout in small chunks, each awaited (Bashkit's
    backpressure), so a large result reaches the cell, a pipe or a file without a whole
    copy in Bashkit: an 8 MB result printed peaked at 1.0x its size, against 7.8x through
    a `BuiltinResult` under `execute_sync`. It runs on the script's own loop, the one that
    also runs the byte sinks, and awaits the call there (or on the private loop), so the
    output printed before a call reaches the cell while the call runs, and a write of
    its own reaches the cell only after everything printed before it.
    """

    CHUNK = 1 << 16  # characters a write: small next to any result worth streaming

    def __init__(self, builtin: _Builtin, watch: "_CapWatch") -> None:
        self.builtin, self.watch = builtin, watch
        # Every call still running, awaited by `settle` (see `call`).
        self.running: set[asyncio.Task] = set()

    async def __call__(self, ctx) -> int:
        return await self.call(ctx, list(ctx.argv), lambda: _input(ctx.stdin))

    async def call(self, ctx, argv: list[str], read_stdin) -> int:
        """One call. Calls of background jobs run at once on this loop; when one of them stops the
        script, Bashkit (0.20.1) cancels the others where they wait. A call cancelled so is not
        dropped halfway (made on the server, missing from the report): it runs on in a task of its
        own, shielded, and the run awaits it at its end (`settle`). Every call's task is kept, not
        only those seen cancelled: Bashkit may also drop a job's awaiting coroutine unawaited, and
        nothing here hears of it. An interrupt or the run's timeout still cancels the call
        (`ToolsCommand.interrupt` cancels every call in flight)."""
        call = asyncio.ensure_future(self.builtin.command.handle_async(argv, read_stdin, ctx.cwd))
        self.running.add(call)
        call.add_done_callback(self.running.discard)
        outcome = await asyncio.shield(call)
        return await self.deliver(ctx, outcome)

    async def settle(self) -> None:
        """Await the calls still running when Bashkit ended the script: each is recorded."""
        while self.running:
            await asyncio.wait(set(self.running))

    async def deliver(self, ctx, outcome) -> int:
        """Write a call's outcome to the script, or end the script at a call that stopped it."""
        if outcome.stops_script:
            await self._stop(outcome.stderr)
        else:
            await _write(ctx.stdout, outcome.stdout, self.CHUNK)
            await _write(ctx.stderr, outcome.stderr, self.CHUNK)
        return outcome.exit_code

    async def _stop(self, error: str) -> None:
        """End the script at a call that stops it, its error line shown last.

        Cancelling drops what Bashkit has not handed on yet, and inside an `if`, a pipe,
        a `$(...)` or a subshell it holds back what came before the call too, and what the
        call writes (seen with bashkit 0.20.1). So the line goes by the side door, as on the
        sync builtin, once Bashkit has handed on all it will: nothing more comes while the
        script waits here, and everything already printed arrives within milliseconds.
        """
        await self.watch.settled()
        self.builtin.stop(error)


class _Relay:
    """`tools` in a script with many calls: made in place where that is cheap, handed to
    the live command where it is not.

    A live call costs Bashkit two trips between its thread and the script's loop (about
    130 us, against 2 for a sync builtin: bench_builtin_paths.py), which a loop of quick
    calls pays on every call. A sync builtin cannot write in chunks (a printed 8 MB result
    peaked at 8x its size), and while it runs, Bashkit hands on no output before it. So
    `tools` is a shell function (`FUNCTION`): the builtin `_tools_now` makes the call
    (`ToolsCommand.handle_sync(now_only=True)`) and returns a small result itself; a large
    result, a call that stops the script, a call that may wait on a hook or a person, and
    the first call of a run and the first `FLUSH_EVERY` seconds after the last that went
    this way (so that what the script printed reaches the cell), it leaves with the live
    command `_tools_rest`, which the function runs next. So what a loop prints waits at
    most for one call made in place, and only what it printed in the last `FLUSH_EVERY`.
    `command tools`, `xargs tools` and `$t` reach the builtin `tools`, which returns any
    result whole.

    Not for a loop that reads its input (`while read`): Bashkit (0.20.1) gives a function
    that starts a pipeline in such a loop all of the loop's input when that input comes
    from a live command, and the loop ends after one turn (`tests/test_relay.py`).
    """

    LATER = 199  # `_tools_now`'s status that says "run `_tools_rest`"
    # Characters of output past which a result is written in chunks: below it the copies a
    # sync builtin makes (about 7x the result) stay under 2 MB, and cost less than a trip.
    LARGE = 1 << 18
    FLUSH_EVERY = 0.05  # seconds: the longest the cell waits for a loop's printed lines
    # What a tool itself exits with is kept: `_tools_rest` with nothing left exits LATER too.
    # The rare branch is a function of its own (`$?` in it is `_tools_now`'s status): Bashkit
    # pays for a function's whole body on each call, taken or not, and `tools` in a loop is
    # called thousands of times (5-7 us a call less, bashkit 0.20.1).
    FUNCTION = ("tools() { _tools_now \"$@\" || _tools_after; };"
                " _tools_after() { local _tools_status=$?; if [ \"$_tools_status\" = %d ];"
                " then _tools_rest; else return \"$_tools_status\"; fi; }" % LATER)

    def __init__(self, builtin: _Builtin, live: _LiveTools) -> None:
        self.builtin, self.live = builtin, live
        # One at most: the function runs `_tools_rest` right after. Background jobs (`&`) can
        # run between the two: a job whose `_tools_now` finds the slot taken makes its call in
        # place (a `_tools_rest` always finds the entry its own `_tools_now` left, as only the
        # `_tools_rest` of the job that filled the slot empties it). `_way` gives a script with
        # background jobs the live command anyway, where they run at once.
        self.left: tuple | None = None
        self.left_lock = threading.Lock()
        self.flushed = float("-inf")  # the first call goes by the live command: it may be a slow one

    def now(self, ctx) -> object:
        """The builtin `_tools_now`, on Bashkit's thread."""
        builtin = self.builtin
        _keep_thread_state_here(builtin.script_thread)
        argv, stdin = ctx.argv, ctx.stdin
        outcome = None
        if time.monotonic() - self.flushed < self.FLUSH_EVERY:
            outcome = builtin.command.handle_sync(argv, stdin, ctx.cwd, now_only=True)
        if outcome is None:
            return self._later(("call", argv, stdin)) or builtin(ctx)
        if (outcome.stops_script or len(outcome.stdout) + len(outcome.stderr) > self.LARGE
                or type(outcome.stdout) is not str):
            return self._later(("outcome", outcome)) or builtin.returned(outcome)
        return builtin.result(stdout=outcome.stdout, stderr=outcome.stderr, exit_code=outcome.exit_code)

    def _later(self, what: tuple) -> object | None:
        """LATER, `what` left for `_tools_rest`; None when another job's entry holds the slot."""
        with self.left_lock:
            if self.left is not None:
                return None
            self.left = what
        return self.builtin.result(exit_code=self.LATER)

    async def rest(self, ctx) -> int:
        """The live command `_tools_rest`: what `_tools_now` left, on the script's loop."""
        if self.left is None:
            return self.LATER
        # From its start: after a slow call, the next goes this way too, so that what the
        # script prints between slow calls reaches the cell before each.
        self.flushed = time.monotonic()
        with self.left_lock:
            (kind, *what), self.left = self.left, None
        if kind == "call":
            argv, stdin = what
            return await self.live.call(ctx, argv, _given(stdin))
        return await self.live.deliver(ctx, what[0])


def _given(stdin: str | None):
    async def read() -> str | None:
        return stdin
    return read


async def _input(stdin) -> str | None:
    """All of a pipe into the command, as the sync builtin's `ctx.stdin` has it (None: no pipe).
    Read only when the call may take its input from it: each read is a trip to Bashkit's
    thread. Reading takes nothing from a `while read` loop's own input (bashkit 0.20.1)."""
    parts = [chunk async for chunk in stdin]
    return b"".join(parts).decode("utf-8", "replace") if parts else None


async def _write(stream, text: str | LongText, chunk: int) -> None:
    try:
        for piece in pieces(text, chunk):  # a `LongText` comes from its file, a piece at a time
            await stream.write(piece.encode("utf-8", "replace"))
    except BrokenPipeError:
        pass  # the reader left early (`tools x | head`): like a producer that SIGPIPE ends, quietly


_kept = threading.local()


def _keep_thread_state_here(script_thread: int) -> None:
    if threading.get_ident() != script_thread:
        _keep_thread_state()  # called on Bashkit's thread: under the async `execute`


def _keep_thread_state() -> None:
    """Keep the Python thread state of the Bashkit thread that calls the builtin.

    Under the async `execute`, Bashkit calls a sync builtin on its own tokio threads,
    which Python did not start: pyo3 makes a Python thread state for each entry into
    Python and deletes it on the way out, three times a call. Everything Python keeps
    per thread state starts again each time (asyncio's running-loop cache, contextvars,
    `threading.local`), which cost a `tools` call 100-300 us more than under
    `execute_sync`. One `PyGILState_Ensure` that is never released keeps the state for
    the thread's life (the documented way for a foreign thread to keep one); pyo3's own
    ensure/release pairs then reuse it. Bashkit's tokio workers live as long as the
    process, so this keeps a handful of thread states, never one per call.
    """
    if getattr(_kept, "state", False):
        return
    _kept.state = True
    pythonapi = getattr(ctypes, "pythonapi", None)  # CPython's C API; elsewhere only slower
    if pythonapi is not None:
        pythonapi.PyGILState_Ensure()


def _new_bash(builtin: _Builtin, live: "_LiveTools | None", relay: "_Relay | None", workdir: Path,
              plan: Protection, read_only: bool, limits: ShellLimits, *, agent: bool = False):
    from bashkit import Bash, ExecutionProfile, FileSystem

    builtins = {"chmod": GuardedChmod(plan, read_only), "curl": _no_network, "wget": _no_network,
                "ln": refuse_links, "link": refuse_links}
    if live is None:
        builtins["tools"] = builtin
    if relay is not None:
        builtins["_tools_now"] = relay.now
    # Interactive lifts Standard's 1 MiB caps on the script's output and on `jq` to 10 MiB;
    # what stays hard ends the run loudly (see _caps.py).
    bash = Bash(custom_builtins=builtins, cwd=str(workdir), profile=ExecutionProfile.Interactive,
                **limits.bashkit_options())
    if live is not None:
        bash.add_command("tools", live)
    if relay is not None:
        bash.add_command("_tools_rest", relay.rest)
    # Mounted at run time rather than through `mounts=`: the constructor prints a warning
    # for every writable mount to the process's stderr, which a kernel shows in the cell.
    bash.mount(str(workdir), FileSystem.real(str(workdir), writable=not read_only))
    mount(bash, plan, agent=agent)  # what no script may write (see _guard.py)
    if not read_only:
        mount_links(bash, plan)  # and the links that would lead past those mounts
    return bash


class _Analyzer:
    """One `Bash` kept for parsing scripts (`Bash.analyze`): making one costs about 0.23 ms,
    parsing a short script with it about 2 us. Runs of several threads share it, in turns."""

    def __init__(self) -> None:
        self._bash = None
        self._lock = threading.Lock()

    def __call__(self, script: str):
        """The analysis of `script`; None when Bashkit cannot parse it (it then fails as it runs)."""
        with self._lock:
            if self._bash is None:
                from bashkit import Bash

                self._bash = Bash()
            try:
                return self._bash.analyze(script)
            except Exception:  # noqa: BLE001 - any failure to parse is the run's to report
                return None


_analyze = _Analyzer()

# The commands Bashkit (0.20.1) streams: under the async `execute` (its byte sinks), the output
# of `cat`, `grep`, `tr`, `seq`, `yes` and of a live command (`tools`) that goes to a file is
# appended to it 4 KiB at a time, and its real filesystem appends by writing the whole file anew
# (copied to a temporary sibling, synced, renamed): `cat` of 2 MB into a file took 5.6 s, of 6.9
# MB 51.5 s, and wrote 124 times the file's size. Under `execute_sync` these commands do not
# stream and a sync builtin returns its result whole: the file is written once.
_STREAMING = frozenset({"cat", "grep", "tr", "seq", "yes", "tools"})
# Commands that run a command their arguments name, which the analysis does not name.
_RUNS_OTHERS = frozenset({"xargs", "find", "timeout", "env", "command", "exec", "builtin", "nice", "nohup",
                          "parallel", "watch"})
_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
# `>& file` and `&>> file`, which the analysis (bashkit 0.20.1) leaves out
_DUP_TO_FILE = re.compile(r">&\s*[^\s\d-]|&>>")


def streams_to_a_file(analysis, script: str) -> bool:
    """Whether the script may redirect a command Bashkit streams into a file (see _STREAMING):
    it writes a file by redirection (anywhere in it), and names a streaming command, one that
    runs a command its arguments name (`_RUNS_OTHERS`: `xargs cat`), or one the analysis cannot
    name (`$cmd`, `eval`)."""
    if analysis is None:
        return False
    unknown = analysis.truncated or analysis.is_opaque
    writes = (any(r.is_write and _a_file(r.path) for r in analysis.redirects)
              or bool(_DUP_TO_FILE.search(script)) or (unknown and ">" in script))
    names = analysis.command_names
    return writes and bool(unknown or analysis.has_dynamic_commands or _STREAMING.intersection(names)
                           or _RUNS_OTHERS.intersection(names))


def _a_file(path: str | None) -> bool:
    return path is None or (path not in _NOT_FILES and not path.startswith("/dev/fd/"))


_LOOPS = re.compile(r"\b(for|while|until|select|xargs)\b")
# A loop that reads its input: `read`, or a loop a pipe or a redirection feeds.
_READS = re.compile(r"(?<![\w-])(read|mapfile|readarray)(?![\w-])|\|\s*(for|while|until|select)\b|\bdone\s*<")
_FUNCTIONS = re.compile(r"\(\s*\)\s*[{(]|\bfunction\s")
# `&` that starts a background job: not `&&`, `|&`, `>&2`, `<&0` or `&>file` (a quoted `&` only
# costs the relay's speed).
_BACKGROUND = re.compile(r"(?<![&|<>])&(?![&>])")
_MANY_CALLS = 10


def _way(script: str, analysis) -> str:
    """How Bashkit runs the script (`analysis`: Bashkit's, None when it cannot be parsed):
    "live", "relayed", "sync" or "streamed".

    A script that calls `tools` (literally: a name built at run time, such as `$t`, reaches
    the sync builtin, which returns a result whole) has `tools` as a live command ("live"),
    so a result of any size streams and what came before a call reaches the cell while it
    runs. A live call costs Bashkit about 130 us more than a sync builtin (the call and each
    write are trips between Bashkit's thread and the script's loop; bench_builtin_paths.py),
    which only counts when there are many calls: a script with a loop, or with many calls
    written out, has the relay (`_Relay`), which makes quick calls in place, unless it reads
    its input in a loop (see `_Relay`). A script with background jobs (`&`) has the live
    command too: Bashkit (0.20.1) runs background jobs' live commands at once, while a sync
    builtin (the relay's calls in place) holds every job until it returns. A script that reads
    its input and defines a function keeps `execute_sync` ("sync"): there a printed result peaks
    at about 8x its size, but Bashkit's function trap (`_Relay`) needs a live command, which
    this way has not; its background jobs' calls are all made, one after another.
    A script that calls no tool streams ("streamed"), but one made only of quick commands
    (`_QUICK`) and no loop, which runs with `execute_sync` ("sync"): see `_QUICK`.

    A script that may redirect a streaming command into a file (`streams_to_a_file`) keeps
    `execute_sync` too, where the file is written once (`cat` of 2 MB into a file: 5.6 s
    streamed), unless it has background jobs, whose calls run at once only live. So does a loop
    with such a redirect: under the relay, `tools` is a shell function, and Bashkit holds a
    function's redirected output whole, cut at 10 MiB without a word.
    """
    if streams_to_a_file(analysis, script) and not _BACKGROUND.search(script):
        return "sync"
    if "tools" not in script:
        return "sync" if _only_quick(analysis) and not _LOOPS.search(script) else "streamed"
    if _READS.search(script):
        return "sync" if _FUNCTIONS.search(script) else "live"
    if _BACKGROUND.search(script):  # background jobs' live calls run at once; the relay's would not
        return "live"
    if _LOOPS.search(script) or len(re.findall(r"\btools\b", script)) > _MANY_CALLS:
        return "relayed"
    return "live"


# Commands that end at once and print little: a script of only these, with no loop (no tool, no
# function of its own, none the analysis cannot name), runs with `execute_sync`. Bashkit's async
# `execute` with byte sinks costs a run about 0.5 ms more (bashkit 0.20.1: 0.48 ms for `true`, 0.01
# under `execute_sync`), and buys such a script nothing: only the commands of `_STREAMING` are
# handed on in chunks, every other command's output as it ends under either; and a cancel lands
# between commands under either. Not `sleep`, `wait` or `read` (under `execute_sync` a cancel waits
# for them to end), nor a command that may work long on many files (`find`, `rm -r`, `ls -R`). Not
# a loop: `execute_sync` hands on each command's output by itself, which a loop of 20,000 `echo`s
# made 1.5-2x slower than the byte sinks, which join what comes in quick succession.
_QUICK = frozenset({
    "echo", "printf", "true", "false", ":", "cd", "pwd", "export", "unset", "set", "shopt", "local",
    "declare", "typeset", "readonly", "test", "[", "[[", "exit", "return", "shift", "let", "basename",
    "dirname", "date", "type", "hash", "alias", "unalias", "mkdir", "touch", "whoami", "hostname",
})


def _only_quick(analysis) -> bool:
    return (analysis is not None and not (analysis.truncated or analysis.is_opaque or analysis.has_dynamic_commands)
            and _QUICK.issuperset(analysis.command_names))


def _streamed(bash, script: str, watch: "_CapWatch", prelude: str = "", settle=None):
    """Run the script with its output streamed in small byte chunks.

    `execute_sync` hands each command's whole output to `on_output` and keeps the script's
    whole stdout besides: an 8 MB `cat` peaked at about 8x its size. The byte sinks of the
    async `execute` hold neither (about 1.1x). A sync builtin (`tools` as a `$t` the script
    builds; `chmod`) blocks here the Bashkit thread that would hand on the output before it,
    so that output waits until the interpreter next waits on something (`sleep`, a pipe,
    the end); the live `tools` command does not (`_LiveTools`). Seen with bashkit 0.20.1.
    """
    out, err = codecs.getincrementaldecoder("utf-8")("replace"), codecs.getincrementaldecoder("utf-8")("replace")

    async def stdout(chunk: bytes) -> None:
        watch.output(out.decode(chunk), "")

    async def stderr(chunk: bytes) -> None:
        watch.output("", err.decode(chunk))

    async def execute():  # Bashkit's future must be made with the loop running
        if prelude:  # what the script finds defined (a run keeps its functions from one execute to the next)
            await bash.execute(prelude, stdout=stdout, stderr=stderr)
        try:
            return await bash.execute(script, stdout=stdout, stderr=stderr)
        finally:
            if settle is not None:  # calls Bashkit left running when it ended the script
                await settle()

    try:
        loop = kept_here("bashkit-loop", _CallbackLoop)
        if loop is None:  # not on a script thread (a bench, a test): a loop of its own
            with asyncio.Runner(loop_factory=_CallbackLoop) as runner:
                return runner.run(execute())
        return _run_on(loop, execute())
    finally:
        watch.output(out.decode(b"", final=True), err.decode(b"", final=True))


def _run_on(loop: asyncio.AbstractEventLoop, coro):
    """Run `coro` to its end on `loop`, kept by the script thread between runs (making and
    closing one cost a run about 0.1-0.2 ms), and leave nothing of the run on it: a task still
    pending is cancelled and awaited, and an async generator left open is closed, as
    `asyncio.Runner` does before it closes a loop."""
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            # The loop's own record of the async generators it started (asyncio keeps it for
            # `shutdown_asyncgens`, which a loop that runs again cannot call).
            closing = [generator.aclose() for generator in list(getattr(loop, "_asyncgens", ()))]
            if left or closing:
                loop.run_until_complete(asyncio.gather(*left, *closing, return_exceptions=True))
        finally:
            asyncio.set_event_loop(None)


class _CallbackLoop(asyncio.SelectorEventLoop):
    """The loop that awaits `execute`: it runs what Bashkit hands it in a copy of the
    context Bashkit names.

    Bashkit (0.20.1) calls a sync builtin on its own thread inside one
    `contextvars.Context`, and schedules its byte-sink calls on this loop in that same
    Context. A Context can be entered only once at a time: a sink call that came while a
    builtin ran (`chmod` just after a large output) failed with "cannot enter context",
    its chunk was never acknowledged, and the run hung until [shell] timeout (a day by
    default). A copy carries the same values and can be entered while the original is.
    """

    keep_free = True  # it runs the byte sinks: a sync tool runs on a thread (`_loop.may_block`)

    def run_in_executor(self, executor, func, *args):
        # Background jobs' calls of sync tools run at once on these threads: asyncio's own pool
        # has min(32, CPUs + 4), which held the seventh of 8 calls on a machine of two cores.
        # Made at the first such call: a pool made for every run, and the thread that shuts it
        # down as the run ends, cost a run without one about 0.15 ms.
        if executor is None and not self._pool_set:
            self._pool_set = True
            self.set_default_executor(concurrent.futures.ThreadPoolExecutor(CALLS_AT_ONCE, "toolkernel-call"))
        return super().run_in_executor(executor, func, *args)

    _pool_set = False

    def call_soon_threadsafe(self, callback, *args, context=None):
        return super().call_soon_threadsafe(callback, *args, context=None if context is None else context.copy())


def _no_network(ctx):
    # Bashkit's own curl explains its build features in four lines; say what to use instead.
    from bashkit import BuiltinResult

    return BuiltinResult(stdout="", exit_code=1, stderr="no network in the sandbox: fetch a URL with"
                         " `tools web-fetch url=...` (the host's programs run in %%bash)\n")


_RAISABLE = ("loop iteration", "maximum commands", "command limit", "timed out", "timeout", "memory")


class _CapWatch:
    """Passes output on, noting a builtin that Bashkit cut short (it says so on stderr only)."""

    QUIET = 0.1  # seconds without output that say Bashkit has handed on all it had
    MOST = 2.0

    def __init__(self, events: RunEvents) -> None:
        self.events = events
        self.cut_builtin: str | None = None
        self.last = time.monotonic()

    def output(self, stdout: str, stderr: str) -> None:
        self.last = time.monotonic()
        if stderr and self.cut_builtin is None:
            self.cut_builtin = builtin_cap(stderr)
        if stdout or stderr:
            self.events.output(stdout, stderr)

    async def settled(self) -> None:
        """Wait (on the loop that runs the byte sinks) until no output came for QUIET seconds."""
        start = time.monotonic()
        while time.monotonic() - start < self.MOST:
            wait = self.QUIET - (time.monotonic() - max(self.last, start))
            if wait <= 0:
                return
            await asyncio.sleep(wait)


def syntax_notice(error: str) -> str:
    """The last line of a script Bashkit could not parse: where, and that none of it ran."""
    return f"toolkernel: the script has a syntax error, so none of it ran: {error}\n"


def _ended(result, watch: _CapWatch) -> ShellResult:
    """The run's result; a limit or a hard cap met on the way makes it fail, and its last
    line says which (Bashkit reports its own limits in `error`, not through on_output)."""
    error = str(result.error or "")
    if error.startswith("parse error"):  # Bashkit parses the whole script before it runs any of it
        return ShellResult(result.exit_code or 2, "", syntax_notice(error))
    # A limit the [shell] table sets says where to raise it; Bashkit's other budgets are hard caps.
    raisable = any(word in error for word in _RAISABLE)
    cap = cap_line(builtin=watch.cut_builtin, stdout_cut=bool(result.stdout_truncated),
                   budget=None if raisable else error)
    notice = limit_notice(error) if error and "cancelled" not in error and not cap else ""
    exit_code = result.exit_code or (1 if cap or notice else 0)
    return ShellResult(exit_code, "", notice + cap, output_cut=bool(result.stdout_truncated))
