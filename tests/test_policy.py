"""The approval layer's decision: rules, modes, the admin file, the workspace."""

from __future__ import annotations

import pytest

from toolkernel._approval._hooks import HookOutcome
from toolkernel._approval._policy import (
    CallInfo,
    Policy,
    canonical_call_key,
    decide,
    rule_matches,
)
from toolkernel._config._rules import parse_rule


def mcp(server: str, tool: str, kind: str = "execute", outside: bool = False, **input) -> CallInfo:
    return CallInfo(
        f"mcp_{server}__{tool.replace('-', '_')}",
        f"tools {server} {tool.replace('_', '-')}",
        input,
        kind,
        outside,
    )


def own(name: str, kind: str = "read", outside: bool = False, **input) -> CallInfo:
    return CallInfo(name.replace("-", "_"), f"tools {name.replace('_', '-')}", input, kind, outside)


def custom(name: str, kind: str = "execute", **input) -> CallInfo:
    return CallInfo(f"tool__{name}", f"tools {name}", input, kind)


DELETE = mcp("github", "delete-branch", branch="fix-x")
LIST = mcp("github", "list-pulls", "read", repo="acme/api")
GET_PULL = mcp("github", "get-pull", "read", repo="acme/api", number=7)
CREATE = mcp("linear", "create-issue", title="Flaky test")
READ = own("read_file", "read", path="a.txt")
WRITE = own("write_file", "edit", path="a.txt", content="x")
RIPGREP = custom("ripgrep", pattern="TODO")


# -- modes × kinds with no rule ----------------------------------------------

MODE_TABLE = [
    # mode, kind, expected
    ("default", "read", "allow"),
    ("default", "edit", "ask"),
    ("default", "execute", "ask"),
    ("accept-edits", "read", "allow"),
    ("accept-edits", "edit", "allow"),
    ("accept-edits", "execute", "ask"),
    ("plan", "read", "allow"),
    ("plan", "edit", "deny"),
    ("plan", "execute", "deny"),
    ("bypass-permissions", "read", "allow"),
    ("bypass-permissions", "edit", "allow"),
    ("bypass-permissions", "execute", "allow"),
]


@pytest.mark.parametrize("mode, kind, expected", MODE_TABLE)
@pytest.mark.parametrize("make", [lambda k: mcp("s", "t", k), lambda k: own("t", k), lambda k: custom("t", k)])
def test_mode_decides_what_no_rule_covers(mode, kind, expected, make):
    decision = decide(make(kind), Policy(mode=mode))
    assert decision.action == expected
    assert decision.rule is None
    assert mode in decision.reason


# -- rule order ----------------------------------------------------------------

RULE_TABLE = [
    # policy, call, expected action, expected rule
    (Policy(allow=("github delete-branch",)), DELETE, "allow", "github delete-branch"),
    (Policy(allow=("github *",), deny=("github delete-branch",)), DELETE, "deny", "github delete-branch"),
    (Policy(allow=("mcp_github__*",), deny=("mcp_github__delete_branch",)), DELETE, "deny", "mcp_github__delete_branch"),
    (Policy(allow=("github *",), ask=("github delete-*",)), DELETE, "ask", "github delete-*"),
    (Policy(ask=("github *",), deny=("github delete-branch",)), DELETE, "deny", "github delete-branch"),
    (Policy(allow=("github *",), admin_deny=("mcp__github__delete_branch",)), DELETE, "deny", "mcp__github__delete_branch"),
    (Policy(mode="bypass-permissions", admin_deny=("github *",)), DELETE, "deny", "github *"),
    (Policy(deny=("github list-pulls",)), LIST, "deny", "github list-pulls"),  # a read can be denied
    (Policy(ask=("read_file",)), READ, "ask", "read_file"),
    (Policy(mode="bypass-permissions", ask=("github *",)), DELETE, "ask", "github *"),
    (Policy(allow=("linear *", "github *")), CREATE, "allow", "linear *"),
    (Policy(allow=("tool__ripgrep",)), RIPGREP, "allow", "tool__ripgrep"),
    (Policy(deny=("tool__*",)), RIPGREP, "deny", "tool__*"),
    (Policy(allow=("ripgrep",)), RIPGREP, "allow", "ripgrep"),
    (Policy(allow=("write-file",)), WRITE, "allow", "write-file"),
    (Policy(allow=("*",), deny=("*",)), READ, "deny", "*"),
]


@pytest.mark.parametrize("policy, call, action, rule", RULE_TABLE)
def test_rule_order_admin_deny_deny_ask_allow(policy, call, action, rule):
    decision = decide(call, policy)
    assert (decision.action, decision.rule) == (action, rule)
    assert repr(rule) in decision.reason


def test_admin_deny_is_named_as_the_administrators():
    decision = decide(DELETE, Policy(allow=("github *",), admin_deny=("github delete-branch",)))
    assert "administrator" in decision.reason


# -- admin mode ceiling --------------------------------------------------------

CEILING_TABLE = [
    # project mode, ceiling, effective
    ("bypass-permissions", "default", "default"),
    ("bypass-permissions", "plan", "plan"),
    ("accept-edits", "default", "default"),
    ("default", "accept-edits", "default"),
    ("plan", "bypass-permissions", "plan"),
    ("accept-edits", "accept-edits", "accept-edits"),
    ("bypass-permissions", None, "bypass-permissions"),
]


@pytest.mark.parametrize("mode, ceiling, effective", CEILING_TABLE)
def test_the_mode_is_never_looser_than_the_admin_ceiling(mode, ceiling, effective):
    assert Policy(mode=mode, admin_mode_ceiling=ceiling).effective_mode == effective


def test_ceiling_changes_the_decision_and_says_so():
    policy = Policy(mode="bypass-permissions", admin_mode_ceiling="default")
    decision = decide(DELETE, policy)
    assert decision.action == "ask"
    assert "administrator caps the mode at default" in decision.reason
    assert decide(WRITE, Policy(mode="accept-edits", admin_mode_ceiling="plan")).action == "deny"


# -- plan mode and the workspace boundary: what an allow rule cannot lift ------


def test_plan_denies_non_read_calls_even_with_an_allow_rule():
    policy = Policy(mode="plan", allow=("github *", "write_file"))
    assert decide(DELETE, policy).action == "deny"
    assert decide(WRITE, policy).action == "deny"
    assert decide(LIST, policy).action == "allow"


def test_plan_is_the_admin_guarantee_over_project_allow_rules():
    policy = Policy(mode="bypass-permissions", allow=("*",), admin_mode_ceiling="plan")
    assert decide(DELETE, policy).action == "deny"
    assert decide(LIST, policy).action == "allow"


@pytest.mark.parametrize("mode", ["default", "accept-edits", "bypass-permissions"])
def test_outside_workspace_asks_even_with_an_allow_rule(mode):
    call = own("write_file", "edit", outside=True, path="/etc/passwd")
    decision = decide(call, Policy(mode=mode, allow=("write_file",)))
    assert decision.action == "ask"
    assert "outside the workspace" in decision.reason
    read = own("read_file", "read", outside=True, path="/etc/hosts")
    assert decide(read, Policy(mode=mode, allow=("*",))).action == "ask"


def test_outside_workspace_deny_still_denies():
    call = own("write_file", "edit", outside=True, path="/etc/passwd")
    assert decide(call, Policy(deny=("write_file",))).action == "deny"
    assert decide(call, Policy(mode="plan")).action == "deny"


# -- name forms --------------------------------------------------------------

MATCH_TABLE = [
    # rule, call, matches
    ("mcp_github__delete_branch", DELETE, True),
    ("mcp__github__delete_branch", DELETE, True),
    ("mcp-github--delete-branch", DELETE, True),
    ("mcp_github__delete-branch", DELETE, True),
    ("mcp_github", DELETE, True),
    ("mcp__github", DELETE, True),
    ("mcp_github__*", DELETE, True),
    ("mcp_*__delete_*", DELETE, True),
    ("mcp_gitlab__*", DELETE, False),
    ("mcp_git", DELETE, False),
    ("github delete-branch", DELETE, True),
    ("github delete_branch", DELETE, True),
    ("tools github delete-branch", DELETE, True),
    ("github *", DELETE, True),
    ("tools github *", DELETE, True),
    ("* delete-*", DELETE, True),
    ("github list-*", DELETE, False),
    ("gitlab *", DELETE, False),
    ("github", DELETE, False),  # a server alone is `github *` or `mcp_github`
    ("git*", DELETE, False),  # in the command form `*` stays inside one word
    ("*", DELETE, True),
    ("tools *", DELETE, True),
    ("read_file", READ, True),
    ("read-file", READ, True),
    ("tools read-file", READ, True),
    ("read_*", READ, True),
    ("read_file", WRITE, False),
    ("tool__ripgrep", RIPGREP, True),
    ("tool--ripgrep", RIPGREP, True),
    ("tool__*", RIPGREP, True),
    ("ripgrep", RIPGREP, True),
    ("tools ripgrep", RIPGREP, True),
    ("tool__ripgrep", READ, False),
    ("Read_File", READ, True),  # names fold case: a deny rule in another case must not fail open
    ("mcp_GitHub__Delete_Branch", DELETE, True),
]


@pytest.mark.parametrize("rule, call, expected", MATCH_TABLE)
def test_rule_names(rule, call, expected):
    assert rule_matches(rule, call) is expected


def test_a_server_glob_covers_tools_with_odd_names():
    odd = CallInfo("mcp_github__delete branch", "tools github delete branch", {}, "execute")
    assert rule_matches("github *", odd)
    assert decide(odd, Policy(allow=("*",), deny=("github *",))).action == "deny"
    assert not rule_matches("gitlab *", odd)


def test_command_rule_matches_by_name_when_the_command_is_unusual():
    # The dispatcher may record a different spelling; the qualified name still decides.
    call = CallInfo("mcp_github__delete_branch", "tools GitHub delete-branch", {}, "execute")
    assert rule_matches("github delete-branch", call)


# -- input constraints ---------------------------------------------------------

INPUT_TABLE = [
    ("github get-pull(repo=acme/*)", GET_PULL, True),
    ("github get-pull(repo=other/*)", GET_PULL, False),
    ("mcp_github__get_pull(repo=acme/*, number=7)", GET_PULL, True),
    ("mcp_github__get_pull(repo=acme/*, number=8)", GET_PULL, False),
    ("mcp_github__get_pull(repo=acme/*,number=7)", GET_PULL, True),
    ("github get-pull(number=*)", GET_PULL, True),
    ("github get-pull(state=open)", GET_PULL, False),  # a missing key does not match
    ("github get-pull(state=*)", GET_PULL, False),
    ("github get-pull(repo=acme/api)", GET_PULL, True),
    ("github get-pull(repo=acme)", GET_PULL, False),  # the glob covers the whole value
    ('github get-pull(repo="acme/*")', GET_PULL, True),
    ("github list-pulls(repo=acme/*)", GET_PULL, False),
    ("github *(repo=acme/*)", GET_PULL, True),
    ("github *(repo=acme/*)", DELETE, False),
    ("write_file(path=*.txt)", WRITE, True),
    ("write_file(path=*.py)", WRITE, False),
]


@pytest.mark.parametrize("rule, call, expected", INPUT_TABLE)
def test_input_constraints(rule, call, expected):
    assert rule_matches(rule, call) is expected


def test_input_constraint_value_forms():
    call = mcp("s", "t", flag=True, nothing=None, items=[1, 2], nested={"b": 1, "a": "x"},
               title="a, b (c)", **{"dash-key": "v"})
    assert rule_matches("s t(flag=true)", call)
    assert rule_matches("s t(n=7)", mcp("s", "t", n=7.0))  # one number, however it was written
    assert rule_matches("s t(n=7)", mcp("s", "t", n="7"))  # the string form of the value
    assert not rule_matches("s t(n=7)", mcp("s", "t", n=7.5))
    assert rule_matches("s t(nothing=null)", call)
    assert rule_matches('s t(items="[1,2]")', call)  # anything but a string is compact JSON
    assert rule_matches('s t(items="[1, 2]")', call) is False
    assert rule_matches('s t(nested="{\\"a\\":\\"x\\",\\"b\\":1}")', call)
    assert rule_matches('s t(title="a, b (c)")', call)
    assert rule_matches('s t(title="a, b*")', call)
    assert not rule_matches("s t(dash_key=v)", call)  # a grant needs the key as spelled
    assert rule_matches("s t(dash_key=v)", call, grants=False)  # a deny takes any spelling
    spaced = mcp("s", "t", title="Flaky test", url="https://x/?a=b")
    assert rule_matches("s t(title=Flaky test, url=https://x/?a=*)", spaced)
    assert rule_matches('s t(title="Flaky test b=c")', mcp("s", "t", title="Flaky test b=c"))


def test_input_constraints_decide_allow_and_deny():
    policy = Policy(allow=("github get-pull(repo=acme/*)",), deny=("github *(repo=secret/*)",))
    acme = mcp("github", "get-pull", repo="acme/api")
    secret = mcp("github", "get-pull", repo="secret/vault")
    other = mcp("github", "get-pull", repo="other/x")
    assert decide(acme, policy).action == "allow"
    assert decide(secret, policy).action == "deny"
    assert decide(other, policy).action == "ask"


# -- bad rules ---------------------------------------------------------------

BAD_RULES = [
    ("", "empty"),
    ("   ", "empty"),
    ("tools a b c", "at most two words"),
    ("a b c", "at most two words"),
    ("github get-pull(repo=acme", "must end the rule"),
    ("github get-pull)", "without '('"),
    ("github get-pull()", "empty input constraint"),
    ("github get-pull(repo)", "has no `=`"),
    ("github get-pull(=x)", "not an input key"),
    ("github get-pull(repo=a,)", "trailing ','"),
    ("github get-pull(repo=a b=c)", "missing ','"),
    ("github get-pull(repo=(x))", "quote a value"),
    ('github get-pull(repo="x)', "unterminated"),
    ("(repo=x)", "names no tool"),
    ('git"hub', "not a tool name"),
    ("github,get", "not a tool name"),
]


@pytest.mark.parametrize("rule, problem", BAD_RULES)
def test_bad_rules_raise_a_clear_value_error(rule, problem):
    with pytest.raises(ValueError) as info:
        parse_rule(rule)
    assert problem in str(info.value)
    if rule.strip():
        assert repr(rule) in str(info.value)


@pytest.mark.parametrize("rule", [None, 7, ["github *"]])
def test_a_rule_that_is_no_string_is_a_value_error(rule):
    with pytest.raises(ValueError, match="must be a string"):
        parse_rule(rule)


def test_policy_rejects_bad_rules_and_modes():
    with pytest.raises(ValueError, match="bad rule"):
        Policy(allow=("a b c",))
    with pytest.raises(ValueError, match="unknown mode"):
        Policy(mode="yolo")
    with pytest.raises(ValueError, match="unknown mode"):
        Policy(admin_mode_ceiling="none")


# -- from_config -------------------------------------------------------------


def test_from_config_builds_every_part():
    policy = Policy.from_config(
        {"mode": "accept_edits", "allow": ["github *"], "ask": ["github merge-*"], "deny": ["tool__*"]},
        {"deny": ["github delete-*"], "mode_ceiling": "Default"},
        extra_allow=["linear create-issue"],
    )
    assert policy == Policy(
        mode="accept-edits",
        allow=("github *", "linear create-issue"),
        ask=("github merge-*",),
        deny=("tool__*",),
        admin_deny=("github delete-*",),
        admin_mode_ceiling="default",
    )
    assert policy.effective_mode == "default"
    assert decide(DELETE, policy).action == "deny"
    assert decide(CREATE, policy).action == "allow"


def test_from_config_reads_the_admin_files_mode_as_a_ceiling():
    # The config layer hands the admin file's [policy] as it is: `mode` there is a ceiling.
    policy = Policy.from_config({"mode": "bypass-permissions"}, {"mode": "plan", "deny": ()})
    assert (policy.mode, policy.admin_mode_ceiling, policy.effective_mode) == ("bypass-permissions", "plan", "plan")
    assert decide(DELETE, policy).action == "deny"


def test_admin_ask_rules_are_not_lifted_by_project_allow_rules():
    policy = Policy.from_config({"mode": "bypass-permissions", "allow": ["github *"]},
                                {"ask": ["github delete-*"], "allow": ["linear *"]})
    assert decide(DELETE, policy).action == "ask"
    assert decide(LIST, policy).action == "allow"
    assert decide(CREATE, Policy.from_config({}, {"allow": ["linear *"]})).action == "allow"
    assert decide(CREATE, Policy.from_config({"deny": ["linear *"]}, {"allow": ["linear *"]})).action == "deny"


def test_from_config_defaults():
    assert Policy.from_config({}, {}) == Policy()
    assert Policy.from_config(None, None) == Policy()


@pytest.mark.parametrize(
    "policy, admin, extra, where",
    [
        ({"allow": ["ok", "a b c"]}, {}, (), "policy.allow[1]"),
        ({"deny": "github *"}, {}, (), "policy.deny: expected a list"),
        ({"ask": [3]}, {}, (), "policy.ask[0]"),
        ({"mode": "fast"}, {}, (), "policy.mode"),
        ({}, {"deny": ["x("]}, (), "admin policy.deny[0]"),
        ({}, {"mode_ceiling": "lax"}, (), "admin policy.mode_ceiling"),
        ({}, {"mode": "lax"}, (), "admin policy.mode"),
        ({}, {"ask": ["a b c"]}, (), "admin policy.ask[0]"),
        ({}, {}, ["x()"], "lasting approvals[0]"),
    ],
)
def test_from_config_names_the_bad_entry(policy, admin, extra, where):
    with pytest.raises(ValueError) as info:
        Policy.from_config(policy, admin, extra)
    assert where in str(info.value)


# -- hooks in the decision -----------------------------------------------------


def test_hook_allow_acts_as_an_allow_rule():
    allow = HookOutcome("allow", "hook says fine")
    assert decide(DELETE, Policy(), allow).action == "allow"
    assert decide(DELETE, Policy(), allow).reason == "hook says fine"
    assert decide(DELETE, Policy(deny=("github *",)), allow).action == "deny"
    assert decide(DELETE, Policy(ask=("github *",)), allow).action == "ask"
    assert decide(DELETE, Policy(mode="plan"), allow).action == "deny"
    outside = own("write_file", "edit", outside=True, path="/x")
    assert decide(outside, Policy(), allow).action == "ask"


def test_hook_ask_and_deny():
    assert decide(READ, Policy(allow=("*",)), HookOutcome("ask", "check")).action == "ask"
    denied = decide(READ, Policy(allow=("*",)), HookOutcome("deny", "no reads today"))
    assert (denied.action, denied.reason) == ("deny", "no reads today")
    assert decide(READ, Policy(), HookOutcome("continue")).action == "allow"


# -- canonical keys ------------------------------------------------------------


def test_canonical_key_ignores_key_order_and_name_spelling():
    a = canonical_call_key("mcp_github__delete_branch", {"branch": "fix-x", "repo": "acme/api"})
    b = canonical_call_key("mcp__github__delete-branch", {"repo": "acme/api", "branch": "fix-x"})
    assert a == b
    nested_a = canonical_call_key("t", {"o": {"y": 1, "x": [1, {"b": 2, "a": 1}]}})
    nested_b = canonical_call_key("t", {"o": {"x": [1, {"a": 1, "b": 2}], "y": 1}})
    assert nested_a == nested_b
    assert canonical_call_key("t", {"n": 7}) == canonical_call_key("t", {"n": 7.0})


def test_canonical_key_tells_different_calls_apart():
    base = canonical_call_key("mcp_github__delete_branch", {"branch": "fix-x"})
    assert base != canonical_call_key("mcp_github__delete_branch", {"branch": "fix-y"})
    assert base != canonical_call_key("mcp_gitlab__delete_branch", {"branch": "fix-x"})
    assert base != canonical_call_key("mcp_github__delete_branch", {"branch": "fix-x", "force": True})
    assert canonical_call_key("t", {"n": 7}) != canonical_call_key("t", {"n": "7"})
    assert canonical_call_key("t", {"n": 7}) != canonical_call_key("t", {"n": 7.5})


# -- the server/tool boundary and Unicode folding (issue 8 item 11) -------------


@pytest.mark.parametrize("rule, call", [
    ("mcp_fo*__read", mcp("foo__x", "read")),   # a `*` in the server part stays in the server
    ("mcp_foo", mcp("foo-bar", "t")),
    ("mcp_foo", own("mcp_foo_t")),               # a bare name is no MCP tool
    ("tool__rip*", mcp("tool", "ripgrep")),
    ("mcp_foo__*", custom("foo__x")),
])
def test_rules_respect_the_server_tool_boundary(rule, call):
    assert not rule_matches(rule, call)


@pytest.mark.parametrize("rule, call", [
    ("mcp_fo*__read", mcp("foo", "read")),
    ("mcp_foo", mcp("foo", "x__y")),
    ("mcp_*", mcp("foo", "t")),
    ("tool__rip*", RIPGREP),
    ("*", mcp("foo", "t")),
])
def test_rules_still_cover_what_they_name(rule, call):
    assert rule_matches(rule, call)


@pytest.mark.parametrize("rule, call", [
    ("mcp_docs__STRASSE", mcp("docs", "straße")),
    ("docs straße", mcp("docs", "STRASSE")),
    ("ＲＥＡＤ_ＦＩＬＥ", READ),
])
def test_deny_rules_fold_case_the_unicode_way(rule, call):
    assert decide(call, Policy(mode="bypass-permissions", deny=(rule,))).action == "deny"

# -- input constraints fail closed (issue 8, item 5) --------------------------------------

def repo_call(schema_keys=frozenset({"repo"}), **input) -> CallInfo:
    return CallInfo("mcp_github__delete_repo", "tools github delete-repo", input, "execute",
                    schema_keys=schema_keys)


@pytest.mark.parametrize("input", [{"Repo": "sandbox/x"}, {"REPO": "sandbox/y"},
                                   {"repo": "sandbox/x", "Repo": "prod"}, {}])
def test_an_allow_constraint_needs_the_key_as_spelled_and_no_look_alike(input):
    policy = Policy(allow=("mcp_github__delete_repo(repo=sandbox/*)",))
    assert decide(repo_call(**input), policy).action == "ask"
    assert decide(repo_call(repo="sandbox/z"), policy).action == "allow"  # the control


@pytest.mark.parametrize("input", [{}, {"Repo": "x"}, {"REPO": "prod"}, {"repo": "prod"},
                                   {"repo": "x", "Repo": "prod"}])
def test_a_deny_constraint_covers_other_spellings_and_a_defaulted_key(input):
    policy = Policy(mode="bypass-permissions", deny=("github delete-repo(repo=prod)",))
    assert decide(repo_call(**input), policy).action == "deny"
    assert decide(repo_call(repo="scratch"), policy).action == "allow"  # the control


def test_a_deny_constraint_skips_a_tool_whose_schema_lacks_the_key():
    policy = Policy(mode="bypass-permissions", deny=("github *(repo=prod)",))
    no_repo = CallInfo("mcp_github__list_orgs", "tools github list-orgs", {}, "read", schema_keys=frozenset())
    assert decide(no_repo, policy).action == "allow"
    unknown = CallInfo("mcp_github__list_orgs", "tools github list-orgs", {}, "read")
    assert decide(unknown, policy).action == "deny"  # no schema to tell: fail closed


def test_read_only_denies_every_call_that_is_not_a_read_whatever_the_mode():
    policy = Policy(mode="bypass-permissions", allow=("*",), read_only=True)
    decision = decide(mcp("github", "create-issue"), policy)
    assert decision.action == "deny" and "--read-only" in decision.reason
    assert decide(mcp("github", "list-pulls", kind="read"), policy).action == "allow"


# -- path arguments are matched where they lead -----------------------------------------

WS = "/home/ds/project"


def path_call(name: str, kind: str, path: str, leads_to: str, **input) -> CallInfo:
    """A call of an own tool whose `path` the dispatcher resolved to `leads_to` (a real path)."""
    inside = leads_to[len(WS) + 1:] if leads_to.startswith(WS + "/") else None
    forms = (leads_to,) if inside is None else (inside, leads_to)
    return CallInfo(name, f"tools {name.replace('_', '-')}", {"path": path, **input}, kind,
                    paths={"path": leads_to}, path_forms={"path": forms})


SECRET_SPELLINGS = ["./secrets/x", "notes/../secrets/x", f"{WS}/secrets/x", "notes/link-to-secret"]


@pytest.mark.parametrize("path", SECRET_SPELLINGS)
@pytest.mark.parametrize("rule", ["read-file(path=secrets/*)", "read_file(path=./secrets/*)",
                                  f"read-file(path={WS}/secrets/*)"])
def test_a_deny_rule_on_a_path_covers_every_way_to_name_the_file(path, rule):
    policy = Policy(mode="accept-edits", deny=(rule,))
    decision = decide(path_call("read_file", "read", path, f"{WS}/secrets/x"), policy)
    assert decision.action == "deny" and decision.rule == rule
    assert decide(path_call("read_file", "read", "notes/a", f"{WS}/notes/a"), policy).action == "allow"


def test_a_deny_rule_on_a_path_also_covers_the_text_as_written():
    # `secrets` is a link out of the workspace's `secrets/` pattern: the text still denies.
    policy = Policy(mode="bypass-permissions", deny=("write-file(path=secrets/*)",))
    call = path_call("write_file", "edit", "secrets/x", f"{WS}/elsewhere/x", content="c")
    assert decide(call, policy).action == "deny"


def test_an_absolute_deny_pattern_matches_a_path_out_of_the_workspace():
    policy = Policy(mode="bypass-permissions", deny=("read-file(path=/etc/*)",))
    for path in ["/etc/../etc/passwd", "../../../../etc/passwd", "//etc/passwd"]:
        assert decide(path_call("read_file", "read", path, "/etc/passwd"), policy).action == "deny", path
    policy = Policy(mode="bypass-permissions", deny=("read-file(path=//etc/*)",))
    assert decide(path_call("read_file", "read", "/etc/./passwd", "/etc/passwd"), policy).action == "deny"


@pytest.mark.parametrize("path, leads_to", [("notes/../src/x", f"{WS}/src/x"),
                                            ("notes/link-to-src", f"{WS}/src/app.py"),
                                            ("notes/../../elsewhere/x", "/home/ds/elsewhere/x")])
def test_an_allow_rule_on_a_path_allows_only_where_the_path_leads(path, leads_to):
    policy = Policy(allow=("write-file(path=notes/*)",))
    assert decide(path_call("write_file", "edit", path, leads_to, content="c"), policy).action == "ask"
    inside = path_call("write_file", "edit", "./notes/../notes/a.md", f"{WS}/notes/a.md", content="c")
    assert decide(inside, policy).action == "allow"  # the control: it leads into notes/


def test_an_absolute_allow_pattern_matches_the_real_path():
    policy = Policy(allow=(f"write-file(path={WS}/notes/*)",))
    assert decide(path_call("write_file", "edit", "notes/a", f"{WS}/notes/a"), policy).action == "allow"
    assert decide(path_call("write_file", "edit", f"{WS}/notes/../src/a", f"{WS}/src/a"),
                  policy).action == "ask"


def test_an_ask_rule_on_a_path_asks_for_either_form():
    policy = Policy(mode="bypass-permissions", ask=("read-file(path=secrets/*)",))
    assert decide(path_call("read_file", "read", "./secrets/x", f"{WS}/secrets/x"), policy).action == "ask"
    assert decide(path_call("read_file", "read", "secrets/x", f"{WS}/data/x"), policy).action == "ask"
    assert decide(path_call("read_file", "read", "data/x", f"{WS}/data/x"), policy).action == "allow"
