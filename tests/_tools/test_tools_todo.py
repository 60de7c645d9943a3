import asyncio
from pathlib import Path

from toolkernel._tool import ToolContext
from toolkernel._providers._tools.todo import todo_write


def call(args, ctx):
    result = asyncio.run(todo_write.call(args, ctx))
    return "\n".join(result.texts), result.is_error


def item(content, status, active=None):
    return {"content": content, "status": status, "activeForm": active or content + "ing"}


def test_checklist_and_state():
    ctx = ToolContext(workdir=Path("."))
    todos = [item("Write code", "completed"), item("Run tests", "in_progress", "Running tests"), item("Ship", "pending")]
    out, err = call({"todos": todos}, ctx)
    assert not err
    assert out == "[x] Write code\n[~] Run tests (Running tests)\n[ ] Ship\n(1/3 completed)"
    assert ctx.state["todos"] == todos
    assert ctx.state["todos"] is not todos  # a copy: the caller's list can change without touching ours


def test_each_call_replaces_the_list():
    ctx = ToolContext(workdir=Path("."))
    call({"todos": [item("A", "pending"), item("B", "pending")]}, ctx)
    out, _ = call({"todos": [item("A", "completed")]}, ctx)
    assert out == "[x] A\n(1/1 completed)"
    assert [t["content"] for t in ctx.state["todos"]] == ["A"]
    assert call({"todos": []}, ctx) == ("(no tasks)", False)
    assert ctx.state["todos"] == []


def test_two_in_progress_refused_and_list_kept():
    ctx = ToolContext(workdir=Path("."))
    call({"todos": [item("A", "in_progress")]}, ctx)
    out, err = call({"todos": [item("A", "in_progress"), item("B", "in_progress")]}, ctx)
    assert err and "one in_progress" in out
    assert [t["content"] for t in ctx.state["todos"]] == ["A"]


def test_bad_items_refused():
    ctx = ToolContext(workdir=Path("."))
    assert call({"todos": [{"content": "A", "status": "done", "activeForm": "x"}]}, ctx)[1]
    assert call({"todos": [{"content": "A", "status": "pending"}]}, ctx)[1]
    assert call({"todos": ["A"]}, ctx)[1]
    assert "todos" not in ctx.state
