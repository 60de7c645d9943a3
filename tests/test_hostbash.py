"""`%%bash` on the host in a real IPython kernel (jupyter_client): real bash, real child
processes, the real `tools` shim over the kernel's Unix socket, real MCP fixture servers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernel_helpers import (
    FIXTURE_ALLOW, error_lines, fixture_toml, github_toml, isolated_env, loaded_kernel, policy_toml, write_config,
)

pytestmark = pytest.mark.timeout(300)


def base_config() -> str:
    return github_toml() + fixture_toml("images") + policy_toml(allow=FIXTURE_ALLOW)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    project = tmp_path_factory.mktemp("hostbash") / "project"
    project.mkdir()
    write_config(project, base_config())
    return project


@pytest.fixture(scope="module")
def kernel(workdir):
    with loaded_kernel(workdir) as k:
        yield k


def bash(script: str, flags: str = "") -> str:
    return f"%%bash {flags}\n{script}"


def stream_chunks(run, name: str) -> list[str]:
    return [m["content"]["text"] for m in run.of_type("stream") if m["content"]["name"] == name]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


def wait_gone(pid: int, within: float = 20) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


# -- real bash, as IPython's %%bash ---------------------------------------------------


def test_it_is_the_hosts_bash_with_stdin_empty_and_the_script_from_a_file(kernel):
    run = kernel.execute_ok(bash('echo "$BASH_VERSION" | cut -c1; read -r line; echo "read:[$line]"\necho last'))
    assert run.stdout.splitlines() == [run.stdout[0], "read:[]", "last"]
    assert run.stdout[0].isdigit()  # a real bash version, not Bashkit's


def test_stdout_and_stderr_stream_live_and_apart(kernel):
    run = kernel.execute_ok(bash("echo out1; echo err1 >&2; sleep 1; echo out2; echo err2 >&2"))
    assert run.stdout == "out1\nout2\n" and run.stderr == "err1\nerr2\n"
    out = stream_chunks(run, "stdout")
    assert len(out) >= 2 and "out2" not in out[0]
    order = [m["content"]["text"] for m in run.of_type("stream")]
    assert order.index("err1\n") < next(i for i, t in enumerate(order) if "out2" in t)


def test_a_carriage_return_progress_bar_arrives_as_it_is_drawn(kernel):
    run = kernel.execute_ok(bash("for p in 10 50 100; do printf '\\r%3d%%' $p; sleep 0.4; done; echo"))
    chunks = stream_chunks(run, "stdout")
    assert run.stdout == "\r 10%\r 50%\r100%\n"
    assert len(chunks) >= 3 and chunks[0].startswith("\r")


def test_out_and_err_keep_the_streams_instead_of_showing_them(kernel):
    run = kernel.execute_ok(bash("echo hi; echo oops >&2", "--out o --err e"))
    assert "hi" not in run.stdout and "oops" not in run.stderr
    assert kernel.value("[o, e]") == ["hi\n", "oops\n"]


def test_bg_returns_at_once_with_the_process_and_its_pipe(kernel):
    kernel.execute_ok(bash("sleep 1; echo from-the-background", "--bg --out bg_out --proc bg_proc"))
    assert kernel.value("bg_proc.poll() is None")  # still running when the cell is done
    assert kernel.value("(bg_proc.wait(60), bg_out.read().decode())") == [0, "from-the-background\n"]


def test_non_zero_exit_stops_run_all_with_a_short_message(kernel):
    run = kernel.execute(bash("echo before; exit 3"))
    assert run.status == "error" and run.stdout == "before\n"
    assert run.error["ename"] == "ScriptFailed" and "code 3" in run.error["evalue"]
    assert len(run.error["traceback"]) == 1  # no Python traceback
    assert kernel.execute(bash("exit 3", "--no-raise-error")).status == "ok"


def test_timeout_ends_the_whole_group(kernel, workdir):
    run = kernel.execute(bash("sleep 300 & echo $! > timeout.pid; sleep 300", "--timeout 1"), timeout=120)
    assert run.status == "error" and "code 124" in run.error["evalue"]
    assert "timed out after 1 s" in run.stderr
    assert wait_gone(int((workdir / "timeout.pid").read_text()))


def test_interrupt_kills_the_process_group_grandchildren_included(kernel, workdir):
    pid_file = workdir / "grandchild.pid"
    pid_file.unlink(missing_ok=True)
    msg_id = kernel.start(bash("echo started; bash -c 'sleep 300 & echo $! > grandchild.pid; wait'; echo never"))
    kernel.messages_until(msg_id, lambda seen: any("started" in m["content"].get("text", "") for m in seen), 60)
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    kernel.manager.interrupt_kernel()
    run = kernel.finish(msg_id)
    assert wait_gone(grandchild)
    assert run.status == "error" and "never" not in run.stdout
    # One true line: what printed stays, and what the interrupt ended.
    assert run.error["evalue"] == ("bash: interrupted; the output above is what the script printed before;"
                                   " its process group was ended")
    assert kernel.execute_ok("print('alive')").stdout == "alive\n"


# -- tools inside it ------------------------------------------------------------------


def test_tools_prints_what_the_builtin_prints_with_the_same_errors(kernel):
    script = ("tools github list-pulls repo=acme/api | jq length\n"
              "tools github nope; echo \"exit=$?\"\n"
              "tools read-file; echo \"exit=$?\"\n"
              "echo '{\"repo\":\"acme/api\",\"number\":101}' | tools github get-pull | jq -r .title\n"
              "tools github get-pull repo=acme/api number=101 | tools github get-pull - number=103 | jq -r .number\n")
    host = kernel.execute_ok(bash(script))
    sandbox = kernel.execute_ok(f"%%tools\n{script}")
    assert host.stdout == sandbox.stdout and host.stdout.splitlines()[1:3] == ["exit=1", "exit=1"]
    assert error_lines(host.stderr) == error_lines(sandbox.stderr)
    assert [e["code"] for e in error_lines(host.stderr)][:2] == ["unknown_command", "invalid_input"]


def test_a_failure_inside_toolkernel_is_one_error_line_in_both_shells(kernel):
    # A fault injected where no CallError is expected (in the dispatcher's first checks, which
    # every call passes, made from sync code or not): the call still ends in one JSON line and
    # exit 1, and the script goes on, in %%bash as in %%tools.
    kernel.execute_ok("import toolkernel._approval._dispatch as _tk_dispatch\n"
                      "_tk_saved = _tk_dispatch.Dispatcher._admit\n"
                      "def _tk_boom(self, tool, arguments, run):\n    raise RuntimeError('boom')\n"
                      "_tk_dispatch.Dispatcher._admit = _tk_boom")
    try:
        script = 'tools read-file path=x; echo "exit=$?"\ntools github get-pull repo=acme/api number=101; echo "exit=$?"'
        host = kernel.execute_ok(bash(script))
        sandbox = kernel.execute_ok(f"%%tools\n{script}")
    finally:
        kernel.execute_ok("_tk_dispatch.Dispatcher._admit = _tk_saved")
    for run in (host, sandbox):
        assert run.stdout == "exit=1\nexit=1\n"
        errors = error_lines(run.stderr)
        assert [e["code"] for e in errors] == ["unavailable", "unavailable"]
        assert all("RuntimeError: boom" in e["message"] and not e["retryable"] for e in errors)
    assert kernel.execute_ok(bash("tools github get-pull repo=acme/api number=101 | jq -r .number")).stdout == "101\n"


def test_tools_from_subshells_pipelines_xargs_and_background_jobs(kernel):
    script = (
        "(tools github get-pull repo=acme/api number=101 | jq -r .number)\n"
        "tools github list-pulls repo=acme/api | jq -r '.[].number' | head -2"
        " | while read n; do tools github get-pull repo=acme/api number=$n | jq -r .number; done\n"
        "printf '101\\n103\\n104\\n101\\n' | xargs -P 4 -I{} tools github get-pull repo=acme/api number={}"
        " | jq -r .number | sort | tr '\\n' ' '; echo\n"
        "tools github get-pull repo=acme/api number=104 | jq -r .number > bg.txt & wait; cat bg.txt\n"
    )
    run = kernel.execute_ok(bash(script))
    assert run.stdout.splitlines() == ["101", "101", "102", "101 101 103 104 ", "104"]


def test_calls_from_parallel_processes_share_the_one_call_limit_and_the_group_ends(kernel, workdir):
    (workdir / "note.txt").write_text("x")
    script = ("sleep 300 & echo $! > limit.pid\n"
              "seq 1 80 | xargs -P 4 -I{} tools read-file path=note.txt > /dev/null; echo after")
    run = kernel.execute(bash(script), timeout=200)
    assert run.status == "error" and "after" not in run.stdout
    assert "call_limit" in [e["code"] for e in error_lines(run.stderr)]
    report = next(d["data"] for d in run.displays() if "application/vnd.toolkernel.report+json" in d["data"])
    stopped = report["application/vnd.toolkernel.report+json"]["tools"]
    assert stopped["stopped"]["reason"] == "call_limit" and stopped["read_only_calls"] == 50
    assert wait_gone(int((workdir / "limit.pid").read_text()))


def test_a_call_that_needs_approval_stops_the_group_and_shows_the_report(kernel, workdir):
    # The path is a variable: a call written out in full would be asked about before the start.
    script = "sleep 300 & echo $! > ask.pid\necho first\nf=asked.txt; tools write-file path=$f content=hi\necho never"
    run = kernel.execute(bash(script))
    assert run.status == "error" and run.stdout == "first\n"
    assert [e["code"] for e in error_lines(run.stderr)] == ["needs_approval"]
    report = next(d["data"] for d in run.displays() if "application/vnd.toolkernel.report+json" in d["data"])
    stopped = report["application/vnd.toolkernel.report+json"]["tools"]["stopped"]
    assert stopped["reason"] == "needs_approval" and stopped["call"]["tool"] == "tools write-file"
    assert "%tools approve" in report["text/plain"]
    assert wait_gone(int((workdir / "ask.pid").read_text()))
    assert not (workdir / "asked.txt").exists()
    kernel.execute_ok("%tools deny")


def test_a_call_written_out_in_full_that_needs_approval_is_asked_before_the_cell_starts(kernel, workdir):
    script = "echo x > before.txt; echo first\ntools write-file path=asked.txt content=hi > /dev/null"
    run = kernel.execute(bash(script))
    assert run.status == "error" and run.stdout == "" and not (workdir / "before.txt").exists()
    assert [e["code"] for e in error_lines(run.stderr)] == ["needs_approval"]
    assert "did not start" in error_lines(run.stderr)[0]["message"]
    report = next(d["data"] for d in run.displays() if "application/vnd.toolkernel.report+json" in d["data"])
    stopped = report["application/vnd.toolkernel.report+json"]["tools"]["stopped"]
    assert stopped["before_start"] and stopped["call"]["tool"] == "tools write-file"
    background = kernel.execute(bash(script, "--bg"))  # nobody watches it: it does not start either
    assert background.status == "error" and "needs_approval" in background.stderr
    assert not (workdir / "before.txt").exists()
    kernel.execute_ok("%tools approve")  # once: the cell runs again, and its call with it
    assert kernel.execute_ok(bash(script)).stdout == "first\n"
    assert (workdir / "before.txt").exists() and (workdir / "asked.txt").read_text() == "hi"
    (workdir / "before.txt").unlink()
    (workdir / "asked.txt").unlink()


def test_the_channel_refuses_a_caller_without_the_runs_secret(kernel, workdir):
    kernel.execute_ok(bash('echo "$TOOLKERNEL_TOOLS_SOCKET" > chan.txt; echo "$TOOLKERNEL_TOOLS_SECRET" >> chan.txt;'
                           ' command -v tools >> chan.txt'))
    socket_path, old_secret, shim = (workdir / "chan.txt").read_text().split()
    assert (os.stat(Path(socket_path).parent).st_mode & 0o777) == 0o700

    def call(secret: str | None) -> subprocess.CompletedProcess:
        env = {"PATH": os.environ["PATH"], "TOOLKERNEL_TOOLS_SOCKET": socket_path}
        if secret is not None:
            env["TOOLKERNEL_TOOLS_SECRET"] = secret
        return subprocess.run([shim, "github", "list-pulls", "repo=acme/api"], env=env, cwd=workdir,
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)

    for secret in (old_secret, "0" * 64, None):  # a finished run's, a guessed one, none
        refused = call(secret)
        assert refused.returncode == 1 and refused.stdout == ""
        assert [e["code"] for e in error_lines(refused.stderr)] in (["denied"], ["unavailable"])
    # Another cell's secret while it runs works only for that cell's own processes.
    msg_id = kernel.start(bash('echo "$TOOLKERNEL_TOOLS_SECRET" > live.txt; sleep 3'))
    deadline = time.monotonic() + 30
    while not (workdir / "live.txt").exists() or len((workdir / "live.txt").read_text().strip()) < 64:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert call((workdir / "live.txt").read_text().strip()).returncode == 0
    assert call(old_secret).returncode == 1
    kernel.finish(msg_id)


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(),
                    reason="needs root to act as another user, and a Python that user may run")
def test_another_user_cannot_reach_the_socket(kernel, workdir):
    kernel.execute_ok(bash('echo "$TOOLKERNEL_TOOLS_SOCKET" > sock.txt'))
    socket_path = (workdir / "sock.txt").read_text().strip()
    code = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({socket_path!r})"
    other = subprocess.run(["/usr/bin/python3", "-c", code], user=65534, group=65534, capture_output=True, text=True,
                           timeout=60, cwd="/")
    assert other.returncode != 0 and "PermissionError" in other.stderr


# -- images -----------------------------------------------------------------------------


def test_display_shows_an_image_file_and_tools_images_render_inline(kernel, workdir):
    sys.path.insert(0, str(Path(__file__).parent / "servers"))
    from images import png

    (workdir / "plot.png").write_bytes(png(2, 2, (0, 0, 255)))
    run = kernel.execute_ok(bash("mkdir -p sub; cd sub; display ../plot.png; tools images red-square size=4"))
    pictures = [d for d in run.displays() if "image/png" in d["data"]]
    assert len(pictures) == 2
    bad = kernel.execute(bash("display missing.png"))
    assert bad.status == "error" and "no such file" in bad.stderr


# -- the cell as a Bash call when an agent started it --------------------------------------


# An agent may send %%bash cells (checked by the Bash rules) and load toolkernel, nothing else.
AGENT_POLICY = policy_toml(allow=[*FIXTURE_ALLOW, 'notebook_run(code="%%bash*")',
                                  'notebook_run(code="%load_ext toolkernel")', "Bash(echo *)", "Bash(git status)"],
                           deny=["Bash(rm *)"])


@pytest.fixture
def agent_config(workdir):
    write_config(workdir, base_config().replace(policy_toml(allow=FIXTURE_ALLOW), "") + AGENT_POLICY)
    yield
    write_config(workdir, base_config())


def agent_execute(kernel, code: str):
    """Send a cell the way notebook-run does: the request carries the agent mark."""
    from toolkernel._providers._notebook._connection import AGENT_METADATA, EXECUTE_CONTENT

    msg = kernel.client.session.msg("execute_request", {"code": code, **EXECUTE_CONTENT}, metadata=AGENT_METADATA)
    kernel.client.shell_channel.send(msg)
    return kernel.finish(msg["header"]["msg_id"])


def test_an_agents_cell_is_checked_against_bash_rules_and_a_persons_is_not(kernel, workdir, agent_config):
    assert agent_execute(kernel, bash("echo agent-ok")).stdout == "agent-ok\n"
    asked = agent_execute(kernel, bash("echo hi && touch agent.txt"))
    assert asked.status == "error" and [e["code"] for e in error_lines(asked.stderr)] == ["needs_approval"]
    assert "touch agent.txt" in error_lines(asked.stderr)[0]["message"] and not (workdir / "agent.txt").exists()
    report = next(d["data"] for d in asked.displays() if "application/vnd.toolkernel.report+json" in d["data"])
    assert report["application/vnd.toolkernel.report+json"]["tools"]["stopped"]["call"]["tool"] == "Bash"
    kernel.execute_ok("%tools deny")
    denied = agent_execute(kernel, bash("echo x; rm -f person.txt"))
    assert [e["code"] for e in error_lines(denied.stderr)] == ["denied"]
    opaque = agent_execute(kernel, bash('cmd="echo hi"; eval "$cmd"'))
    assert [e["code"] for e in error_lines(opaque.stderr)] == ["needs_approval"]
    kernel.execute_ok("%tools deny")
    # The same cells pressed by a person just run.
    (workdir / "person.txt").write_text("x")
    kernel.execute_ok(bash("echo hi && touch agent.txt; rm -f person.txt"))
    assert (workdir / "agent.txt").exists() and not (workdir / "person.txt").exists()


def test_an_agents_cell_that_runs_more_than_its_words_does_not_start(kernel, workdir, agent_config):
    # Each is allowed word by word by `Bash(echo *)`, yet bash would run `touch` (or set PATH).
    for cell in ("x='$(touch pwn.txt)'; echo ${x@P}", "echo <<EOF\n`touch pwn.txt`\nEOF",
                 "x='a[$(touch pwn.txt)]'; echo $((x))", "echo $((PATH=1)) hi",
                 "[[ ${BASH_COMMAND:38:19} -eq 1 || -n 'a[$(touch pwn.txt)]' ]]"):  # issue 34: no command at all
        refused = agent_execute(kernel, bash(cell))
        assert [e["code"] for e in error_lines(refused.stderr)] == ["needs_approval"], cell
        assert not (workdir / "pwn.txt").exists(), cell
        kernel.execute_ok("%tools deny")
    kernel.execute_ok(bash("x='$(touch pwn.txt)'; echo ${x@P}"))  # what the rules stopped: a person's cell runs it
    assert (workdir / "pwn.txt").exists()


def test_the_magic_lines_are_not_expanded_as_python(kernel, workdir, agent_config):
    # IPython evaluates `{expr}` in a magic's line before the magic runs: an agent allowed
    # only `notebook_run(code="%%bash*")` (or `%%tools*`) would run any Python that way.
    touch = "{__import__('pathlib').Path('expanded.txt').touch() or 'v'}"
    for cell in (bash("echo hi", flags=f"--out {touch}"), f"%%tools --out {touch}\necho hi", f"%tools search {touch}"):
        agent_execute(kernel, cell)
        kernel.execute(cell)
        assert not (workdir / "expanded.txt").exists(), cell


def test_an_agents_cell_runs_in_the_os_sandbox_whatever_its_rules_allow(kernel, workdir):
    """Through a real kernel, the cell marked as notebook-run marks it: `Bash(*)` lets every
    command start, and the sandbox alone keeps config, .toolkernel/ and the state folder."""
    from toolkernel._sandbox import mechanism

    if not mechanism().available:
        pytest.skip(f"no OS sandbox here: {mechanism().detail}")
    write_config(workdir, base_config().replace(policy_toml(allow=FIXTURE_ALLOW), "")
                 + policy_toml(allow=[*FIXTURE_ALLOW, "Bash(*)"]))
    state = Path(os.environ["XDG_STATE_HOME"]) / "toolkernel"
    try:
        config = (workdir / "toolkernel.toml").read_text()
        # Spelled as the attacker did, past the checker's courtesy look at names.
        ran = agent_execute(kernel, bash(f"""touch toolkernel.tom{{l,}} 2>/dev/null || echo config-read-only
mkdir -p .toolkerne{{l,}}/pending 2>/dev/null || echo state-read-only
ls -A {state} | wc -l
tools github get-pull repo=acme/api number=101 | jq .number
touch ordinary.txt && echo ordinary-written"""))
        assert ran.stdout.split() == ["config-read-only", "state-read-only", "0", "101", "ordinary-written"], ran.stderr
        assert (workdir / "toolkernel.toml").read_text() == config and (workdir / "ordinary.txt").exists()
        assert not (workdir / ".toolkernel" / "pending").exists()
    finally:
        write_config(workdir, base_config())
        for made in ("toolkernel.tom", ".toolkerne/pending", ".toolkerne"):
            (workdir / made).unlink() if (workdir / made).is_file() else (workdir / made).rmdir() \
                if (workdir / made).is_dir() else None


def test_an_agent_cannot_approve_its_own_cell(kernel, agent_config):
    agent_execute(kernel, bash("touch approved.txt"))
    refused = agent_execute(kernel, "%tools approve")
    assert refused.status == "error" and AGENTS_REFUSED in refused.stderr
    kernel.execute_ok("%tools approve")  # the person can
    assert agent_execute(kernel, bash("touch approved.txt")).status == "ok"
    assert agent_execute(kernel, bash("touch approved.txt")).status == "error"  # once is once
    kernel.execute_ok("%tools deny")


AGENTS_REFUSED = "approvals are a person's: this cell was sent by an agent"


def test_no_granting_entry_point_answers_for_an_agents_cell(kernel, workdir, agent_config):
    # The agent's cell asks, then its next cell tries every way a person answers.
    agent_execute(kernel, bash("touch granted.txt"))
    for code in ("import toolkernel; toolkernel.approve()", "import toolkernel; toolkernel.approve(always=True)",
                 "import toolkernel; toolkernel.deny()",
                 "from toolkernel._frontends._answers import approve; approve(toolkernel.get_session())"):
        refused = agent_execute(kernel, code)
        assert refused.status == "error" and refused.error["ename"] == "Denied", code
        assert AGENTS_REFUSED in refused.error["evalue"], code
        # The agent's own line and the error, not a wall of toolkernel's frames (the raising one is shown).
        assert sum("toolkernel/" in frame for frame in refused.error["traceback"]) <= 1, code
    for line in ("%tools deny", "%tools approve --always", "%tools approve 0123456789ab"):
        refused = agent_execute(kernel, line)
        assert refused.status == "error" and AGENTS_REFUSED in refused.stderr, line
    hook = agent_execute(kernel, "import toolkernel\n@toolkernel.before_call('*')\n"
                                 "def yes(call): return toolkernel.HookOutcome(action='allow')")
    assert hook.status == "error" and hook.error["ename"] == "Denied"
    assert "pre-call hooks are a person's" in hook.error["evalue"]
    trust = agent_execute(kernel, "%tools trust")
    assert trust.status == "error" and "trusting a folder's config is a person's: this cell was sent by an agent" \
        in trust.stderr
    assert not (workdir / "granted.txt").exists()
    # Nothing was taken: the person's own cell still finds the call waiting, and answers it.
    assert "allowed once" in kernel.value("toolkernel.approve()")
    assert agent_execute(kernel, bash("touch granted.txt")).status == "ok"


def test_notebook_run_marks_its_cells_as_an_agents(kernel, workdir, agent_config):
    kernel.execute_ok("%tools pair agent.ipynb --kernel python3", timeout=180)
    try:
        kernel.execute_ok("import toolkernel; toolkernel.call('notebook-run', notebook_path='agent.ipynb', code='%load_ext toolkernel')")
        ok = kernel.value("toolkernel.call('notebook-run', notebook_path='agent.ipynb', code='%%bash\\necho via-notebook-run')")
        assert ok.strip() == "via-notebook-run"
        refused = kernel.execute("toolkernel.call('notebook-run', notebook_path='agent.ipynb', code='%%bash\\ntouch from-agent.txt')")
        assert refused.status == "error" and "needs_approval" in refused.error["evalue"]
        assert not (workdir / "from-agent.txt").exists()
        python = kernel.execute("toolkernel.call('notebook-run', notebook_path='agent.ipynb', code='import os')")
        assert python.status == "error" and python.error["ename"] == "NeedsApproval"
        kernel.execute_ok("%tools deny")
    finally:
        kernel.execute("%tools unpair")


def test_an_agents_bash_cell_does_not_run_where_nothing_checks_it(kernel, workdir, agent_config):
    # The mark alone failed open: a kernel without toolkernel loaded (a plain python3, or the
    # same kernel after `restart`) ran IPython's own %%bash, unchecked by the Bash(...) rules.
    kernel.execute_ok("%tools pair agent.ipynb --kernel python3", timeout=180)
    run = "toolkernel.call('notebook-run', notebook_path='agent.ipynb', code={!r}{})"
    try:
        kernel.execute_ok("import toolkernel")
        refused = kernel.execute(run.format("%%bash\ntouch plain.txt", ""))
        assert refused.status == "error" and "toolkernel_agent_bash" in refused.error["evalue"]
        assert not (workdir / "plain.txt").exists()
        kernel.execute_ok(run.format("%load_ext toolkernel", ""))
        restarted = kernel.execute(run.format("%%bash\ntouch restarted.txt", ", restart=True"))
        assert restarted.status == "error" and not (workdir / "restarted.txt").exists()
        kernel.execute_ok(run.format("%load_ext toolkernel", ""))
        assert kernel.value(run.format("%%bash\necho checked", "")).strip() == "checked"
    finally:
        kernel.execute("%tools unpair")


@pytest.mark.parametrize("cell, line, body", [
    ("%%bash\ntouch x", "", "touch x\n"),
    ("\n  %%bash --out v\n  touch x", "--out v", "touch x\n"),  # IPython drops blank lines and the indent
    (">>> %%bash\n>>> touch x", "", "touch x\n"),  # and prompts
])
def test_an_agents_bash_cell_is_sent_as_the_magic_only_toolkernel_defines(cell, line, body):
    from toolkernel._providers._notebook._connection import agent_code

    assert agent_code(cell) == f"get_ipython().run_cell_magic('toolkernel_agent_bash', {line!r}, {body!r})\n"
    for other in ("import os", "%%timeit\nx = 1", "%%bashx\ny", "'%%bash'"):
        assert agent_code(other) == other


# -- no sandbox: what a host cell changes stays changed, and workspace trust guards what is used --


@pytest.mark.slow
def test_a_config_a_host_cell_changes_stays_changed_and_is_untrusted_until_trusted_again(tmp_path):
    from approval_helpers import Kernel as PersonKernel, policy_section, shown, untrusting_env, write_project

    work = tmp_path / "project"
    write_project(work, policy_section(deny=["mcp_github__delete_branch"]))
    loosened = policy_section(allow=["write_file"])
    person = PersonKernel(work, untrusting_env(work, tmp_path / "state"))
    try:
        assert person.run("%tools trust").ok
        assert person.run(f"%%bash\ncat > toolkernel.toml <<'EOF'\n{loosened}EOF").ok
        assert (work / "toolkernel.toml").read_text() == loosened  # not undone: the cell is the person's
        helped = person.run("%%bash --no-raise-error\ntools --help | grep -c 'its config is not trusted'")
        assert helped.stdout == "1\n", shown(helped)
        asked = person.run("%%bash --no-raise-error\ntools write-file path=w.txt content=hi")
        assert "needs_approval" in shown(asked) and not (work / "w.txt").exists()  # its allow rule does not count
        assert person.run("%tools deny").ok
        assert person.run("%tools trust").ok
        assert person.run("%%bash\ntools write-file path=w.txt content=hi").ok
        assert (work / "w.txt").read_text() == "hi"
        # Lasting approvals a cell writes itself do not count either, until trusted.
        granted = json.dumps({"version": 1, "allow": [{"rule": "edit_file", "added": "2026-01-01T00:00:00+00:00"}]})
        assert person.run(f"%%bash\nmkdir -p .toolkernel; echo '{granted}' > .toolkernel/approvals.json").ok
        asked = person.run("%%bash --no-raise-error\ntools edit-file path=w.txt old_string=hi new_string=ho")
        assert "needs_approval" in shown(asked) and (work / "w.txt").read_text() == "hi"
    finally:
        person.close()


# -- an agent's cell at the approver seam, in process (a real bash, a real channel) ------------


@pytest.fixture
def agent_session(tmp_path, monkeypatch):
    from toolkernel._runners._hostbash._channel import Channel
    from toolkernel._session import Session

    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "work"
    work.mkdir()
    write_config(work, policy_toml(allow=["Bash(echo *)"], deny=["Bash(rm *)"]))
    session, channel = Session(work), Channel()
    yield session, channel
    channel.close()
    session.close()


def run_agent_cell(agent_session, script: str, approver=None):
    from kernel_helpers import RecordingSink
    from toolkernel._runners._hostbash._runner import HostBashRunner

    session, channel = agent_session
    sink = RecordingSink()
    result = session.run_script(script, sink, runner=HostBashRunner(channel, agent=True), approver=approver)
    return result, sink


def test_an_approver_answering_once_before_the_start_lets_an_agents_cell_run_once(agent_session):
    from test_runners import Answering
    from toolkernel._approval._approver import Answer

    session, _ = agent_session
    approver = Answering(Answer.ONCE)
    result, sink = run_agent_cell(agent_session, "echo hi && touch agent.txt", approver)
    assert result.exit_code == 0 and result.report is None and "".join(sink.out) == "hi\n"
    assert [(r.call.qualified_name, r.before_start) for r in approver.requests] == [("Bash", True)]
    assert (session.workdir / "agent.txt").exists()
    assert session.approvals.pending_once() == []  # the grant that let it start is spent
    (session.workdir / "agent.txt").unlink()
    # Nobody answers now ("later"): a before-start stop, and nothing ran.
    result, sink = run_agent_cell(agent_session, "echo hi && touch agent.txt")
    stopped = result.report["tools"]["stopped"]
    assert stopped["before_start"] and stopped["approval"] == "requested" and stopped["call"]["tool"] == "Bash"
    assert "".join(sink.out) == "" and not (session.workdir / "agent.txt").exists()
    assert session.approvals.take_pending() is not None


def test_an_agents_cell_a_rule_denies_or_a_person_denies_does_not_start(agent_session):
    from test_runners import Answering
    from toolkernel._approval._approver import Answer

    session, _ = agent_session
    (session.workdir / "keep.txt").write_text("x")
    result, sink = run_agent_cell(agent_session, "echo x; rm keep.txt", Answering(Answer.ONCE))
    assert [e["code"] for e in error_lines("".join(sink.err))] == ["denied"] and result.exit_code == 1
    approver = Answering(Answer.DENY)
    result, sink = run_agent_cell(agent_session, "touch made.txt", approver)
    assert [e["code"] for e in error_lines("".join(sink.err))] == ["denied"]
    assert result.report["tools"]["stopped"]["approval"] == "denied" and len(approver.requests) == 1
    assert (session.workdir / "keep.txt").exists() and not (session.workdir / "made.txt").exists()


def test_a_host_without_bash_says_so_in_the_cell(agent_session, monkeypatch, tmp_path):
    from kernel_helpers import RecordingSink
    from toolkernel._runners._hostbash._runner import HostBashRunner

    session, channel = agent_session
    monkeypatch.setenv("PATH", str(tmp_path / "no-bash-here"))
    sink = RecordingSink()
    result = session.run_script("echo hi", sink, runner=HostBashRunner(channel))
    assert result.exit_code == 1 and [e["code"] for e in error_lines("".join(sink.err))] == ["unavailable"]
    assert "could not start bash" in "".join(sink.err)


def test_always_for_an_agents_cell_no_single_rule_names_says_so_and_it_does_not_start(agent_session):
    from test_runners import Answering
    from toolkernel._approval._approver import Answer

    session, _ = agent_session
    result, sink = run_agent_cell(agent_session, "touch a.txt; touch b.txt", Answering(Answer.ALWAYS))
    errors = error_lines("".join(sink.err))
    assert result.exit_code == 1 and [e["code"] for e in errors] == ["invalid_input"]
    assert "no single rule names it" in errors[0]["message"] and not (session.workdir / "a.txt").exists()


# -- a person's cell: the calls it writes out in full are asked about before it starts ------------


@pytest.fixture
def person_session(tmp_path, monkeypatch):
    from toolkernel._runners._hostbash._channel import Channel
    from toolkernel._session import Session

    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "work"
    work.mkdir()
    write_config(work, github_toml(load="on-demand") + policy_toml())  # write-file asks; github's reads do not
    session, channel = Session(work), Channel()
    yield session, channel
    channel.close()
    session.close()


def run_person_cell(person_session, script: str, approver=None):
    from kernel_helpers import RecordingSink
    from toolkernel._runners._hostbash._runner import HostBashRunner

    session, channel = person_session
    sink = RecordingSink()
    result = session.run_script(script, sink, runner=HostBashRunner(channel), approver=approver)
    return result, sink


@pytest.mark.parametrize("script, calls", [
    ("echo x > m; tools github delete-branch branch=fix", [["github", "delete-branch", "branch=fix"]]),
    ("A=1 tools a 'b c' \"d\" 7 > out 2>&1 && x=$(tools e f) | (tools g)", [["a", "b c", "d", "7"], ["e", "f"], ["g"]]),
    ("cat <<EOF\n$(tools runs here)\nEOF\ncat <<'EOF'\n$(tools text only)\nEOF", [["runs", "here"]]),
    ("tools a $x; tools a *.txt; tools a ~/f; tools a {b,c}; tools a \"$(id)\"; tools a $'b'", []),
    ("f() { tools a b; }; tools; /bin/tools c; echo tools d", [[]]),
    ("tools a b; if then", []),  # bash would not run it either
])
def test_the_calls_a_cell_writes_out_in_full(script, calls):
    from toolkernel._runners._hostbash._runner import HostBashRunner

    assert HostBashRunner(channel=None).literal_calls(script) == calls


WRITES = "echo x > m.txt; echo first\ntools write-file path=w.txt content=hi >/dev/null\necho last"


def test_a_persons_cell_is_asked_about_the_calls_it_writes_out_before_it_starts(person_session):
    from test_runners import Answering
    from toolkernel._approval._approver import Answer

    session, _ = person_session
    work = session.workdir
    for answer, approval in ((None, "requested"), (Answer.DENY, "denied")):
        approver = Answering(answer) if answer else None
        result, sink = run_person_cell(person_session, WRITES, approver)
        stopped = result.report["tools"]["stopped"]
        assert stopped["before_start"] and stopped["approval"] == approval and result.exit_code == 1
        assert "".join(sink.out) == "" and not (work / "m.txt").exists() and not (work / "w.txt").exists()
        if approver:
            assert [(r.call.command, r.before_start) for r in approver.requests] == [("tools write-file", True)]
        session.approvals.take_pending()
    approver = Answering(Answer.ONCE)
    result, sink = run_person_cell(person_session, WRITES, approver)
    assert result.exit_code == 0 and "".join(sink.out) == "first\nlast\n" and len(approver.requests) == 1
    assert (work / "m.txt").exists() and (work / "w.txt").read_text() == "hi"
    assert session.approvals.pending_once() == []  # the call that ran spent the grant


def test_an_interrupt_in_a_mid_run_question_ends_the_group_before_the_call_is_let_go(person_session, monkeypatch):
    # The interrupt lands in `input()`; the run is stopped a moment later (a busy machine's delay,
    # made here). Until it is, the question must stay open: a question ended first answered the
    # shim "cancelled", and bash ran on to `echo after` before its process group was ended.
    from kernel_helpers import RecordingSink
    from toolkernel._runners import _shell
    from toolkernel._runners._hostbash._runner import HostBashRunner

    session, channel = person_session
    stop_run = _shell.stop_run

    def stop_late(*args):
        time.sleep(0.5)
        stop_run(*args)

    def interrupted(prompt: str) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(_shell, "stop_run", stop_late)
    sink = RecordingSink()
    built = 'for b in fix-x; do tools github delete-branch "branch=$b"; done\necho after\n'
    result = session.run_script(built, sink, runner=HostBashRunner(channel), ask=interrupted)
    assert result.interrupted and "after" not in "".join(sink.out), sink.out


@pytest.mark.parametrize("script", [
    "f=w.txt; echo x > m.txt; tools write-file path=$f content=hi",  # built at run time
    "echo x > m.txt; tools write-file path=w.txt content=\"$(echo hi)\"",
    "w() { tools write-file path=w.txt content=hi; }\necho x > m.txt; w",  # a function may never be called
    "echo x > m.txt; echo '{\"path\": \"w.txt\", \"content\": \"hi\"}' | tools write-file",  # input on stdin
])
def test_a_call_the_cell_does_not_write_out_in_full_is_checked_as_it_runs(person_session, script):
    session, _ = person_session
    result, _ = run_person_cell(person_session, script)
    stopped = result.report["tools"]["stopped"]
    assert stopped["reason"] == "needs_approval" and not stopped.get("before_start")
    assert (session.workdir / "m.txt").exists() and not (session.workdir / "w.txt").exists()


def test_a_cell_whose_calls_are_all_allowed_just_runs(person_session):
    script = "echo x > m.txt; tools github get-pull repo=acme/api number=101 | jq .number"
    result, sink = run_person_cell(person_session, script)
    assert result.exit_code == 0 and result.report is None and "".join(sink.out) == "101\n"
    assert (person_session[0].workdir / "m.txt").exists()


def test_a_long_text_goes_to_the_shim_in_pieces_whole(monkeypatch):
    import socket
    import threading

    from toolkernel._command._command import Outcome
    from toolkernel._longtext import LongText, Spool
    from toolkernel._runners._hostbash._channel import _send_result

    text = "é中 long text\n" * 40_000
    spool = Spool()
    spool.write(json.dumps(text, ensure_ascii=False).encode()[1:-1])
    outcome = Outcome(LongText(spool, 0, spool.size), "a note\n", 0)
    monkeypatch.setattr(LongText, "__str__", lambda self: pytest.fail("the text was made whole"))  # pieces only
    mine, theirs = socket.socketpair()
    failed = []

    def send() -> None:
        try:
            _send_result(mine, outcome)
        except BaseException as exc:  # noqa: BLE001 - reported below, after the reader's end
            failed.append(exc)
        finally:
            mine.shutdown(socket.SHUT_WR)

    with mine, theirs:
        sender = threading.Thread(target=send)
        sender.start()
        received = bytearray()
        while chunk := theirs.recv(1 << 16):
            received += chunk
        sender.join()
    assert not failed, failed
    size = int.from_bytes(received[5:9], "big")
    assert received[:1] == b"R" and size == len(text.encode())
    assert received[9:9 + size].decode() == text
    assert received[9 + size + 4:] == b"a note\n"
