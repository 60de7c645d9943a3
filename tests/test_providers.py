"""The provider seam: every source of tools comes in through one door.

A fake provider (in memory, no MCP) goes through the catalog, help, the
dispatcher's approval layer and a real Bashkit run; name collisions between
sources fail closed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kernel_helpers import (
    RecordingSink, error_lines, policy_toml, project_with, server_toml, write_config,
)
from toolkernel import ConfigError, _loop, register_tools, tool
from toolkernel._providers._base import ToolProvider, ToolSet
from toolkernel._session import Session
from toolkernel._tool import ProviderRef

pytestmark = pytest.mark.timeout(240)


class FakeProvider:
    """A named provider of in-memory tools; records on which loop each call ran."""

    kind = "mcp"
    description = "a fake provider for tests"
    on_demand = False
    loaded = True
    error = None

    def __init__(self, name: str = "fake", *, loop_bound: bool = False) -> None:
        self.name = name
        self.source = ("tests/test_providers.py", None)
        self.ref = ProviderRef("mcp", name, loop_bound=loop_bound)
        self.calls: list[tuple[dict, bool]] = []
        self.closed = False

        @tool("echo", description="Give the input back.", kind="read",
              input_schema={"type": "object", "properties": {"text": {"type": "string"}}})
        async def echo(arguments, ctx):  # async: runs on the loop the call was put on
            self.calls.append((arguments, _loop.on_private_loop()))
            return arguments

        self._tools = [_with_provider(echo, self.ref)]

    async def tools(self):
        return list(self._tools)

    async def close(self) -> None:
        self.closed = True


def _with_provider(t, ref):
    return dataclasses.replace(t, provider=ref)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    return project_with(tmp_path, monkeypatch, policy_toml(deny=["mcp_fake__echo(text=secret*)"]))


def run(session: Session, script: str):
    sink = RecordingSink()
    return session.run_script(script, sink), sink


def test_the_fake_provider_meets_the_protocol():
    assert isinstance(FakeProvider(), ToolProvider)
    assert isinstance(ToolSet("builtin", []), ToolProvider)


def test_a_fake_provider_goes_through_catalog_help_and_dispatcher(workdir: Path):
    session = Session(workdir)
    fake = FakeProvider()
    session.add_provider(fake)
    try:
        result, sink = run(session, "tools fake echo text=hi\ntools mcp_fake__echo text=again")
        assert result.exit_code == 0, sink.stderr_text
        assert [c[0] for c in fake.calls] == [{"text": "hi"}, {"text": "again"}]
        # A named provider that is not loop-bound runs on the script thread's loop: "has a
        # name" no longer means "is MCP on the private loop".
        assert [c[1] for c in fake.calls] == [False, False]

        result, sink = run(session, "tools --help")
        assert "fake (1 tool)  a fake provider for tests" in sink.stdout_text

        result, sink = run(session, "tools fake echo text=secret-plan")
        assert result.exit_code == 1
        assert error_lines(sink.stderr_text)[0]["code"] == "denied"
        assert len(fake.calls) == 2
    finally:
        session.close()


def test_a_loop_bound_provider_runs_its_calls_on_the_private_loop(workdir: Path):
    session = Session(workdir)
    fake = FakeProvider(loop_bound=True)
    session.add_provider(fake)
    try:
        result, sink = run(session, "tools fake echo text=hi")
        assert result.exit_code == 0, sink.stderr_text
        assert fake.calls == [({"text": "hi"}, True)]
    finally:
        session.close()


def test_an_mcp_server_may_not_shadow_an_own_tool(workdir: Path):
    path = write_config(workdir, server_toml("Read_File", script="demo.py"))
    session = Session(workdir)
    try:
        with pytest.raises(ConfigError) as caught:
            run(session, "tools read-file path=x")
    finally:
        session.close()
    error = caught.value
    assert (error.path, error.key) == (str(path), "mcp_servers.Read_File")
    assert "the MCP server 'Read-File' has the same name as the tool 'read-file'" in str(error)


def test_an_mcp_server_may_not_take_a_command_word(workdir: Path):
    write_config(workdir, server_toml("search", script="demo.py"))
    session = Session(workdir)
    try:
        with pytest.raises(ConfigError, match="the command word 'search'"):
            run(session, "tools --help")
    finally:
        session.close()


def test_a_named_provider_with_a_blurred_name_is_refused(workdir: Path):
    session = Session(workdir)
    session.add_provider(FakeProvider("foo__x"))
    try:
        with pytest.raises(ConfigError, match="no doubled separator"):
            run(session, "tools --help")
    finally:
        session.close()


@tool("shout", description="Upper-case the text.", kind="read",
      input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
def shout(arguments, ctx):
    return arguments["text"].upper()


def test_register_tools_adds_top_level_commands(workdir: Path, monkeypatch):
    session = Session(workdir)
    monkeypatch.setattr("toolkernel._default_session", session)
    try:
        register_tools(shout)
        result, sink = run(session, "tools shout text=hi")
        assert (result.exit_code, sink.stdout_text) == (0, "HI\n"), sink.stderr_text
        result, sink = run(session, "tools --help")
        assert "shout" in sink.stdout_text.split("Other tools:")[1]
    finally:
        session.close()


@pytest.mark.parametrize("name, words", [
    ("READ-FILE", "the tool 'READ-FILE' has the same name as the tool 'read-file'"),
    ("notebook_read", "has the same name as the notebook tool 'notebook-read'"),
    ("mcp_x__y", "reads as a qualified name"),
])
def test_register_tools_refuses_a_name_already_taken(workdir: Path, name, words):
    session = Session(workdir)
    taken = tool(name, description="x", input_schema={"type": "object"})(lambda a, c: "x")
    with pytest.raises(ConfigError) as caught:
        session.register_tools([taken])
    assert words in str(caught.value)
    assert caught.value.path == "toolkernel.register_tools"


def test_help_says_why_an_on_demand_server_last_failed_to_start(workdir: Path):
    from toolkernel import Unavailable

    session = Session(workdir)
    fake = FakeProvider()
    fake.on_demand, fake.loaded, fake.error = True, False, Unavailable("the server exited with code 2\nmore")
    session.add_provider(fake)
    try:
        result, sink = run(session, "tools --help")
    finally:
        session.close()
    assert "fake (not loaded; last start failed: the server exited with code 2)" in sink.stdout_text
