"""`${VAR}` and `${VAR:-default}` in config values, from toolkernel's environment.

What a variable expanded to may be a secret (a token in a URL or an argument), so the
values are remembered for masking, and unset variables are remembered so that what
needs them is reported unusable rather than started with an empty string.
"""

from __future__ import annotations

import re
import sys
from types import MappingProxyType
from pathlib import Path
from typing import Iterable, Mapping

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
EMPTY: Mapping[str, str] = MappingProxyType({})
# The Python toolkernel runs in, unless the environment sets it: a server written in Python (the
# demo's) starts with the kernel's own interpreter, not whatever `python3` comes first on the PATH
# (a kernel from another environment found no toolkernel there). A path, not a secret: not masked.
OWN_PYTHON = "TOOLKERNEL_PYTHON"


class Expander:
    """Expands `${VAR}` and `${VAR:-default}`; remembers the variables that were unset."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.missing: list[str] = []
        self.values: list[str] = []  # what came from the environment: may be secret

    def __call__(self, text: str) -> str:
        return _VARIABLE.sub(self._value, text)

    def _value(self, match: re.Match[str]) -> str:
        name, default = match[1], match[2]
        value = self.environ.get(name)
        if value is None and name == OWN_PYTHON:
            return sys.executable
        if default is not None and not value:
            return default
        if value is None:
            if name not in self.missing:
                self.missing.append(name)
            return ""
        self.values.append(value)
        return value

    def each(self, values: Iterable[str]) -> tuple[str, ...]:
        return tuple(self(v) for v in values)

    def table(self, table: Mapping[str, str]) -> Mapping[str, str]:
        return MappingProxyType({k: self(v) for k, v in table.items()}) if table else EMPTY


def resolve_cwd(cwd: str, base: Path, home: Path) -> str:
    """A server's `cwd`, `${VAR}`s expanded: a relative one is relative to the file that names
    it (`base`, its folder), not to the kernel; `~` is the home folder."""
    if cwd == "~" or cwd.startswith("~/"):
        cwd = str(home) + cwd[1:]
    return str(base / cwd)
