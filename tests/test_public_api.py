"""The public API is small and deliberate: changing it must change this test."""

import types

import toolkernel


def _public_names(module: types.ModuleType) -> list[str]:
    """What `from toolkernel import *` would miss if `__all__` forgot it: every name
    not starting with `_`, except the `annotations` future flag and toolkernel's own
    submodules (importing `toolkernel.demo_server` makes it an attribute)."""
    return [
        name for name, value in vars(module).items()
        if not name.startswith("_") and name != "annotations"
        and not (isinstance(value, types.ModuleType) and value.__name__.startswith("toolkernel."))
    ]


def test_every_public_name_is_exported_and_nothing_else():
    assert sorted(toolkernel.__all__) == sorted(_public_names(toolkernel))


def test_all_is_pinned():
    assert sorted(toolkernel.__all__) == sorted([
        "CallError", "CallLimit", "ConfigError", "ConnectionRequired", "Denied", "HookOutcome", "Image",
        "InvalidInput", "NeedsApproval", "Stopped", "Tool", "ToolContext", "ToolFailed", "ToolInputError",
        "ToolResult", "ToolkernelError", "Unavailable", "UnknownCommand",
        "after_call", "approve", "before_call", "call", "deny", "get_session",
        "load_ipython_extension", "redact", "register_tools", "run", "tool", "unload_ipython_extension",
    ])
    for name in toolkernel.__all__:
        assert hasattr(toolkernel, name), name


def test_exported_names_show_the_public_module():
    for name in toolkernel.__all__:
        value = getattr(toolkernel, name)
        assert value.__module__ == "toolkernel", (name, value.__module__)
    assert repr(toolkernel.Tool).endswith("'toolkernel.Tool'>")


def test_errors_a_tool_author_needs_are_in_the_one_tree():
    assert issubclass(toolkernel.ToolInputError, toolkernel.ToolkernelError)
    assert not issubclass(toolkernel.ToolInputError, toolkernel.CallError)  # a result, not a failed call


def test_every_error_code_of_the_seed_has_a_class():
    from toolkernel._errors import ERROR_CODES

    assert set(ERROR_CODES) == {
        "unknown_command", "invalid_input", "tool_error", "denied", "needs_approval",
        "stopped", "connection_required", "call_limit", "unavailable",
    }
    for code, cls in ERROR_CODES.items():
        line = cls("message").to_json()["error"]
        assert line["code"] == code and line["message"] == "message"
        assert line["retryable"] is (code == "unavailable")
