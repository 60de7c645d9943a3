"""What both script magics (`%%tools`, `%%bash`) share: the IPython sink, the failure that stops
"Run All", their common options, whether a person can answer `input()` now."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from . import _report
from ._cli_sink import PrintSink


class ScriptFailed(Exception):
    """A `%%tools` cell whose script exited non-zero: stops "Run All"."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback
        return [f"{type(self).__name__}: {self}"]


def stop_after_denial(no_raise_error: bool) -> None:
    """A person denied a call before the start: "denied; nothing ran" said so, and the cell
    still fails, so "Run All" does not go on past a script that did not run."""
    if not no_raise_error:
        raise ScriptFailed("the cell stops here: a call was denied before the start")


def interrupted(result, ask, what: str, no_raise_error: bool, also: str = "") -> None:
    """An interrupted cell ends in one true line, and fails, so "Run All" stops: what was cut
    short (a question a person was asked, or the script), not an exit code nothing returned.
    `also`: what else the interrupt did (host bash: its process group was ended)."""
    message = f"{what}: {interrupted_how(result, ask)}{also}"
    if no_raise_error:
        sys.stderr.write(message + "\n")
        return
    raise ScriptFailed(message)


def interrupted_how(result, ask) -> str:
    from .._approval._run import CANCELLED, described_call

    call = getattr(ask, "cancelled", None)  # the question on the screen when the interrupt came
    report = result.report
    if call is None and report is not None:
        call = next((a for a in report["tools"].get("asked", ()) if a["answer"] == CANCELLED), None)
    if call is not None:
        return (f"interrupted while a person was asked about {described_call(call)}: the question is"
                " cancelled and the call was not made")
    if not result.stdout and not result.stderr:
        return "interrupted before the script printed anything"
    return "interrupted; the output above is what the script printed before"


# The note `tools` writes for each image a tool returned (`_command._outcome`), alone in a write.
_IMAGE_NOTES = re.compile(r"(?:tools: image saved to [^\n]*\n)+")


class IPythonSink(PrintSink):
    """Prints like `PrintSink`; shows images inline and progress as one updating line."""

    def __init__(self) -> None:
        self._progress = None

    def image(self, path: Path) -> None:
        show_image(path)

    def stderr(self, text: str) -> None:
        # `tools`' note of where an image went is no error: not in the cell's error colour.
        # (A script's stderr keeps it: its stdout is the script's data.)
        if _IMAGE_NOTES.fullmatch(text):
            return super().stdout(text)
        super().stderr(text)

    def progress(self, tool: str, progress: float, total: float | None, message: str | None) -> None:
        from IPython.display import display

        text = _report.progress_line(tool, progress, total, message)
        if self._progress is None:
            self._progress = display({"text/plain": text}, raw=True, display_id=True)
        else:
            self._progress.update({"text/plain": text}, raw=True)


class KeptSink(IPythonSink):
    """`--out VAR`: stdout goes into VAR instead of the cell, as `%%bash --out` (and IPython's
    own script magics) keep it; stderr, images and progress still show."""

    def stdout(self, text: str) -> None:
        pass


def show_image(path: Path) -> None:
    from IPython.display import Image, display

    try:
        display(Image(filename=str(path)))
    except (OSError, ValueError):
        sys.stderr.write(f"tools: could not show image {path}\n")


def shell_args(magic):
    """The options every script magic shares (`%%tools`, and `%%bash` with the `tools` shim)."""
    for option in (
        argument("--read-only", action="store_true",
                 help="mount the working directory read-only and deny every tool call that is not a read"),
        argument("--no-raise-error", action="store_true", help="do not raise when the script exits non-zero"),
        argument("--out", metavar="VAR", help="keep the script's stdout in VAR instead of showing it"
                 " (a tools cell parses it when it is JSON)"),
    ):
        magic = option(magic)
    return magic


def _stdin_allowed(shell) -> bool:
    """Whether a person can answer `input()` now (never in headless runs)."""
    kernel = getattr(shell, "kernel", None)
    if kernel is not None:
        return bool(getattr(kernel, "_allow_stdin", False))
    return sys.stdin is not None and sys.stdin.isatty()


# The only variables a cell an agent sent may set (`--out`, `--err`, `--proc`): never a person's.
AGENT_PREFIX = "agent_"


def refuse_persons_variables(args) -> None:
    """A cell an agent sent keeps output only in variables named `agent_...`: one that set the
    person's `build_dir` changed what the person's next `!rm -rf {build_dir}` runs."""
    for flag in ("out", "err", "proc"):
        name = getattr(args, flag, None)
        if name and not name.startswith(AGENT_PREFIX):
            raise UsageError(f"an agent's cell keeps --{flag} only in a variable named {AGENT_PREFIX}..."
                             f" (not {name!r}): the person's variables are theirs")


def cell_about(shell, script: str, agent: bool, workdir: Path) -> dict[str, Any]:
    """Where a script magic's run came from, as the journal keeps it for a person's list of changes:
    the notebook (the one a Jupyter Server started this kernel for), the cell (its id, and its count
    as `In [n]` shows it), the script's first line, and whether a person or an agent sent it."""
    about: dict[str, Any] = {"who": "agent" if agent else "person"}
    first = next((line.strip() for line in script.splitlines() if line.strip()), "")
    if first:
        about["first_line"] = first[:200]
    count = getattr(shell, "execution_count", None)
    if isinstance(count, int):
        about["count"] = count
    kernel = getattr(shell, "kernel", None)
    try:
        metadata = (kernel.get_parent("shell") or {}).get("metadata") or {} if kernel is not None else {}
    except Exception:  # noqa: BLE001 - no cell id: the list names the cell by its count
        metadata = {}
    if isinstance(metadata.get("cellId"), str):
        about["cell_id"] = metadata["cellId"]
    named = os.environ.get("JPY_SESSION_NAME")
    if named:
        path = os.path.realpath(named if os.path.isabs(named) else os.path.join(os.getcwd(), os.path.basename(named)))
        relative = os.path.relpath(path, os.path.realpath(workdir))
        about["notebook"] = relative if not relative.startswith("..") else path
    return about
