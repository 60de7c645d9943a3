"""The public API is small and deliberate: changing it must change this test."""

import toolkernel


def test_all_is_pinned():
    assert sorted(toolkernel.__all__) == sorted([
        "CallError", "CallLimit", "ConfigError", "ConnectionRequired", "Denied", "HookOutcome", "Image",
        "InvalidInput", "NeedsApproval", "Stopped", "Tool", "ToolContext", "ToolFailed",
        "ToolResult", "ToolkernelError", "Unavailable", "UnknownCommand",
        "after_call", "approve", "before_call", "call", "deny", "get_session",
        "load_ipython_extension", "redact", "run", "tool", "unload_ipython_extension",
    ])
    for name in toolkernel.__all__:
        assert hasattr(toolkernel, name), name


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
