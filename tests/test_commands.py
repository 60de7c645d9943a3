"""Command tools (seed 003) through a real Bashkit run: real child processes for every
call, the config reader's errors, approval with the filled argv, the parallel cap and lint."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path

import pytest

from kernel_helpers import RecordingSink, error_lines, isolated_env, loaded_kernel, write_config
from test_process import wait_dead
from toolkernel import _loop
from toolkernel.__main__ import main as cli_main
from toolkernel._errors import ConfigError
from toolkernel._frontends._lint import lint
from toolkernel._providers._commands import ProcessSlots
from toolkernel._session import Session
from toolkernel._tool import ToolContext

pytestmark = pytest.mark.timeout(240)

PY = sys.executable
# A program that prints its argv (after the program) as JSON: what the command really got.
ARGV_PRINTER = "import json, sys; print(json.dumps(sys.argv[1:]))"


def q(value) -> str:
    return json.dumps(value)  # JSON strings and arrays are valid TOML values


def command_tool(name: str, command: list[str], **keys) -> str:
    lines = [f"[tools.{name}]", f"command = {q(command)}"]
    for key, value in keys.items():
        if key == "parameters":
            lines.append(f"parameters = {_toml_inline(value)}")
        elif key == "env":
            lines.append("env = { " + ", ".join(f"{k} = {q(v)}" for k, v in value.items()) + " }")
        else:
            lines.append(f"{key} = {q(value)}")
    return "\n".join(lines) + "\n\n"


def _toml_inline(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_inline(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_inline(v) for v in value) + "]"
    return q(value)


STRINGS = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"},
                                           "nested": {"type": "object",
                                                      "properties": {"c": {"type": "string"}}}}}


@pytest.fixture
def project(tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


def run_script(folder: Path, config: str, script: str, session: Session | None = None):
    write_config(folder, config)
    sink = RecordingSink()
    result = (session or Session(folder)).run_script(script, sink)
    return result, sink


# -- templates and injection ---------------------------------------------------------------

INJECTIONS = ["a; touch {m}", "b | touch {m}", "`touch {m}`", "$(touch {m})", "two words",
              "line1\nline2", "-rf", "--output={m}", "' \" \\", "{{{{ input.b }}}}"]


@pytest.mark.parametrize("value", INJECTIONS)
def test_a_value_is_one_argv_element_whatever_it_holds(project, value):
    marker = project / "pwned"
    value = value.format(m=marker)
    config = command_tool("argv", [PY, "-c", ARGV_PRINTER, "x{{ input.a }}y", "{{input.a}}",
                                   "{{ input.nested.c }}", "fixed"],
                          parameters=STRINGS, read_only=True, input_options=True)
    tool_input = json.dumps({"a": value, "b": "B", "nested": {"c": value}})
    result, sink = run_script(project, config, f"tools argv {_shell_quote(tool_input)}\n")
    assert result.exit_code == 0, sink.stderr_text
    assert json.loads(sink.stdout_text) == [f"x{value}y", value, value, "fixed"]
    assert not marker.exists()


# rg runs the program `--pre=CMD` names on each file it searches: a value that begins an
# argument with `-` is an option to the program, whatever argv it is one element of.
OPTION_LIKE = {"--pre=touch {m}": True, "-rf": True, "--": True, "x--pre": False, "-": False}


@pytest.mark.parametrize("value", list(OPTION_LIKE))
def test_a_value_that_would_be_an_option_is_refused_before_anything_runs(project, value):
    marker = project / "ran"
    refused = OPTION_LIKE[value]
    value = value.format(m=marker)
    config = (command_tool("grep_like", [PY, "-c", f"open({str(marker)!r}, 'w')", "--json", "{{ input.a }}"],
                           parameters=STRINGS, read_only=True)
              + command_tool("fenced", [PY, "-c", ARGV_PRINTER, "--json", "--", "{{ input.a }}"],
                             parameters=STRINGS, read_only=True)
              + command_tool("attached", [PY, "-c", ARGV_PRINTER, "--regexp={{ input.a }}", "{{ input.n }}"],
                             parameters={"type": "object", "properties": {"a": {"type": "string"},
                                                                          "n": {"type": "integer"}}},
                             read_only=True))
    quoted = _shell_quote(json.dumps({"a": value}))
    result, sink = run_script(project, config, f"tools grep-like {quoted}\necho \"status $?\"\n"
                              f"tools fenced {quoted}\ntools attached {_shell_quote(json.dumps({'a': value, 'n': -5}))}\n")
    assert marker.exists() is not refused, sink.stderr_text
    if refused:
        assert error_lines(sink.stderr_text)[0]["code"] == "invalid_input"
        assert "as an option" in sink.stderr_text and "input_options = true" in sink.stderr_text
    assert "status 1" in sink.stdout_text if refused else "status 0" in sink.stdout_text
    # After a literal `--` the value is data; attached to an option the command writes, or as a number, too.
    assert json.loads(sink.stdout_text.splitlines()[1]) == ["--json", "--", value]
    assert json.loads(sink.stdout_text.splitlines()[2]) == [f"--regexp={value}", "-5"]


# Each argument is judged as composed from all its templates: (template, input, refused).
COMPOSED = {
    # The attack of issue 34: a read_only `git log` tool got `--output=F` from two values.
    "joined": ("{{input.remote}}{{input.ref}}", {"remote": "-", "ref": "-output=F"}, True),
    "empty_first": ("{{input.a}}{{input.b}}", {"a": "", "b": "-x"}, True),
    "each": ("{{#each input.l}}{{this}}{{/each}}", {"l": ["-", "-x"]}, True),
    "each_data": ("{{#each input.l}}{{this}}{{/each}}", {"l": ["a", "-x"]}, False),
    "key": ("{{#each input.o}}{{@key}}{{/each}}", {"o": {"--output=F": 1}}, True),
    "stripped_text": (" {{~input.a}}", {"a": "-x"}, True),  # `~` takes the template's own space away
    "own_option": ("--format={{input.a}}", {"a": "-x"}, False),
    "own_flag": ("{{#if input.v}}--verbose{{/if}}{{input.a}}", {"v": True, "a": "-x"}, False),
    "flag_off": ("{{#if input.v}}--verbose{{/if}}{{input.a}}", {"v": False, "a": "-x"}, True),
    "dash_alone": ("{{input.a}}{{input.b}}", {"a": "-", "b": ""}, False),
    "number": ("{{input.b}}{{input.n}}", {"b": "", "n": -5}, False),
}


def test_an_argument_the_input_begins_with_a_dash_is_refused_as_composed(project):
    ran = project / "ran"
    ran.mkdir()
    config = "".join(command_tool(name, [PY, "-c", "import sys; open(sys.argv[1], 'w')", str(ran / name), template],
                                  parameters={"type": "object"}, read_only=True)
                     for name, (template, _, _) in COMPOSED.items())
    script = "".join(f"tools {name.replace('_', '-')} {_shell_quote(json.dumps(tool_input))}; echo \"{name} $?\"\n"
                     for name, (_, tool_input, _) in COMPOSED.items())
    result, sink = run_script(project, config, script)
    for name, (_, _, refused) in COMPOSED.items():
        assert (ran / name).exists() is not refused, (name, sink.stderr_text)
        assert f"{name} {1 if refused else 0}" in sink.stdout_text.splitlines(), (name, sink.stdout_text)
    assert sink.stderr_text.count("begins with `-` from the input") == sum(r for _, _, r in COMPOSED.values())
    assert "'--output=F'" in sink.stderr_text and "invalid_input" in sink.stderr_text


def test_a_value_that_would_be_an_option_is_refused_before_a_person_is_asked(project):
    config = command_tool("fetch_like", ["true", "{{ input.a }}"], parameters=STRINGS)  # may change: asks
    result, sink = run_script(project, config, "x=--upload-pack=touch; tools fetch-like a=$x\n")
    assert error_lines(sink.stderr_text)[0]["code"] == "invalid_input", sink.stderr_text
    assert result.report is None or result.report["tools"]["stopped"] is None


def test_a_value_holding_a_nul_is_invalid_input_and_the_script_goes_on(project):
    # No argv can carry one: the start failed inside toolkernel ("a bug, please report it").
    marker = project / "ran"
    config = command_tool("writer", [PY, "-c", f"open({str(marker)!r}, 'w')", "{{ input.a }}"],
                          parameters=STRINGS, read_only=True)
    result, sink = run_script(project, config, "tools writer '{\"a\": \"x\\u0000y\"}'\necho \"status $?\"\n")
    assert error_lines(sink.stderr_text)[0]["code"] == "invalid_input", sink.stderr_text
    assert "NUL" in sink.stderr_text and "status 1" in sink.stdout_text
    assert not marker.exists()
    # Input that no command line parsed (`toolkernel.call`, a `serve` client) is checked where it runs.
    from toolkernel._errors import InvalidInput
    from toolkernel._frontends._direct import call_argv

    session = Session(project)
    try:
        for value, says in (("x\0y", "NUL character"), ("x\ud800y", "half a surrogate pair")):
            with pytest.raises(InvalidInput, match=says):
                call_argv(session, ["writer"], base={"a": value})
    finally:
        session.close()
    assert not marker.exists()


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def test_handlebars_semantics_for_missing_values_lists_and_objects(project):
    config = command_tool("shapes", [PY, "-c", ARGV_PRINTER, "[{{ input.missing }}]", "{{ input.list }}",
                                     "{{#each input.list}}<{{this}}>{{/each}}", "{{ input.obj.k }}",
                                     "{{ input.flag }}", "{{ input.amp }}"], read_only=True)
    result, sink = run_script(project, config,
                              """tools shapes '{"list": [1, "b"], "obj": {"k": 2}, "flag": true, "amp": "a&b<c>"}'\n""")
    assert result.exit_code == 0, sink.stderr_text
    # values go in as they are: no HTML escaping of & and <
    assert json.loads(sink.stdout_text) == ["[]", "1,b", "<1><b>", "2", "true", "a&b<c>"]


# -- input -------------------------------------------------------------------------------------

def test_null_and_empty_input_are_an_empty_object(project):
    config = command_tool("noargs", [PY, "-c", ARGV_PRINTER, "ran"], read_only=True)
    result, sink = run_script(project, config, "tools noargs null\ntools noargs\necho '' | tools noargs -\n")
    assert result.exit_code == 0, sink.stderr_text
    assert sink.stdout_text.split() == ['["ran"]'] * 3


@pytest.mark.parametrize("bad", ["'[1, 2]'", "'\"text\"'", "5", "true"])
def test_input_that_is_not_an_object_runs_nothing(project, bad):
    marker = project / "ran"
    config = command_tool("touch", ["touch", str(marker)], read_only=True)
    result, sink = run_script(project, config, f"tools touch {bad}\n")
    assert result.exit_code == 1
    assert error_lines(sink.stderr_text)[0]["code"] == "invalid_input"
    assert not marker.exists()


def test_the_whole_schema_is_checked_before_anything_runs(project):
    marker = project / "ran"
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3},
                                               "mode": {"enum": ["fast", "slow"]}},
              "required": ["n"], "additionalProperties": False}
    config = command_tool("touch", ["touch", str(marker)], parameters=schema, read_only=True)
    for bad in ["n=2", "n=5 mode=other", "n=5 extra=1", "mode=fast"]:
        result, sink = run_script(project, config, f"tools touch {bad}\n")
        assert error_lines(sink.stderr_text)[0]["code"] == "invalid_input", bad
        assert not marker.exists()
    result, sink = run_script(project, config, "tools touch n=5 mode=slow\n")
    assert result.exit_code == 0 and marker.exists()


# -- running ------------------------------------------------------------------------------------

def test_the_env_allow_list_hides_the_kernels_secrets(project, monkeypatch):
    monkeypatch.setenv("KERNEL_SECRET", "hunter2-secret")
    monkeypatch.setenv("SAFE_VALUE", "shown")
    show = "import json, os; print(json.dumps(dict(os.environ)))"
    config = (command_tool("fenced", [PY, "-c", show], env={"SAFE": "${SAFE_VALUE}"}, read_only=True)
              + command_tool("open", [PY, "-c", show], read_only=True))
    result, sink = run_script(project, config, "tools fenced\n")
    assert result.exit_code == 0, sink.stderr_text
    seen = json.loads(sink.stdout_text)
    assert seen.get("SAFE") == "shown"
    assert "KERNEL_SECRET" not in seen and "hunter2-secret" not in sink.stdout_text
    result, sink = run_script(project, config, "tools open\n")
    assert json.loads(sink.stdout_text)["KERNEL_SECRET"] == "hunter2-secret"  # no env: inherited


def test_the_argv_a_person_approves_shows_format_characters_escaped():
    from toolkernel._approval._run import described_call

    call = {"tool": "tools rg", "input": {"p": "x"}, "argv": ["rg", "--", "\u202eexe.gnp", "café"]}
    assert described_call(call).endswith('(runs ["rg", "--", "\\u202eexe.gnp", "café"])')


def test_a_secret_handed_in_env_is_masked_in_the_error_the_script_reads(project, monkeypatch):
    monkeypatch.setenv("KERNEL_TOKEN", "ghp-secret-value-42")
    rejects = "import os, sys; sys.stderr.write('bad token ' + os.environ['TOKEN']); sys.exit(1)"
    config = command_tool("auth", [PY, "-c", rejects], env={"TOKEN": "${KERNEL_TOKEN}"}, read_only=True)
    result, sink = run_script(project, config, "tools auth\n")
    assert "bad token ***" in error_lines(sink.stderr_text)[0]["message"]
    assert "ghp-secret-value-42" not in sink.stderr_text + sink.stdout_text


def test_an_env_without_path_cannot_find_a_bare_program(project):
    config = command_tool("nopath", ["true"], env={"X": "1"}, read_only=True)
    result, sink = run_script(project, config, "tools nopath\n")
    error = error_lines(sink.stderr_text)[0]
    assert error["code"] == "tool_error" and "could not start 'true'" in error["message"]
    config = command_tool("withpath", ["true"], env={"PATH": "${PATH}"}, read_only=True)
    result, sink = run_script(project, config, "tools withpath\n")
    assert result.exit_code == 0, sink.stderr_text


def test_a_program_missing_from_the_allowed_path_is_a_tool_error(project):
    config = command_tool("gone", ["toolkernel-no-such-program"], env={"PATH": "${PATH}"}, read_only=True)
    result, sink = run_script(project, config, "tools gone || echo handled\n")
    assert "handled" in sink.stdout_text
    error = error_lines(sink.stderr_text)[0]
    assert error["code"] == "tool_error" and "could not start 'toolkernel-no-such-program'" in error["message"]


def test_cwd_is_expanded_and_relative_to_the_working_directory(project, monkeypatch):
    (project / "sub").mkdir()
    monkeypatch.setenv("SUBDIR", "sub")
    config = command_tool("where", [PY, "-c", "import os; print(os.getcwd())"], cwd="${SUBDIR}",
                          read_only=True)
    result, sink = run_script(project, config, "tools where\n")
    assert sink.stdout_text.strip() == str(project / "sub")


def test_a_failing_command_is_a_tool_error_and_the_script_goes_on(project):
    fail = "import sys; sys.stderr.write('early\\n' + 'x' * 5000 + '\\nthe real reason'); sys.exit(4)"
    config = command_tool("fails", [PY, "-c", fail], read_only=True)
    result, sink = run_script(project, config, "tools fails; echo after=$?\n")
    assert "after=1" in sink.stdout_text
    error = error_lines(sink.stderr_text)[0]
    assert error["code"] == "tool_error"
    assert "exited with code 4" in error["message"] and error["message"].endswith("the real reason")
    assert "early" not in error["message"]  # the end of stderr, not all of it


def test_a_command_that_is_not_found(project):
    config = command_tool("ghost", ["/nonexistent/ghost-program", "x"], read_only=True)
    result, sink = run_script(project, config, "tools ghost || echo handled\n")
    assert "handled" in sink.stdout_text
    error = error_lines(sink.stderr_text)[0]
    assert error["code"] == "tool_error" and "ghost-program" in error["message"]


def test_non_utf8_output_becomes_replacement_characters(project):
    config = command_tool("bytes", [PY, "-c", "import sys; sys.stdout.buffer.write(b'a\\xffb\\n')"],
                          read_only=True)
    result, sink = run_script(project, config, "tools bytes\n")
    assert result.exit_code == 0 and sink.stdout_text == "a\ufffdb\n"


@pytest.mark.slow
def test_a_timeout_kills_a_grandchild_and_is_a_tool_error(project):
    pid_file = project / "grandchild.pid"
    code = ("import subprocess, sys, time\n"
            f"g = subprocess.Popen(['sleep', '300']); open({str(pid_file)!r}, 'w').write(str(g.pid))\n"
            "sys.stderr.write('still busy'); sys.stderr.flush(); time.sleep(300)")
    config = command_tool("slow", [PY, "-c", code], timeout=2, read_only=True)
    result, sink = run_script(project, config, "tools slow; echo next\n")
    assert "next" in sink.stdout_text
    error = error_lines(sink.stderr_text)[0]
    assert "timed out after 2 s" in error["message"] and "still busy" in error["message"]
    assert wait_dead(int(pid_file.read_text()))


def test_output_past_16_mib_kills_the_tree_and_names_the_limit(project):
    pid_file = project / "grandchild.pid"
    code = ("import subprocess, sys, time\n"
            f"g = subprocess.Popen(['sleep', '300']); open({str(pid_file)!r}, 'w').write(str(g.pid))\n"
            "chunk = b'y' * 65536\n"
            "for _ in range(1600): sys.stdout.buffer.write(chunk)\n"  # 100 MiB
            "time.sleep(300)")
    config = command_tool("flood", [PY, "-c", code], read_only=True)
    result, sink = run_script(project, config, "tools flood | wc -c; echo done\n")
    assert "done" in sink.stdout_text
    error = error_lines(sink.stderr_text)[0]
    assert error["code"] == "tool_error" and "16 MiB limit" in error["message"]
    assert wait_dead(int(pid_file.read_text()))


@pytest.mark.slow
def test_at_most_eight_command_processes_run_at_once(project):
    running = project / "running"
    running.mkdir()
    code = ("import os, sys, time, uuid\n"
            f"me = os.path.join({str(running)!r}, uuid.uuid4().hex); open(me, 'w').close()\n"
            f"print(len(os.listdir({str(running)!r})))\n"
            "time.sleep(3); os.remove(me)")
    write_config(project, command_tool("par", [PY, "-c", code], read_only=True))
    session = Session(project)

    async def twelve_at_once():
        command = await session.prepare()
        tool = command.catalog.own["par"]
        ctx = ToolContext(workdir=project)
        return await asyncio.gather(*(tool.call({}, ctx) for _ in range(12)))

    results = _loop.run(twelve_at_once(), timeout=180)
    counts = [int(r.texts[0]) for r in results]
    assert max(counts) == 8, counts


def test_process_slots_are_shared_by_threads_each_with_its_own_loop():
    # Command tools run on the calling thread's loop: a script's, the direct calls' worker's.
    slots, lock, release = ProcessSlots(8), threading.Lock(), threading.Event()
    inside, most, done = [0], [0], []

    async def hold():
        await slots.take()
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        while not release.is_set():
            await asyncio.sleep(0.01)
        with lock:
            inside[0] -= 1
        slots.give_back()
        done.append(1)

    async def six():
        await asyncio.gather(*(hold() for _ in range(6)))

    threads = [threading.Thread(target=asyncio.run, args=(six(),)) for _ in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while inside[0] < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # the other four are waiting, not inside
    assert inside[0] == 8
    release.set()
    for thread in threads:
        thread.join(60)
    assert (most[0], len(done)) == (8, 12)


def test_a_cancelled_wait_for_a_process_slot_leaves_no_slot_taken():
    slots = ProcessSlots(1)

    async def scenario():
        holder_in, holder_out = asyncio.Event(), asyncio.Event()

        async def holder():
            await slots.take()
            holder_in.set()
            await holder_out.wait()
            slots.give_back()

        async def waiter():
            await slots.take()
            raise AssertionError("a cancelled waiter ran")

        first = asyncio.ensure_future(holder())
        await holder_in.wait()
        never = asyncio.ensure_future(waiter())
        cancelled_early = asyncio.ensure_future(waiter())
        await asyncio.sleep(0.05)
        cancelled_early.cancel()  # cancelled while waiting
        holder_out.set()
        await first
        # ... and one cancelled just as the slot was handed to it: it passes the slot on.
        never.cancel()
        for task in (never, cancelled_early):
            with pytest.raises(asyncio.CancelledError):
                await task
        await slots.take()
        return True

    assert asyncio.run(asyncio.wait_for(scenario(), 60))


# -- names, policy and approval ------------------------------------------------------------------

def test_a_name_taken_by_an_own_tool_or_a_server_is_a_config_error_naming_both(project):
    # One rule for every source of tools (the catalog's): the error names both claims.
    for clash, other in [("read-file", "the tool 'read-file'"), ("github", "the MCP server 'github'")]:
        config = (f'[mcp_servers.github]\ncommand = {q(PY)}\nargs = ["-m", "toolkernel.demo_server"]\n\n'
                  + command_tool(clash, ["true"]))
        write_config(project, config)
        with pytest.raises(ConfigError) as caught:
            Session(project).run_script("tools --help\n", RecordingSink())
        assert f"the command tool '{clash}'" in caught.value.problem and other in caught.value.problem
        assert caught.value.key in (f"tools.{clash.replace('-', '_')}", f"mcp_servers.{clash}")
        assert caught.value.path == str(project / "toolkernel.toml")


@pytest.mark.parametrize("entry, key, problem", [
    (command_tool("e", []), "tools.e.command", "must not be empty"),
    (command_tool("e", ["echo", "{{#if input.x}}"]), "tools.e.command[1]", "not a valid Handlebars template"),
    (command_tool("e", ["true"], parameters={"type": "object", "properties": {"a": {"type": "wat"}}}),
     "tools.e.parameters", "not a valid JSON Schema"),
    (command_tool("e", ["true"], parameters={"type": "array"}), "tools.e.parameters", '"type" must be "object"'),
    (command_tool("e", ["true"], timeout=0), "tools.e.timeout", "greater than 0"),
    (command_tool("e", ["true"], shell=True), "tools.e.shell", "unknown key"),
])
def test_bad_command_tool_tables_name_file_and_key(project, entry, key, problem):
    write_config(project, entry)
    with pytest.raises(ConfigError) as caught:
        Session(project).run_script("true\n", RecordingSink())
    assert caught.value.key == key and problem in caught.value.problem


def test_own_tool_settings_tables_keep_their_meaning(project):
    config = '[tools.web_fetch]\nmax_bytes = 1234\n\n' + command_tool("ok", ["true"], read_only=True)
    write_config(project, config)
    command = _loop.run(Session(project).prepare())
    assert command.dispatcher.env.settings["web_fetch"]["max_bytes"] == 1234
    assert "web_fetch" in command.catalog.own and "ok" in command.catalog.own


def test_policy_rules_name_command_tools_by_qualified_name(project):
    marker = project / "ran"
    config = (command_tool("touch", ["touch", str(marker)], read_only=True)
              + '[policy]\ndeny = ["tool__*"]\n')
    result, sink = run_script(project, config, "tools touch\n")
    assert error_lines(sink.stderr_text)[0]["code"] == "denied" and not marker.exists()


def test_a_command_that_may_change_things_asks_and_the_report_shows_the_argv(project):
    marker = project / "ran"
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    config = command_tool("mk", ["touch", "--", "prefix-{{ input.name }}"], parameters=schema)
    # literal: stopped before the start
    result, sink = run_script(project, config, "tools mk name=x\n")
    call = result.report["tools"]["stopped"]["call"]
    assert result.report["tools"]["stopped"]["before_start"]
    assert call == {"tool": "tools mk", "input": {"name": "x"}, "argv": ["touch", "--", "prefix-x"]}
    # through a variable: stopped as it runs, same call shape
    result, sink = run_script(project, config, 'n=y; tools mk name="$n"\n')
    call = result.report["tools"]["stopped"]["call"]
    assert call["argv"] == ["touch", "--", "prefix-y"] and not marker.exists()
    from toolkernel._frontends._report import report_html, report_text

    assert '["touch", "--", "prefix-y"]' in report_text(result.report)
    assert "prefix-y" in report_html(result.report)


def test_read_only_command_tools_run_in_default_mode(project):
    config = command_tool("look", [PY, "-c", "print('looked')"], read_only=True)
    result, sink = run_script(project, config, "tools look\n")
    assert result.exit_code == 0 and sink.stdout_text == "looked\n"


# -- lint ----------------------------------------------------------------------------------------

def test_lint_finds_each_problem_with_file_and_key(project, capsys):
    config = (f'[mcp_servers.github]\ncommand = {q(PY)}\nargs = ["-m", "toolkernel.demo_server"]\n'
              'load = "on-demand"\n\n'
              + command_tool("rg", ["rg", "{{ input.pattern }}", "{{#if input.dir}}{{ input.dri }}{{/if}}"],
                             parameters={"type": "object", "properties": {"pattern": {"type": "string"},
                                                                          "dir": {"type": "string"}}})
              + '[policy]\nallow = ["tool__rg", "github list-pulls", "mcp_github__any", "read_file"]\n'
              'deny = ["tool__rgx", "gitlab *", "mcp_gitlab"]\n'
              'ask = ["github"]\n\n'
              '[[hooks]]\nevent = "pre_call"\nmatch = "tool__nothing"\ncommand = ["true"]\n\n'
              '[tools_in_shell]\nkeep_visible = ["web_fetch", "tool__rg", "webfetch"]\n')
    write_config(project, config)
    found = {(f.key, f.file) for f in lint(project)}
    file = str(project / "toolkernel.toml")
    assert found == {(k, file) for k in ["tools.rg.command[2]", "policy.deny[0]", "policy.deny[1]",
                                         "policy.deny[2]", "policy.ask[0]", "hooks[0].match",
                                         "tools_in_shell.keep_visible[2]"]}
    assert cli_main(["lint", str(project)]) == 1
    out = capsys.readouterr().out
    assert f"{file}: tools.rg.command[2]: uses {{{{ input.dri }}}}" in out
    assert "7 problem(s)" in out


def test_lint_reports_a_config_error_and_a_clean_config(project, capsys):
    write_config(project, command_tool("e", []))
    assert [(f.key, "must not be empty" in f.problem) for f in lint(project)] == [("tools.e.command", True)]
    write_config(project, command_tool("fine", ["echo", "{{ input.a }}"], parameters=STRINGS)
                 + '[policy]\nallow = ["tool__fine", "*"]\n')
    assert lint(project) == []
    assert cli_main(["lint", str(project)]) == 0
    assert "no problems found" in capsys.readouterr().out


def test_lint_takes_bash_rules_as_rules_for_an_agents_cells_not_as_tool_names(project):
    write_config(project, command_tool("fine", ["echo", "{{ input.a }}"], parameters=STRINGS)
                 + '[policy]\nallow = ["Bash(echo *)"]\ndeny = ["Bash(rm *)"]\n'
                 + 'network = ["Bash(pip install *)", "tool__fine", "tool__gone"]\n')
    assert [(f.key, f.problem) for f in lint(project)] == [
        ("policy.network[2]", "\"tool__gone\": no command tool is named 'gone'")]


def test_lint_reports_every_config_error_with_the_name_findings(project, capsys):
    config = (command_tool("e", []) + command_tool("b", ["{{#if input.x}}"])
              + '[policy]\nallow = ["a b c", "nothing_here"]\ndeny = [1]\n\n[shell]\ntimeout = 0\n')
    write_config(project, config)
    file = str(project / "toolkernel.toml")
    assert [(f.file, f.key) for f in lint(project)] == [
        (file, "policy.allow[0]"), (file, "policy.deny[0]"), (file, "tools.e.command"),
        (file, "tools.b.command[0]"), (file, "shell.timeout"), (file, "policy.allow[1]")]
    assert cli_main(["lint", str(project)]) == 1
    assert "6 problem(s)" in capsys.readouterr().out


def test_lint_checks_the_paths_of_block_conditions_on_both_sides(project):
    argv = ["echo", "{{#if input.flag}}on{{/if}}", "{{#unless input.nope}}x{{/unless}}",
            "{{#if input.flag}}a{{else}}{{ input.other }}{{/if}}", "{{#each input.items}}{{ this }}{{/each}}",
            "{{#each input.lost}}{{ this }}{{/each}}", "{{#with input.obj}}{{ inner }}{{ gone }}{{/with}}"]
    parameters = {"type": "object", "properties": {
        "flag": {"type": "boolean"}, "items": {"type": "array", "items": {"type": "string"}},
        "obj": {"type": "object", "properties": {"inner": {"type": "string"}}}}}
    write_config(project, command_tool("blocks", argv, parameters=parameters))
    found = [(f.key, f.problem.split(",")[0]) for f in lint(project)]
    assert found == [("tools.blocks.command[2]", "uses {{ input.nope }}"),
                     ("tools.blocks.command[3]", "uses {{ input.other }}"),
                     ("tools.blocks.command[5]", "uses {{ input.lost }}"),
                     ("tools.blocks.command[6]", "uses {{ input.obj.gone }}")]


def test_lint_catches_a_name_collision(project):
    write_config(project, command_tool("glob-search", ["true"]))
    (finding,) = lint(project)
    assert finding.key == "tools.glob_search" and "own tool" in finding.problem


def test_lint_shows_control_characters_from_the_file_escaped(project, capsys):
    # A cloned repository's config must not drive the terminal of whoever lints it: clear the
    # screen, set the window title, write the clipboard (OSC 52), turn a line around (U+202E).
    write_config(project, '[shell]\n"\\u001b[2J\\u001b]52;c;SGk=\\u0007" = 1\n\n'
                          '[mcp_servers."\\u001b]0;pwned\\u0007"]\ncommand = "x"\n\n'
                          '[policy]\nallow = ["\\u001b[31mred\\u202e"]\n\n'
                          '[tools."\\u001b[5mblink"]\ncommand = ["echo", "{{ input.\\u001b[8m }}"]\n')
    assert cli_main(["lint", str(project)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "shell.\\x1b[2J\\x1b]52;c;SGk=\\x07: unknown key" in out
    assert 'mcp_servers.\\x1b]0;pwned\\x07' in out and "tools.\\x1b[5mblink" in out


def test_lint_checks_an_untrusted_folder_as_it_would_a_trusted_one(project, tmp_path, monkeypatch, capsys):
    # A cloned repository's config is what a person lints before trusting it: lint reads it
    # whole (servers, command tools), starts nothing, and finds the same before and after.
    from kernel_helpers import without_blanket_trust

    without_blanket_trust(tmp_path, monkeypatch)
    started = project / "started"
    write_config(project, f'[mcp_servers.github]\ncommand = {q(PY)}\n'
                 f'args = ["-c", "open({str(started)!r}, \'w\')"]\n\n'
                 + command_tool("cat", ["cat", "--", "{{ input.file }}"], parameters=STRINGS)
                 + '[tools_in_shell]\nkeep_visible = ["github get-pull", "mcp_github__get_pull", "gitlab get"]\n')
    before = [str(f) for f in lint(project)]
    assert cli_main(["lint", str(project)]) == 1
    out = capsys.readouterr().out
    assert "checked as if trusted, not used by a run until then" in out and "toolkernel trust" in out
    file = str(project / "toolkernel.toml")
    assert before == [f"{file}: tools.cat.command[2]: uses {{{{ input.file }}}}, which no declared parameter fills"
                      " (declare it under parameters.properties)",
                      f'{file}: tools_in_shell.keep_visible[2]: "gitlab get": no MCP server is named \'gitlab\'']
    assert cli_main(["trust", str(project)]) == 0
    capsys.readouterr()
    assert [str(f) for f in lint(project)] == before
    assert cli_main(["lint", str(project)]) == 1
    assert "as if trusted" not in capsys.readouterr().out
    assert not started.exists(), "lint started a server"


# -- end to end in a real kernel -----------------------------------------------------------------

@pytest.fixture
def kernel(project):
    with loaded_kernel(project) as k:
        yield k


def test_a_tools_cell_in_a_real_kernel_calls_a_command_tool_and_an_interrupt_kills_its_tree(project, kernel):
    pid_file = project / "grandchild.pid"
    slow = ("import subprocess, time\n"
            f"g = subprocess.Popen(['sleep', '300']); open({str(pid_file)!r}, 'w').write(str(g.pid))\n"
            "time.sleep(300)")
    write_config(project, command_tool("words", [PY, "-c", ARGV_PRINTER, "{{ input.a }}"],
                                       parameters=STRINGS, read_only=True)
                 + command_tool("slow", [PY, "-c", slow], read_only=True))
    run = kernel.execute_ok("%%tools\ntools words a='one; two' | jq -c 'length'\n")
    assert run.stdout == "1\n"
    kernel.execute_ok("%%tools --out words\ntools words a='$(x)'\n")
    assert kernel.value("words") == ["$(x)"]
    assert "no problems found" in kernel.execute_ok("%tools lint").stdout

    msg_id = kernel.start("%%tools\ntools slow\n")
    _wait_for_text(pid_file)
    kernel.manager.interrupt_kernel()
    run = kernel.finish(msg_id, timeout=120)
    assert run.reply["content"]["status"] == "error"
    assert wait_dead(int(pid_file.read_text())), "the command tool's grandchild outlived the interrupt"
    assert kernel.value("1 + 1") == 2


def _wait_for_text(path: Path, within: float = 120) -> None:
    import time

    deadline = time.monotonic() + within
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} was not written"
        time.sleep(0.1)


def test_hooks_match_command_tools_by_qualified_name_and_see_the_input(project):
    from toolkernel._approval._hooks import HookOutcome

    marker = project / "ran"
    seen = []
    write_config(project, command_tool("guarded", ["touch", str(marker)], read_only=True))
    session = Session(project)

    @session.hooks.before_call("tool__guarded")
    def refuse(call):
        seen.append((call.qualified_name, call.command, dict(call.input)))
        return HookOutcome("deny", "not today")

    result, sink = run_script(project, command_tool("guarded", ["touch", str(marker)], read_only=True),
                              "tools guarded\n", session)
    assert error_lines(sink.stderr_text)[0]["code"] == "denied" and not marker.exists()
    assert seen == [("tool__guarded", "tools guarded", {})]
