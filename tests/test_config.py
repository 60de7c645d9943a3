"""Config loading against real files in a private directory tree.

Every test runs with HOME set to its own tmp folder, so the upward walk stops there
and no config on this machine can leak in.
"""

from __future__ import annotations

import json
import sys
import os
import textwrap
from pathlib import Path

import pytest

from toolkernel._config._config import Config, load_config, read_config
from toolkernel._config._hooks import DEFAULT_HOOK_TIMEOUT, HookConfig
from toolkernel._config._servers import DEFAULT_CALL_TIMEOUT, ServerConfig
from toolkernel._errors import ConfigError


class Tree:
    """A home with a project in it, plus user and admin config locations."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        self.project = self.home / "proj"
        self.workdir = self.project / "sub" / "dir"
        self.user_dir = root / "xdg" / "toolkernel"
        self.admin = root / "etc" / "toolkernel.toml"
        for folder in (self.workdir, self.user_dir, self.admin.parent):
            folder.mkdir(parents=True, exist_ok=True)
        # Trusted: these tests are about reading files (test_trust.py is about trust).
        self.environ: dict[str, str] = {"HOME": str(self.home), "TOOLKERNEL_TRUST_ALL": "1"}

    def write(self, path: Path, text: str) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    def toml(self, folder: Path, text: str) -> Path:
        return self.write(folder / "toolkernel.toml", text)

    def mcp_json(self, folder: Path, servers: dict) -> Path:
        return self.write(folder / ".mcp.json", json.dumps({"mcpServers": servers}))

    def user(self, text: str) -> Path:
        return self.toml(self.user_dir, text)

    def admin_file(self, text: str) -> Path:
        return self.write(self.admin, text)

    def load(self, workdir: Path | None = None) -> Config:
        return load_config(workdir or self.workdir, user_config_dir=self.user_dir,
                           admin_path=self.admin, environ=self.environ)

    def error(self, workdir: Path | None = None) -> ConfigError:
        with pytest.raises(ConfigError) as caught:
            self.load(workdir)
        return caught.value

    def broken(self, workdir: Path | None = None) -> ConfigError:
        """The problem of the one server whose own entry is wrong: the config still loads."""
        problems = dict(self.load(workdir).broken_servers)
        assert len(problems) == 1, problems
        return next(iter(problems.values()))

    def problem(self, workdir: Path | None = None) -> ConfigError:
        """The config's error: raised, or the one broken server's."""
        try:
            return self.broken(workdir)
        except ConfigError as exc:
            return exc


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


# --- sections ------------------------------------------------------------------------

def test_no_files_gives_empty_config(tree):
    config = tree.load()
    assert config.servers == {}
    assert dict(config.policy) == {"mode": "default", "allow": (), "ask": (), "deny": ()}
    assert dict(config.admin_policy) == {"allow": (), "ask": (), "deny": ()}
    assert config.hooks == () and config.tools == {} and config.files == ()


def test_stdio_server_with_every_field(tree):
    path = tree.toml(tree.project, """
        [mcp_servers.github]
        command = "github-mcp"
        args = ["--stdio", "-v"]
        env = { GITHUB_TOKEN = "abc" }
        cwd = "/srv/github"
        load = "on-demand"
        description = "GitHub issues and pulls"
        trust_annotations = false
    """)
    server = tree.load().servers["github"]
    assert server == ServerConfig(
        name="github", transport="stdio", command="github-mcp", args=("--stdio", "-v"),
        env={"GITHUB_TOKEN": "abc"}, cwd="/srv/github", load="on-demand",
        description="GitHub issues and pulls", trust_annotations=False)
    assert server.source == str(path)
    assert server.url is None and server.headers == {} and server.missing_vars == ()


def test_http_server_and_defaults(tree):
    tree.toml(tree.project, """
        [mcp_servers.docs]
        url = "https://docs.example.com/mcp"
        headers = { Authorization = "Bearer x" }
    """)
    server = tree.load().servers["docs"]
    assert server.transport == "http"
    assert server.url == "https://docs.example.com/mcp"
    assert dict(server.headers) == {"Authorization": "Bearer x"}
    assert (server.command, server.args, server.cwd) == (None, (), None)
    assert (server.load, server.description, server.trust_annotations) == ("eager", "", True)


def test_config_values_cannot_be_changed(tree):
    tree.toml(tree.project, """
        [mcp_servers.a]
        command = "a"
        env = { K = "v" }
        [tools.web_fetch]
        allow_hosts = ["127.0.0.1"]
    """)
    config = tree.load()
    with pytest.raises(TypeError):
        config.servers["a"].env["K"] = "w"  # type: ignore[index]
    with pytest.raises(TypeError):
        config.tools["web_fetch"]["allow_hosts"] = []  # type: ignore[index]
    assert config.tools["web_fetch"]["allow_hosts"] == ("127.0.0.1",)


def test_policy_section(tree):
    tree.toml(tree.project, """
        [policy]
        mode = "accept-edits"
        allow = ["github list-pulls", "mcp_github__get_*"]
        ask = ["github *"]
        deny = ["github delete-branch(branch=main)"]
    """)
    assert dict(tree.load().policy) == {
        "mode": "accept-edits", "allow": ("github list-pulls", "mcp_github__get_*"),
        "ask": ("github *",), "deny": ("github delete-branch(branch=main)",)}


def test_hooks_section(tree):
    path = tree.toml(tree.project, """
        [[hooks]]
        event = "pre_call"
        match = "github *"
        command = ["python", "check.py"]
        timeout = 5

        [[hooks]]
        event = "post_call"
        command = ["redact"]
    """)
    first, second = tree.load().hooks
    assert first == HookConfig(event="before_call", match="github *",
                               command=("python", "check.py"), timeout=5,
                               cwd=str(tree.project), source=str(path))
    assert second == HookConfig(event="after_call", match="*", command=("redact",),
                                cwd=str(tree.project), source=str(path), timeout=DEFAULT_HOOK_TIMEOUT)


def test_hook_events_may_use_the_hooks_module_names(tree):
    tree.toml(tree.project, '[[hooks]]\nevent = "before_call"\ncommand = ["a"]\n'
                            '[[hooks]]\nevent = "after_call"\ncommand = ["b"]\n')
    assert [h.event for h in tree.load().hooks] == ["before_call", "after_call"]


def test_config_hooks_register_with_the_hooks_module(tree):
    from toolkernel._approval._hooks import Hooks
    tree.toml(tree.project, '[[hooks]]\nevent = "pre_call"\nmatch = "github get-pull(repo=acme/*)"\n'
                            'command = ["true"]\ntimeout = 2.5\n')
    hooks = Hooks()
    for hook in tree.load().hooks:
        hooks.add_command_hook(hook.event, hook.match, list(hook.command), hook.timeout, cwd=hook.cwd)


def test_tools_section_merges_per_key_and_names_either_way(tree):
    tree.user("""
        [tools.web-fetch]
        allow_hosts = ["example.org"]
        timeout = 10
    """)
    tree.toml(tree.project, """
        [tools.web_fetch]
        allow_hosts = ["127.0.0.1"]
        [tools.grep_search]
        use_rg = false
    """)
    config = tree.load()
    assert dict(config.tool_settings("web-fetch")) == {"allow_hosts": ("127.0.0.1",), "timeout": 10}
    assert dict(config.tool_settings("grep_search")) == {"use_rg": False}
    assert config.tool_settings("read-file") == {}


# --- precedence ----------------------------------------------------------------------

def test_precedence_admin_user_far_near(tree):
    tree.admin_file('[mcp_servers.s]\ncommand = "admin"\n[mcp_servers.only_admin]\ncommand = "a"\n')
    tree.user('[mcp_servers.s]\ncommand = "user"\n[mcp_servers.only_user]\ncommand = "u"\n')
    tree.toml(tree.project, '[mcp_servers.s]\ncommand = "far"\n')
    near = tree.toml(tree.workdir, '[mcp_servers.s]\ncommand = "near"\n')
    config = tree.load()
    assert config.servers["s"].command == "near"
    assert config.servers["s"].source == str(near)
    assert config.servers["only_admin"].command == "a"
    assert config.servers["only_user"].command == "u"
    assert config.files == (str(tree.admin), str(tree.user_dir / "toolkernel.toml"),
                            str(tree.project / "toolkernel.toml"), str(near))


def test_toml_wins_over_mcp_json_in_same_directory(tree):
    tree.mcp_json(tree.project, {"s": {"command": "from-json"}, "j": {"command": "j"}})
    tree.toml(tree.project, '[mcp_servers.s]\ncommand = "from-toml"\n')
    config = tree.load()
    assert config.servers["s"].command == "from-toml"
    assert config.servers["j"].command == "j"
    assert config.files == (str(tree.project / ".mcp.json"), str(tree.project / "toolkernel.toml"))


def test_nearer_mcp_json_wins_over_farther_toml(tree):
    tree.toml(tree.project, '[mcp_servers.s]\ncommand = "far-toml"\n')
    tree.mcp_json(tree.workdir, {"s": {"command": "near-json"}})
    assert tree.load().servers["s"].command == "near-json"


def test_redefinition_replaces_the_whole_server(tree):
    tree.user('[mcp_servers.s]\ncommand = "a"\nargs = ["x"]\nload = "on-demand"\n')
    tree.toml(tree.project, '[mcp_servers.s]\nurl = "http://127.0.0.1:1/mcp"\n')
    server = tree.load().servers["s"]
    assert (server.transport, server.args, server.load) == ("http", (), "eager")


def test_hyphen_and_underscore_names_are_the_same_server(tree):
    tree.user('[mcp_servers.my_server]\ncommand = "user"\n')
    tree.toml(tree.project, '[mcp_servers.my-server]\ncommand = "project"\n')
    config = tree.load()
    assert list(config.servers) == ["my-server"]
    assert config.server("my_server").command == "project"
    assert config.server("nope") is None


def test_policy_lists_concatenate_and_nearest_mode_wins(tree):
    tree.user('[policy]\nmode = "plan"\nallow = ["u"]\ndeny = ["ud"]\n')
    tree.toml(tree.project, '[policy]\nmode = "bypass-permissions"\nallow = ["far"]\n')
    tree.toml(tree.workdir, '[policy]\nallow = ["near"]\n')
    policy = tree.load().policy
    assert policy["mode"] == "bypass-permissions"
    assert policy["allow"] == ("u", "far", "near")
    assert policy["deny"] == ("ud",) and policy["ask"] == ()


def test_hooks_concatenate_lowest_first(tree):
    tree.admin_file('[[hooks]]\nevent = "pre_call"\ncommand = ["admin"]\n')
    tree.user('[[hooks]]\nevent = "pre_call"\ncommand = ["user"]\n')
    tree.toml(tree.project, '[[hooks]]\nevent = "post_call"\ncommand = ["project"]\n')
    assert [h.command[0] for h in tree.load().hooks] == ["admin", "user", "project"]


def test_admin_policy_is_kept_apart(tree):
    tree.admin_file('[policy]\nmode = "default"\ndeny = ["github delete-*"]\n')
    tree.toml(tree.project, '[policy]\nmode = "bypass-permissions"\nallow = ["github *"]\n')
    config = tree.load()
    assert dict(config.admin_policy) == {"mode_ceiling": "default", "allow": (), "ask": (),
                                         "deny": ("github delete-*",)}
    assert dict(config.policy) == {"mode": "bypass-permissions", "allow": ("github *",),
                                   "ask": (), "deny": ()}


def test_admin_policy_reaches_the_policy_module(tree):
    from toolkernel._approval._policy import CallInfo, Policy, decide
    tree.admin_file('[policy]\nmode_ceiling = "plan"\ndeny = ["github delete-*"]\n')
    tree.toml(tree.project, '[policy]\nmode = "bypass-permissions"\nallow = ["github *"]\n')
    config = tree.load()
    policy = Policy.from_config(config.policy, config.admin_policy)
    assert policy.effective_mode == "plan"
    delete = CallInfo("mcp_github__delete_branch", "tools github delete-branch", {}, "execute")
    assert decide(delete, policy).action == "deny"


def test_admin_policy_has_no_ceiling_unless_set(tree):
    tree.admin_file('[policy]\ndeny = ["x"]\n')
    admin = tree.load().admin_policy
    assert "mode_ceiling" not in admin and "mode" not in admin


def test_mode_accepts_underscores(tree):
    tree.toml(tree.project, '[policy]\nmode = "accept_edits"\n')
    assert tree.load().policy["mode"] == "accept-edits"


def test_disabled_mcp_json_server_hides_a_farther_one(tree):
    tree.user('[mcp_servers.s]\ncommand = "user"\n')
    tree.mcp_json(tree.project, {"s": {"command": "x", "disabled": True}, "t": {"command": "t"}})
    assert list(tree.load().servers) == ["t"]


# --- where files are found -----------------------------------------------------------

def test_upward_search_stops_at_home(tree):
    tree.toml(tree.home, '[mcp_servers.at_home]\ncommand = "h"\n')
    tree.toml(tree.home.parent, '[mcp_servers.above_home]\ncommand = "x"\n')
    tree.mcp_json(tree.project / "sub", {"middle": {"command": "m"}})
    assert set(tree.load().servers) == {"at_home", "middle"}


def test_upward_search_goes_past_folders_outside_home(tree, tmp_path):
    outside = tmp_path / "outside"
    workdir = outside / "a" / "b"
    workdir.mkdir(parents=True)
    tree.toml(outside, '[mcp_servers.outer]\ncommand = "o"\n')
    assert "outer" in tree.load(workdir).servers


def test_relative_workdir_is_resolved(tree, monkeypatch):
    tree.toml(tree.project, '[mcp_servers.p]\ncommand = "p"\n')
    monkeypatch.chdir(tree.workdir)
    assert "p" in tree.load(Path(".")).servers


def test_files_in_world_writable_folders_only_tighten(tree):
    # Even trusted (TOOLKERNEL_TRUST_ALL): anyone could have written them.
    shared = tree.project / "shared"
    shared.mkdir()
    tree.toml(shared, '[mcp_servers.planted]\ncommand = "evil"\n'
              '[policy]\nmode = "plan"\nallow = ["write_file"]\ndeny = ["read_file"]\n')
    tree.mcp_json(shared, {"planted2": {"command": "evil"}})
    shared.chmod(0o777)
    config = tree.load(shared)
    assert config.servers == {}
    assert dict(config.policy) == {"mode": "plan", "allow": (), "ask": (), "deny": ("read_file",)}
    assert "anyone may write" in config.untrusted[0] and str(shared) in config.untrusted[0]
    shared.chmod(0o755)
    assert set(tree.load(shared).servers) == {"planted", "planted2"}


def test_a_world_writable_config_file_only_tightens(tree):
    path = tree.toml(tree.project, '[mcp_servers.p]\ncommand = "p"\n[policy]\ndeny = ["read_file"]\n')
    path.chmod(0o666)
    config = tree.load()
    assert config.servers == {} and config.policy["deny"] == ("read_file",)
    assert "anyone may write to toolkernel.toml" in config.untrusted[0]


@pytest.mark.parametrize("target", ["nowhere.toml", "f/x.toml"])
def test_a_config_symlink_to_nothing_is_an_error_not_absent(tree, target):
    (tree.project / "f").write_text("a file, not a folder")
    (tree.project / "toolkernel.toml").symlink_to(target)
    error = tree.error()
    assert error.path == str(tree.project / "toolkernel.toml") and "symlink to nothing" in error.problem


def test_default_locations_come_from_the_environment(tree, monkeypatch):
    xdg = tree.user_dir.parent
    tree.user('[mcp_servers.user_server]\ncommand = "u"\n')
    tree.admin_file('[policy]\ndeny = ["admin-rule"]\n')
    monkeypatch.setenv("HOME", str(tree.home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.setenv("TOOLKERNEL_ADMIN_CONFIG", str(tree.admin))
    config = load_config(tree.workdir)
    assert "user_server" in config.servers
    assert config.admin_policy["deny"] == ("admin-rule",)


def test_user_file_defaults_to_dot_config_under_home(tree):
    tree.toml(tree.home / ".config" / "toolkernel", '[mcp_servers.dot]\ncommand = "d"\n')
    config = load_config(tree.workdir, admin_path=tree.admin, environ=tree.environ)
    assert "dot" in config.servers


def test_missing_admin_file_is_fine(tree, tmp_path):
    config = load_config(tree.workdir, user_config_dir=tree.user_dir,
                         admin_path=tmp_path / "no" / "such.toml", environ=tree.environ)
    assert config.files == ()


# --- .mcp.json forms -----------------------------------------------------------------

def test_mcp_json_stdio_form(tree):
    tree.mcp_json(tree.project, {"fs": {"command": "npx", "args": ["-y", "server-fs", "."],
                                        "env": {"DEBUG": "1"}, "cwd": "tools"}})
    server = tree.load().servers["fs"]
    assert (server.transport, server.command, server.args) == ("stdio", "npx", ("-y", "server-fs", "."))
    assert dict(server.env) == {"DEBUG": "1"}
    assert server.cwd == str(tree.project / "tools")


def test_mcp_json_url_form(tree):
    tree.mcp_json(tree.project, {"remote": {"url": "https://x.example/mcp",
                                            "headers": {"X-Key": "k"}}})
    server = tree.load().servers["remote"]
    assert (server.transport, server.url, dict(server.headers)) == \
        ("http", "https://x.example/mcp", {"X-Key": "k"})


@pytest.mark.parametrize("declared, transport", [
    ("http", "http"), ("streamable-http", "http"), ("streamableHttp", "http"), ("sse", "sse")])
def test_mcp_json_typed_url_forms(tree, declared, transport):
    tree.mcp_json(tree.project, {"r": {"type": declared, "url": "http://127.0.0.1:9/sse"}})
    assert tree.load().servers["r"].transport == transport


def test_mcp_json_typed_stdio_form_and_foreign_keys_ignored(tree):
    tree.mcp_json(tree.project, {"s": {"type": "stdio", "command": "srv", "autoApprove": ["x"],
                                       "timeout": 60, "description": "a server"}})
    server = tree.load().servers["s"]
    assert (server.transport, server.command, server.description) == ("stdio", "srv", "a server")


def test_mcp_json_other_top_level_keys_are_ignored(tree):
    tree.write(tree.project / ".mcp.json", json.dumps({"inputs": [], "mcpServers": {"s": {"command": "c"}}}))
    assert "s" in tree.load().servers


def test_mcp_json_with_bom_is_read(tree):
    (tree.project / ".mcp.json").write_bytes(b"\xef\xbb\xbf" + json.dumps({"mcpServers": {"s": {"command": "c"}}}).encode())
    assert "s" in tree.load().servers


# --- ${VAR} expansion ----------------------------------------------------------------

def test_variables_expand_in_every_field(tree):
    tree.environ.update(TOKEN="t0k", PORT="8123", ROOT="/srv", BIN="mcp-bin")
    tree.toml(tree.project, """
        [mcp_servers.s]
        command = "${BIN}"
        args = ["--port", "${PORT}", "--root=${ROOT}/data"]
        env = { API_TOKEN = "${TOKEN}", LEVEL = "${LEVEL:-info}" }
        cwd = "${ROOT}/work"
        [mcp_servers.h]
        url = "http://127.0.0.1:${PORT}/mcp"
        headers = { Authorization = "Bearer ${TOKEN}", X = "${UNSET_X:-fallback}" }
    """)
    config = tree.load()
    s, h = config.servers["s"], config.servers["h"]
    assert s.command == "mcp-bin"
    assert s.args == ("--port", "8123", "--root=/srv/data")
    assert dict(s.env) == {"API_TOKEN": "t0k", "LEVEL": "info"}
    assert s.cwd == "/srv/work"
    assert h.url == "http://127.0.0.1:8123/mcp"
    assert dict(h.headers) == {"Authorization": "Bearer t0k", "X": "fallback"}
    assert s.missing_vars == () and h.missing_vars == ()


def test_default_applies_to_empty_variables_and_plain_form_keeps_empty(tree):
    tree.environ.update(EMPTY="")
    tree.toml(tree.project, '[mcp_servers.s]\ncommand = "c"\nargs = ["${EMPTY:-d}", "${EMPTY}"]\n')
    server = tree.load().servers["s"]
    assert server.args == ("d", "")
    assert server.missing_vars == ()


def test_unset_variables_keep_the_server_and_are_listed(tree):
    tree.toml(tree.project, """
        [mcp_servers.gh]
        command = "gh-mcp"
        env = { GITHUB_TOKEN = "${GITHUB_TOKEN}", OTHER = "${OTHER_SECRET}" }
        args = ["${GITHUB_TOKEN}"]
        [mcp_servers.web]
        url = "${WEB_URL}"
    """)
    config = tree.load()
    assert config.servers["gh"].missing_vars == ("GITHUB_TOKEN", "OTHER_SECRET")
    assert config.servers["gh"].env["GITHUB_TOKEN"] == ""
    assert config.servers["web"].missing_vars == ("WEB_URL",)


def test_text_that_is_not_a_variable_is_left_alone(tree):
    tree.environ.update(HOME_DIR="/h")
    tree.toml(tree.project, '[mcp_servers.s]\ncommand = "c"\nargs = ["$HOME_DIR", "${1bad}", "${open"]\n')
    assert tree.load().servers["s"].args == ("$HOME_DIR", "${1bad}", "${open")


def test_mcp_json_expands_variables_too(tree):
    tree.environ.update(KEY="secret-key")
    tree.mcp_json(tree.project, {"r": {"url": "https://x.example/mcp",
                                       "headers": {"Authorization": "Bearer ${KEY}"}}})
    assert tree.load().servers["r"].headers["Authorization"] == "Bearer secret-key"


def test_relative_and_home_cwd(tree):
    tree.toml(tree.project, '[mcp_servers.r]\ncommand = "c"\ncwd = "servers/r"\n'
                            '[mcp_servers.t]\ncommand = "c"\ncwd = "~/srv"\n')
    config = tree.load()
    assert config.servers["r"].cwd == str(tree.project / "servers" / "r")
    assert config.servers["t"].cwd == str(tree.home / "srv")


# --- errors --------------------------------------------------------------------------

def assert_names(error: ConfigError, path: Path, key: str | None, *words: str) -> None:
    assert error.path == str(path)
    assert error.key == key
    text = str(error)
    assert text.startswith(f"{path}: {key}: " if key else f"{path}: ")
    for word in words:
        assert word in text, text


def test_toml_syntax_error_names_the_line(tree):
    path = tree.toml(tree.project, '[mcp_servers.s]\ncommand = "c"\nargs = \nload = "eager"\n')
    error = tree.error()
    assert str(error) == f"{path}: invalid TOML at line 3, column 8: Invalid value"


def test_toml_error_at_the_end_names_the_last_line(tree):
    path = tree.toml(tree.project, '[mcp_servers.s]\ncommand = "c"\nargs = [\n')
    assert_names(tree.error(), path, None, "invalid TOML at the end of the file (line 4)")


def test_toml_duplicate_key_names_the_line(tree):
    path = tree.toml(tree.project, '[mcp_servers.s]\ncommand = "c"\ncommand = "d"\n')
    assert_names(tree.error(), path, None, "invalid TOML at line 3")


def test_json_syntax_error_names_the_line(tree):
    path = tree.write(tree.project / ".mcp.json", '{\n  "mcpServers": {\n    "s": {"command": "c",}\n  }\n}\n')
    assert_names(tree.error(), path, None, "invalid JSON at line 3")


def test_json_top_level_must_be_an_object(tree):
    path = tree.write(tree.project / ".mcp.json", "[1, 2]")
    assert_names(tree.error(), path, None, "expected an object, got an array")


def test_load_value_error_message(tree):
    path = tree.toml(tree.project, '[mcp_servers.github]\ncommand = "c"\nload = "lazy"\n')
    error = tree.broken()
    assert_names(error, path, "mcp_servers.github.load")
    assert str(error) == f'{path}: mcp_servers.github.load: expected "eager" or "on-demand", got "lazy"'


@pytest.mark.parametrize("body, key, words", [
    ('[mcp_servers.s]\ncommand = 5\n', "mcp_servers.s.command", ["expected a string, got an integer"]),
    ('[mcp_servers.s]\ncommand = ""\n', "mcp_servers.s.command", ["must not be empty"]),
    ('[mcp_servers.s]\ncommand = "c"\nargs = "x"\n', "mcp_servers.s.args", ["expected an array of strings, got a string"]),
    ('[mcp_servers.s]\ncommand = "c"\nargs = ["a", 1]\n', "mcp_servers.s.args[1]", ["expected a string"]),
    ('[mcp_servers.s]\ncommand = "c"\nenv = { A = 1 }\n', "mcp_servers.s.env.A", ["expected a string, got an integer"]),
    ('[mcp_servers.s]\ncommand = "c"\nenv = ["A"]\n', "mcp_servers.s.env", ["expected a table, got an array"]),
    ('[mcp_servers.s]\ncommand = "c"\ntrust_annotations = "no"\n', "mcp_servers.s.trust_annotations", ["expected true or false"]),
    ('[mcp_servers.s]\ncommand = "c"\ndescription = 1\n', "mcp_servers.s.description", ["expected a string"]),
    ('[mcp_servers.s]\ncommand = "c"\ncomand = "d"\n', "mcp_servers.s.comand", ["unknown key", 'did you mean "command"', "allowed here: command, args"]),
    ('[mcp_servers.s]\ncommand = "c"\nurl = "http://x/"\n', "mcp_servers.s", ['both "command" and "url"']),
    ('[mcp_servers.s]\ndescription = "d"\n', "mcp_servers.s", ['needs "command"', '"url"']),
    ('[mcp_servers.s]\nurl = "http://x/"\nargs = ["a"]\n', "mcp_servers.s.args", ["only to stdio servers"]),
    ('[mcp_servers.s]\ncommand = "c"\nheaders = { A = "b" }\n', "mcp_servers.s.headers", ["only to HTTP servers"]),
    ('[mcp_servers.s]\nurl = "ftp://x/"\n', "mcp_servers.s.url", ["http:// or https:// URL"]),
    ('[mcp_servers.s]\nurl = "http://[::1/mcp"\n', "mcp_servers.s.url", ["http:// or https:// URL"]),
    ('[mcp_servers.s]\nurl = "localhost:8080/mcp"\n', "mcp_servers.s.url", ["http:// or https:// URL"]),
    ('[mcp_servers.s]\nload = 1\ncommand = "c"\n', "mcp_servers.s.load", ['expected "eager" or "on-demand", got an integer']),
    ('[mcp_servers."bad name"]\ncommand = "c"\n', "mcp_servers.bad name", ["letters, digits, '-' and '_'"]),
    ('[mcp_servers.-x]\ncommand = "c"\n', "mcp_servers.-x", ["start with a letter or digit"]),
    ('[mcp_servers.a_b]\ncommand = "c"\n[mcp_servers.a-b]\ncommand = "d"\n', "mcp_servers.a-b", ['same name as "a_b"']),
    ('mcp_servers = 3\n', "mcp_servers", ["expected a table, got an integer"]),
    ('[mcp_servers]\ns = "c"\n', "mcp_servers.s", ["expected a table, got a string"]),
    ('[server]\ncommand = "c"\n', "server", ["unknown key", "allowed here: mcp_servers, policy, hooks, tools"]),
    ('[policy]\nmode = "yolo"\n', "policy.mode", ['one of "default", "accept-edits", "plan", "bypass-permissions", got "yolo"']),
    ('[policy]\nallow = "github *"\n', "policy.allow", ["expected an array of strings, got a string"]),
    ('[policy]\ndeny = [1]\n', "policy.deny[0]", ["expected a string, got an integer"]),
    ('[policy]\nask = [""]\n', "policy.ask[0]", ["must not be empty"]),
    ('[policy]\nmodes = "plan"\n', "policy.modes", ['did you mean "mode"']),
    ('[policy]\nmode_ceiling = "plan"\n', "policy.mode_ceiling", ["unknown key"]),
    ('[policy]\nallow = ["github get-pull(repo)"]\n', "policy.allow[0]", ["bad rule", "has no `=`"]),
    ('[policy]\ndeny = ["a b c"]\n', "policy.deny[0]", ["at most two words"]),
    ('[[hooks]]\nevent = "pre_call"\nmatch = "x(y"\ncommand = ["h"]\n', "hooks[0].match", ["bad rule"]),
    ('policy = []\n', "policy", ["expected a table, got an array"]),
    ('[hooks]\nevent = "pre_call"\n', "hooks", ["expected an array of tables ([[hooks]]), got a table"]),
    ('[[hooks]]\nevent = "before"\ncommand = ["x"]\n', "hooks[0].event", ['"pre_call", "before_call", "post_call", "after_call", got "before"']),
    ('[[hooks]]\nevent = "pre_call"\n', "hooks[0].command", ["missing"]),
    ('[[hooks]]\nevent = "pre_call"\ncommand = []\n', "hooks[0].command", ["must not be empty"]),
    ('[[hooks]]\nevent = "pre_call"\ncommand = "x"\n', "hooks[0].command", ["expected an array of strings"]),
    ('[[hooks]]\nevent = "pre_call"\ncommand = ["x"]\ntimeout = 0\n', "hooks[0].timeout", ["greater than 0"]),
    ('[[hooks]]\nevent = "pre_call"\ncommand = ["x"]\ntimeout = true\n', "hooks[0].timeout", ["a number of seconds, got a boolean"]),
    ('[[hooks]]\nevent = "pre_call"\ncommand = ["x"]\n[[hooks]]\nevent = "post_call"\ncommand = ["y"]\nwhen = 1\n', "hooks[1].when", ["unknown key"]),
    ('tools = 1\n', "tools", ["expected a table"]),
])
def test_toml_errors_name_file_and_key(tree, body, key, words):
    path = tree.toml(tree.project, body)
    assert_names(tree.problem(), path, key, *words)


@pytest.mark.parametrize("servers, key, words", [
    ({"s": {"command": 1}}, "mcpServers.s.command", ["expected a string, got an integer"]),
    ({"s": {"command": "c", "args": [None]}}, "mcpServers.s.args[0]", ["expected a string, got null"]),
    ({"s": {"command": "c", "env": "A=1"}}, "mcpServers.s.env", ["expected an object, got a string"]),
    ({"s": {"type": "websocket", "url": "ws://x"}}, "mcpServers.s.type", ['got "websocket"']),
    ({"s": {"type": "stdio", "url": "http://x/"}}, "mcpServers.s.type", ['"stdio" but the server has a "url"']),
    ({"s": {"type": "http", "command": "c"}}, "mcpServers.s.type", ['"http" but the server has a "command"']),
    ({"s": {}}, "mcpServers.s", ['needs "command"']),
    ({"s": {"command": "c", "disabled": "yes"}}, "mcpServers.s.disabled", ["expected true or false"]),
    ({"s.x": {"command": "c"}}, "mcpServers.s.x", ["letters, digits"]),
    ({"s": "c"}, "mcpServers.s", ["expected an object, got a string"]),
])
def test_mcp_json_errors_name_file_and_key(tree, servers, key, words):
    path = tree.mcp_json(tree.project, servers)
    assert_names(tree.problem(), path, key, *words)


def test_a_broken_server_entry_disables_only_that_server(tree):
    tree.toml(tree.project, '[mcp_servers.good]\ncommand = "c"\n\n[mcp_servers.bad]\ncommand = 5\n'
                            '[policy]\nallow = ["read_file"]\n')
    tree.mcp_json(tree.project, {"alsobad": {"type": "websocket", "url": "ws://x"}, "alsogood": {"command": "d"}})
    config = tree.load()
    assert set(config.servers) == {"good", "alsogood"} and "read_file" in config.policy["allow"]
    assert {name: error.key for name, error in config.broken_servers.items()} == {
        "bad": "mcp_servers.bad.command", "alsobad": "mcpServers.alsobad.type"}


def test_a_broken_entry_is_replaced_by_a_good_one_of_higher_precedence_and_the_other_way(tree):
    tree.user('[mcp_servers.s]\ncommand = 5\n')
    tree.toml(tree.project, '[mcp_servers.s]\ncommand = "c"\n')
    config = tree.load()
    assert set(config.servers) == {"s"} and not config.broken_servers
    tree.user('[mcp_servers.s]\ncommand = "c"\n')
    tree.toml(tree.project, '[mcp_servers.s]\ncommand = 5\n')
    config = tree.load()
    assert not config.servers and set(config.broken_servers) == {"s"}


def test_mcp_servers_must_be_an_object(tree):
    path = tree.write(tree.project / ".mcp.json", '{"mcpServers": []}')
    assert_names(tree.error(), path, "mcpServers", "expected an object, got an array")


def test_admin_file_takes_mode_or_mode_ceiling_not_both(tree):
    path = tree.admin_file('[policy]\nmode = "plan"\nmode_ceiling = "default"\n')
    assert_names(tree.error(), path, "policy.mode_ceiling", "not both")


def test_errors_in_user_and_admin_files_name_them(tree):
    path = tree.user('[policy]\nmode = "nope"\n')
    assert_names(tree.error(), path, "policy.mode")
    path.unlink()
    path = tree.admin_file('[policy]\ndeny = "x"\n')
    assert_names(tree.error(), path, "policy.deny")


def test_error_messages_never_show_environment_values(tree):
    tree.environ.update(SECRET_URL="notaurl-s3cr3t-value")
    path = tree.toml(tree.project, '[mcp_servers.s]\nurl = "${SECRET_URL}"\n')
    error = tree.broken()
    assert_names(error, path, "mcp_servers.s.url", "http:// or https:// URL")
    assert "s3cr3t" not in str(error)


def test_wrong_type_errors_do_not_echo_values(tree):
    tree.toml(tree.project, '[mcp_servers.s]\ncommand = "c"\nenv = { TOKEN = ["hunter2-secret"] }\n')
    assert "hunter2" not in str(tree.broken())


def test_non_utf8_file(tree):
    path = tree.project / "toolkernel.toml"
    path.write_bytes(b'[mcp_servers.s]\ncommand = "\xff"\n')
    assert_names(tree.error(), path, None, "not UTF-8")


def test_directory_in_place_of_a_file(tree):
    path = tree.project / "toolkernel.toml"
    path.mkdir()
    assert_names(tree.error(), path, None, "is a directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tree):
    path = tree.toml(tree.project, '[mcp_servers.s]\ncommand = "c"\n')
    path.chmod(0)
    try:
        assert_names(tree.error(), path, None, "cannot read the file")
    finally:
        path.chmod(0o644)


def test_file_that_cannot_be_read(tree):
    path = tree.project / "toolkernel.toml"
    path.symlink_to(path)  # a loop: reading fails even for root
    assert_names(tree.error(), path, None, "cannot read the file", "symbolic links")


def test_files_above_home_are_never_read(tree):
    tree.toml(tree.home.parent, "this is not toml")  # above home: never read
    tree.toml(tree.project, '[mcp_servers.s]\ncommand = "c"\n')
    assert "s" in tree.load().servers


# --- fingerprint ---------------------------------------------------------------------

def test_fingerprint_is_stable_across_loads(tree):
    tree.toml(tree.project, '[mcp_servers.s]\ncommand = "c"\nenv = { A = "1", B = "2" }\n')
    assert tree.load().fingerprint == tree.load().fingerprint


@pytest.mark.parametrize("changed", [
    '[mcp_servers.s]\ncommand = "c2"\n',
    '[mcp_servers.s]\ncommand = "c"\nargs = ["x"]\n',
    '[mcp_servers.s]\ncommand = "c"\nload = "on-demand"\n',
    '[mcp_servers.s]\ncommand = "c"\ndescription = "new"\n',
    '[mcp_servers.s]\ncommand = "c"\ntrust_annotations = false\n',
    '[mcp_servers.s]\ncommand = "c"\n[mcp_servers.t]\ncommand = "c"\n',
    '[mcp_servers.t]\ncommand = "c"\n',
    '',
])
def test_fingerprint_changes_when_a_server_changes(tree, changed):
    path = tree.toml(tree.project, '[mcp_servers.s]\ncommand = "c"\n')
    before = tree.load().fingerprint
    path.write_text(changed)
    assert tree.load().fingerprint != before


def test_fingerprint_follows_expanded_environment(tree):
    tree.toml(tree.project, '[mcp_servers.s]\ncommand = "c"\nenv = { T = "${TOKEN}" }\n')
    unset = tree.load()
    tree.environ["TOKEN"] = "a"
    with_a = tree.load()
    tree.environ["TOKEN"] = "b"
    with_b = tree.load()
    assert len({unset.fingerprint, with_a.fingerprint, with_b.fingerprint}) == 3
    assert unset.servers["s"].missing_vars == ("TOKEN",)
    assert with_a.servers["s"].missing_vars == ()


def test_fingerprint_ignores_everything_but_servers(tree):
    path = tree.toml(tree.project, '[mcp_servers.s]\ncommand = "c"\n')
    before = tree.load()
    path.write_text('# a comment\n[policy]\nallow = ["x"]\n[[hooks]]\nevent = "pre_call"\n'
                    'command = ["h"]\n[tools.web_fetch]\nallow_hosts = ["h"]\n'
                    '[mcp_servers.s]\ncommand = "c"\n')
    after = tree.load()
    assert after.fingerprint == before.fingerprint
    assert after.servers["s"] == before.servers["s"]


def test_same_server_moved_to_another_file_keeps_its_fingerprint(tree):
    tree.toml(tree.project, '[mcp_servers.s]\ncommand = "c"\n')
    before = tree.load()
    (tree.project / "toolkernel.toml").unlink()
    tree.mcp_json(tree.workdir, {"s": {"command": "c"}})
    after = tree.load()
    assert after.servers["s"].source != before.servers["s"].source
    assert after.servers["s"] == before.servers["s"]
    assert hash(after.servers["s"]) == hash(before.servers["s"])
    assert after.fingerprint == before.fingerprint


def test_server_names_differing_only_in_case_are_one_name(tree):
    tree.toml(tree.project, '[mcp_servers.GitHub]\ncommand = "a"\n[mcp_servers.github]\ncommand = "b"\n')
    error = tree.error()
    assert error.key == "mcp_servers.github"
    assert 'same name as "GitHub"' in str(error) and "case does not matter" in str(error)


def test_a_nearer_file_replaces_a_server_spelled_in_another_case(tree):
    tree.user('[mcp_servers.GitHub]\ncommand = "user"\n')
    tree.toml(tree.project, '[mcp_servers.github]\ncommand = "project"\n')
    config = tree.load()
    assert list(config.servers) == ["github"]
    assert config.server("GITHUB").command == "project"


@pytest.mark.parametrize("name", ["foo-", "foo_", "foo__x", "foo-_x"])
def test_server_names_that_blur_the_server_tool_boundary_are_refused(tree, name):
    # Else the allow rule `mcp_foo` would read `mcp_foo___x` (server `foo_`) as a tool of `foo`.
    tree.mcp_json(tree.project, {name: {"command": "c"}})
    error = tree.error()
    assert error.key == f"mcpServers.{name}"
    assert "no doubled separator" in str(error)

def test_server_timeout_defaults_and_is_checked(tree):
    path = tree.toml(tree.project, '[mcp_servers.a]\ncommand = "c"\ntimeout = 12.5\n'
                                   '[mcp_servers.b]\ncommand = "c"\n')
    servers = tree.load().servers
    assert (servers["a"].timeout, servers["b"].timeout) == (12.5, DEFAULT_CALL_TIMEOUT)
    tree.toml(tree.project, '[mcp_servers.a]\ncommand = "c"\ntimeout = 0\n')
    assert_names(tree.broken(), path, "mcp_servers.a.timeout")


def test_expanded_values_are_kept_as_secrets_apart_from_defaults_and_literals(tree):
    tree.environ.update(TOKEN="t0k-from-env", BIN="mcp-bin")
    tree.toml(tree.project, """
        [mcp_servers.s]
        command = "/opt/${BIN}"
        args = ["--token=${TOKEN}", "--mode=${MODE:-fast}", "literal"]
    """)
    server = tree.load().servers["s"]
    assert server.args == ("--token=t0k-from-env", "--mode=fast", "literal")
    assert set(server.secrets) == {"mcp-bin", "t0k-from-env"}


def test_toolkernel_python_is_the_python_toolkernel_runs_in_unless_the_environment_says(tree):
    # The demo config starts its server with it: the first `python3` on the PATH may belong to
    # another environment, without toolkernel (issue 37).
    tree.toml(tree.project, '[mcp_servers.s]\ncommand = "${TOOLKERNEL_PYTHON}"\nargs = ["-m", "x"]\n')
    server = tree.load().servers["s"]
    assert server.command == sys.executable and server.missing_vars == () and server.secrets == ()
    tree.environ.update(TOOLKERNEL_PYTHON="/opt/py/bin/python")
    assert tree.load().servers["s"].command == "/opt/py/bin/python"


def test_every_problem_in_every_file_is_reported_at_once(tree):
    user = tree.user('[policy]\nmode = "yolo"\n')
    project = tree.toml(tree.project, """
        [mcp_servers.a]
        command = 1
        [mcp_servers.b]
        url = "ftp://x/"
        [policy]
        allow = ["ok", "a b c"]
        [[hooks]]
        event = "before"
        command = ["x"]
        [tools.t]
        command = []
        [shell]
        timeout = 0
        [tools_in_shell]
        enabled = "yes"
        [server]
    """)
    json_file = tree.mcp_json(tree.project, {"s": {"command": 2}})
    error = tree.error()
    found = [(e.path, e.key) for e in error.errors]
    # A server whose own entry is wrong is only that server's problem (issue 10): lint lists it.
    config, problems = read_config(tree.workdir, user_config_dir=tree.user_dir, admin_path=tree.admin,
                                   environ=tree.environ)
    assert [(e.path, e.key) for e in problems] == found
    assert {name: (e.path, e.key) for name, e in config.broken_servers.items()} == {
        "s": (str(json_file), "mcpServers.s.command"), "a": (str(project), "mcp_servers.a.command"),
        "b": (str(project), "mcp_servers.b.url")}
    assert found == [(str(user), "policy.mode"),
                     (str(project), "server"), (str(project), "policy.allow[1]"),
                     (str(project), "hooks[0].event"), (str(project), "tools.t.command"),
                     (str(project), "tools_in_shell.enabled"), (str(project), "shell.timeout")]
    text = str(error)
    assert_names(error, user, "policy.mode", "yolo")  # reads as the first, then the others
    assert text.splitlines() == [str(e) for e in error.errors]


def test_a_file_that_cannot_be_parsed_does_not_hide_the_problems_of_the_others(tree):
    broken = tree.toml(tree.project, "[policy\n")
    user = tree.user('[shell]\ntimeout = "long"\n')
    error = tree.error()
    assert [(e.path, e.key) for e in error.errors] == [(str(user), "shell.timeout"), (str(broken), None)]


@pytest.mark.slow
def test_a_tools_cell_in_a_real_kernel_names_every_config_problem(tmp_path):
    from kernel_helpers import loaded_kernel, write_config

    workdir = tmp_path / "project"
    workdir.mkdir()
    path = write_config(workdir, '[policy]\nmode = "fast"\ndeny = ["a b c"]\n[shell]\ntimeout = 0\n')
    with loaded_kernel(workdir) as kernel:
        run = kernel.execute("%%tools\ntools --help\n")
    text = f"{run.error['evalue'] if run.error else ''}\n{run.stderr}"
    for key in ("policy.mode", "policy.deny[0]", "shell.timeout"):
        assert f"{path}: {key}: " in text, text
    assert "Traceback" not in run.stderr


# A cloned repository's file nested past any parser's depth: Python's parsers raise RecursionError
# there, which no caller took for a config problem (a traceback on every run, lint included).
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("name, text", [(".mcp.json", '{"mcpServers": ' + DEEP + "}"),
                                        ("toolkernel.toml", f"[policy]\nallow = {DEEP}\n")])
def test_a_file_nested_too_deeply_is_a_config_error_naming_it(tree, name, text):
    path = tree.write(tree.project / name, text)
    error = tree.error()
    assert error.path == str(path) and "nested too deeply" in error.problem, error


def test_sandbox_counts_only_from_trusted_files(tree):
    tree.user('[sandbox]\nenv = ["HF_TOKEN"]\n')
    tree.toml(tree.project, '[sandbox]\nenv = ["GITHUB_TOKEN"]\nhome = [".config/tool"]\n')
    assert tree.load().sandbox.env == ("HF_TOKEN", "GITHUB_TOKEN")
    del tree.environ["TOOLKERNEL_TRUST_ALL"]  # the project's file is not trusted now: it only tightens
    config = tree.load()
    assert config.sandbox.env == ("HF_TOKEN",) and config.sandbox.home == ()


def test_serve_may_start_kernels_only_where_a_trusted_file_says_so(tree):
    assert tree.load().serve.start_kernels is False  # the default: a call never starts a kernel
    tree.toml(tree.project, "[serve]\nstart_kernels = true\n")
    assert tree.load().serve.start_kernels is True
    del tree.environ["TOOLKERNEL_TRUST_ALL"]  # a cloned repository's file must not start kernels
    assert tree.load().serve.start_kernels is False
    tree.user("[serve]\nstart_kernels = true\n")  # the person's own file counts
    assert tree.load().serve.start_kernels is True
    tree.user('[serve]\nstart_kernels = "yes"\nkernels = 1\n')
    with pytest.raises(ConfigError) as caught:
        tree.load()
    assert "serve.start_kernels" in str(caught.value) and "serve.kernels" in str(caught.value)
