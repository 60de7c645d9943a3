"""A long text result of an MCP server, called from a script, stays in a file and reaches the
script in pieces (toolkernel/_providers/_spool.py, _longtext.py): whole to a pipe, a file,
`--save` and the saved output past max_result_mb; whole as a str to a hook, and in a loop;
and the kernel's peak memory stays below its size. Long structured content is written to a
file as the indented JSON `tools` prints (_long_json.py): the same text as the whole parse
gives, values to a hook and a direct call, and a peak below twice its size."""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_helpers import RecordingSink, fixture_toml, isolated_env, policy_toml, write_config
from toolkernel._session import Session

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("big_fixture", REPO / "tests" / "servers" / "big.py")
big = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(big)
ALLOW = ["big blob", "big rows", "big listing", "big pictured-rows", "big record", "big fail-long", "big ping",
         "write-file"]


def blob(megabytes: float) -> str:
    text = big.blob_text(megabytes)
    return text if text.endswith("\n") else text + "\n"  # a text result ends its line


def start(project: Path, monkeypatch, extra: str = "") -> Session:
    for key, value in isolated_env(project.parent).items():
        monkeypatch.setenv(key, value)
    write_config(project, fixture_toml("big") + policy_toml(allow=ALLOW) + extra)
    return Session(project)


@pytest.fixture
def project(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.fixture
def session(project, monkeypatch):
    s = start(project, monkeypatch)
    yield s
    s.close()


def run(session: Session, script: str):
    sink = RecordingSink()
    return session.run_script(script, sink), sink


@pytest.mark.slow
def test_a_long_text_reaches_a_file_a_pipe_and_save_whole(session, project):
    # (Not `> out.txt`: Bashkit's redirect of a live command's output to a file takes time
    # quadratic in its size, whatever the tool: 3.5 s for 2 MB, 13.5 s for 4 MB.)
    result, sink = run(session, "tools big blob megabytes=3 | wc -c\n"
                                "tools big blob megabytes=3 | tail -c 20\n"
                                "tools big blob megabytes=3 --save saved/blob.txt")
    assert result.exit_code == 0, sink.stderr_text
    expected = blob(3)
    assert (project / "saved" / "blob.txt").read_text(encoding="utf-8") == expected
    count, tail = sink.stdout_text.split("\n", 1)
    assert count.strip() == str(len(expected.encode()))
    assert tail.startswith(expected.encode()[-20:].decode())


@pytest.mark.slow
def test_in_a_loop_each_long_text_arrives_whole(session):
    result, sink = run(session, "for i in 1 2; do tools big blob megabytes=2 | wc -c; done")
    assert result.exit_code == 0, sink.stderr_text
    assert sink.stdout_text.split() == [str(len(blob(2).encode()))] * 2


@pytest.mark.slow
def test_a_hook_reads_and_changes_the_whole_text(session):
    seen = []

    @session.hooks.after_call("big blob")
    def shorten(call, result):
        seen.append(type(result.texts[0]))
        result.texts = [result.texts[0][:10]]
        return result

    result, sink = run(session, "tools big blob megabytes=2")
    assert result.exit_code == 0, sink.stderr_text
    assert seen == [str]
    assert sink.stdout_text == blob(2)[:10] + "\n"


@pytest.mark.slow
def test_structured_rows_beside_a_long_text_print_as_json(session):
    result, sink = run(session, "tools big rows megabytes=2")
    assert result.exit_code == 0, sink.stderr_text
    assert json.loads((session.workdir / result.saved_output).read_text()) == big.rows(2)


def printed(value) -> str:
    """What `tools` prints for structured content: the whole parsed, then written indented."""
    from toolkernel._command._render import to_json

    return to_json(value, plain=True) + "\n"


@pytest.fixture
def walked(monkeypatch):
    """The structured contents written to a file as their reply was parsed."""
    from toolkernel._providers._mcp import _long_json

    made = []
    indented = _long_json.indented
    monkeypatch.setattr(_long_json, "indented", lambda *a: made.append(indented(*a)) or made[-1])
    return made


@pytest.mark.slow
def test_long_structured_rows_print_as_the_whole_parse_would(session, project, walked):
    result, sink = run(session, "tools big rows megabytes=2 | wc -c\n"
                                "tools big rows megabytes=2 --save saved/rows.json\n"
                                "tools big rows megabytes=2 | tail -c 50")
    assert result.exit_code == 0, sink.stderr_text
    expected = printed(big.rows(2))
    count, created, tail = sink.stdout_text.split("\n", 2)
    assert count.strip() == str(len(expected.encode()))
    assert created.startswith("Created saved/rows.json") and tail == expected[-50:]
    assert (project / "saved" / "rows.json").read_text(encoding="utf-8") == expected
    assert len(walked) == 3


@pytest.mark.slow
def test_a_long_list_is_shown_without_its_wrapper_and_checked_against_its_schema(session, walked):
    result, sink = run(session, "tools big listing megabytes=2 | sha256sum")
    assert result.exit_code == 0, sink.stderr_text
    expected = printed(big.rows(2)["rows"])
    assert sink.stdout_text.split()[0] == hashlib.sha256(expected.encode()).hexdigest()
    assert walked and walked[0][0].wrapped


@pytest.mark.slow
def test_long_rows_with_a_picture_beside_them_print_and_save_it(session, project, walked):
    result, sink = run(session, "tools big pictured-rows megabytes=2 | sha256sum")
    assert result.exit_code == 0, sink.stderr_text
    assert sink.stdout_text.split()[0] == hashlib.sha256(printed(big.rows(2)).encode()).hexdigest()
    (picture,) = (project / "tool-images").iterdir()
    assert picture.suffix == ".png" and len(walked) == 1


@pytest.mark.slow
def test_a_direct_call_and_a_hook_get_long_structured_content_as_values(session, walked):
    from toolkernel._frontends._direct import call_argv

    seen = []

    @session.hooks.after_call("big rows")
    def count(call, result):
        seen.append(type(result.structured))
        result.structured = {"count": len(result.structured["rows"])}
        return result

    result, sink = run(session, "tools big rows megabytes=2")
    assert result.exit_code == 0, sink.stderr_text
    assert seen == [dict] and json.loads(sink.stdout_text) == {"count": len(big.rows(2)["rows"])}
    assert call_argv(session, ["big", "listing", "megabytes=2"]) == big.rows(2)["rows"]
    assert len(walked) == 2


@pytest.mark.slow
def test_a_long_text_inside_structured_content_prints_as_json(session):
    # Written to a file with the text a piece at a time (`_long_json.with_texts`), as the whole prints.
    from toolkernel._frontends._direct import call_argv

    result, sink = run(session, "tools big record megabytes=2")
    assert result.exit_code == 0, sink.stderr_text
    assert (session.workdir / result.saved_output).read_text() == printed(big.record(2))
    assert call_argv(session, ["big", "record", "megabytes=2"]) == big.record(2)


@pytest.mark.slow
def test_a_long_error_is_masked_and_shown(project, monkeypatch):
    token = "tok-0123456789"
    session = start(project, monkeypatch)
    write_config(project, fixture_toml("big", extra=f'env = {{ TOKEN = "{token}" }}') + policy_toml(allow=ALLOW))
    try:
        result, sink = run(session, f"tools big fail-long megabytes=2 echo={token}")
    finally:
        session.close()
    assert result.exit_code == 1
    error = json.loads(sink.stderr_text.strip().splitlines()[-1])["error"]
    assert error["code"] == "tool_error"
    assert token not in sink.stderr_text
    assert "***0123456789abcdefghij" in error["message"]
    assert len(error["message"]) > 2_000_000


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["blob", "rows"])
def test_past_max_result_mb_the_long_result_is_saved_whole_and_the_script_stops(project, monkeypatch, tool):
    session = start(project, monkeypatch, "[shell]\nmax_result_mb = 2\n")
    try:
        result, sink = run(session, f"tools big {tool} megabytes=3 | wc -c\necho after")
    finally:
        session.close()
    assert result.exit_code != 0
    assert "after" not in sink.stdout_text
    (saved,) = (project / ".toolkernel" / "outputs").glob("result-*")
    assert saved.read_text(encoding="utf-8") == (blob(3) if tool == "blob" else printed(big.rows(3)))
    assert "max_result_mb" in sink.stderr_text


CHILD = """
import gc, json, sys
from pathlib import Path
from toolkernel._session import Session

class Quiet:
    def stdout(self, t): pass
    def stderr(self, t): pass
    def image(self, p): pass
    def progress(self, *a): pass

def status_mb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024

work = Path(sys.argv[1])
session = Session(work)
session.run_script("tools big ping; tools big blob megabytes=0.01 > /dev/null", Quiet())
gc.collect()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from here
before = status_mb("VmRSS")
result = session.run_script("tools big blob megabytes=8", Quiet())  # to the cell (and its saved file)
print(json.dumps({"rise": status_mb("VmHWM") - before, "exit": result.exit_code}))
"""


@pytest.fixture(params=["stdio", "http"])
def big_toml(request, project):
    """The config of the big fixture, over stdio or over streamable HTTP (`_mcp._http`): a long
    reply is taken in as it arrives either way. (The older SSE transport is the SDK's `sse_client`,
    which takes no message over 1 MiB: tests/test_http_lane.py.)"""
    if request.param == "stdio":
        yield fixture_toml("big")
        return
    from test_mcp import free_port, start_http_server

    port = free_port()
    process = start_http_server(port, f"--{request.param}", script="big.py")
    yield f'[mcp_servers.big]\nurl = "http://127.0.0.1:{port}/mcp"\n\n'
    process.kill()
    process.wait()


def peak_in_a_child(project: Path, tmp_path: Path, toml: str, tool: str) -> dict:
    """The kernel's peak memory above where it was, and the exit code, for `tools big TOOL megabytes=8`
    printed to the cell, measured in a process of its own."""
    write_config(project, toml + policy_toml(allow=ALLOW))
    env = {**os.environ, "PYTHONPATH": str(REPO), **isolated_env(tmp_path)}
    child = CHILD.replace("big blob", f"big {tool}")
    out = subprocess.run([sys.executable, "-c", child, str(project)], env=env, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["rows", "listing", "record"])
def test_long_structured_rows_peak_below_their_size_in_the_kernel(project, tmp_path, big_toml, tool):
    # Parsed whole, 8 MB of rows peaked at 5.5x: Python values of 3.5x, then the JSON as bytes and
    # a str. The list (a text block per row beside it, an output schema to check) at 9.3x; with its
    # skeleton held in memory, not walked mapped, at about 2x. Over HTTP, read by the SDK: 31x.
    # A long text inside structured content (`record`), made whole to be printed: 7.2x.
    got = peak_in_a_child(project, tmp_path, big_toml, tool)
    value = {"rows": big.rows(8), "listing": big.rows(8)["rows"], "record": big.record(8)}[tool]
    size = len(printed(value).encode()) / 2**20
    assert got["exit"] == 0
    assert got["rise"] < size, got  # the target is 2x; it is about 0.3-0.5x


@pytest.mark.slow
def test_a_long_text_peaks_below_its_size_in_the_kernel(project, tmp_path, big_toml):
    # Read whole, 8 MB of text (twice in the reply: text and {"result": text}) peaked at 10x; over
    # HTTP, read by the SDK, at 25x.
    got = peak_in_a_child(project, tmp_path, big_toml, "blob")
    size = len(blob(8).encode()) / 2**20
    assert got["exit"] == 0
    assert got["rise"] < size, got  # the target is 2x; it is about 0.4x


@pytest.mark.slow
def test_a_reply_past_the_line_cap_fails_its_call_and_the_server_serves_on(session, monkeypatch):
    import toolkernel._providers._mcp._spool as spool_module

    monkeypatch.setattr(spool_module, "LINE_CAP", 3 << 20)
    result, sink = run(session, "tools big blob megabytes=4; echo \"exit $?\"; tools big ping")
    assert "the server's reply was not taken in: it is longer than 0 GiB" in sink.stderr_text
    assert sink.stdout_text.split() == ["exit", "1", "pong"]


@pytest.mark.slow
def test_a_direct_call_gives_the_long_text_as_a_str(session, monkeypatch):
    from toolkernel._frontends._direct import call_argv
    from toolkernel._providers._mcp._spool import LongLine

    finished = []
    finish = LongLine.finish
    monkeypatch.setattr(LongLine, "finish", lambda self: finished.append(1) or finish(self))
    run(session, "tools big ping")  # the server started, so the call goes past the session
    value = call_argv(session, ["big", "blob", "megabytes=2"])
    assert finished  # the reply was taken in as a long line
    assert type(value) is str and value == big.blob_text(2)


def spool_files() -> list[str]:
    """The unnamed temporary files this process holds open (/proc shows them as deleted)."""
    gc.collect()  # what earlier tests left in cycles, closed
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            names.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    return [name for name in names if name.endswith("(deleted)")]


@pytest.mark.slow
def test_a_loop_of_long_rows_leaves_no_file_open_and_the_report_names_their_length(session):
    before = spool_files()
    result, sink = run(session, "for i in 1 2 3 4; do tools big rows megabytes=1.5 > /dev/null; done; exit 3")
    assert result.exit_code == 3, sink.stderr_text
    assert len(spool_files()) <= len(before) + 1
    calls = result.run_report.to_json()["tools"]["done"]
    assert len(calls) == 4
    assert calls[0]["result"] == f"[JSON of {len(printed(big.rows(1.5))) - 1:,} characters, not kept for the report]"


@pytest.mark.slow
def test_a_loop_of_long_texts_leaves_no_file_open_and_the_report_names_their_length(session):
    before = spool_files()
    result, sink = run(session, "for i in 1 2 3 4 5 6; do tools big blob megabytes=1.5 > /dev/null; done; exit 3")
    assert result.exit_code == 3, sink.stderr_text
    assert len(spool_files()) <= len(before) + 1  # not one spool file per call
    calls = result.run_report.to_json()["tools"]["done"]
    assert len(calls) == 6
    assert calls[0]["result"] == f"[a text of {len(big.blob_text(1.5)):,} characters, not kept for the report]"


@pytest.mark.slow
def test_a_long_reply_to_a_request_nobody_waits_for_is_dropped(project, monkeypatch):
    # A server answering a request the lane gave up on (a timeout; compliant servers send
    # nothing after the cancel): the line is not made whole again for the session.
    from toolkernel._providers._mcp._spool import LongLine

    remade = []
    whole_line = LongLine.whole
    monkeypatch.setattr(LongLine, "whole", lambda self: remade.append(1) or whole_line(self))
    session = start(project, monkeypatch)
    write_config(project, fixture_toml("hostile") + policy_toml(allow=["hostile ping", "hostile late-reply"]))
    try:
        result, sink = run(session, "tools hostile ping; tools hostile late-reply megabytes=3; tools hostile ping")
    finally:
        session.close()
    assert sink.stdout_text.split("\n")[:3] == ["pong", "the real answer", "pong"], sink.stderr_text
    assert remade == []


@pytest.mark.slow
@pytest.mark.parametrize("depth, megabytes", [(5_000, 0), (100_000, 3)], ids=["short-line", "long-line"])
def test_a_reply_nested_past_the_recursion_limit_fails_its_call_and_the_server_serves_on(
        project, monkeypatch, depth, megabytes):
    # It raised RecursionError in the reader, which lost the line (the call waited for the
    # server's next answer) and whatever else was read with it.
    session = start(project, monkeypatch)
    write_config(project, fixture_toml("hostile") + policy_toml(allow=["hostile ping", "hostile deep-reply"]))
    try:
        result, sink = run(session, f"tools hostile ping; tools hostile deep-reply depth={depth} megabytes={megabytes};"
                                    " echo \"exit $?\"; tools hostile ping")
    finally:
        session.close()
    assert sink.stdout_text.split("\n")[:3] == ["pong", "exit 1", "pong"], sink.stderr_text
    assert "the server's reply is nested too deep to read" in sink.stderr_text


@pytest.mark.slow
def test_in_a_real_kernel_a_long_text_and_long_rows_reach_the_cell_and_a_pipe_whole(tmp_path):
    from kernel_helpers import loaded_kernel

    work = tmp_path / "work"
    work.mkdir()
    write_config(work, fixture_toml("big") + policy_toml(allow=ALLOW))
    with loaded_kernel(work) as kernel:
        counted = kernel.execute_ok("%%tools\ntools big blob megabytes=3 | wc -c")
        shown = kernel.execute_ok("%%tools\ntools big blob megabytes=0.5; tools big blob megabytes=3 | tail -c 30")
        rows = kernel.execute_ok("%%tools\ntools big rows megabytes=3 | sha256sum")
    assert rows.stdout.split()[0] == hashlib.sha256(printed(big.rows(3)).encode()).hexdigest()
    assert counted.stdout.split()[-1] == str(len(blob(3).encode()))
    assert shown.stdout.startswith(blob(0.5)[:1000])  # (the cell shows the head of a long output)
    assert shown.stdout.rstrip().endswith(blob(3).encode()[-30:].decode().rstrip())
