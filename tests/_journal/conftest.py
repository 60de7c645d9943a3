"""What the journal's tests share: a workspace with the state folder beside it, and a session in a
project with a given config (a host cell: journal_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_helpers import project_with


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def session_with(tmp_path, monkeypatch):
    """`session_with(config)`: a Session in a project holding `config` (closed after the test)."""
    from toolkernel._session import Session

    made = []

    def make(config: str = '[policy]\nmode = "accept-edits"\n') -> Session:
        project = project_with(tmp_path, monkeypatch, config)
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
        made.append(Session(project))
        return made[-1]

    yield make
    for session in made:
        session.close()
