"""The first hour of a new user (issue 10): what got in the way, each checked the
way it was found, through a real kernel where it is about a kernel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkernel._frontends._lab import APPROVAL_MIME
from toolkernel._frontends._report import MIME as REPORT_MIME
from kernel_helpers import RecordingSink, isolated_env, loaded_kernel, write_config
from toolkernel._config._config import load_config
from toolkernel._errors import ConfigError
from toolkernel._config._limits import ShellLimits
from toolkernel._session import Session

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    project = tmp_path_factory.mktemp("firsthour") / "project"
    project.mkdir()
    write_config(project, "")
    return project


@pytest.fixture(scope="module")
def kernel(workdir):
    with loaded_kernel(workdir) as k:
        yield k


@pytest.fixture
def config(workdir):
    yield lambda text: write_config(workdir, text)
    write_config(workdir, "")


@pytest.fixture
def session(tmp_path, monkeypatch):
    for name, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    project = tmp_path / "project"
    project.mkdir()
    s = Session(project)
    yield s, project
    s.close()


# -- 2. the sandbox's limits --------------------------------------------------------


def test_a_thirty_thousand_line_loop_runs_to_the_end_in_a_kernel(kernel):
    run = kernel.execute_ok("%%tools\nseq 1 30000 | while read n; do echo \"row $n\"; done | tail -n 1\n")
    assert run.stdout.strip().splitlines()[-1] == "row 30000"
    assert "limit" not in run.stderr


def test_a_limit_that_ends_a_script_is_the_last_marked_line_and_fails_the_cell(kernel, config):
    config("[shell]\nmax_loop_iterations = 100\n")
    # enough output for the large-output cut, which must not bury the limit's line
    run = kernel.execute("%%tools\nseq 1 20000 | sed 's/$/ xxxxxxxxxxxxxxxx/'\n"
                         "for i in $(seq 1 200); do echo $i; done\necho never\n")
    assert run.status == "error"
    assert "exited with code 1" in run.error["evalue"]
    streams = [m["content"] for m in run.of_type("stream")]
    last = streams[-1]
    assert last["name"] == "stderr"
    assert last["text"].startswith("toolkernel: the script was ended by a sandbox limit")
    assert "maximum loop iterations exceeded (100)" in last["text"]
    assert "[shell]" in last["text"]
    assert "never" not in run.stdout


@pytest.mark.parametrize("script, where", [('tools --help; echo "unclosed', "line 1"),
                                           ("if then fi", "column 4")])
def test_a_script_with_a_syntax_error_says_so_and_runs_none_of_it(session, script, where):
    """Not "ended by a sandbox limit ... raise it in the [shell] table": nothing to raise."""
    s, _ = session
    sink = RecordingSink()
    result = s.run_script(script, sink)
    said = sink.stderr_text + result.stderr
    assert result.exit_code != 0
    assert said.splitlines()[-1].startswith("toolkernel: the script has a syntax error, so none of it ran:")
    assert where in said and "sandbox limit" not in said and "[shell]" not in said
    assert sink.stdout_text + result.stdout == ""


def test_the_call_limit_comes_from_the_shell_table(session):
    s, project = session
    write_config(project, "[shell]\ncall_limit = 3\n")
    result = s.run_script("for i in 1 2 3 4 5; do tools glob-search pattern='*' >/dev/null || echo failed $i; done",
                          RecordingSink())
    assert result.run_report is not None
    assert result.run_report.stopped.reason == "call_limit"
    assert "more than 3 tool calls" in result.stderr


def test_every_shell_key_is_read_and_bad_values_are_config_errors(tmp_path, monkeypatch):
    for name, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    write_config(tmp_path, "[shell]\nmax_loop_iterations = 5\nmax_commands = 6\nmax_memory_mb = 7\n"
                           "timeout = 8\ncall_limit = 9\n")
    assert load_config(tmp_path).shell == ShellLimits(5, 6, 7, 8, 9)
    for bad in ("timeout = 0", 'call_limit = "50"', "max_loops = 3", "max_commands = true"):
        write_config(tmp_path, f"[shell]\n{bad}\n")
        with pytest.raises(ConfigError, match=r"shell\."):
            load_config(tmp_path)


def test_an_untrusted_folder_cannot_raise_the_limits(tmp_path, monkeypatch):
    for name, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TOOLKERNEL_TRUST_ALL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    write_config(tmp_path, "[shell]\ncall_limit = 5000\n")
    config = load_config(tmp_path)
    assert config.untrusted and config.shell == ShellLimits()


# -- 1. one clear message per approval --------------------------------------------------

DELETE = "tools github delete-branch branch=fix-x"


def with_stdin(kernel, code: str, answers: list[str]):
    """Run a cell in a frontend that offers stdin; `answers` reply to its prompts in turn
    ("^C" interrupts the kernel instead). Returns (prompts, CellRun)."""
    from kernel_helpers import CellRun

    prompts, messages, replies = [], [], iter(answers)

    def answer(msg):
        prompts.append(msg["content"]["prompt"])
        reply = next(replies)
        if reply == "^C":
            kernel.manager.interrupt_kernel()
        else:
            kernel.client.input(reply)

    reply = kernel.client.execute_interactive(code, allow_stdin=True, stdin_hook=answer,
                                              output_hook=messages.append, timeout=180)
    return prompts, CellRun(reply, messages)


@pytest.fixture
def github(config):
    from kernel_helpers import github_toml

    config(github_toml())


def test_the_prompt_shows_its_choices_asks_again_on_empty_and_says_what_happened(kernel, github):
    prompts, run = with_stdin(kernel, f"%%tools\n{DELETE}\necho after\n", ["", "maybe", "o"])
    assert run.status == "ok", run.error
    assert "[o]nce / [a]lways / [d]eny (no default)" in prompts[0]
    assert len(prompts) == 3 and all("o (allow once)" in p for p in prompts[1:])
    assert run.stdout == "allowed once; running the script\ndeleted branch fix-x\nafter\n"
    # No stale error line and no report: only the question, shown once for JupyterLab's buttons.
    assert run.stderr == "" and [list(d["content"]["data"])[0] for d in run.of_type("display_data")] == [APPROVAL_MIME]
    # The answer ends the question where it is shown: its buttons go off, "Allow once" marked.
    [ended] = run.of_type("update_display_data")
    assert ended["content"]["data"][APPROVAL_MIME]["answered"] == "once"


def test_a_denial_before_the_start_says_nothing_ran_and_nothing_else(kernel, github):
    prompts, run = with_stdin(kernel, f"%%tools\n{DELETE}\necho after\n", ["d"])
    assert len(prompts) == 1
    assert run.stdout == "denied; nothing ran\n"
    # No JSON error line, no report asking to approve; the cell fails, in one line, so Run All stops.
    assert run.stderr == "" and run.status == "error"
    assert run.error["traceback"] == ["ScriptFailed: the cell stops here: a call was denied before the start"]
    assert [list(d["content"]["data"])[0] for d in run.of_type("display_data")] == [APPROVAL_MIME]


def test_without_stdin_the_stop_is_reported_and_a_later_deny_says_so_once(kernel, github):
    run = kernel.execute(f"%%tools\n{DELETE}\necho after\n")
    # Nobody can answer now: the report asks, the cell fails, nothing ran.
    assert run.status == "error" and "after" not in run.stdout and "deleted" not in run.stdout
    report = next(d for d in run.displays() if REPORT_MIME in d.get("data", {}))["data"]["text/plain"]
    assert "did not start" in report and "%tools approve" in report
    denied = kernel.execute_ok("%tools deny")
    assert denied.stderr == "" and len(denied.stdout.strip().splitlines()) == 1, denied.stdout
    assert "denied" in denied.stdout


def test_an_interrupt_while_the_prompt_waits_is_one_line(kernel, github):
    prompts, run = with_stdin(kernel, f"%%tools\n{DELETE}\n", ["^C"])
    assert len(prompts) == 1
    shown = run.stdout + run.stderr + (str(run.error.get("traceback")) if run.error else "")
    assert "KeyboardInterrupt" not in shown and "Traceback" not in shown
    # One true line: the question was open, nothing printed, and no exit code was returned.
    assert run.stderr == "" and run.error["traceback"] == [
        'ScriptFailed: tools: interrupted while a person was asked about tools github delete-branch'
        ' {"branch": "fix-x"}: the question is cancelled and the call was not made']
    assert "deleted" not in run.stdout
    [ended] = run.of_type("update_display_data")  # the buttons end with the question
    assert ended["content"]["data"][APPROVAL_MIME]["answered"] == "cancelled"


def test_a_direct_call_asks_the_same_way_when_stdin_is_offered(kernel, github):
    prompts, run = with_stdin(kernel, f"x = %{DELETE}\nprint(repr(x))", ["", "o"])
    assert run.status == "ok", run.error
    assert len(prompts) == 2 and "[o]nce / [a]lways / [d]eny" in prompts[0]
    assert run.stdout == "allowed once; making the call\n'deleted branch fix-x'\n"


def test_an_interrupt_while_a_direct_calls_prompt_waits_is_one_line_and_the_kernel_goes_on(kernel, github):
    prompts, run = with_stdin(kernel, f"x = %{DELETE}", ["^C"])
    assert len(prompts) == 1
    assert run.stderr == "tools: interrupted; the call was cancelled (a tool already running may have done part of its work)\n"
    assert "deleted" not in run.stdout
    kernel.execute_ok("pull = %tools github get-pull repo=acme/api number=101")
    assert kernel.value("pull['number']") == 101


def test_a_direct_call_denied_at_the_prompt_says_so_and_does_not_ask_for_approval(kernel, github):
    prompts, run = with_stdin(kernel, f"x = %{DELETE}", ["d"])
    assert len(prompts) == 1 and run.stdout == "denied; the call was not made\n"
    # x cannot be assigned, so the cell fails: with one line that agrees with the answer.
    assert run.status == "error" and "denied" in run.error["evalue"]
    assert "approve" not in run.error["evalue"] and len(run.error["traceback"]) == 1


def test_a_direct_call_without_stdin_speaks_of_a_call_not_a_script(kernel, github):
    run = kernel.execute(f"x = %{DELETE}")
    assert run.status == "error"
    message = run.error["evalue"]
    assert "the call was not made" in message
    assert "script" not in message


# -- 7. smaller items ---------------------------------------------------------------------


def run_in(session, script: str):
    s, project = session
    sink = RecordingSink()
    return s.run_script(script, sink), sink


def test_search_without_words_is_a_usage_error(session):
    result, sink = run_in(session, "tools search; echo code=$?")
    assert sink.stdout_text == "code=1\n"
    assert '"invalid_input"' in sink.stderr_text and "tools search <words>" in sink.stderr_text


def test_search_for_time_zone_does_not_list_todo_write(session):
    result, sink = run_in(session, "tools search time zone")
    assert "todo-write" not in sink.stdout_text
    result, sink = run_in(session, "tools search every time")
    assert "todo-write" in sink.stdout_text  # both words in its description


@pytest.mark.slow
def test_a_server_tool_named_alone_suggests_the_server_qualified_form(session):
    from kernel_helpers import github_toml

    s, project = session
    write_config(project, github_toml())
    result, sink = run_in(session, "tools list-pulls --help")
    assert "`tools github list-pulls`" in sink.stderr_text
    result, sink = run_in(session, "tools github list-pulls --help")
    assert result.exit_code == 0 and "repo" in sink.stdout_text


def test_curl_says_in_one_line_that_the_network_goes_through_web_fetch(session):
    result, sink = run_in(session, "curl https://example.com; echo code=$?")
    assert sink.stdout_text == "code=1\n"
    assert len(sink.stderr_text.strip().splitlines()) == 1 and "tools web-fetch" in sink.stderr_text


def test_the_text_report_reads_naturally(session):
    from toolkernel._frontends._report import report_text

    s, project = session
    write_config(project, "")
    result, sink = run_in(session, "tools write-file path=a.txt content=x")
    text = report_text(result.report)
    assert "no read-only calls" in text and "call(s)" not in text and "{\n" not in text


# -- 3. a config that is ignored says so -------------------------------------------------


def test_a_world_writable_folders_config_is_named_with_reason_and_fix(kernel, workdir, config):
    from kernel_helpers import github_toml

    config(github_toml())
    workdir.chmod(0o777)
    try:
        first = kernel.execute_ok("%%tools\ntools --help\n")
        again = kernel.execute_ok("%%tools\ntools --help\n")
    finally:
        workdir.chmod(0o755)
    assert f"toolkernel: config not used: {workdir}: anyone may write to the folder" in first.stderr
    assert "chmod o-w" in first.stderr
    assert str(workdir) in first.stdout and "chmod o-w" in first.stdout  # tools --help names it too
    assert "config not used" not in again.stderr  # said once a session


# -- 7. notebook-run with nothing paired -------------------------------------------------

RUN_UNPAIRED = "tools notebook-run notebook_path=analysis.ipynb code='print(1)'"


def test_notebook_run_with_nothing_paired_says_so_before_asking(kernel, config):
    config("")
    prompts, run = with_stdin(kernel, f"%%tools\n{RUN_UNPAIRED}\n", ["o", "o"])
    assert prompts == []  # not asked to allow a call that cannot run
    assert "analysis.ipynb is not paired" in run.stderr and '"connection_required"' in run.stderr
    assert APPROVAL_MIME not in str(run.displays())
    prompts, run = with_stdin(kernel, f"x = %{RUN_UNPAIRED}", ["o", "o"])
    assert prompts == [] and "is not paired" in run.error["evalue"]


def test_notebook_run_with_nothing_paired_and_no_stdin_is_not_a_pending_approval(kernel, config):
    config("")
    run = kernel.execute(f"%%tools\n{RUN_UNPAIRED}\n")
    assert "analysis.ipynb is not paired" in run.stderr and "needs_approval" not in run.stderr
    assert "%tools approve" not in str(run.displays())


# -- 4. a broken server makes only that server unavailable ----------------------------------


def test_broken_servers_disable_only_themselves_and_a_hung_one_is_not_started_again(kernel, config, workdir):
    import json
    import sys

    from kernel_helpers import SERVERS, github_toml

    starts = workdir.parent / "hang-starts.log"
    starts.unlink(missing_ok=True)
    def server(name: str, *args: str) -> str:
        return f"[mcp_servers.{name}]\ncommand = {json.dumps(sys.executable)}\nargs = {json.dumps(list(args))}\n\n"

    config(github_toml() + server("stuck", str(SERVERS / "hang.py"), str(starts))
           + server("dead", str(SERVERS / "crash.py"), "--die-at-start")
           + f'[mcp_servers.ghost]\ncommand = "{workdir}/no-such-mcp-server"\n')
    first = kernel.execute_ok("%%tools\ntools --help\n", timeout=240)  # waits once for the hung start
    lines = {line.split()[0]: line for line in map(str.strip, first.stdout.splitlines())
             if line.startswith(("github ", "stuck ", "dead ", "ghost "))}
    assert set(lines) == {"github", "stuck", "dead", "ghost"}, first.stdout
    assert "unavailable" not in lines["github"]
    assert "did not finish starting" in lines["stuck"]
    assert "exited before it finished starting" in lines["dead"]
    assert "command not found" in lines["ghost"]

    run = kernel.execute("%%tools\ntools github list-pulls repo=acme/api | jq length\n"
                         "tools stuck anything; echo stuck=$?\ntools ghost anything\n")
    assert run.stdout.splitlines()[0].isdigit() and "stuck=1" in run.stdout
    errors = [json.loads(line)["error"] for line in run.stderr.splitlines() if line.startswith('{"error"')]
    assert [(e["code"], e["retryable"]) for e in errors] == [("unavailable", False), ("unavailable", False)]

    again = kernel.execute_ok("%%tools\ntools --help\n")
    assert "did not finish starting" in again.stdout
    assert starts.read_text().count("started") == 1  # shown again, not started again


# -- 7. `tools <server> <tool> --help` works for every MCP tool ------------------------------

FIXTURES = ("badschema", "dynamic", "images", "recorder", "structured")  # unlike schemas


@pytest.mark.slow
def test_every_fixture_servers_every_tool_has_help(session):
    from kernel_helpers import fixture_toml

    s, project = session
    write_config(project, "".join(fixture_toml(name, load="on-demand") for name in FIXTURES))
    for server in FIXTURES:
        listing, sink = run_in(session, f"tools {server} --help")
        assert listing.exit_code == 0, sink.stderr_text
        names = [line.split()[0] for line in sink.stdout_text.splitlines()
                 if line.startswith("  ") and line.strip() and not line.strip().startswith(("tools", "-"))]
        assert names, sink.stdout_text
        for tool in names:
            result, sink = run_in(session, f"tools {server} {tool} --help")
            assert result.exit_code == 0 and tool in sink.stdout_text, (server, tool, sink.stderr_text)


# -- 3. an ignored .mcp.json is named too -----------------------------------------------------


def test_a_world_writable_folders_mcp_json_is_named_in_help(session):
    import json
    import sys

    s, project = session
    (project / "toolkernel.toml").unlink(missing_ok=True)
    (project / ".mcp.json").write_text(json.dumps(
        {"mcpServers": {"github": {"command": sys.executable, "args": ["-m", "toolkernel.demo_server"]}}}))
    project.chmod(0o777)
    try:
        result, sink = run_in(session, "tools --help")
    finally:
        project.chmod(0o755)
    assert result.exit_code == 0
    assert f"{project}: anyone may write to the folder" in sink.stdout_text and "chmod o-w" in sink.stdout_text
    assert "github" not in sink.stdout_text.split("MCP servers", 1)[-1].split("Other tools", 1)[0]


# -- 6. web-fetch's 32 KB cut, in a script -------------------------------------------------


def test_a_long_web_page_is_cut_in_the_script_and_read_whole_from_the_saved_file(session):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    page = "".join(f"row {n:05d}\n" for n in range(6000)).encode()  # 60 KB

    class Page(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    s, project = session
    # Loopback is refused unless the host is allowed: the SSRF guard stays on.
    write_config(project, '[tools.web_fetch]\nallow_hosts = ["127.0.0.1"]\n')
    url = f"http://127.0.0.1:{httpd.server_address[1]}/data.txt"
    try:
        result, sink = run_in(session, f"tools web-fetch url={url} > page.txt; wc -l < page.txt;"
                                       " grep -o '.toolkernel/outputs/[^] ]*' page.txt")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert result.exit_code == 0, sink.stderr_text
    count, saved = sink.stdout_text.split()
    assert int(count) < 3300  # 32 KB: the head and the tail of 6000 rows of 10 characters
    assert (project / saved).read_bytes() == page
    whole, sink = run_in(session, f"tools read-file path={saved} offset=5999 limit=1")
    assert "row 05999" in sink.stdout_text


def test_a_server_whose_config_entry_is_wrong_is_the_only_one_unavailable(kernel, config, workdir):
    import json

    from kernel_helpers import github_toml

    config(github_toml() + "[mcp_servers.bad]\ncommand = 5\n\n[policy]\nallow = [\"mcp_github__list_pulls\"]\n")
    run = kernel.execute("%%tools\ntools --help | grep -E '^  (bad|github) '\n"
                         "tools github list-pulls repo=acme/api | jq length\ntools bad anything\n")
    lines = run.stdout.splitlines()
    assert lines[0].startswith("  bad (unavailable: MCP server 'bad' is not started: its config is wrong:")
    assert "mcp_servers.bad.command: expected a string, got an integer" in lines[0]
    assert lines[1].startswith("  github (") and lines[2].isdigit()
    error = json.loads(run.stderr.strip().splitlines()[-1])["error"]
    assert error["code"] == "unavailable" and error["retryable"] is False and "mcp_servers.bad.command" in error["message"]
    lint = kernel.execute("%tools lint")
    assert "mcp_servers.bad.command: expected a string" in lint.stdout + lint.stderr + str(lint.error)


# -- kernels toolkernel starts ---------------------------------------------------------------


@pytest.mark.slow
def test_the_demo_prints_its_cells_and_no_kernel_warning(tmp_path):
    # The README's first command. Its kernel said "running over TCP without encryption ...
    # susceptible to eavesdropping" first: the demo's channels went unencrypted.
    env = {**os.environ, **isolated_env(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "toolkernel", "demo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr
    assert '{"number":103,"title":"Fix pagination off-by-one","mergeable":false}' in done.stdout
    assert "WARNING" not in done.stderr and "encryption" not in done.stderr + done.stdout


def test_a_kernel_paired_from_a_cell_is_reached_encrypted_and_warns_nothing(kernel, config):
    config('[policy]\nallow = ["notebook-run"]\n')
    kernel.execute_ok("import toolkernel")
    paired = kernel.execute_ok("%tools pair encrypted.ipynb --kernel python3", timeout=180)
    try:
        assert "encryption" not in paired.stdout + paired.stderr  # ipykernel's TCP warning, in the cell
        assert paired.stdout.startswith("paired: encrypted.ipynb")
        assert kernel.value("toolkernel.call('notebook-run', notebook_path='encrypted.ipynb', code='6*7')") == 42
        # Its channels carry CurveZMQ keys, which the client it is reached through holds.
        keys = kernel.value("[bool(p.connection.client.curve_publickey) for p in"
                            " toolkernel.get_session().state['notebook_pairings']]")
        assert keys == [True]
    finally:
        kernel.execute("%tools unpair encrypted.ipynb")
