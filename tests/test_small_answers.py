"""Issue 48's small ones: what a revoke, a rewind in a notebook, a pairing and the trust question say."""

from __future__ import annotations

import argparse
import types

import pytest
from IPython.core.error import UsageError

from toolkernel._config._untrusted import NotNow, ask_to_trust
from toolkernel._frontends._answers import journal_line, manage
from toolkernel._providers._notebook._pairing import Pairing
from toolkernel._providers._notebook._stores import FileStore
from toolkernel._session import Session


@pytest.fixture
def session(tmp_path):
    s = Session(tmp_path)
    yield s
    s.close()


def test_a_revoke_says_what_it_revoked_and_what_is_left(session):
    session.approvals.always_allow("mcp_github__delete_branch")
    session.approvals.always_allow("write_file")
    said = manage(session, ["approvals", "--revoke", "mcp_github__delete_branch"])
    assert said == "revoked mcp_github__delete_branch\nleft:\n1. write_file"
    assert manage(session, ["approvals", "--revoke", "1"]) == "revoked write_file\nno lasting approvals left"
    # A rule that is not there: said, and what the person wanted holds (nothing allows it).
    assert manage(session, ["approvals", "--revoke", "mcp_github__delete_branch"]) == (
        "nothing to revoke: no lasting approval mcp_github__delete_branch\nno lasting approvals left")
    with pytest.raises(UsageError, match="no lasting approval number 3"):  # a number names a line of the list
        manage(session, ["approvals", "--revoke", "3"])


def test_a_rewind_in_a_notebook_names_the_notebooks_command_to_undo_it(session, tmp_path):
    run = session.journal.start_run("cell")
    (tmp_path / "a.txt").write_text("old\n")
    run.before_change(tmp_path / "a.txt")
    (tmp_path / "a.txt").write_text("new\n")
    run.finish()
    args = argparse.Namespace(what="rewind", run=run.id, last=False, force=False, path=[])
    said = journal_line(session, args)
    assert (tmp_path / "a.txt").read_text() == "old\n"
    assert "`%tools rewind " in said and "undoes this" in said, said
    assert "`rewind " not in said.replace("`%tools rewind ", "")


def test_a_local_pairing_names_its_notebook_once(tmp_path):
    connection = types.SimpleNamespace(describe=lambda: "python3 kernel started by this session")
    pairing = Pairing("scratch.ipynb", str(tmp_path / "scratch.ipynb"), "kernel", connection,
                      FileStore(tmp_path / "scratch.ipynb", "scratch.ipynb"))
    assert pairing.describe() == "scratch.ipynb paired with python3 kernel started by this session"
    served = Pairing("a.ipynb", "a.ipynb", "server", connection,
                     types.SimpleNamespace(describe=lambda: "a.ipynb through the Contents API of http://h/"))
    assert served.describe().endswith("; notebook a.ipynb through the Contents API of http://h/")


def test_the_trust_question_shows_the_config_and_where_it_is(tmp_path, monkeypatch):
    monkeypatch.delenv("TOOLKERNEL_TRUST_ALL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    work = tmp_path / "project"
    work.mkdir()
    (work / "toolkernel.toml").write_text('[policy]\nallow = ["write_file"]\n# \u202e a comment\n')
    shown: list[dict] = []
    asked: list[str] = []

    class Buttons:
        def __call__(self, prompt: str) -> str:
            asked.append(prompt)
            return "n"

        def show_trust(self, question: dict) -> bool:
            shown.append(question)
            return True

    ask_to_trust(work, Buttons(), NotNow())
    [config] = shown[0]["config"]
    assert config["path"] == str(work / "toolkernel.toml") and config["name"] == "toolkernel.toml"
    assert 'allow = ["write_file"]' in config["text"] and "\u202e" not in config["text"] and "\\u202e" in config["text"]
    assert f"Read it first: {work / 'toolkernel.toml'}." in shown[0]["text"]
    plain: list[str] = []
    ask_to_trust(work, lambda prompt: plain.append(prompt) or "n", NotNow())  # a front end without buttons
    assert f"Read it first: {work / 'toolkernel.toml'}." in plain[0]
