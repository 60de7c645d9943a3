"""`%%tools`, `%tools` and the Python API in a real IPython kernel (jupyter_client),
with real MCP servers as subprocesses; and `%load_ext toolkernel` in a plain IPython.
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
    FIXTURE_ALLOW, SEED_SCRIPT, Kernel, error_lines, fixture_toml, github_toml, isolated_env, loaded_kernel,
    policy_toml, write_config,
)

pytestmark = pytest.mark.timeout(300)


SEED_LINES = [
    '{"number":101,"title":"Add rate limiting to /search","mergeable":true}',
    '{"number":103,"title":"Fix pagination off-by-one","mergeable":false}',
    '{"number":104,"title":"Bump httpx to 0.27","mergeable":true}',
]


def base_config() -> str:
    return (github_toml() + fixture_toml("images") + fixture_toml("slow") + fixture_toml("crash")
            + policy_toml(allow=FIXTURE_ALLOW))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("magic")
    project = root / "project"
    project.mkdir()
    write_config(project, base_config())
    return project


@pytest.fixture(scope="module")
def kernel(workdir):
    with loaded_kernel(workdir) as k:
        yield k


@pytest.fixture
def config(workdir):
    """Rewrite toolkernel.toml for one test; the base config comes back afterwards."""
    yield lambda text: write_config(workdir, text)
    write_config(workdir, base_config())


def cell(script: str, flags: str = "") -> str:
    return f"%%tools {flags}\n{script}"


# -- %%tools --------------------------------------------------------------------------


def test_output_streams_into_the_cell_as_it_comes(kernel):
    run = kernel.execute_ok(cell("echo first; sleep 1; echo second"))
    chunks = [m["content"]["text"] for m in run.of_type("stream") if m["content"]["name"] == "stdout"]
    assert run.stdout == "first\nsecond\n"
    assert len(chunks) >= 2  # not one block at the end
    assert "first" in chunks[0] and "second" not in chunks[0]


def test_seed_example_prints_its_three_lines(kernel):
    run = kernel.execute_ok(cell(SEED_SCRIPT))
    assert run.stdout.splitlines() == SEED_LINES


def test_non_zero_exit_raises_so_run_all_stops(kernel):
    # An "error" reply is what makes a frontend's Run All stop. Whether ipykernel also
    # aborts a request already queued behind it depends on a race inside ipykernel
    # (its stop_on_error window), so this test does not assert that part.
    first = kernel.execute(cell("echo partial; tools github get-pull repo=acme/api number=999"))
    assert first.reply["content"]["status"] == "error"
    assert first.error["ename"] == "ScriptFailed"
    assert "exited with code 1" in first.error["evalue"]
    assert first.stdout == "partial\n"
    assert error_lines(first.stderr)[0]["code"] == "tool_error"


def test_no_raise_error_keeps_the_cell_ok(kernel):
    run = kernel.execute(cell("echo partial; exit 3", "--no-raise-error"))
    assert run.status == "ok"
    assert run.stdout == "partial\n"


def test_out_keeps_json_as_a_value_and_text_as_str(kernel):
    kernel.execute_ok(cell("tools github list-pulls repo=acme/web", "--out prs"))
    assert kernel.value("[p['number'] for p in prs]") == [12, 11]
    kernel.execute_ok(cell("tools github get-pull repo=acme/web number=12 | jq -r .title", "--out title"))
    assert kernel.value("[type(title).__name__, title]") == ["str", "Dark mode\n"]


def test_read_only_mount_refuses_writes(kernel, workdir):
    run = kernel.execute(cell("echo data > written.txt", "--read-only"))
    assert run.status == "error"
    assert not (workdir / "written.txt").exists()
    kernel.execute_ok(cell("echo data > written.txt && cat written.txt"))
    assert (workdir / "written.txt").read_text() == "data\n"


def test_images_are_saved_and_shown_inline(kernel, workdir):
    run = kernel.execute_ok(cell("tools images red-square size=4"))
    assert "a red square, 4x4 pixels" in run.stdout
    saved = sorted((workdir / "tool-images").glob("images-red*.png"))
    assert saved and saved[-1].read_bytes().startswith(b"\x89PNG")
    # Where it went is a note, not an error: in the cell's output, not its red stderr
    assert f"tools: image saved to {saved[-1].relative_to(workdir)}" in run.stdout and run.stderr == ""
    pictures = [d for d in run.displays() if "image/png" in d.get("data", {})]
    assert len(pictures) == 1


def test_progress_of_a_slow_call_is_shown(kernel):
    run = kernel.execute_ok(cell("tools slow wait steps=3 step_seconds=0.3"))
    assert run.stdout == "waited 3 steps\n"
    shown = [d["data"]["text/plain"] for d in run.displays() if "text/plain" in d.get("data", {})]
    assert any("step" in text and "/3" in text for text in shown), shown
    assert run.of_type("update_display_data")


def test_interrupt_stops_the_script_and_keeps_earlier_output(kernel):
    msg_id = kernel.start(cell("echo before; sleep 30; echo after"))
    kernel.messages_until(msg_id, lambda seen: any(
        m["msg_type"] == "stream" and "before" in m["content"]["text"] for m in seen), timeout=60)
    started = time.monotonic()
    kernel.manager.interrupt_kernel()
    run = kernel.finish(msg_id, timeout=60)
    assert time.monotonic() - started < 25  # generous: far less than the 30 s sleep
    assert "after" not in run.stdout
    assert run.reply["content"]["status"] == "error"
    assert kernel.value("1 + 1") == 2
    assert kernel.execute_ok(cell("echo again")).stdout == "again\n"


def test_bad_config_gives_one_clear_error_and_the_kernel_lives(kernel, config, workdir):
    # (a wrong server entry disables only that server: test_firsthour)
    path = config(base_config() + "[shell]\ntimeout = 0\n")
    run = kernel.execute(cell("tools --help"))
    assert run.status == "error"
    message = run.error["evalue"]
    assert str(path) in message and "shell.timeout" in message
    assert run.stdout == ""
    config(base_config())
    assert "github (4 tools)" in kernel.execute_ok(cell("tools --help")).stdout


def test_a_server_added_between_cells_shows_up(kernel, config):
    assert "structured" not in kernel.execute_ok(cell("tools --help")).stdout
    config(base_config() + fixture_toml("structured"))
    assert "structured (6 tools)" in kernel.execute_ok(cell("tools --help")).stdout


def test_a_crashed_server_is_unavailable_and_comes_back(kernel):
    run = kernel.execute(cell("tools crash crash", "--no-raise-error"))
    error = error_lines(run.stderr)[0]
    assert error["code"] == "unavailable" and error["retryable"] is True
    assert kernel.execute_ok(cell("tools crash echo text=back")).stdout == "back\n"


def test_broken_server_schema_and_deep_input_are_json_lines_not_tracebacks(kernel, config):
    config(fixture_toml("badschema") + policy_toml(allow=["mcp_badschema"]))
    deep = "[" * 100_000 + "]" * 100_000
    script = f"tools badschema bad_type n=1; tools badschema bad_ref n=1; tools badschema good '{deep}'"
    run = kernel.execute(cell(script, "--no-raise-error"))
    assert run.status == "ok" and run.error is None, (run.error, run.stderr[:2000])
    assert [e["code"] for e in error_lines(run.stderr)] == ["tool_error", "tool_error", "invalid_input"]
    assert "Traceback" not in run.stderr and len(run.stderr.splitlines()) == 3, run.stderr
    line = kernel.execute("%tools badschema bad_pattern s=x")
    assert line.error["ename"] == "CallFailed" and "'(unclosed' is not a 'regex'" in line.error["evalue"]
    assert "Traceback" not in line.stderr


# -- %tools and the Python API ---------------------------------------------------------


@pytest.mark.slow
def test_a_tools_line_splits_as_shlex_does():
    import random
    import shlex

    from toolkernel._frontends._magic import _words

    def split(how, line):
        try:
            return how(line)
        except ValueError:
            return "unbalanced"

    lines = ["github get-pull repo=acme/api number=101", "  a\tb\r\nc ", "", "a 'b c' d", 'x="1 2"',
             "a\\ b", "a\x0bb", "a\xa0b", "a\u2003b", "a #b", "'open", "é ü"]
    chars = "ab =#'\"\\ \t\n\r\x0b\x0c\xa0\u2003é"
    rng = random.Random(7)
    lines += ["".join(rng.choice(chars) for _ in range(rng.randint(0, 10))) for _ in range(20000)]
    for line in lines:
        assert split(_words, line) == split(shlex.split, line), repr(line)



def test_line_magic_returns_the_value(kernel):
    kernel.execute_ok("prs = %tools github list-pulls repo=acme/api")
    assert kernel.value("[type(prs).__name__, [p['number'] for p in prs]]") == ["list", [101, 102, 103, 104]]


def test_python_call_returns_the_same_value(kernel):
    kernel.execute_ok("import toolkernel\nsame = toolkernel.call('github', 'list-pulls', repo='acme/api')\n"
                      "by_magic = %tools github list-pulls repo=acme/api")
    assert kernel.value("same == by_magic") is True


def test_line_magic_failure_raises_with_the_error_line(kernel):
    run = kernel.execute("%tools github get-pull repo=acme/api number=999")
    assert run.status == "error"
    assert json.loads(run.error["evalue"])["error"]["code"] == "tool_error"


def test_line_magic_failure_carries_its_error_code_like_the_python_api(kernel):
    kernel.execute_ok(
        "from toolkernel._frontends._magic import CallFailed\n"
        "codes = []\n"
        "for line in ('github get-pull repo=acme/api number=999', 'githb --help', 'github get-pull number=x'):\n"
        "    try:\n"
        "        get_ipython().run_line_magic('tools', line)\n"
        "    except CallFailed as exc:\n"
        "        codes.append(exc.code)\n"
    )
    assert kernel.value("codes") == ["tool_error", "unknown_command", "invalid_input"]


# -- %load_ext's background warm-up --------------------------------------------------------


@pytest.mark.slow
def test_the_warm_up_waits_until_no_cell_runs(tmp_path):
    """jsonschema is seconds of imports under the GIL: the warm-up starts only once the kernel
    is idle, never beside a running cell (a first `tools --help` lost a third of its speed)."""
    project = tmp_path / "project"
    project.mkdir()
    # Loaded in the busy cell itself: a pause between a `%load_ext` cell and the next one
    # (a loaded machine) would rightly start the warm-up before the cell under test.
    k = Kernel(project, {**isolated_env(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        busy = k.execute_ok(
            "import sys, time\n"
            "get_ipython().run_line_magic('load_ext', 'toolkernel')\n"
            "get_ipython().run_cell_magic('tools', '', 'tools --help >/dev/null')\n"
            "deadline = time.monotonic() + 10  # the old warm-up had imported it within seconds\n"
            "while 'jsonschema' not in sys.modules and time.monotonic() < deadline:\n"
            "    time.sleep(0.1)\n"
            "print('jsonschema' in sys.modules)\n"
        )
        assert busy.stdout.split() == ["False"]
        deadline = time.monotonic() + 120
        while not k.value("'jsonschema' in sys.modules") and time.monotonic() < deadline:
            time.sleep(2)  # the kernel idles between these short cells (4x the settle time): the warm-up runs
        assert k.value("'jsonschema' in sys.modules")
        assert "hi" in k.execute_ok("%%tools\necho hi > a.txt; tools read-file path=a.txt").stdout
    finally:
        k.shutdown()


# -- a plain IPython, no kernel --------------------------------------------------------------


@pytest.mark.slow
def test_load_ext_in_a_plain_ipython_terminal(workdir):
    code = (
        "%load_ext toolkernel\n"
        "prs = %tools github list-pulls repo=acme/web\n"
        "print('numbers', [p['number'] for p in prs])\n"
        "get_ipython().run_cell_magic('tools', '', 'tools github list-pulls repo=acme/api | jq length')\n"
    )
    env = {**os.environ, **isolated_env(workdir.parent)}
    done = subprocess.run([sys.executable, "-m", "IPython", "--quick", "--no-banner", "-c", code],
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "numbers [12, 11]" in done.stdout
    assert "\n4\n" in "\n" + done.stdout
