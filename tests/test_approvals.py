"""One-off approvals (spent after one use) and lasting ones (on disk, shared)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from toolkernel._approval._approvals import ApprovalStore, rule_for
from toolkernel._errors import ConfigError
from toolkernel._approval._policy import CallInfo, Policy, canonical_call_key, decide

REPO = Path(__file__).resolve().parents[1]

DELETE = CallInfo("mcp_github__delete_branch", "tools github delete-branch", {"branch": "fix-x"}, "execute")


def key(name: str, **input) -> str:
    return canonical_call_key(name, input)


# -- one-off ---------------------------------------------------------------


def test_one_off_approval_is_spent_after_one_use(tmp_path):
    store = ApprovalStore(tmp_path)
    k = key("mcp_github__delete_branch", branch="fix-x")
    assert not store.consume_once(k)
    store.grant_once(k)
    assert store.has_once(k)
    assert store.has_once(k)  # looking does not spend it
    assert store.consume_once(k)
    assert not store.consume_once(k)
    assert not store.has_once(k)


def test_one_off_approval_covers_only_that_exact_call(tmp_path):
    store = ApprovalStore(tmp_path)
    store.grant_once(key("mcp_github__delete_branch", branch="fix-x", repo="acme/api"))
    assert not store.consume_once(key("mcp_github__delete_branch", branch="fix-y", repo="acme/api"))
    assert not store.consume_once(key("mcp_gitlab__delete_branch", branch="fix-x", repo="acme/api"))
    # the same call with its keys in another order and another spelling of the name
    assert store.consume_once(key("mcp__github__delete-branch", repo="acme/api", branch="fix-x"))


def test_granting_twice_still_covers_one_call(tmp_path):
    store = ApprovalStore(tmp_path)
    k = key("t", a=1)
    store.grant_once(k)
    store.grant_once(k)
    assert store.pending_once() == [k]
    assert store.consume_once(k)
    assert not store.consume_once(k)


def test_one_off_approvals_stay_in_memory(tmp_path):
    ApprovalStore(tmp_path).grant_once(key("t", a=1))
    assert not ApprovalStore(tmp_path).has_once(key("t", a=1))
    assert not (tmp_path / ".toolkernel" / "approvals.json").exists()


def test_one_off_consumed_by_exactly_one_of_many_threads(tmp_path):
    store = ApprovalStore(tmp_path)
    k = key("t", a=1)
    store.grant_once(k)
    wins = []
    barrier = threading.Barrier(8)

    def racer():
        barrier.wait()
        wins.append(store.consume_once(k))

    threads = [threading.Thread(target=racer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(wins) == [False] * 7 + [True]


# -- lasting -----------------------------------------------------------------


def test_lasting_rules_are_persisted_in_the_project(tmp_path):
    store = ApprovalStore(tmp_path)
    assert store.lasting_rules() == []
    assert store.always_allow("github delete-branch") == "github delete-branch"
    store.always_allow(" tool__ripgrep ")
    store.always_allow("github delete-branch")  # once only
    assert store.lasting_rules() == ["github delete-branch", "tool__ripgrep"]
    data = json.loads((tmp_path / ".toolkernel" / "approvals.json").read_text())
    assert data["version"] == 1
    assert [e["rule"] for e in data["allow"]] == ["github delete-branch", "tool__ripgrep"]
    assert all(e["added"] for e in data["allow"])
    assert ApprovalStore(tmp_path).lasting_rules() == ["github delete-branch", "tool__ripgrep"]


def test_lasting_rules_feed_the_policy(tmp_path):
    store = ApprovalStore(tmp_path)
    assert decide(DELETE, Policy.from_config({}, {}, store.lasting_rules())).action == "ask"
    store.always_allow(rule_for(DELETE))
    assert decide(DELETE, Policy.from_config({}, {}, store.lasting_rules())).action == "allow"
    # a lasting approval is an allow rule: deny and the admin still win
    denied = Policy.from_config({"deny": ["github *"]}, {}, store.lasting_rules())
    assert decide(DELETE, denied).action == "deny"


def test_revoke_by_rule_and_by_index(tmp_path):
    store = ApprovalStore(tmp_path)
    for rule in ("a", "b", "c", "d"):
        store.always_allow(rule)
    assert store.revoke("b") == "b"
    assert store.lasting_rules() == ["a", "c", "d"]
    assert store.revoke(0) == "a"
    assert store.lasting_rules() == ["c", "d"]
    assert store.revoke(1) == "d"
    assert ApprovalStore(tmp_path).lasting_rules() == ["c"]
    with pytest.raises(KeyError, match="no lasting approval 'zzz'"):
        store.revoke("zzz")
    with pytest.raises(IndexError):
        store.revoke(5)
    with pytest.raises(IndexError):
        store.revoke(-1)
    with pytest.raises(TypeError):
        store.revoke(True)
    assert store.lasting_rules() == ["c"]


def test_a_bad_rule_is_not_stored(tmp_path):
    store = ApprovalStore(tmp_path)
    with pytest.raises(ValueError, match="bad rule"):
        store.always_allow("github delete-branch(")
    assert store.lasting_rules() == []


def test_stores_on_one_project_agree(tmp_path):
    first, second = ApprovalStore(tmp_path), ApprovalStore(tmp_path)
    first.always_allow("github *")
    assert second.lasting_rules() == ["github *"]
    second.revoke("github *")
    assert first.lasting_rules() == []


@pytest.mark.slow
def test_concurrent_kernels_adding_at_once_all_land(tmp_path):
    # Real processes, as separate kernels would be: without the lock file
    # read-modify-write races lose some of the additions.
    script = (
        "import sys\n"
        "from toolkernel._approval._approvals import ApprovalStore\n"
        "store = ApprovalStore(sys.argv[1])\n"
        "for i in range(10):\n"
        "    store.always_allow(f'tool__p{sys.argv[2]}_{i}')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), str(n)], env=env) for n in range(6)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 6
    rules = ApprovalStore(tmp_path).lasting_rules()
    assert sorted(rules) == sorted(f"tool__p{n}_{i}" for n in range(6) for i in range(10))


def test_concurrent_threads_adding_and_revoking(tmp_path):
    store = ApprovalStore(tmp_path)
    for n in range(20):
        store.always_allow(f"keep_{n}")

    def add(n):
        ApprovalStore(tmp_path).always_allow(f"new_{n}")

    def drop(n):
        ApprovalStore(tmp_path).revoke(f"keep_{n}")

    threads = [threading.Thread(target=add, args=(n,)) for n in range(20)]
    threads += [threading.Thread(target=drop, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(store.lasting_rules()) == sorted(f"new_{n}" for n in range(20))


# -- the file as found ---------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / ".toolkernel" / "approvals.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def test_a_hand_written_list_of_strings_is_read(tmp_path):
    write(tmp_path, '{"allow": ["github *", {"rule": "tool__x"}]}')
    assert ApprovalStore(tmp_path).lasting_rules() == ["github *", "tool__x"]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("{not json", "not valid JSON"),
        ("[]", "expected"),
        ('{"allow": "github *"}', "expected"),
        ('{"allow": [3]}', "allow[0]"),
        ('{"allow": ["ok", "a b c d"]}', "allow[1]"),
        ('{"allow": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),  # past the parser's depth
    ],
)
def test_a_broken_file_is_a_config_error_naming_it(tmp_path, text, problem):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        ApprovalStore(tmp_path).lasting_rules()
    assert str(path) in str(info.value)
    assert problem in str(info.value)


def test_a_file_anyone_may_write_is_refused(tmp_path):
    path = write(tmp_path, '{"allow": ["*"]}')
    path.chmod(0o666)
    with pytest.raises(ConfigError, match="writable by anyone"):
        ApprovalStore(tmp_path).lasting_rules()
    path.chmod(0o644)
    path.parent.chmod(0o777)
    with pytest.raises(ConfigError, match="writable by anyone"):
        ApprovalStore(tmp_path).lasting_rules()
    path.parent.chmod(0o755)
    assert ApprovalStore(tmp_path).lasting_rules() == ["*"]


def test_the_write_is_atomic_and_keeps_no_temp_files(tmp_path):
    store = ApprovalStore(tmp_path)
    for n in range(5):
        store.always_allow(f"r{n}")
    names = sorted(p.name for p in (tmp_path / ".toolkernel").iterdir())
    assert names == ["approvals.json", "approvals.lock"]


# -- rule_for ------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, rule",
    [
        (DELETE, "mcp_github__delete_branch"),
        (CallInfo("mcp__github__delete-branch", "tools github delete-branch", {}, "execute"),
         "mcp_github__delete_branch"),
        (CallInfo("write_file", "tools write-file", {"path": "a"}, "edit"), "write_file"),
        (CallInfo("tool__ripgrep", "tools ripgrep", {"pattern": "x"}, "execute"), "tool__ripgrep"),
    ],
)
def test_rule_for_names_the_exact_tool_whatever_its_input(call, rule):
    assert rule_for(call) == rule
    other_input = CallInfo(call.qualified_name, call.command, {"anything": 1}, call.kind)
    assert decide(other_input, Policy(allow=(rule,))).action == "allow"


def test_rule_for_does_not_cover_other_tools_of_the_server():
    rule = rule_for(DELETE)
    other = CallInfo("mcp_github__delete_repo", "tools github delete-repo", {}, "execute")
    assert decide(other, Policy(allow=(rule,))).action == "ask"
    prefix = CallInfo("mcp_github__delete_branch_x", "tools github delete-branch-x", {}, "execute")
    assert decide(prefix, Policy(allow=(rule,))).action == "ask"
