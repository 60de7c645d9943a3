"""What a shell script names as it writes (issue 44, item 2): the targets of `rm`, `mv`, `cp`,
`sed -i`, `>`, `tee`..., read from Bashkit's parse of the script (`Bash().analyze`, which runs
nothing), so that their prior contents are stored just before the run instead of a copy of the
whole folder ahead of it.

Advisory, like every static reading of a script: the analysis is *complete* only when every
command is one whose writes are known, and each of their words (and every redirect's target,
and every `cd`) is written out literally. Anything else (a variable, `eval`, a loop's `$f`, a
program that writes where it likes: `python3`, `tar`, `xargs`...) makes it incomplete, and the
run is then recorded as a host `%%bash` cell is: what it names, plus the most recently changed
files within `[rewind] shell_mb`. A file the run changes that neither covered is said to be
"not restorable", with the reason, in the cell and in `changes`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

# Commands that write nothing, or only what a redirect names (checked with it).
_READ_ONLY = frozenset("""
    : [ [[ echo printf cat head tail grep egrep fgrep rg wc ls find jq sort cut tr seq date sleep true false
    test pwd export set unset read tools base64 diff cmp basename dirname realpath readlink stat file du df env
    printenv which type exit return local declare let shift wait jobs nl od hexdump xxd md5sum sha1sum
    sha256sum cksum column rev fold expand unexpand paste join comm yes expr bc awk mkdir history alias
    unalias source . shopt getopts printf hash umask times trap continue break
""".split())
# Commands whose every path argument (options aside) may be written or removed.
_ALL_ARGS = frozenset("rm rmdir touch truncate chmod chown shred unlink".split())
_LAST_ARG = frozenset("cp install ln".split())  # the last argument (the target), when more than one
_BOTH = frozenset({"mv"})  # every argument: the sources go, the target may be replaced


@dataclass(frozen=True)
class Named:
    """The paths a script names as it writes (as written: relative to its folder, globs as
    they are), and whether that is all it can write."""

    paths: frozenset[str]
    complete: bool
    folders: frozenset[str] = frozenset()  # the `cd` targets: a relative path may be below one


NOTHING = Named(frozenset(), False)
_analyzer = None
_analyzer_lock = threading.Lock()


def named(script: str) -> Named:
    """What `script` names as it writes; incomplete when Bashkit cannot say."""
    global _analyzer
    try:
        from bashkit import Bash

        with _analyzer_lock:  # one analyzer kept: a `Bash` a run cost a shell run its time
            if _analyzer is None:
                _analyzer = Bash()
            analysis = _analyzer.analyze(script)
    except Exception:  # noqa: BLE001 - a script Bashkit cannot parse fails when it runs
        return NOTHING
    return of_analysis(analysis)


def of_analysis(analysis) -> Named:
    paths: set[str] = set()
    folders: set[str] = set()
    complete = not analysis.is_opaque and not analysis.has_dynamic_commands and not analysis.truncated
    for redirect in analysis.redirects:
        if redirect.is_write:
            if redirect.path is None:
                complete = False
            elif redirect.path not in ("/dev/null", "/dev/stdout", "/dev/stderr"):
                paths.add(redirect.path)
    for command in analysis.commands:
        if command.name is None:
            complete &= bool(getattr(command, "is_assignment_only", False))
            continue
        args = list(command.args)
        if command.name == "cd":
            if args and args[0] is not None:
                folders.add(args[0])
            else:
                complete = False
            continue
        written, known = _written(command.name, args)
        paths |= written
        complete &= known
    return Named(frozenset(paths), complete, frozenset(folders))


def _written(name: str, args: list[str | None]) -> tuple[set[str], bool]:
    """The paths one command may write, and whether those are all."""
    words = [arg for arg in args if arg is None or not arg.startswith("-")]
    if name == "sed":
        in_place = any(arg is not None and arg.startswith("-i") for arg in args)
        if not in_place:
            return set(), None not in args
        files = words[1:] if not any(arg in ("-e", "-f") for arg in args) else words
        return {w for w in files if w is not None}, None not in args
    if name in ("tee", "dd") or name in _ALL_ARGS or name in _BOTH:
        if name == "dd":
            outputs = {arg[3:] for arg in args if arg is not None and arg.startswith("of=")}
            return outputs, None not in args
        return {w for w in words if w is not None}, None not in words
    if name in _LAST_ARG:
        if len(words) < 2:
            return set(), None not in words
        return ({words[-1]} if words[-1] is not None else set()), None not in words
    if name == "sort" and any(arg is None or arg.startswith("-o") for arg in args):
        at = [i for i, arg in enumerate(args) if arg == "-o"]
        target = args[at[0] + 1] if at and at[0] + 1 < len(args) else None
        return ({target} if target else set()), target is not None
    if name == "find" and any(arg is None or arg in ("-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint",
                                                     "-fprintf", "-fls") for arg in args):
        return set(), False
    if name == "awk" and any(arg is None or ">" in arg or "system" in arg for arg in args):
        return set(), False  # a program that writes files, or runs commands, of its own
    if name in _READ_ONLY:
        return set(), True
    return set(), False  # a program whose writes nobody can read from its words
