"""Project config that is not used: what a session notes once, and the question `%%tools` asks
before trusting a folder (the records themselves are `_trust.py`'s)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .._errors import printable
from ._config import load_config
from ._trust import TrustStore, fingerprints, trust_command


def ignored_config_notes(workdir: Path, noted: set[str]) -> list[str]:
    """Once a session: each project config kept out for a reason trusting cannot fix
    (a folder or file anyone may write to), with the reason and the fix."""
    config = load_config(workdir)
    notes = [note for note in config.untrusted if note not in noted
             and not any(note.startswith(f"{folder}: ") for folder in config.to_trust)]
    noted.update(notes)
    return [f"toolkernel: config not used: {printable(note)}" for note in notes]


def ask_to_trust(workdir: Path, ask: Callable[[str], str], declined: set[str],
                 store: TrustStore | None = None) -> list[str]:
    """Ask a person about each project folder of `workdir` whose config is not
    trusted (once: a "no" lands in `declined`); trust those they say yes to.
    Returns what to show them."""
    said = []
    store = store or TrustStore()
    for folder in load_config(workdir).to_trust:
        if folder in declined:
            continue
        declined.add(folder)
        names = printable(", ".join(sorted(fingerprints(Path(folder)))))
        changed = store.changed(Path(folder))[1]
        since = f"; changed since it was trusted: {printable(', '.join(changed))}" if changed else ""
        question = (f"toolkernel: {printable(folder)} has config that is not trusted ({names}{since}); its servers,"
                    " hooks, allow rules and lasting approvals are not used. Trust it as it is now? [y/N] ")
        if ask(question).strip().lower() in ("y", "yes"):
            said.append(trust_command(Path(folder), store))
    return said
