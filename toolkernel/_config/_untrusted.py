"""Project config that is not used: what a session notes once, the question `%%tools` asks
before trusting a folder, and what an error it causes says (the records are `_trust.py`'s)."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Callable

from .._errors import printable
from ._config import load_config
from ._trust import FINGERPRINTED, TrustStore, fingerprints, read_config_file, trust_command

# The replies the text prompt understands, which JupyterLab's buttons type for the person.
TRUST_KEYS = {"trust": "y", "not_now": "n"}


def ignored_config_notes(workdir: Path, noted: set[str]) -> list[str]:
    """Once a session: each project config kept out for a reason trusting cannot fix
    (a folder or file anyone may write to), with the reason and the fix."""
    config = load_config(workdir)
    notes = [note for note in config.untrusted if note not in noted
             and not any(note.startswith(f"{folder}: ") for folder in config.to_trust)]
    noted.update(notes)
    return [f"toolkernel: config not used: {printable(note)}" for note in notes]


def not_trusted(to_trust: tuple[str, ...], workdir: Path, trust: str) -> str:
    """What an error that the untrusted config may have caused says of it (a server it names is
    not started, a command tool it defines is not there), with advice the reader can follow:
    `trust` is the front end's own command (`%tools trust`, or `toolkernel trust` under serve)."""
    said = []
    for folder in to_trust:
        if Path(folder) == Path(workdir):
            said.append(f"this folder's config is not trusted: {trust}")
        else:
            said.append(f"the config of {printable(folder)} is not trusted: {trust} {printable(shlex.quote(folder))}")
    return "; ".join(said)


class NotNow:
    """The folders a person answered "Not now" for: not asked about again for `hold` seconds,
    or until their config changes (a notebook asks again later, not only once a kernel)."""

    def __init__(self, hold: float = 600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._hold, self._clock = hold, clock
        self._said: dict[str, tuple[float, tuple[tuple[str, str], ...]]] = {}

    def holds(self, folder: str, files: dict[str, str]) -> bool:
        said = self._said.get(folder)
        return said is not None and self._clock() - said[0] < self._hold and said[1] == tuple(sorted(files.items()))

    def add(self, folder: str, files: dict[str, str]) -> None:
        self._said[folder] = (self._clock(), tuple(sorted(files.items())))


SHOWN_CONFIG_BYTES = 16 * 1024  # of each config file, in the question; the path names the whole


def config_texts(folder: Path, files: dict[str, str]) -> list[dict[str, str]]:
    """The config files of `folder` the question is about, each with its path and its text (the
    first SHOWN_CONFIG_BYTES, each character that is not printable escaped): what trusting lets
    run is read where it is decided. The files that config runs are named, not shown."""
    shown = []
    for name in FINGERPRINTED:
        if name not in files:
            continue
        path = folder / name
        try:
            data = read_config_file(path)
        except (OSError, ValueError) as exc:
            text = f"(cannot be read: {exc})"
        else:
            text = data[:SHOWN_CONFIG_BYTES].decode("utf-8", errors="replace")
            if len(data) > SHOWN_CONFIG_BYTES:
                text += f"\n… ({len(data) - SHOWN_CONFIG_BYTES} more bytes in the file)"
        shown.append({"name": name, "path": printable(str(path)), "text": printable(text, keep="\n\t")})
    return shown


def ask_to_trust(workdir: Path, ask: Callable[[str], str], not_now: NotNow,
                 store: TrustStore | None = None) -> list[str]:
    """Ask a person about each project folder of `workdir` whose config is not trusted (unless
    they said "Not now" lately, `not_now`); trust those they say yes to. Returns what to show
    them. An `ask` with `show_trust(question)` shows the question first (JupyterLab's buttons)."""
    said = []
    store = store or TrustStore()
    for folder in load_config(workdir).to_trust:
        files = fingerprints(Path(folder))
        if not_now.holds(folder, files):
            continue
        names = printable(", ".join(sorted(files)))
        changed = store.changed(Path(folder))[1]
        since = f"; changed since it was trusted: {printable(', '.join(changed))}" if changed else ""
        config = config_texts(Path(folder), files)
        told = (f"toolkernel: {printable(folder)} has config that is not trusted ({names}{since}); its servers,"
                " hooks, allow rules and lasting approvals are not used. Read it first: "
                + ", ".join(item["path"] for item in config) + ".")
        show = getattr(ask, "show_trust", None)
        shown = show is not None and show({"folder": printable(folder), "files": sorted(map(printable, files)),
                                           "changed": [printable(name) for name in changed], "keys": TRUST_KEYS,
                                           "config": config, "text": told})
        try:  # what was shown is not said again by the prompt (JupyterLab echoes it under the buttons)
            reply = ask(f"{'' if shown else told + ' '}Trust it as it is now? [y/N] ")
        except EOFError:  # stdin closed: nobody can answer now
            reply = ""
        if reply.strip().lower() in ("y", "yes"):
            said.append(trust_command(Path(folder), store))
        else:
            not_now.add(folder, files)
    return said
