"""Pre-call and post-call hooks: Python callables and real child processes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

import toolkernel._approval._hooks as hooks_module
from toolkernel._approval._hooks import HookOutcome, Hooks, redact
from toolkernel._approval._policy import CallInfo
from toolkernel._tool import Image, ToolResult

GET_PULL = CallInfo("mcp_github__get_pull", "tools github get-pull", {"repo": "acme/api", "number": 7}, "read")
DELETE = CallInfo("mcp_github__delete_branch", "tools github delete-branch", {"branch": "fix-x"}, "execute")
SECRET = "tok_live_ABCDEF123456"


def before(hooks: Hooks, call: CallInfo = GET_PULL) -> HookOutcome:
    return asyncio.run(hooks.run_before(call))


def after(hooks: Hooks, result: ToolResult, call: CallInfo = GET_PULL) -> ToolResult:
    return asyncio.run(hooks.run_after(call, result))


def script(tmp_path: Path, name: str, body: str) -> list[str]:
    """A hook command: a small Python program in tmp_path."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def shown(result: ToolResult) -> str:
    return json.dumps({"texts": result.texts, "structured": result.structured})


# -- Python pre-call hooks -----------------------------------------------------


def test_no_hooks_continue_unchanged():
    assert before(Hooks()) == HookOutcome("continue", "", None)


def test_python_hook_denies_with_a_reason_and_later_hooks_do_not_run():
    hooks, seen = Hooks(), []

    @hooks.before_call("github *")
    def no_deletes(call):
        seen.append("first")
        if "delete" in call.qualified_name:
            return HookOutcome("deny", "deleting branches is not allowed here")
        return None

    @hooks.before_call
    def later(call):
        seen.append("later")

    outcome = before(hooks, DELETE)
    assert outcome.action == "deny"
    assert "deleting branches is not allowed here" in outcome.reason
    assert "no_deletes" in outcome.reason
    assert seen == ["first"]
    assert before(hooks, GET_PULL).action == "continue"
    assert seen == ["first", "first", "later"]


def test_python_hook_rewrites_the_input_for_the_next_hooks_and_the_call():
    hooks, seen = Hooks(), []

    @hooks.before_call("github get-pull")
    async def pin_repo(call):
        return HookOutcome(input={**call.input, "repo": "acme/mirror"})

    @hooks.before_call("github get-pull(repo=acme/mirror)")  # matches the rewritten input
    def observe(call):
        seen.append(dict(call.input))

    outcome = before(hooks)
    assert outcome.action == "continue"
    assert outcome.input == {"repo": "acme/mirror", "number": 7}
    assert seen == [{"repo": "acme/mirror", "number": 7}]
    assert GET_PULL.input["repo"] == "acme/api"  # the caller's call is not mutated


def test_allow_is_kept_ask_wins_over_allow_and_deny_wins_over_both():
    hooks = Hooks()
    hooks.before_call("*")(lambda call: HookOutcome("allow", "reads of acme are fine"))
    assert before(hooks) == HookOutcome("allow", "reads of acme are fine")

    hooks.before_call("*")(lambda call: HookOutcome("ask", "a person should look"))
    assert before(hooks).action == "ask"
    assert before(hooks).reason == "a person should look"

    hooks.before_call("*")(lambda call: HookOutcome("allow"))
    assert before(hooks).action == "ask"

    hooks.before_call("*")(lambda call: HookOutcome("deny", "never"))
    assert before(hooks).action == "deny"


def test_patterns_select_the_hooks_that_run():
    hooks, seen = Hooks(), []
    for pattern in ("github *", "mcp_github__get_pull", "gitlab *", "read_file", "github get-pull(number=8)"):
        hooks.before_call(pattern)(lambda call, p=pattern: seen.append(p))
    before(hooks)
    assert seen == ["github *", "mcp_github__get_pull"]


@pytest.mark.parametrize(
    "hook, problem",
    [
        (lambda call: 1 / 0, "ZeroDivisionError"),
        (lambda call: "deny", "returned str, not a HookOutcome"),
        (lambda call: {"action": "allow"}, "returned dict, not a HookOutcome"),
        (lambda call: HookOutcome("allow", input=["not", "an", "object"]), "not a JSON object"),
    ],
)
def test_a_failing_python_hook_denies(hook, problem):
    hooks = Hooks()
    hooks.before_call("*")(hook)
    outcome = before(hooks)
    assert outcome.action == "deny"
    assert problem in outcome.reason
    assert "<lambda>" in outcome.reason


def test_an_async_hook_that_raises_denies():
    hooks = Hooks()

    @hooks.before_call
    async def broken(call):
        raise RuntimeError("lost the database")

    outcome = before(hooks)
    assert outcome.action == "deny"
    assert "broken failed: RuntimeError: lost the database" in outcome.reason


def test_a_hook_that_times_out_denies():
    hooks = Hooks()

    @hooks.before_call("*", timeout=0.2)
    async def slow(call):
        await asyncio.sleep(30)

    @hooks.before_call("*", timeout=0.2)
    def slow_sync(call):
        time.sleep(1)

    outcome = before(hooks)
    assert outcome.action == "deny"
    assert "slow timed out" in outcome.reason

    sync_only = Hooks()
    sync_only.before_call("*", timeout=0.2)(slow_sync)
    outcome = before(sync_only)
    assert (outcome.action, "slow_sync timed out" in outcome.reason) == ("deny", True)


def test_hook_outcome_rejects_unknown_actions():
    with pytest.raises(ValueError, match="hook action"):
        HookOutcome("maybe")


def test_registration_checks_patterns_and_timeouts():
    hooks = Hooks()
    with pytest.raises(ValueError, match="bad rule"):
        hooks.before_call("github get-pull(")
    with pytest.raises(ValueError, match="timeout"):
        hooks.after_call("*", timeout=0)
    with pytest.raises(ValueError, match="hook event"):
        hooks.add_command_hook("during_call", "*", ["true"])
    with pytest.raises(ValueError, match="argv"):
        hooks.add_command_hook("before_call", "*", [])
    with pytest.raises(ValueError, match="argv"):
        hooks.add_command_hook("before_call", "*", "rm -rf /")


# -- Python post-call hooks ----------------------------------------------------


def test_after_call_redacts_the_result():
    hooks = Hooks()

    @hooks.after_call("github *")
    def scrub(call, result):
        return redact(result, [SECRET])

    result = ToolResult(texts=[f"token={SECRET}"], structured={"token": SECRET, "list": [f"x{SECRET}y"],
                                                               SECRET: 1, "n": 7},
                        images=[Image(b"png")])
    cleaned = after(hooks, result)
    assert SECRET not in shown(cleaned)
    assert cleaned.texts == ["token=[redacted]"]
    assert cleaned.structured == {"token": "[redacted]", "list": ["x[redacted]y"], "[redacted]": 1, "n": 7}
    assert cleaned.images == [Image(b"png")]
    assert after(hooks, result, CallInfo("read_file", "tools read-file", {}, "read")) is result


def test_after_call_hooks_chain_and_none_keeps_the_result():
    hooks = Hooks()
    hooks.after_call()(lambda call, result: None)
    hooks.after_call()(lambda call, result: ToolResult.text(result.texts[0].upper()))

    @hooks.after_call
    async def exclaim(call, result):
        return ToolResult.text(result.texts[0] + "!")

    assert after(hooks, ToolResult.text("ok")).texts == ["OK!"]


@pytest.mark.parametrize(
    "hook, problem",
    [
        (lambda call, result: 1 / 0, "ZeroDivisionError"),
        (lambda call, result: SECRET, "returned str, not a ToolResult"),
    ],
)
def test_a_failing_post_hook_withholds_the_result(hook, problem):
    hooks = Hooks()
    hooks.after_call()(hook)
    result = after(hooks, ToolResult(texts=[SECRET], structured={"s": SECRET}))
    assert result.is_error
    assert problem in result.texts[0]
    assert "withheld" in result.texts[0]
    assert SECRET not in shown(result)


def test_a_post_hook_that_times_out_withholds_the_result():
    hooks = Hooks()

    @hooks.after_call(timeout=0.2)
    async def slow(call, result):
        await asyncio.sleep(30)

    result = after(hooks, ToolResult.text(SECRET))
    assert result.is_error and "timed out" in result.texts[0] and SECRET not in shown(result)


# -- command hooks: real child processes -----------------------------------------

RECORDER = """
    import json, os, sys
    payload = json.load(sys.stdin)
    with open(sys.argv[1], "w") as f:
        json.dump({"payload": payload, "env": dict(os.environ), "cwd": os.getcwd()}, f)
"""


def test_command_hook_gets_the_call_on_stdin_and_a_minimal_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKERNEL_TEST_SECRET", SECRET)
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    record = tmp_path / "seen.json"
    hooks = Hooks()
    hooks.add_command_hook("pre_call", "github *", script(tmp_path, "rec", RECORDER) + [str(record)], cwd=tmp_path)
    assert before(hooks) == HookOutcome()
    seen = json.loads(record.read_text())
    assert seen["payload"] == {
        "event": "before_call", "tool": "mcp_github__get_pull", "command": "tools github get-pull",
        "input": {"repo": "acme/api", "number": 7}, "kind": "read", "outside_workspace": False,
    }
    assert SECRET not in json.dumps(seen["env"])
    assert set(seen["env"]) - {"LC_CTYPE"} <= {"PATH", "HOME", "LANG", "TOOLKERNEL_HOOK_EVENT", "TOOLKERNEL_HOOK_TOOL",
                                             "PYTHONSAFEPATH"}
    assert seen["env"]["PATH"] == os.environ["PATH"]
    assert seen["env"]["TOOLKERNEL_HOOK_TOOL"] == "mcp_github__get_pull"
    assert Path(seen["cwd"]) == tmp_path


def test_command_hook_denies_with_its_reason(tmp_path):
    hooks = Hooks()
    hooks.add_command_hook("before_call", "github delete-*", script(tmp_path, "deny", """
        import json, sys
        call = json.load(sys.stdin)
        print(json.dumps({"action": "deny", "reason": "branch " + call["input"]["branch"] + " is protected"}))
    """))
    outcome = before(hooks, DELETE)
    assert outcome.action == "deny"
    assert "branch fix-x is protected" in outcome.reason
    assert "deny.py" in outcome.reason  # names the hook
    assert before(hooks, GET_PULL).action == "continue"  # pattern did not match


def test_command_hook_rewrites_the_input(tmp_path):
    hooks = Hooks()
    hooks.add_command_hook("before_call", "*", script(tmp_path, "rewrite", """
        import json, sys
        call = json.load(sys.stdin)
        print(json.dumps({"action": "allow", "reason": "pinned", "input": {**call["input"], "number": 8}}))
    """))
    seen = []
    hooks.before_call("github get-pull(number=8)")(lambda call: seen.append(call.input["number"]))
    outcome = before(hooks)
    assert (outcome.action, outcome.reason, outcome.input) == ("allow", "pinned", {"repo": "acme/api", "number": 8})
    assert seen == [8]  # command hooks run before Python hooks


@pytest.mark.parametrize(
    "body, problem",
    [
        ("print('yes please')", "not JSON"),
        ("print('[1, 2]')", "not an object"),
        ("import json; print(json.dumps({'decision': 'allow'}))", "unknown keys 'decision'"),
        ("import json; print(json.dumps({'action': 'sure'}))", "the action 'sure'"),
        ("import json; print(json.dumps({'action': 'allow', 'input': [1]}))", "not a JSON object"),
        ("import json; print(json.dumps({'action': 'deny', 'reason': 3}))", "reason that is not a string"),
        ("import sys; print('cannot reach policy server', file=sys.stderr); sys.exit(3)",
         "exited with code 3: cannot reach policy server"),
        ("import json; print(json.dumps({'action': 'allow'})); raise SystemExit(1)", "exited with code 1"),
    ],
)
def test_command_hook_bad_output_or_exit_code_denies(tmp_path, body, problem):
    hooks = Hooks()
    hooks.add_command_hook("before_call", "*", script(tmp_path, "bad", body))
    outcome = before(hooks)
    assert outcome.action == "deny"
    assert problem in outcome.reason


def test_command_hook_that_cannot_start_denies(tmp_path):
    hooks = Hooks()
    hooks.add_command_hook("before_call", "*", [str(tmp_path / "no-such-hook")])
    outcome = before(hooks)
    assert outcome.action == "deny"
    assert "could not start" in outcome.reason


def test_command_hook_timeout_denies_and_kills_its_processes(tmp_path):
    pids = tmp_path / "pids"
    hooks = Hooks()
    hooks.add_command_hook("before_call", "*", script(tmp_path, "hang", f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        with open({str(pids)!r}, "w") as f:
            f.write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(60)
    """), timeout=1.5)
    started = time.monotonic()
    outcome = before(hooks)
    assert outcome.action == "deny"
    assert "timed out after 1.5 s" in outcome.reason
    assert time.monotonic() - started < 30
    for pid in map(int, pids.read_text().split()):
        assert not _alive(pid), f"hook process {pid} survived the timeout"


def _alive(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        try:
            # a killed grandchild is reparented and reaped by init; a zombie counts as dead
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(")")[-1].split()[0] == "Z":
                    return False
        except FileNotFoundError:
            return False
        time.sleep(0.05)
    return True


def test_command_hook_flooding_stdout_denies(tmp_path, monkeypatch):
    monkeypatch.setattr(hooks_module, "_STDOUT_LIMIT", 10_000)
    hooks = Hooks()
    hooks.add_command_hook("before_call", "*", script(tmp_path, "flood", """
        import sys
        while True:
            sys.stdout.write("x" * 4096)
    """))
    outcome = before(hooks)
    assert outcome.action == "deny"
    assert "more than 10000 bytes" in outcome.reason


def test_command_hook_that_ignores_stdin_and_prints_nothing_continues(tmp_path):
    hooks = Hooks()
    hooks.add_command_hook("before_call", "*", script(tmp_path, "quiet", "pass"))
    assert before(hooks) == HookOutcome()


# -- command post-call hooks ---------------------------------------------------------


def test_command_post_hook_sees_the_result_and_redacts(tmp_path):
    record = tmp_path / "seen.json"
    hooks = Hooks()
    hooks.add_command_hook("post_call", "github *", script(tmp_path, "redact", f"""
        import json, sys
        call = json.load(sys.stdin)
        open({str(record)!r}, "w").write(json.dumps(call))
        print(json.dumps({{"redact": [{SECRET!r}]}}))
    """))
    result = after(hooks, ToolResult(texts=[f"key {SECRET}"], structured={"key": SECRET}, images=[Image(b"12345")]))
    assert result.texts == ["key [redacted]"] and result.structured == {"key": "[redacted]"}
    assert not result.is_error
    assert len(result.images) == 1
    seen = json.loads(record.read_text())
    assert seen["event"] == "after_call"
    assert seen["result"] == {"texts": [f"key {SECRET}"], "structured": {"key": SECRET}, "is_error": False,
                              "images": [{"mime_type": "image/png", "size": 5}]}


def test_command_post_hook_replaces_the_result(tmp_path):
    hooks = Hooks()
    hooks.add_command_hook("after_call", "*", script(tmp_path, "replace", """
        import json, sys
        call = json.load(sys.stdin)
        print(json.dumps({"result": {"count": len(call["result"]["texts"])}}))
    """))
    result = after(hooks, ToolResult(texts=["a", "b"], images=[Image(b"x")]))
    assert (result.structured, result.texts, result.images, result.is_error) == ({"count": 2}, [], [], False)

    text_hooks = Hooks()
    text_hooks.add_command_hook("after_call", "*", script(tmp_path, "text", """
        import json
        print(json.dumps({"result": "nothing to see", "is_error": True}))
    """))
    result = after(text_hooks, ToolResult.text("secret"))
    assert (result.texts, result.is_error) == (["nothing to see"], True)


@pytest.mark.parametrize(
    "body, problem",
    [
        ("import json; print(json.dumps({'action': 'deny', 'reason': 'contains PII'}))", "contains PII"),
        ("import sys; sys.exit(2)", "exited with code 2"),
        ("print('redact everything')", "not JSON"),
        ("import json; print(json.dumps({'redact': 'x'}))", "not a list of strings"),
        ("import json; print(json.dumps({'action': 'allow'}))", "the action 'allow'"),
        ("import json; print(json.dumps({'is_error': True}))", "is_error but no result"),
        ("import time; time.sleep(30)", "timed out"),
        ("print('[' * 100000 + ']' * 100000)", "nested too deeply"),  # past the parser's depth
    ],
)
def test_a_failing_command_post_hook_withholds_the_result(tmp_path, body, problem):
    hooks = Hooks()
    hooks.add_command_hook("after_call", "*", script(tmp_path, "post", body), timeout=1.5)
    result = after(hooks, ToolResult(texts=[SECRET], structured={"k": SECRET}))
    assert result.is_error
    assert problem in result.texts[0]
    assert SECRET not in shown(result)


def test_clearing_command_hooks_keeps_python_hooks(tmp_path):
    hooks = Hooks()
    hooks.add_command_hook("before_call", "*", script(tmp_path, "deny", """
        import json; print(json.dumps({"action": "deny", "reason": "config says no"}))
    """))
    hooks.before_call("*")(lambda call: HookOutcome("ask", "python asks"))
    assert before(hooks).action == "deny"
    hooks.clear_command_hooks()
    assert before(hooks) == HookOutcome("ask", "python asks")
