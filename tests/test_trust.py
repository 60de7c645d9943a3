"""Workspace trust (toolkernel/_trust.py), without TOOLKERNEL_TRUST_ALL.

A project's servers, hooks, allow rules and lasting approvals count only once
a person trusted the folder's config as it is; its deny rules always count.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from approval_helpers import (
    Kernel, hook_section, policy_section, recorded_calls, recorder_server_section, shown, untrusting_env,
    write_project,
)
from toolkernel._config._config import load_config
from toolkernel._config._trust import TrustStore, fingerprints
from toolkernel._config._untrusted import NotNow, ask_to_trust

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(autouse=True)
def no_trust_all(monkeypatch, tmp_path):
    monkeypatch.delenv("TOOLKERNEL_TRUST_ALL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path))


def untrusted_env(workdir: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    return untrusting_env(workdir, tmp_path / "state", **extra)


def user_config(workdir: Path, text: str) -> None:
    folder = workdir.parent / f"{workdir.name}-xdg" / "toolkernel"  # kernel_env's XDG_CONFIG_HOME
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "toolkernel.toml").write_text(text)


@pytest.mark.slow
def test_an_untrusted_project_only_tightens_until_trusted_and_again_after_a_change(tmp_path):
    record = tmp_path / "record.jsonl"
    work = tmp_path / "project"
    hook_marker = tmp_path / "hook-ran"
    server_marker = tmp_path / "server-started"
    # The github server comes from the user's config (trusted); the project adds
    # its own server, a hook, an allow rule and a deny rule.
    user_config(work, recorder_server_section(record))
    write_project(
        work,
        f'[mcp_servers.own]\ncommand = "sh"\nargs = ["-c", "touch {server_marker}"]\n',
        hook_section("pre_call", "*", ["sh", "-c", f"touch {hook_marker}; echo '{{}}'"]),
        policy_section(allow=["mcp_github__delete_branch"], deny=["mcp_github__create_issue"]),
    )
    kernel = Kernel(work, untrusted_env(work, tmp_path))
    try:
        cell = kernel.run("%%tools --no-raise-error\ntools --help")
        assert cell.stdout.startswith("This folder's config is not trusted: %tools trust.\n"), cell.stdout
        assert "Not used until trusted" in cell.stdout and f"{work}: its config is not trusted" in cell.stdout
        assert "own" not in cell.stdout.split("Other tools:")[0]
        assert "toolkernel trust" in cell.stdout
        cell = kernel.run("%%tools --no-raise-error\ntools github delete-branch branch=fix-x")
        assert "needs_approval" in shown(cell)  # the allow rule does not count
        cell = kernel.run("%%tools --no-raise-error\ntools github create-issue title=x")
        assert "denied" in shown(cell)  # the deny rule does
        assert recorded_calls(record) == []
        assert not hook_marker.exists() and not server_marker.exists()

        cell = kernel.run("%tools trust")
        assert cell.ok and "trusted the config of" in cell.stdout, cell
        cell = kernel.run("%%tools --no-raise-error\ntools github delete-branch branch=fix-x")
        assert recorded_calls(record) == [{"tool": "delete_branch", "input": {"branch": "fix-x"}}], shown(cell)
        assert hook_marker.exists()
        assert "not trusted" not in kernel.run("%%tools\ntools --help").stdout

        # A changed file, or an added one, needs trust again.
        (work / ".mcp.json").write_text('{"mcpServers": {}}')
        record.unlink()
        cell = kernel.run("%%tools --no-raise-error\ntools github delete-branch branch=fix-x")
        assert recorded_calls(record) == [] and "needs_approval" in shown(cell)
    finally:
        kernel.close()


@pytest.mark.slow
def test_trust_all_trusts_every_folder(tmp_path):
    record = tmp_path / "record.jsonl"
    work = write_project(tmp_path / "project", recorder_server_section(record),
                         policy_section(allow=["mcp_github__delete_branch"])).parent
    kernel = Kernel(work, untrusted_env(work, tmp_path, TOOLKERNEL_TRUST_ALL="1"))
    try:
        cell = kernel.run("%%tools\ntools github delete-branch branch=fix-x")
        assert cell.ok, cell
        assert recorded_calls(record) == [{"tool": "delete_branch", "input": {"branch": "fix-x"}}]
    finally:
        kernel.close()
    assert not (tmp_path / "state" / "toolkernel" / "trust.json").exists()


def test_lasting_approvals_count_only_in_a_trusted_folder_and_keep_it_trusted(tmp_path):
    work = write_project(tmp_path / "project", policy_section(deny=["read_file(path=secret*)"])).parent
    (work / ".toolkernel").mkdir()
    (work / ".toolkernel" / "approvals.json").write_text(json.dumps({"version": 1, "allow": ["write_file"]}))
    assert load_config(work).approvals_trusted is False
    TrustStore().trust(work)
    assert load_config(work).approvals_trusted is True
    from toolkernel._approval._approvals import ApprovalStore

    ApprovalStore(work).always_allow("edit_file")  # the person's own answer
    assert load_config(work).approvals_trusted is True
    (work / ".toolkernel" / "approvals.json").write_text(json.dumps({"version": 1, "allow": ["*"]}))
    assert load_config(work).approvals_trusted is False


def test_the_command_line_trusts_a_folder_and_records_it_outside_the_workspace(tmp_path):
    work = write_project(tmp_path / "project", "[policy]\nallow = [\"write_file\"]\n").parent
    env = untrusted_env(work, tmp_path)
    done = subprocess.run([sys.executable, "-m", "toolkernel", "trust", str(work)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "toolkernel.toml" in done.stdout, done.stderr
    store = json.loads((tmp_path / "state" / "toolkernel" / "trust.json").read_text())
    assert store["folders"][str(work)] == fingerprints(work)
    assert load_config(work).policy["allow"] == ("write_file",)
    missing = subprocess.run([sys.executable, "-m", "toolkernel", "trust", str(tmp_path / "nope")], env=env,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "is not a folder" in missing.stderr and "Traceback" not in missing.stderr


def test_a_prompt_trusts_what_the_person_says_yes_to_and_asks_again_later(tmp_path):
    work = write_project(tmp_path / "project", "[policy]\nallow = [\"write_file\"]\n").parent
    questions: list[str] = []
    now = [0.0]
    not_now = NotNow(hold=600, clock=lambda: now[0])
    assert ask_to_trust(work, lambda q: questions.append(q) or "n", not_now) == []
    assert ask_to_trust(work, lambda q: questions.append(q) or "y", not_now) == []  # "Not now" holds
    assert len(questions) == 1 and "toolkernel.toml" in questions[0]
    now[0] = 601.0  # later: asked again ("Not now" is no "never")
    assert ask_to_trust(work, lambda q: questions.append(q) or "", not_now) == [] and len(questions) == 2
    (work / "toolkernel.toml").write_text("[policy]\nallow = [\"edit_file\"]\n")  # changed: asked again at once
    shown_first: list[dict] = []

    class Buttons:
        def __call__(self, question: str) -> str:
            questions.append(question)
            return "y"

        def show_trust(self, question: dict) -> bool:
            shown_first.append(question)
            return True

    said = ask_to_trust(work, Buttons(), not_now)
    assert said and len(questions) == 3 and load_config(work).policy["allow"] == ("edit_file",)
    told = questions[0].removesuffix(" Trust it as it is now? [y/N] ")
    [config] = shown_first[0].pop("config")
    assert config["name"] == "toolkernel.toml" and "edit_file" in config["text"]
    assert shown_first == [{"folder": str(work), "files": ["toolkernel.toml"], "changed": [],
                            "keys": {"trust": "y", "not_now": "n"}, "text": told}]
    assert questions[2] == "Trust it as it is now? [y/N] "  # the question shown is not said twice


def test_a_folder_named_with_control_characters_reaches_no_terminal_raw(tmp_path):
    """A cloned repository names its folders: "\x1b]52;c;...\x07" in a question or a note would
    write the person's clipboard, and a bidi override make the line read otherwise."""
    from toolkernel._command._help import untrusted_note
    from toolkernel._config._trust import trust_command
    from toolkernel._config._untrusted import ignored_config_notes

    work = write_project(tmp_path / "project\x1b]52;c;bWFsaWNl\x07\u202e", "[policy]\nallow = [\"write_file\"]\n").parent
    questions: list[str] = []
    bundles: list[dict] = []

    class Buttons:  # what JupyterLab's buttons are shown (the trust renderer) as well as the prompt
        def __call__(self, question: str) -> str:
            questions.append(question)
            return "y"

        def show_trust(self, question: dict) -> None:
            bundles.append(question)

    said = ask_to_trust(work, Buttons(), NotNow())
    questions.append(json.dumps(bundles, ensure_ascii=False))
    notes = ignored_config_notes(work, set())
    shown = [*questions, *said, untrusted_note((str(work),)), *notes]
    other = write_project(tmp_path / "other\x1b[2J", "[policy]\nallow = [\"write_file\"]\n").parent
    other.chmod(0o777)  # a note trusting cannot fix names the folder too
    other_notes = ignored_config_notes(other, set())
    shown += [*other_notes, trust_command(other)]
    assert questions and said and other_notes
    for text in shown:
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, text
    assert "\\x1b]52" in questions[0] and "\\u202e" in said[0]


def test_a_broken_trust_store_trusts_nothing_and_says_so(tmp_path):
    work = write_project(tmp_path / "project", "[policy]\nallow = [\"write_file\"]\n").parent
    store = tmp_path / "state" / "toolkernel" / "trust.json"
    store.parent.mkdir(parents=True)
    store.write_text("{not json")
    with pytest.raises(Exception, match="not a toolkernel trust file"):
        load_config(work)


def test_trust_judges_the_bytes_that_were_parsed_not_a_second_read(tmp_path, monkeypatch):
    # The config was parsed from one read and fingerprinted from another: whoever may write the
    # file swapped it back to the trusted bytes in between, and an allow rule nobody had trusted
    # counted. The second read is made to see the trusted bytes, as after that swap back.
    from toolkernel._config import _trust

    work = tmp_path / "project"
    work.mkdir()
    trusted = b'[policy]\ndeny = ["web_fetch"]\n'
    (work / "toolkernel.toml").write_bytes(trusted)
    TrustStore().trust(work)
    (work / "toolkernel.toml").write_text('[policy]\nallow = ["write_file"]\n')
    second_read = _trust.read_config_file
    monkeypatch.setattr(_trust, "read_config_file",
                        lambda path: trusted if path.name == "toolkernel.toml" else second_read(path))
    config = load_config(work)
    assert "write_file" not in config.policy.allow
    assert any("not trusted" in note for note in config.untrusted)


def test_trust_judges_a_file_that_was_parsed_and_then_removed(tmp_path, monkeypatch):
    # The same race with the file gone by the second read: a folder trusted with its
    # toolkernel.toml alone took the servers of an .mcp.json parsed, then removed.
    from toolkernel._config import _trust

    work = tmp_path / "project"
    work.mkdir()
    (work / "toolkernel.toml").write_text('[policy]\ndeny = ["web_fetch"]\n')
    TrustStore().trust(work)
    (work / ".mcp.json").write_text(json.dumps({"mcpServers": {"planted": {"command": "sh"}}}))
    first_read = _trust.fingerprints
    monkeypatch.setattr(_trust, "fingerprints",
                        lambda folder, *rest: {k: v for k, v in first_read(folder, *rest).items() if k != ".mcp.json"})
    config = load_config(work)
    assert "planted" not in config.servers
    assert any("not trusted" in note for note in config.untrusted)


# -- trust covers the code a folder's config runs (issue 34) ----------------------------------

def _code_project(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """A project whose hook, server (.mcp.json, a script in `args`) and command tool run
    scripts of its own; each script notes its version in `ran/` when it runs."""
    from approval_helpers import toml_string

    work, ran = tmp_path / "project", tmp_path / "ran"
    ran.mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TOOLKERNEL_ADMIN_CONFIG", str(tmp_path / "no-admin.toml"))
    work.mkdir()
    monkeypatch.chdir(work)  # the server has no cwd: it starts in the kernel's folder, the project's here
    write_project(work, hook_section("pre_call", "*", [sys.executable, "hooks/check.py"]),
                  f"[tools.version]\ncommand = [{toml_string(sys.executable)}, \"tool.py\"]\nread_only = true\n")
    (work / ".mcp.json").write_text(json.dumps({"mcpServers": {"github": {
        "command": sys.executable, "args": ["server.py"], "env": {"RECORD_FILE": str(tmp_path / "rec")}}}}))
    (work / "hooks").mkdir()
    for name in ("hook", "server", "tool"):
        _version(work, 1, ran, name)
    return work, ran


def _noting(name: str, version: int, ran: Path) -> str:
    return f"open({str(ran / name)!r}, 'a').write('v{version} ')\n"


def _version(work: Path, version: int, ran: Path, name: str) -> None:
    """Write the script of `name` as `version`, as a `git pull` would."""
    from approval_helpers import SERVERS

    if name == "hook":
        (work / "hooks" / "check.py").write_text(_noting("hook", version, ran) + "print('{}')\n")
    elif name == "tool":
        (work / "tool.py").write_text(_noting("tool", version, ran) + f"print('tool v{version}')\n")
    else:
        (work / "server.py").write_text(f"import runpy\n{_noting('server', version, ran)}"
                                        f"runpy.run_path({str(SERVERS / 'recorder.py')!r}, run_name='__main__')\n")


def _noted(ran: Path, name: str) -> str:
    path = ran / name
    return path.read_text() if path.exists() else ""


def test_trust_covers_the_scripts_the_config_runs_and_a_rewritten_one_asks_again(tmp_path, monkeypatch):
    from kernel_helpers import RecordingSink
    from toolkernel._config._trust import trust_command
    from toolkernel._session import Session

    work, ran = _code_project(tmp_path, monkeypatch)
    done = subprocess.run([sys.executable, "-m", "toolkernel", "trust", str(work)], capture_output=True, text=True,
                          timeout=120)
    said = done.stdout
    assert all(name in said for name in ("hooks/check.py", "tool.py", "server.py")), (said, done.stderr)
    # What lies outside the folder (the interpreter, found by path) is not the workspace's to cover.
    assert set(json.loads((tmp_path / "state" / "toolkernel" / "trust.json").read_text())["folders"][str(work)]) == {
        "toolkernel.toml", ".mcp.json", "hooks/check.py", "tool.py", "server.py"}

    session = Session(work)
    script = "tools github list-pulls repo=x >/dev/null; tools version; tools --help\n"
    try:
        def run() -> str:
            sink = RecordingSink()
            session.run_script(script, sink)
            return "".join(sink.out) + "".join(sink.err)

        assert "tool v1" in run()
        assert _noted(ran, "hook") == "v1 v1 " and _noted(ran, "server") == "v1 " and _noted(ran, "tool") == "v1 "
        for name, path in (("hook", "hooks/check.py"), ("server", "server.py"), ("tool", "tool.py")):
            before = {other: _noted(ran, other) for other in ("hook", "server", "tool")}
            _version(work, 2, ran, name)
            out = run()  # the same session: its cached config must see the change
            assert {other: _noted(ran, other) for other in before} == before, out  # nothing of it ran
            assert f"{path} changed since it was trusted" in out and "toolkernel trust" in out, out
            assert "tool v" not in out
            trust_command(work)
            out = run()
            assert _noted(ran, name).endswith("v2 "), (name, out)
            assert "not trusted" not in out
    finally:
        session.close()


def test_code_outside_the_folder_or_filled_from_the_input_is_not_covered(tmp_path, monkeypatch):
    work, ran = _code_project(tmp_path, monkeypatch)
    outside = tmp_path / "elsewhere.py"
    outside.write_text("print('{}')\n")
    (work / "hooks" / "link.py").symlink_to(outside)
    write_project(work, hook_section("pre_call", "*", [sys.executable, "hooks/link.py", "../ran/hook"]),
                  hook_section("post_call", "*", [sys.executable, str(work / "hooks" / "check.py")]),
                  '[tools.t]\ncommand = ["sh", "{{input.script}}"]\ncwd = "hooks"\n'
                  '[tools.u]\ncommand = ["sh", "../tool.py"]\ncwd = "hooks"\n')
    names = set(fingerprints(work))
    assert names == {"toolkernel.toml", ".mcp.json", "hooks/check.py", "tool.py", "server.py"}, names
    TrustStore().trust(work)
    assert load_config(work).hooks
    outside.write_text("print('changed')\n")  # not the workspace's: a link out of it is not followed into trust
    assert load_config(work).hooks
    (work / "tool.py").write_text("changed")  # a command tool's script, by its `cwd`
    config = load_config(work)
    assert not config.hooks and not config.commands
    assert any("tool.py changed since it was trusted" in note for note in config.untrusted)
    questions: list[str] = []
    ask_to_trust(work, lambda q: questions.append(q) or "n", NotNow())
    assert "changed since it was trusted: tool.py" in questions[0], questions


def test_a_script_made_where_the_config_looks_for_one_asks_again(tmp_path, monkeypatch):
    # `args = ["helper.py"]` names nothing yet when trusted; a later pull that adds it runs new code.
    work = write_project(tmp_path / "project", hook_section("pre_call", "*", [sys.executable, "helper.py"])).parent
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    from toolkernel._config._cache import ConfigCache

    TrustStore().trust(work)
    cache = ConfigCache(work)
    assert cache.load().hooks
    (work / "helper.py").write_text("print('{}')\n")
    config = cache.load()
    assert not config.hooks and any("helper.py changed" in note for note in config.untrusted)


def test_python_dash_m_covers_the_files_it_starts_from(tmp_path, monkeypatch):
    work = write_project(tmp_path / "project",
                         hook_section("pre_call", "*", [sys.executable, "-m", "pkg.hook"])).parent
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (work / "pkg").mkdir()
    (work / "pkg" / "__init__.py").write_text("")
    (work / "pkg" / "hook.py").write_text("print('{}')\n")
    assert {"pkg/__init__.py", "pkg/hook.py"} <= set(fingerprints(work))
    TrustStore().trust(work)
    assert load_config(work).hooks
    (work / "pkg" / "__init__.py").write_text("import os; os.system('touch pwned')\n")
    config = load_config(work)
    assert not config.hooks and any("pkg/__init__.py changed" in note for note in config.untrusted)


@pytest.mark.slow
def test_every_error_an_untrusted_config_causes_says_so_and_the_notebook_asks_with_buttons(tmp_path):
    from toolkernel._frontends._lab import TRUST_MIME

    work = write_project(tmp_path / "project", f'[mcp_servers.github]\ncommand = "{sys.executable}"\n'
                         'args = ["-m", "toolkernel.demo_server"]\n').parent
    kernel = Kernel(work, untrusted_env(work, tmp_path))
    because = "no server or tool named 'github' (this folder's config is not trusted: %tools trust)"
    try:
        cell = kernel.run("%%tools --no-raise-error\ntools github list-pulls")
        assert because in cell.stderr, shown(cell)
        cell = kernel.run("%tools github list-pulls")
        assert because in cell.error["evalue"], cell
        cell = kernel.run("import toolkernel\ntry:\n    toolkernel.call('github', 'list-pulls')\n"
                          "except Exception as e:\n    print(e)")
        assert because in cell.stdout, shown(cell)
        cell = kernel.run("%%tools\ntools --help")
        assert cell.stdout.splitlines()[0] == "This folder's config is not trusted: %tools trust.", cell.stdout
        assert "(none in use: this folder's config is not trusted: %tools trust)" in cell.stdout

        # Where a person can answer: the question as JupyterLab's buttons (the bundle), then the
        # prompt they answer. "Not now" is not asked again in the next cell; "Trust" trusts.
        first = _cell_with_stdin(kernel, "%%tools --no-raise-error\ntools github list-pulls", "n")
        assert [d[TRUST_MIME]["folder"] for d in first["displays"] if TRUST_MIME in d] == [str(work)]
        assert len(first["asked"]) == 1 and because in first["stderr"]
        again = _cell_with_stdin(kernel, "%%tools --no-raise-error\ntools github list-pulls", "y")
        assert again["asked"] == [] and because in again["stderr"]
    finally:
        kernel.close()


def _cell_with_stdin(kernel: Kernel, code: str, answer: str) -> dict:
    seen: dict = {"asked": [], "displays": [], "stderr": ""}

    def on_output(msg: dict) -> None:
        if msg["msg_type"] == "display_data":
            seen["displays"].append(msg["content"]["data"])
        elif msg["msg_type"] == "stream" and msg["content"]["name"] == "stderr":
            seen["stderr"] += msg["content"]["text"]

    def on_stdin(msg: dict) -> None:
        seen["asked"].append(msg["content"]["prompt"])
        kernel.client.input(answer)

    kernel.client.execute_interactive(code, allow_stdin=True, stdin_hook=on_stdin, output_hook=on_output, timeout=180)
    return seen


@pytest.mark.slow
def test_under_serve_the_error_says_what_serves_user_runs(tmp_path):
    import anyio

    from mcp_client import over_stdio
    from toolkernel._mcp_sdk import StdioServerParameters

    work = write_project(tmp_path / "project", f'[mcp_servers.github]\ncommand = "{sys.executable}"\n'
                         'args = ["-m", "toolkernel.demo_server"]\n').parent
    env = {**untrusted_env(work, tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}

    async def body() -> str:
        params = StdioServerParameters(command=sys.executable, args=["-m", "toolkernel", "serve"], env=env,
                                       cwd=str(work))
        with anyio.fail_after(180):
            return await _first_text(params)

    async def _first_text(params) -> str:
        async with over_stdio(params) as client:
            result = await client.call_tool("bash", {"script": "tools github list-pulls"})
            return "".join(c.text or "" for c in result.content)

    text = anyio.run(body)
    assert "no server or tool named 'github' (this folder's config is not trusted: toolkernel trust (serve reads" \
        in text, text
    assert "%tools" not in text


@pytest.mark.slow
def test_serve_started_by_an_mcp_client_finds_trust_given_the_documented_env(tmp_path):
    # Issue 48 item 7: the SDK's stdio client passes HOME, LOGNAME, PATH, SHELL, TERM and USER
    # only; a folder trusted where XDG_STATE_HOME is set was "not trusted" for serve.
    import anyio

    import toolkernel
    from mcp_client import Client
    from toolkernel._mcp_sdk import ClientSession, StdioServerParameters, stdio_client, wire

    work = write_project(tmp_path / "project", f'[mcp_servers.github]\ncommand = "{sys.executable}"\n'
                         'args = ["-m", "toolkernel.demo_server"]\n').parent
    trusted = subprocess.run([sys.executable, "-m", "toolkernel", "trust", str(work)],
                             env=untrusted_env(work, tmp_path), capture_output=True, text=True, timeout=120)
    assert trusted.returncode == 0, trusted.stderr
    repo = str(Path(__file__).resolve().parent.parent)

    async def call(env: dict[str, str]) -> tuple[str, str]:
        # Only `env` over the SDK's own few variables, as an agent's MCP config gives it.
        params = StdioServerParameters(command=sys.executable, args=["-m", "toolkernel", "serve"], env=env,
                                       cwd=str(work))
        with anyio.fail_after(180):
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write) as session:
                    hello = wire(await session.initialize())
                    script = "tools github list-pulls repo=acme/api >/dev/null && echo reached"
                    result = await Client(session).call_tool("bash", {"script": script})
                    return hello["serverInfo"]["version"], "".join(c.text or "" for c in result.content)

    version, bare = anyio.run(call, {"PYTHONPATH": repo})
    assert version == toolkernel.__version__ != ""
    assert "not trusted" in bare and str(tmp_path / ".local/state/toolkernel/trust.json") in bare, bare
    assert "pass it to serve in the MCP client's `env`" in bare
    _, given = anyio.run(call, {"PYTHONPATH": repo, "XDG_STATE_HOME": str(tmp_path / "state")})
    assert given.startswith("reached\n"), given


def test_a_question_the_untrusted_config_may_have_caused_says_so(tmp_path):
    """Its allow rules do not count yet: the call asks, and the error says why it may have."""
    from kernel_helpers import RecordingSink
    from toolkernel._session import Session

    work = write_project(tmp_path / "project", policy_section(allow=["write-file"])).parent
    session = Session(work)
    because = "(this folder's config is not trusted: %tools trust; its allow rules count only once it is)"
    try:
        for script, when in (("tools write-file path=a.txt content=x", "the script did not start"),
                             ("w=write-file; tools $w path=a.txt content=x", "the call was not made")):
            sink = RecordingSink()
            assert session.run_script(script, sink).exit_code != 0
            assert f"{when} {because}" in sink.stderr_text, sink.stderr_text
        assert not (work / "a.txt").exists()
        TrustStore().trust(work)
        sink = RecordingSink()
        assert session.run_script("tools write-file path=a.txt content=x", sink).exit_code == 0, sink.stderr_text
    finally:
        session.close()


@pytest.mark.parametrize("name, text, problem", [
    ("toolkernel.toml", "[mcp_servers.github\ncommand = 'x'\n", "Expected ']'"),
    (".mcp.json", '{"mcpServers": ', "Expecting value"),
])
def test_a_config_that_does_not_parse_is_not_trusted_and_the_command_says_why(tmp_path, name, text, problem):
    # Trusted as it was, it was of no use (its fix changes it, so it needs trust again), and
    # `toolkernel trust` said "trusted" without a word of what was wrong.
    work = tmp_path / "work"
    work.mkdir()
    (work / name).write_text(text)
    done = subprocess.run([sys.executable, "-m", "toolkernel", "trust", str(work)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and done.stdout == "", (done.stdout, done.stderr)
    said = done.stderr.strip()
    assert said.startswith(f"toolkernel trust: {work / name}: does not parse (") and problem in said, said
    assert "fix it, then trust the folder" in said and len(said.splitlines()) == 1, said
    assert str(work) not in TrustStore().folders()
    (work / name).write_text("" if name == "toolkernel.toml" else "{}")  # fixed: trusted as before
    assert name in TrustStore().trust(work)
