"""What a person reads, through a real kernel: `jq=` / `--jq` on direct calls (issue 37
item 8), and the small messages of item 6 and "one voice"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_helpers import github_toml, loaded_kernel, policy_toml, write_config


def base_config() -> str:
    return github_toml() + policy_toml()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    project = tmp_path_factory.mktemp("voice") / "project"
    project.mkdir()
    write_config(project, base_config())
    return project


@pytest.fixture(scope="module")
def kernel(workdir):
    with loaded_kernel(workdir) as k:
        k.execute_ok("import toolkernel")
        yield k


@pytest.fixture
def config(workdir):
    """Rewrite toolkernel.toml for one test; the base config comes back afterwards."""
    yield lambda text: write_config(workdir, text)
    write_config(workdir, base_config())


# -- jq (item 8) ---------------------------------------------------------------------------


def test_call_with_jq_gives_every_output_as_python_values(kernel):
    kernel.execute_ok(
        "numbers = toolkernel.call('github', 'list-pulls', repo='acme/api', jq='.[] | .number')\n"
        "one = toolkernel.call('github', 'list-pulls', repo='acme/api', jq='length')\n"
        "none = toolkernel.call('github', 'list-pulls', repo='acme/api', jq='.[] | select(.number > 999)')\n"
        "first = toolkernel.call('github', 'get-pull', repo='acme/api', number=101, jq='{number, title}')")
    assert kernel.value("numbers") == [101, 102, 103, 104]
    assert kernel.value("one") == 4  # one output: that value, not a list of one
    assert kernel.value("none") == []
    assert kernel.value("first") == {"number": 101, "title": "Add rate limiting to /search"}


def test_tools_line_with_jq_returns_the_filtered_value(kernel):
    kernel.execute_ok("titles = %tools github list-pulls repo=acme/api --jq '[.[] | .title] | sort | .[0]'\n"
                      "nums = %tools github list-pulls --jq=.[].number repo=acme/api")
    assert kernel.value("titles") == "Add rate limiting to /search"
    assert kernel.value("nums") == [101, 102, 103, 104]


def test_a_bad_filter_is_one_line_and_makes_no_call(kernel):
    run = kernel.execute("toolkernel.call('github', 'create-issue', repo='acme/api', title='x', jq='.[ | x')")
    assert run.status == "error"
    assert run.error["ename"] == "InvalidInput"
    assert run.error["evalue"].startswith("jq: syntax error") and "\n" not in run.error["evalue"]
    # create-issue asks a person: no question came, so no call was made
    assert "approv" not in run.stdout + run.stderr
    line = kernel.execute("%tools github list-pulls repo=acme/api --jq '.[ | x'")
    assert line.status == "error"  # IPython shows a UsageError as one stderr line
    assert line.stderr.startswith("UsageError: %tools --jq: jq: syntax error") and line.stderr.count("\n") == 1
    for words in ("--jq", "--jq . --jq ."):
        run = kernel.execute(f"%tools github list-pulls repo=acme/api {words}")
        assert run.status == "error" and run.stderr.startswith("UsageError: %tools: --jq takes one FILTER"), words


def test_a_filter_that_fails_on_the_result_is_one_coded_line(kernel):
    run = kernel.execute("toolkernel.call('github', 'list-pulls', repo='acme/api', jq='.number')")
    assert run.status == "error" and run.error["ename"] == "InvalidInput"
    assert run.error["evalue"] == 'jq: Cannot index array with string ("number")'
    line = kernel.execute("%tools github list-pulls repo=acme/api --jq .number")
    assert line.status == "error"
    assert json.loads(line.error["evalue"])["error"] == {
        "code": "invalid_input", "message": 'jq: Cannot index array with string ("number")', "retryable": False}
    assert len(line.error["traceback"]) == 1
