"""What a call that may change something leaves for the run's report, and when it is made."""

from __future__ import annotations

import json

import pytest

from kernel_helpers import RecordingSink, isolated_env, write_config
from toolkernel import tool
from toolkernel._session import Session
from toolkernel._tool import ToolResult


@tool("stamp", description="Say what was stamped, as JSON (a test tool that may change something).",
      input_schema={"type": "object", "properties": {"n": {"type": "integer"}}}, kind="write")
def stamp(arguments, ctx):
    return json.dumps({"stamped": arguments.get("n", 0)})


@pytest.fixture
def session(tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    project = tmp_path / "project"
    project.mkdir()
    write_config(project, '[policy]\nallow = ["stamp"]\n')
    session = Session(project)
    session.register_tools([stamp])
    yield session
    session.close()


@pytest.fixture
def values_made(monkeypatch):
    """Counts the results turned into values (a JSON parse of the whole text each)."""
    made = []
    value = ToolResult.value

    def counted(self):
        made.append(self)
        return value(self)

    monkeypatch.setattr(ToolResult, "value", counted)
    return made


def test_a_run_that_needs_no_report_makes_no_result_values(session, values_made):
    result = session.run_script("for i in 1 2 3; do tools stamp n=$i; done", RecordingSink())
    assert result.exit_code == 0
    assert result.run_report is None
    assert values_made == []


def test_the_report_still_shows_each_result(session, values_made):
    result = session.run_script("tools stamp n=7 && tools stamp n=8 && exit 3", RecordingSink())
    assert result.exit_code == 3
    done = result.run_report.to_json()["tools"]["done"]
    assert [call["result"] for call in done] == [{"stamped": 7}, {"stamped": 8}]
    assert [call["input"] for call in done] == [{"n": 7}, {"n": 8}]
