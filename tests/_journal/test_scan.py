"""What is kept before a shell run, and what a run says it could not keep (`_journal/_scan.py`,
issue 44 item 2)."""

from __future__ import annotations

import os
import time

import pytest

from kernel_helpers import RecordingSink

from toolkernel._journal import rewind


@pytest.fixture
def session(session_with):
    return session_with('[policy]\nmode = "accept-edits"\n[rewind]\nshell_mb = 1\n')


def _host(session, script: str):
    from journal_helpers import host_cell

    return host_cell(session, script)


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


def test_runs_at_once_each_see_what_changed_while_they_ran(tmp_path, monkeypatch):
    # A background cell and a person's cell overlapping: what changed while both ran is in both.
    from toolkernel._journal import Journal
    from toolkernel._journal._scan import Comparison

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("a before\n")
    journal = Journal(root)
    try:
        background = journal.start_run("cell")
        long = Comparison(journal, background)
        person = journal.start_run("cell")
        short = Comparison(journal, person)
        (root / "a.txt").write_text("while both ran\n")
        short.record(person)
        person.finish()
        (root / "b.txt").write_text("after the short one\n")
        long.record(background)
        background.finish()
        assert set(journal.run(person.id).files()) == {"a.txt"}
        assert set(journal.run(background.id).files()) == {"a.txt", "b.txt"}
        rewind(journal, person.id)
        assert (root / "a.txt").read_text() == "a before\n"
    finally:
        journal.close()


def test_a_new_kernel_takes_the_contents_the_last_one_kept(tmp_path, monkeypatch):
    from toolkernel._journal import Journal
    from toolkernel._journal._scan import Comparison

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    root = tmp_path / "ws"
    root.mkdir()
    (root / "kept.txt").write_text("kept by the first kernel\n")
    first = Journal(root)
    run = first.start_run("cell")
    Comparison(first, run).record(run)  # a host cell's run: the newest files kept ahead of it
    run.finish()
    first.close()
    second = Journal(root)
    stored = []
    real = second.store
    monkeypatch.setattr(second, "store", lambda *args, **kwargs: stored.append(args[0]) or real(*args, **kwargs))
    try:
        run = second.start_run("cell")
        compared = Comparison(second, run)
        assert stored == []  # nothing moved since: what the first kernel kept is taken as it is
        (root / "kept.txt").write_text("changed\n")
        compared.record(run)
        run.finish()
        rewind(second, run.id)
        assert (root / "kept.txt").read_text() == "kept by the first kernel\n"
    finally:
        second.close()
