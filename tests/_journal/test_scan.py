"""What is kept before a shell run, and what a run says it could not keep (`_journal/_scan.py`,
issue 44 item 2)."""

from __future__ import annotations

import os
import time

import pytest

from kernel_helpers import RecordingSink, project_with

from toolkernel._journal import rewind


@pytest.fixture
def session(tmp_path, monkeypatch):
    from toolkernel._session import Session

    project = project_with(tmp_path, monkeypatch, '[policy]\nmode = "accept-edits"\n[rewind]\nshell_mb = 1\n')
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    session = Session(project)
    yield session
    session.close()


def _host(session, script: str):
    from toolkernel._runners._hostbash._channel import Channel
    from toolkernel._runners._hostbash._runner import HostBashRunner

    channel = Channel()
    try:
        sink = RecordingSink()
        result = session.run_script(script, sink, runner=HostBashRunner(channel))
    finally:
        channel.close()
    assert result.exit_code == 0, sink.stderr_text
    return result, sink


def _aged(root, count: int, size: int) -> None:
    """`count` files of `size` bytes, each older than the one after it (old/f0 the oldest)."""
    (root / "old").mkdir()
    now = time.time()
    for i in range(count):
        path = root / "old" / f"f{i}.bin"
        path.write_bytes(os.urandom(size))
        os.utime(path, (now - 86400 + i, now - 86400 + i))


def test_a_tools_script_keeps_only_what_it_names(session):
    root = session.workdir
    _aged(root, 40, 4096)
    (root / "d1").mkdir()
    for i in range(3):
        (root / "d1" / f"x{i}.csv").write_text(f"x{i}\n")
    result = session.run_script("rm -rf d1", RecordingSink())
    kept = session.journal.packs.hashes()
    assert len(kept) == 3  # the three files it named, not the workspace
    rewind(session.journal, result.changes["run"])
    assert sorted(p.name for p in (root / "d1").iterdir()) == ["x0.csv", "x1.csv", "x2.csv"]


def test_a_host_cell_keeps_the_newest_files_within_shell_mb_and_says_what_it_could_not(session):
    root = session.workdir
    _aged(root, 40, 64 * 1024)  # 2.5 MiB: the newest 1 MiB (16 files) kept ahead of the cell
    before = {i: (root / "old" / f"f{i}.bin").read_bytes() for i in (0, 39)}
    result, sink = _host(session, "for f in old/f0.bin old/f39.bin; do echo new > $f; done")  # named by no word
    said = sink.stderr_text
    assert "1 file this run changed is not restorable" in said and "old/f0.bin" in said and "shell_mb" in said
    assert "old/f39.bin" not in said
    files = session.journal.run(result.changes["run"]).files()
    assert "shell_mb" in files["old/f0.bin"].not_restorable and files["old/f39.bin"].not_restorable is None
    done = rewind(session.journal, result.changes["run"])
    assert done.restored == ("old/f39.bin",) and (root / "old" / "f39.bin").read_bytes() == before[39]
    assert "old/f0.bin" in done.skipped[0]


def test_a_file_a_run_wrote_is_kept_before_the_next_run(session):
    root = session.workdir
    _host(session, "echo first > made.txt")
    second, _ = _host(session, "echo second > made.txt")
    rewind(session.journal, second.changes["run"])
    assert (root / "made.txt").read_text() == "first\n"
