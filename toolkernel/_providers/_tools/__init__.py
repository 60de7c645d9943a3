"""toolkernel's own tools: files, search, web fetch, the task list, and changes/rewind.

`own_tools()` lists them for the registry; `outside_workspace()` is the
workspace-boundary check the dispatcher applies to their `path_keys`.
"""

from __future__ import annotations

from ..._tool import Tool
from ._paths import outside_workspace
from .files import edit_file, read_file, write_file
from .rewind import changes, rewind_tool
from .search import glob_search, grep_search
from .todo import todo_write
from .web import web_fetch

__all__ = ["own_tools", "outside_workspace"]


def own_tools() -> list[Tool]:
    return [read_file, write_file, edit_file, glob_search, grep_search, web_fetch, todo_write, changes, rewind_tool]
