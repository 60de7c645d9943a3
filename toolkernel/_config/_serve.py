"""`[serve]`: what `toolkernel serve` may do on the person's behalf.

    [serve]
    start_kernels = true   # `serve --server URL`: a notebook call on a notebook that has no kernel
                           # session on the server starts one (default false: the call is refused,
                           # and says how to open the notebook or allow this)

A model module (no I/O). Only trusted files count: a cloned repository's config must not start
kernels on the person's Jupyter Server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._check import boolean, known_keys, table
from ._sources import Source

_KEYS = ("start_kernels",)


@dataclass(frozen=True)
class ServeSettings:
    # None in one file's section: the file does not say (a farther file's value stands).
    start_kernels: bool | None = None

    def then(self, nearer: "ServeSettings") -> "ServeSettings":
        return ServeSettings(self.start_kernels if nearer.start_kernels is None else nearer.start_kernels)

    def settled(self) -> "ServeSettings":
        return ServeSettings(self.start_kernels is True)


def serve_section(source: Source, raw: Any) -> ServeSettings:
    checked = table(source, "serve", raw)
    source.attempt(known_keys, source, "serve", checked, _KEYS)
    start = (source.attempt(boolean, source, "serve.start_kernels", checked["start_kernels"])
             if "start_kernels" in checked else None)
    return ServeSettings(start)
