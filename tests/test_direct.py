"""Direct calls (`%tools x`, `toolkernel.call`): one worker thread with its own loop
(toolkernel/_frontends/_direct.py). A real session, real tools, a real demo MCP server."""

from __future__ import annotations

import threading

import pytest

from kernel_helpers import github_toml, isolated_env, write_config
from toolkernel import tool
from toolkernel._errors import CallError
from toolkernel._frontends._direct import call_argv
from toolkernel._session import Session

seen: list[str] = []


@tool("where", description="Say which thread runs it (a test tool).", kind="read",
      input_schema={"type": "object", "properties": {"then": {"type": "string"}}})
def where(arguments, ctx):
    seen.append(threading.current_thread().name)
    return threading.current_thread().name


@pytest.fixture
def session(tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "work"
    work.mkdir()
    write_config(work, github_toml())
    opened = Session(work)
    opened.register_tools([where])
    yield opened
    opened.close()


def test_a_plain_tool_runs_on_the_direct_calls_thread_in_place(session):
    # One hand-off: not the private loop, which would pass a plain function on to a worker thread.
    assert call_argv(session, ["where"]) == "toolkernel-direct"
    assert call_argv(session, ["where"]) == "toolkernel-direct"


def test_mcp_calls_and_help_still_reach_the_private_loop(session):
    pull = call_argv(session, ["github", "get-pull", "repo=acme/api", "number=101"])
    assert pull["title"] == "Add rate limiting to /search"
    assert "get-pull" in call_argv(session, ["github", "--help"])


def test_a_hook_may_make_a_direct_call_of_its_own(session):
    @session.hooks.before_call("github *")
    def look_first(call):
        call_argv(session, ["where"])  # on the direct calls' thread: must not wait on itself

    seen.clear()
    assert call_argv(session, ["github", "get-pull", "repo=acme/api", "number=101"])["number"] == 101
    assert len(seen) == 1


def test_a_failed_direct_call_raises_its_coded_error(session):
    with pytest.raises(CallError) as raised:
        call_argv(session, ["github", "no-such-tool"])
    assert raised.value.code == "unknown_command"
