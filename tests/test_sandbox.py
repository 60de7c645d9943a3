"""The OS sandbox of an agent's host code (`_sandbox.py`, `_runners/_sandbox_plan.py`).

In process: a real Session, a real `bash` behind a real channel, a real `bwrap`. The rules
allow every command (`Bash(*)`): what an agent's cell cannot do here, only the sandbox stops.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernel_helpers import RecordingSink, error_lines, isolated_env, policy_toml, write_config
from toolkernel._sandbox import mechanism

needs_sandbox = pytest.mark.skipif(not mechanism().available and not os.environ.get("CI"),
                                   reason=f"no OS sandbox here: {mechanism().detail}")
# bubblewrap where it works, and the Landlock fallback (`TOOLKERNEL_SANDBOX=landlock`).
MECHANISMS = ["bubblewrap", "landlock"]


@pytest.fixture(params=MECHANISMS)
def each_mechanism(request, monkeypatch):
    if request.param == "landlock":
        monkeypatch.setenv("TOOLKERNEL_SANDBOX", "landlock")
    if mechanism().name != request.param:
        if os.environ.get("CI"):
            pytest.fail(f"{request.param} is not available here: {mechanism().detail}")
        pytest.skip(f"{request.param} is not available here: {mechanism().detail}")
    return request.param

HOOK = "hooks/check.py"
SERVER = "servers/tool_server.py"
COMMAND = "bin/report.py"


def config(allow: list[str], extra: str = "") -> str:
    python = json.dumps(sys.executable)
    return (policy_toml(allow=allow)
            + f'[[hooks]]\nevent = "pre_call"\nmatch = "nothing-matches-this"\ncommand = [{python}, "{HOOK}"]\n\n'
            + f'[mcp_servers.local]\ncommand = {python}\nargs = ["{SERVER}"]\nload = "on-demand"\n\n'
            + f'[tools.report]\ncommand = [{python}, "{COMMAND}", "--", "{{{{ input.path }}}}"]\n'
            + 'parameters = { type = "object", properties = { path = { type = "string" } } }\n'
            + extra)


@pytest.fixture
def project(tmp_path, monkeypatch):
    from toolkernel._runners._hostbash._channel import Channel
    from toolkernel._session import Session

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    (home / ".bashrc").write_text("# the person's\n")
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HOME", str(home))
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    (state / "toolkernel").mkdir(parents=True)
    (state / "toolkernel" / "trust.json").write_text("{}")
    work = home / "work"
    for name in (HOOK, SERVER, COMMAND):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text("print('the person wrote this')\n")
    (work / ".mcp.json").write_text('{"mcpServers": {}}')
    (work / ".git" / "hooks").mkdir(parents=True)
    (work / ".git" / "config").write_text("[core]\n")
    (work / "json.py").write_text("# the person's own json.py\n")
    # Landlock cannot let a new top-level name be made and keep the protected ones: the
    # tests write into entries that exist (a new name at the top is bubblewrap's alone).
    (work / "out").mkdir()
    for name in ("results.csv", "r.txt", "ordinary.txt"):
        (work / name).write_text("")
    write_config(work, config(["Bash(*)"]))
    session, channel = Session(work), Channel()
    yield session, channel
    channel.close()
    session.close()


def run_agent(project, script: str, approver=None):
    """The cell as an agent sends it. A person who approves its text (a redirection asks) lets it
    start; it still runs in the sandbox."""
    from test_runners import Answering
    from toolkernel._approval._approver import Answer
    from toolkernel._runners._hostbash._runner import HostBashRunner

    session, channel = project
    approver = approver or (Answering(Answer.ONCE) if mechanism().available else None)
    sink = RecordingSink()
    result = session.run_script(script, sink, runner=HostBashRunner(channel, agent=True), approver=approver)
    return result, "".join(sink.out), "".join(sink.err)


@needs_sandbox
def test_an_agents_cell_writes_the_workspace_but_nothing_that_decides_or_runs_later(project, each_mechanism):
    session, _ = project
    work = session.workdir
    protected = ["toolkernel.toml", ".mcp.json", ".toolkernel/approvals.json", ".git/config",
                 ".git/hooks/pre-commit", HOOK, SERVER, COMMAND, "json.py"]
    before = {p: (work / p).read_bytes() if (work / p).exists() else None for p in protected}
    lines = "\n".join(f'echo pwned > {p} 2>/dev/null && echo "WROTE {p}"' for p in protected)
    home = os.environ["HOME"]
    # `mount`/`umount` may not exist (a slim image): then nothing to try; the binds hold anyway.
    result, out, err = run_agent(project, f"""
{lines}
echo pwned > {home}/.bashrc 2>/dev/null  # under /tmp here: its own /tmp; checked on the host below
echo pwned > {sys.prefix}/pwned.pth 2>/dev/null && echo WROTE-site
mv hooks hooks2 2>/dev/null && echo MOVED-hooks
mount -o remount,bind,rw / 2>/dev/null && echo WROTE-remounted  # root keeps no capability
umount {work}/toolkernel.toml 2>/dev/null && echo WROTE-unmounted
echo data > results.csv && mkdir -p out && echo ok > out/a.txt && echo wrote-results
echo scratch > ${{TMPDIR:-/tmp}}/scratch && cat ${{TMPDIR:-/tmp}}/scratch
""")
    assert "WROTE" not in out and "MOVED" not in out, (out, err)
    assert result.exit_code == 0, err
    assert "wrote-results" in out and "scratch" in out
    assert (work / "results.csv").read_text() == "data\n" and (work / "out" / "a.txt").exists()
    assert {p: (work / p).read_bytes() if (work / p).exists() else None for p in protected} == before
    assert Path(home, ".bashrc").read_text() == "# the person's\n"
    assert not Path(sys.prefix, "pwned.pth").exists()
    assert not Path("/tmp/scratch").exists()  # its /tmp was its own (Landlock: its own TMPDIR)


@needs_sandbox
def test_what_an_agents_cell_makes_anew_at_the_top_to_run_later_is_moved_aside(project, bubblewrap):
    # A module name that does not exist cannot be mounted read-only: a new module that shadows
    # an installed one is moved aside as the cell ends. A `.git` where there was none (its
    # config runs programs: fsmonitor, hooks) cannot even be made: an empty read-only folder
    # stands in its place while the cell runs, which git passes over. A person's own cell
    # keeps both.
    import shutil

    from toolkernel._runners._hostbash._runner import HostBashRunner

    session, channel = project
    work = session.workdir
    shutil.rmtree(work / ".git")
    plant = "echo 'import os' > nbformat.py && { git init -q . 2>/dev/null || echo refused; } && echo planted"
    result, out, err = run_agent(project, plant)
    assert out.split() == ["refused", "planted"] and result.exit_code == 1, (out, err)
    assert "moved nbformat.py" in err and ".git" not in err, err
    assert not (work / "nbformat.py").exists() and list((work / ".git").iterdir()) == []
    quarantined = list((work / ".toolkernel" / "quarantine").glob("*/*"))
    assert [p.name for p in quarantined] == ["nbformat.py"]
    sink = RecordingSink()
    assert session.run_script(plant, sink, runner=HostBashRunner(channel)).exit_code == 0
    assert (work / "nbformat.py").exists() and (work / ".git" / "config").exists()


@needs_sandbox
def test_the_state_folder_and_credentials_are_not_visible_and_answers_cannot_be_planted(project):
    session, _ = project
    state = Path(os.environ["XDG_STATE_HOME"]) / "toolkernel"
    result, out, _ = run_agent(project, f"""
ls -A {state} | wc -l
cat {state}/trust.json 2>/dev/null || echo no-trust-file
cat ~/.ssh/id_ed25519 2>/dev/null || echo no-key
mkdir -p {state}/pending && echo '{{"answer": "once"}}' > {state}/pending/x.answer.json && echo planted-inside
""")
    assert out.split() == ["0", "no-trust-file", "no-key", "planted-inside"]
    assert not (state / "pending").exists()  # what it wrote there was its own empty folder's


@needs_sandbox
def test_the_state_folder_cannot_be_written_under_landlock_either(project, monkeypatch):
    monkeypatch.setenv("TOOLKERNEL_SANDBOX", "landlock")
    if mechanism().name != "landlock":
        pytest.skip(f"no Landlock here: {mechanism().detail}")
    state = Path(os.environ["XDG_STATE_HOME"]) / "toolkernel"
    result, out, _ = run_agent(project, f"mkdir -p {state}/pending 2>/dev/null || echo refused;"
                                        f" echo x > {state}/trust.json 2>/dev/null || echo refused")
    assert out.split() == ["refused", "refused"] and (state / "trust.json").read_text() == "{}"


@needs_sandbox
def test_the_network_is_closed_to_an_agents_cell(project, each_mechanism):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted: list[object] = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    try:
        result, out, _ = run_agent(project, f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo connected"
                                            " || echo refused")
    finally:
        server.close()
    assert out.strip() == "refused" and not accepted


@needs_sandbox
def test_tools_still_reach_the_kernel_from_inside_the_sandbox(project, each_mechanism):
    result, out, err = run_agent(project, "tools read-file path=results.csv >/dev/null 2>&1; echo hi > r.txt;"
                                          " tools read-file path=r.txt")
    assert result.exit_code == 0, err
    assert "hi" in out


def test_without_a_sandbox_an_agents_cell_asks_whatever_the_rules_allow(project, monkeypatch):
    from test_runners import Answering
    from toolkernel._approval._approver import Answer

    monkeypatch.setenv("TOOLKERNEL_SANDBOX", "0")
    session, _ = project
    result, out, err = run_agent(project, "touch made.txt")
    assert [e["code"] for e in error_lines(err)] == ["needs_approval"]
    assert "no OS sandbox" in error_lines(err)[0]["message"] and not (session.workdir / "made.txt").exists()
    approver = Answering(Answer.ONCE)
    result, out, err = run_agent(project, "touch made.txt", approver)
    assert result.exit_code == 0 and (session.workdir / "made.txt").exists()  # a person said yes: theirs
    assert [r.call.qualified_name for r in approver.requests] == ["Bash"]


def test_a_rule_that_denies_still_denies_with_no_sandbox(project, monkeypatch):
    monkeypatch.setenv("TOOLKERNEL_SANDBOX", "0")
    session, _ = project
    write_config(session.workdir, config(["Bash(*)"]).replace('ask = []', 'ask = []\ndeny = ["Bash(rm *)"]')
                 .replace('deny = []\n', ''))
    result, out, err = run_agent(project, "rm -f json.py")
    assert [e["code"] for e in error_lines(err)] == ["denied"] and (session.workdir / "json.py").exists()


# -- command tools an agent's run calls -----------------------------------------------------


def command_project(project, program: str, network: bool = False):
    session, _ = project
    (session.workdir / COMMAND).write_text(program)
    write_config(session.workdir, config(["Bash(*)", "tool__report"],
                                         "network = true\n" if network else ""))
    return session


def agent_call(session, **arguments):
    import toolkernel._loop as loop

    async def call():
        command = await session.prepare(one_call=True, agent=True)
        tool = await command.catalog.find_tool(None, "report")
        return await command.call(tool, arguments)

    return loop.run(call())


WRITER = """import sys
target = sys.argv[-1]
try:
    open(target, "w").write("pwned")
    print("wrote", target)
except OSError as exc:
    print("refused", type(exc).__name__)
"""


@needs_sandbox
def test_a_command_tool_an_agent_calls_runs_in_the_sandbox_and_a_persons_does_not(project, each_mechanism):
    session = command_project(project, WRITER)
    called = agent_call(session, path=".toolkernel/planted.json")
    assert called.failure is None and "refused" in called.result.value()
    assert not (session.workdir / ".toolkernel" / "planted.json").exists()
    called = agent_call(session, path="ordinary.txt")
    assert "wrote" in called.result.value() and (session.workdir / "ordinary.txt").read_text() == "pwned"
    from toolkernel._frontends._direct import call_argv

    person = call_argv(session, ["report", "path=.toolkernel/person.json"])
    assert "wrote" in person and (session.workdir / ".toolkernel" / "person.json").exists()


CONNECTOR = """import os, socket, sys
way = "proxy" if os.environ.get("HTTPS_PROXY") else "no-proxy"
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[-1])), timeout=5).close()
    print(way, "connected")
except OSError:
    print(way, "no-network")
"""


@needs_sandbox
@pytest.mark.parametrize("network", [False, True])
def test_a_command_tool_has_the_network_only_when_its_config_says_so(project, network, each_mechanism):
    # The network it gets is the proxy's (never loopback: see test_sandbox_home.py); Landlock,
    # which cannot hold it, asks a person instead.
    from toolkernel._errors import NeedsApproval

    session = command_project(project, CONNECTOR, network=network)
    server = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=lambda: server.accept(), daemon=True).start()
    try:
        if network and each_mechanism == "landlock":
            with pytest.raises(NeedsApproval, match="Landlock"):
                agent_call(session, path=str(server.getsockname()[1]))
            return
        called = agent_call(session, path=str(server.getsockname()[1]))
    finally:
        server.close()
    assert called.result.value().strip() == ("proxy" if network else "no-proxy") + " no-network"


def test_without_a_sandbox_an_agents_command_tool_call_asks_even_when_allowed(project, monkeypatch):
    monkeypatch.setenv("TOOLKERNEL_SANDBOX", "0")
    session = command_project(project, WRITER)
    from toolkernel._errors import NeedsApproval

    with pytest.raises(NeedsApproval, match="no OS sandbox"):
        agent_call(session, path="made-by-the-call.txt")
    assert not (session.workdir / "made-by-the-call.txt").exists()


def test_doctor_says_which_mechanism_and_why(project, monkeypatch):
    from toolkernel._runners._sandbox_plan import doctor

    session, _ = project
    text = doctor(session.workdir)
    if mechanism().available:
        assert text.startswith("OS sandbox for an agent's host code: bubblewrap")
        assert ".toolkernel" in text and "toolkernel.toml" in text and "network: off" in text
    monkeypatch.setenv("TOOLKERNEL_SANDBOX", "0")
    assert "none (turned off" in doctor(session.workdir) and "asks a person" in doctor(session.workdir)


@needs_sandbox
def test_policy_network_rules_give_a_cell_or_a_call_the_network_and_nothing_else_does(project, bubblewrap):
    session, _ = project
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    threading.Thread(target=lambda: [server.accept() for _ in range(4)], daemon=True).start()
    (session.workdir / "connect.py").write_text(CONNECTOR)
    connect = f"{sys.executable} connect.py {port}"  # one command, which network rules may name
    (session.workdir / COMMAND).write_text(CONNECTOR)
    python = f"Bash({sys.executable} *)"
    try:
        write_config(session.workdir, config(["Bash(*)", "tool__report"]))
        assert run_agent(project, connect)[1].strip() == "no-proxy no-network"
        assert agent_call(session, path=str(port)).result.value().strip() == "no-proxy no-network"
        write_config(session.workdir, config(["Bash(*)", "tool__report"]).replace(
            "ask = []", f"ask = []\nnetwork = [{json.dumps(python)}, \"tool__report\"]"))
        assert run_agent(project, connect)[1].strip() == "proxy no-network"  # the proxy's, never loopback
        assert agent_call(session, path=str(port)).result.value().strip() == "proxy no-network"
        # A cell with one command the network rules do not name keeps none.
        assert run_agent(project, f"true; {connect}")[1].strip() == "no-proxy no-network"
    finally:
        server.close()


def test_an_untrusted_files_network_rules_do_not_count():
    from toolkernel._config._policy import PolicySection
    from toolkernel._config._rules import parse_rule

    section = PolicySection(allow=(parse_rule("read_file"),), network=(parse_rule("Bash(curl *)"),))
    assert section.tightening().network == () and section.then(section).network == section.network * 2


@needs_sandbox
def test_tools_reach_the_kernel_when_the_channel_lies_in_a_hidden_folder(project, tmp_path, monkeypatch):
    # A session's temporary files may live in $XDG_RUNTIME_DIR, which the sandbox hides.
    import shutil
    import tempfile

    from toolkernel._runners._hostbash._channel import Channel
    from toolkernel._runners._hostbash._runner import HostBashRunner

    # Short: a Unix socket's path holds at most 107 bytes (tmp_path under xdist is longer).
    runtime = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setattr(tempfile, "tempdir", str(runtime))
    session, _ = project
    channel = Channel()
    try:
        assert str(channel.folder).startswith(str(runtime))
        sink = RecordingSink()
        result = session.run_script(f"tools read-file path=r.txt && ls {runtime} | wc -l", sink,
                                    runner=HostBashRunner(channel, agent=True))
        assert result.exit_code == 0, "".join(sink.err)
        assert "".join(sink.out).split()[-1] == "1"  # only the channel's own folder shows there
    finally:
        channel.close()
        shutil.rmtree(runtime, ignore_errors=True)


@needs_sandbox
def test_what_runs_from_under_tmp_is_shown_read_only_and_the_workspace_in_it_stays_writable(tmp_path, monkeypatch):
    # A venv or a checkout under /tmp (CI clones there) holds the interpreter and the programs:
    # the sandbox's own /tmp would hide them. The workspace may lie inside such a folder.
    import subprocess

    from toolkernel._approval._protected import mount_plan
    from toolkernel._runners._sandbox_plan import sandbox_plan
    from toolkernel._sandbox import wrap

    monkeypatch.delenv("TOOLKERNEL_SANDBOX", raising=False)
    if mechanism().name != "bubblewrap":
        pytest.skip("the private /tmp is bubblewrap's")
    checkout = tmp_path / "checkout"
    (checkout / "bin").mkdir(parents=True)
    (checkout / "bin" / "tool").write_text("#!/bin/sh\necho from-the-checkout\n")
    (checkout / "bin" / "tool").chmod(0o755)
    work = checkout / "work"
    work.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(checkout)])
    plan = sandbox_plan(mount_plan(work))
    assert str(checkout.resolve()) in plan.visible
    script = f"{checkout}/bin/tool; echo x > {work}/made && echo made; echo y > {checkout}/nope || echo refused"
    done = subprocess.run(wrap(["bash", "-c", script], plan), capture_output=True, text=True, cwd=work)
    assert done.stdout.split() == ["from-the-checkout", "made", "refused"], done.stderr
    assert (work / "made").exists() and not (checkout / "nope").exists()


# -- the sandbox made ahead for an agent's next cell (`_hostbash/_prespawn.py`) -----------------

# What a cell can tell of its sandbox: its environment (but the run's own secret), every mount
# (point, options, type), its processes, user, limits, umask, folder, stdin and its /tmp.
# The processes are counted from a listing taken by one process: `ls /proc | grep` counted grep
# or not, as it was started before ls read /proc or after (3 against 4 in a full run).
VIEW = r"""
env -0 | sort -z | tr '\0' '\n' | grep -v -e '^TOOLKERNEL_TOOLS_SECRET=' -e '^_='
awk '{print $5, $6, $(NF-2)}' /proc/self/mountinfo
procs=$(ls /proc); grep -c '^[0-9]' <<< "$procs"; echo pid $$ $PPID; id; ulimit -a; umask; pwd; readlink /proc/self/fd/0; ls -A /tmp
"""


def run_agent_cell(project, script: str):
    result, out, err = run_agent(project, script)
    assert result.exit_code == 0, err
    return out


@pytest.fixture
def bubblewrap(monkeypatch):
    monkeypatch.delenv("TOOLKERNEL_SANDBOX", raising=False)
    if mechanism().name != "bubblewrap":
        pytest.skip(f"sandboxes are made ahead with bubblewrap only: {mechanism().detail}")


@needs_sandbox
@pytest.mark.parametrize("passed", [None, "odd_name", "TMPDIR"])
def test_an_agents_next_cell_runs_in_the_sandbox_made_ahead_and_sees_the_same_view(project, bubblewrap, monkeypatch,
                                                                                  passed):
    # The loader exports plain names itself; a lower-case one (its own variables' case) or one
    # bash reads as it runs (`TMPDIR`) goes through `env -i`: the cell sees the same either way.
    from toolkernel._runners._hostbash._prespawn import _plain

    session, channel = project
    assert _plain(["PATH", "HOME", "TOOLKERNEL_TOOLS_SECRET", *([passed] if passed else [])]) == (passed is None)
    if passed is not None:
        monkeypatch.setenv(passed, "kept as it was")
        write_config(session.workdir, config(["Bash(*)"], f'\n[sandbox]\nenv = ["{passed}"]\n'))
    fresh = run_agent_cell(project, VIEW)  # nothing was made ahead for the first
    assert channel.sandboxes.taken == 0
    waiting = channel.sandboxes.ready()
    assert waiting is not None and waiting.poll() is None
    ahead = run_agent_cell(project, VIEW)
    assert channel.sandboxes.taken == 1 and waiting.wait(timeout=60) == 0  # that one ran this cell
    assert ahead == fresh
    assert passed is None or f"{passed}=kept as it was" in ahead.splitlines()


def test_the_loader_exports_only_names_bash_leaves_alone():
    from toolkernel._runners._hostbash._prespawn import _plain

    assert _plain(["PATH", "HOME", "LANG", "LC_ALL", "TERM", "USER", "TZ", "TOOLKERNEL_TOOLS_SOCKET"])
    for name in ("RANDOM", "SECONDS", "SHELLOPTS", "BASH_ENV", "BASH_FUNC_x%%", "IFS", "PWD", "SHLVL", "_", "name",
                 "run", "a.b", "9X", ""):
        assert not _plain(["PATH", name]), name


@needs_sandbox
def test_a_sandbox_made_ahead_is_not_used_when_a_new_path_is_protected(project, bubblewrap):
    # The config names a new command tool's program in a new top-level folder: that folder is
    # read-only from now on, and the sandbox made before it (where it was writable) must not run.
    session, channel = project
    run_agent_cell(project, "true")
    stale = channel.sandboxes.ready()
    assert stale is not None
    (session.workdir / "scripts").mkdir()
    (session.workdir / "scripts" / "check.py").write_text("print('the person wrote this')\n")
    write_config(session.workdir, config(["Bash(*)"], '\n[tools.check]\ncommand = ["python3", "scripts/check.py"]\n'))
    out = run_agent_cell(project, "echo pwned > scripts/check.py 2>/dev/null && echo WROTE; echo done")
    assert out.split() == ["done"]
    assert (session.workdir / "scripts" / "check.py").read_text() == "print('the person wrote this')\n"
    assert channel.sandboxes.taken == 0 and stale.wait(timeout=60) != 0  # ended unused


@needs_sandbox
def test_a_protected_folder_made_anew_is_not_left_writable_by_a_sandbox_made_before(project, bubblewrap):
    # Same paths, so the same command line: the folder's identity tells the stale mount apart.
    session, channel = project
    work = session.workdir
    run_agent_cell(project, "true")
    stale = channel.sandboxes.ready()
    assert stale is not None
    os.rename(work / ".git", work / ".git-old")
    (work / ".git").mkdir()
    (work / ".git" / "config").write_text("[core]\n")
    out = run_agent_cell(project, "echo pwned > .git/config 2>/dev/null && echo WROTE; echo done")
    assert out.split() == ["done"] and (work / ".git" / "config").read_text() == "[core]\n"
    assert channel.sandboxes.taken == 0 and stale.wait(timeout=60) != 0


@needs_sandbox
def test_a_protected_file_replaced_on_the_host_is_not_left_writable_even_under_its_old_inode(project, bubblewrap):
    # Linux detaches a mount in every other namespace when its file is renamed over on the host,
    # so the waiting sandbox's read-only config is gone. The path may then hold a file with the
    # old device and inode (ext4 reuses a freed inode at once; here the old file comes back by a
    # link): what the sandbox still has mounted, not the path's identity, decides.
    session, channel = project
    work = session.workdir
    run_agent_cell(project, "true")
    stale = channel.sandboxes.ready()
    assert stale is not None
    config_path = work / "toolkernel.toml"  # mounted by now: one is offered once its mounts are laid
    os.link(config_path, work / "kept")
    write_config(work, config(["Bash(*)"]))  # renamed over: the stale sandbox's mount is detached
    os.rename(work / "kept", config_path)
    person_wrote = config_path.read_text()
    out = run_agent_cell(project, "echo pwned > toolkernel.toml 2>/dev/null && echo WROTE; echo done")
    assert out.split() == ["done"] and config_path.read_text() == person_wrote
    assert channel.sandboxes.taken == 0 and stale.wait(timeout=60) != 0


@needs_sandbox
def test_a_sandbox_made_ahead_is_offered_only_once_every_mount_is_laid(project, bubblewrap):
    # bwrap names its process before that process has laid its mounts: one offered then failed the
    # check of a cell that came at once (its mounts half laid), which started a sandbox of its own.
    _, channel = project
    run_agent_cell(project, "true")
    assert channel.sandboxes.ready() is not None
    waiting = channel.sandboxes._waiting
    plan = waiting.key[0]
    mounted = {line.split()[4] for line in Path(f"/proc/{waiting.child}/mountinfo").read_text().splitlines()}
    assert plan.read_only and all(place in mounted for place in plan.read_only if os.path.lexists(place))
    assert "/proc/sys" in mounted
    run_agent_cell(project, "true")
    assert channel.sandboxes.taken == 1


@needs_sandbox
def test_the_next_cells_sandbox_is_made_once_the_cell_is_over(project, bubblewrap):
    # Not while the cell runs: making one (bash, bwrap, its mounts) takes CPU the cell would share.
    session, channel = project
    work = session.workdir
    run_agent_cell(project, "true")
    assert channel.sandboxes.ready() is not None and channel.sandboxes.made == 1
    got: dict = {}
    cell = threading.Thread(target=lambda: got.update(out=run_agent_cell(
        project, "touch out/running; until [ -e out/go ]; do sleep 0.05; done; echo done")))
    cell.start()
    deadline = time.monotonic() + 120
    while not (work / "out" / "running").exists():
        assert time.monotonic() < deadline and cell.is_alive()
        time.sleep(0.05)
    with channel.sandboxes._lock:
        assert channel.sandboxes.taken == 1 and channel.sandboxes._pending == 0
        assert channel.sandboxes._waiting is None
    (work / "out" / "go").touch()
    cell.join(timeout=120)
    assert got["out"].split() == ["done"]
    assert channel.sandboxes.ready() is not None and channel.sandboxes.made == 2


@needs_sandbox
def test_a_cell_cannot_reach_the_sandbox_waiting_for_the_next_and_it_holds_no_secret(project, bubblewrap):
    # The next cell's sandbox is made once a cell is over, and waits while other cells run (a
    # `--bg` one, which starts its own): such a cell gets its process id and tries to see,
    # signal and find it (pid 1 is its own sandbox's). Then the cell that takes it finds its own
    # output FIFOs without names in the channel's folder (other cells see it).
    from toolkernel._runners._hostbash._channel import SECRET_ENV
    from toolkernel._runners._hostbash._runner import HostBashRunner, start_background
    from toolkernel._runners._shell import ShellResult

    session, channel = project
    work = session.workdir
    run_agent_cell(project, "true")
    waiting = channel.sandboxes.ready()
    assert waiting is not None and waiting.poll() is None
    probe = start_background(session, HostBashRunner(channel, agent=True), f"""
pid={waiting.pid}; kill -0 "$pid" && echo SIGNALLED; [ -e /proc/$pid ] && echo SEEN
grep -l -s 'read -r -[d]' /proc/[0-9]*/cmdline | grep -v -x /proc/1/cmdline && echo FOUND-LOADER
touch out/probed; until [ -e out/go ]; do sleep 0.05; done; echo done
""", keep_stdout=True, keep_stderr=False)
    assert not isinstance(probe, ShellResult), probe
    deadline = time.monotonic() + 120
    while not (work / "out" / "probed").exists():
        assert time.monotonic() < deadline and probe.poll() is None
        time.sleep(0.05)
    group = [pid for pid in os.listdir("/proc") if pid.isdigit() and _group_of(pid) == waiting.pid]
    assert str(waiting.pid) in group
    secrets = [run.secret for run in list(channel._runs.values())]
    assert secrets  # the probe's run is open
    for pid in group:
        seen = Path(f"/proc/{pid}/environ").read_bytes() + Path(f"/proc/{pid}/cmdline").read_bytes()
        assert SECRET_ENV.encode() + b"=" not in seen and not any(s.encode() in seen for s in secrets)
    (work / "out" / "go").touch()
    assert probe.stdout.read().decode().split() == ["done"] and probe.wait(timeout=60) == 0
    assert waiting.poll() is None and channel.sandboxes.taken == 0
    # (Their names go once the kernel has read the loader's first byte on each: a moment after.)
    out = run_agent_cell(project, """
names() { ls "${TOOLKERNEL_TOOLS_SOCKET%/*}" | grep -e '^out-' -e '^err-'; }
for _ in $(seq 200); do names >/dev/null || break; sleep 0.05; done; names && echo FOUND-ITS-OUTPUT; echo done
""")
    assert out.split() == ["done"] and channel.sandboxes.taken == 1


def _group_of(pid: str) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def test_landlocks_private_tmp_goes_with_the_process(tmp_path):
    """The temporary folder an agent's processes get under Landlock is the kernel's own: it goes
    when the kernel exits (one was left in /tmp per kernel start)."""
    script = ("from toolkernel import _sandbox; import pathlib; folder = pathlib.Path(_sandbox._private_tmp()); "
              "(folder / 'left.txt').write_text('x'); print(folder)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    folder = done.stdout.strip()
    assert folder and "toolkernel-sandbox-tmp-" in folder
    assert not os.path.exists(folder)
