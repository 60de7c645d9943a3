"""A sink that prints to this process's stdout and stderr (Python API, command line)."""

from __future__ import annotations

import sys
from pathlib import Path


class PrintSink:
    def stdout(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def stderr(self, text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()

    def image(self, path: Path) -> None:
        pass  # the builtin already named the file on stderr

    def progress(self, tool: str, progress: float, total: float | None, message: str | None) -> None:
        from ._report import progress_line

        sys.stderr.write(progress_line(tool, progress, total, message) + "\n")
