"""Big outputs through real Bashkit runs: whole, or failing loudly with the cap named."""

from __future__ import annotations

import json

import pytest

from kernel_helpers import RecordingSink, isolated_env, policy_toml, write_config
from toolkernel._runners._caps import builtin_cap
from toolkernel import tool
from toolkernel._session import Session

pytestmark = pytest.mark.timeout(600)

LINE = "x" * 99 + "\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    for key, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.fixture
def session(project):
    s = Session(project)
    yield s
    s.close()


def run(session, script):
    sink = RecordingSink()
    return session.run_script(script, sink), sink


def test_a_2_mb_output_is_saved_whole(session, project):
    text = "".join(f"{i:09d} " + LINE for i in range(20_000))  # 2.2 MB: above Standard's 1 MiB cap
    (project / "two.txt").write_text(text)
    result, sink = run(session, "cat two.txt")
    assert result.exit_code == 0, sink.stderr_text
    assert (project / result.saved_output).read_text() == text
    assert "the whole output" in sink.stdout_text and sink.stdout_text.endswith(text[-1000:])


@pytest.mark.slow
def test_a_64_mb_output_fails_loudly_naming_the_cap(session, project):
    (project / "big.txt").write_text(LINE * 640_000)
    result, sink = run(session, "cat big.txt | cat | wc -c\necho after")
    assert result.exit_code != 0
    last = sink.stderr_text.strip().splitlines()[-1]
    assert "Bashkit limit" in last and "--save" in last


def test_an_output_past_the_10_mib_cap_ends_non_zero_and_says_the_file_is_not_whole(session, project):
    (project / "m12.txt").write_text(LINE * 120_000)
    result, sink = run(session, "cat m12.txt")
    assert result.exit_code != 0
    assert "10 MiB" in sink.stderr_text.strip().splitlines()[-1]
    assert "the rest is lost" in sink.stdout_text and "the whole output" not in sink.stdout_text


@pytest.mark.slow
def test_jq_reads_a_5_mb_document(session, project):
    items = ["y" * 98] * 50_000
    (project / "doc.json").write_text(json.dumps(items))
    result, sink = run(session, "jq -c '.[]' doc.json | wc -l\njq . doc.json | wc -c")
    assert result.exit_code == 0, sink.stderr_text
    lines, chars = sink.stdout_text.split()
    assert int(lines) == 50_000
    assert int(chars) == len(json.dumps(items, indent=2)) + 1


def test_seq_past_its_line_cap_ends_the_script_non_zero_even_in_a_pipe(session):
    result, sink = run(session, "seq 1 300000 | wc -l")
    assert result.exit_code != 0
    last = sink.stderr_text.strip().splitlines()[-1]
    assert "`seq`" in last and "seq 100001 200000" in last


def test_a_pipe_within_the_caps_still_exits_zero(session, project):
    (project / "ok.txt").write_text(LINE * 50_000)
    result, sink = run(session, "seq 1 90000 | wc -l\ncat ok.txt | wc -l")
    assert result.exit_code == 0, sink.stderr_text
    assert sink.stdout_text.split() == ["90000", "50000"]


@pytest.mark.parametrize("note", ["seq: line limit (100000) exceeded; output truncated",
                                  "jq: output limit exceeded (1048576 bytes)",
                                  "find: output size limit exceeded"])
def test_cap_notes_are_recognised(note):
    assert builtin_cap(f"other\n{note}\n") == note.split(":")[0]


def test_ordinary_errors_are_not_caps():
    assert builtin_cap("jq: error: cannot index string\ncat: x: No such file or directory\n") is None


# -- tools ... --save PATH ---------------------------------------------------------

BIG = 256 * 1024 * 1024


@tool("big_result", description="A result of `size` characters.", kind="read",
      input_schema={"type": "object", "properties": {"size": {"type": "integer"}}})
def big_result(arguments, ctx):
    return "z" * (arguments["size"] - 1) + "\n"


@pytest.fixture
def saving(project):
    write_config(project, policy_toml(allow=["write-file"]))
    s = Session(project)
    s.register_tools([big_result])
    yield s
    s.close()


@pytest.mark.slow
def test_save_writes_a_256_mb_result_whole_without_a_pipe(saving, project):
    result, sink = run(saving, f"tools big-result size={BIG} --save out/big.txt\necho done")
    assert result.exit_code == 0, sink.stderr_text
    saved = project / "out" / "big.txt"
    assert saved.stat().st_size == BIG
    with saved.open("rb") as f:
        f.seek(BIG - 2)
        assert f.read() == b"z\n"
    assert "big.txt" in sink.stdout_text and sink.stdout_text.rstrip().endswith("done")
    assert not list(saved.parent.glob(".*"))  # no temp file left: the write was atomic


def test_save_outside_the_workspace_is_not_written_unasked(session, project, tmp_path):
    session.register_tools([big_result])
    target = tmp_path / "elsewhere.txt"
    result, sink = run(session, f"tools big-result size=10 --save {target}")
    assert result.exit_code != 0
    assert not target.exists()
    assert "write-file" in sink.stderr_text


def test_save_without_a_path_is_a_usage_error(session):
    session.register_tools([big_result])
    result, sink = run(session, "tools big-result size=10 --save")
    assert result.exit_code != 0
    assert "--save needs a file path" in sink.stderr_text


# -- [shell] max_result_mb: a result too large for the shell goes to a file ----------------


@pytest.fixture
def capped(project):
    write_config(project, "[shell]\nmax_result_mb = 1\n")
    s = Session(project)
    s.register_tools([big_result])
    yield s
    s.close()


def test_a_result_above_max_result_mb_is_saved_whole_and_stops_the_script(capped, project):
    result, sink = run(capped, "tools big-result size=1500000 | wc -c\necho after")
    assert result.exit_code != 0
    assert "after" not in sink.stdout_text  # nothing ran on the data that never came
    error = json.loads(sink.stderr_text.strip().splitlines()[-1])["error"]
    assert "max_result_mb = 1" in error["message"], error
    assert result.run_report.stopped.reason == "result_too_large"
    saved = project / result.run_report.stopped.shown["saved_to"]
    assert saved.read_text() == "z" * 1_499_999 + "\n" and str(saved.relative_to(project)) in error["message"]


def test_a_result_within_max_result_mb_reaches_the_pipe_whole(capped):
    result, sink = run(capped, "tools big-result size=900000 | wc -c\necho after")
    assert result.exit_code == 0, sink.stderr_text
    assert sink.stdout_text.split() == ["900000", "after"]


# -- a redirect into a file: written once (issue 44) ------------------------------------------


def written_by_this_process() -> int:
    """Bytes this process has passed to write-like calls (`wchar`: write, copy_file_range...)."""
    for line in open("/proc/self/io"):
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


def bytes_written(session, script: str) -> int:
    before = written_by_this_process()
    result, sink = run(session, script)
    assert result.exit_code == 0, sink.stderr_text
    return written_by_this_process() - before


@pytest.mark.parametrize("size", [250_000, 1_000_000])
def test_cat_into_a_file_writes_it_once_whatever_its_size(session, project, size):
    # Streamed, Bashkit (0.20.1) appended each 4 KiB piece of `cat`'s output by writing the
    # whole file anew: 1 MB into a file wrote 124 MB (5.6 s for 2 MB). A pipe writes nothing.
    text = LINE * (size // 100)
    (project / "big.txt").write_text(text)
    written = bytes_written(session, "cat big.txt > copy.txt")
    assert (project / "copy.txt").read_text() == text
    assert written < 3 * size, f"{written:,} bytes written for a {size:,}-byte file"


@pytest.mark.parametrize("script", ["tools big-result size=1000000 > copy.txt",
                                    "grep z <(tools big-result size=1000000) > copy.txt",
                                    "for i in 1 2; do tools big-result size=500000; done > copy.txt",
                                    "for i in 1; do tools big-result size=1000000 >> copy.txt; done"])
def test_a_result_into_a_file_is_written_once(session, project, script):
    session.register_tools([big_result])
    written = bytes_written(session, script)
    assert (project / "copy.txt").stat().st_size == 1_000_000
    assert written < 3_000_000, f"{written:,} bytes written for a 1 MB result"


@pytest.mark.parametrize("script", ["tools big-result size=12000000 > copy.txt\necho after",
                                    "for i in 1; do tools big-result size=12000000 > copy.txt; done\necho after"])
def test_a_result_too_large_to_hold_whole_for_a_redirect_is_saved_and_the_script_stops(session, project, script):
    # Bashkit holds a result going to a file whole, and fails past its 32 MB budget with the
    # result lost; in a loop (where `tools` was a shell function) it cut it at 10 MiB, exit 0.
    session.register_tools([big_result])
    result, sink = run(session, script)
    assert result.exit_code != 0 and "after" not in sink.stdout_text
    error = json.loads(sink.stderr_text.strip().splitlines()[-1])["error"]
    assert "--save PATH" in error["message"] and "max_result_mb" not in error["message"], error
    saved = project / result.run_report.stopped.shown["saved_to"]
    assert saved.stat().st_size == 12_000_000
    assert not (project / "copy.txt").exists() or (project / "copy.txt").stat().st_size == 0
