"""todo_write: the session's task list, rendered as a checklist.

Each call sends the whole list and replaces the stored one in
`ctx.state["todos"]`. At most one item may be `in_progress`: a list with two
is refused (and not stored), so the list always says what is being done now.
"""

from __future__ import annotations

from typing import Any

from ..._tool import ToolContext, ToolInputError, tool

STATUSES = ("pending", "in_progress", "completed")
_MARKS = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]"}


@tool(
    "todo_write",
    description=(
        "Replace the session's task list with `todos` and show it as a checklist. Send the "
        "full list every time; keep exactly one item in_progress while working."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "description": "The complete task list, in order.",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "minLength": 1, "description": "What the task is, imperative: \"Run the tests\"."},
                        "status": {"type": "string", "enum": list(STATUSES), "description": "pending, in_progress or completed."},
                        "activeForm": {"type": "string", "minLength": 1, "description": "What is shown while the task runs: \"Running the tests\"."},
                    },
                    "required": ["content", "status", "activeForm"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["todos"],
        "additionalProperties": False,
    },
    kind="read",
)
def todo_write(arguments: dict[str, Any], ctx: ToolContext) -> str:
    todos = [_checked_item(index, item) for index, item in enumerate(arguments["todos"])]
    running = [item["content"] for item in todos if item["status"] == "in_progress"]
    if len(running) > 1:
        raise ToolInputError(
            f"todo_write: {len(running)} items are in_progress ({'; '.join(running)}); "
            "keep one in_progress at a time and mark the others pending or completed"
        )
    ctx.state["todos"] = todos
    return render_checklist(todos)


def _checked_item(index: int, item: Any) -> dict[str, str]:
    if not isinstance(item, dict):
        raise ToolInputError(f"todo_write: todos[{index}] must be an object with content, status, activeForm")
    missing = [key for key in ("content", "status", "activeForm") if not isinstance(item.get(key), str) or not item.get(key)]
    if missing:
        raise ToolInputError(f"todo_write: todos[{index}] needs a non-empty {', '.join(missing)}")
    if item["status"] not in STATUSES:
        raise ToolInputError(f"todo_write: todos[{index}].status must be one of {', '.join(STATUSES)}, not {item['status']!r}")
    return {"content": item["content"], "status": item["status"], "activeForm": item["activeForm"]}


def render_checklist(todos: list[dict[str, str]]) -> str:
    if not todos:
        return "(no tasks)"
    lines = []
    for item in todos:
        text = f"{item['content']} ({item['activeForm']})" if item["status"] == "in_progress" else item["content"]
        lines.append(f"{_MARKS[item['status']]} {text}")
    done = sum(item["status"] == "completed" for item in todos)
    lines.append(f"({done}/{len(todos)} completed)")
    return "\n".join(lines)
