"""The journal's store of one workspace: the day's limit never drops a run in silence
(`_journal/_store.py`, issue 44 item 5)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest

from kernel_helpers import RecordingSink

from toolkernel._journal import RewindError, describe_runs, iter_changes, rewind


@pytest.fixture
def session(session_with):
    return session_with('[policy]\nmode = "accept-edits"\n[rewind]\nmax_day_mb = 1\n')


def test_the_run_that_makes_room_says_which_runs_went_in_the_cell_its_report_and_the_listing(session):
    root = session.workdir
    (root / "a.bin").write_bytes(os.urandom(600 * 1024))
    first = session.run_script("rm a.bin", RecordingSink()).changes["run"]  # an agent's deletion, say
    (root / "b.bin").write_bytes(os.urandom(600 * 1024))
    sink = RecordingSink()
    second = session.run_script("rm b.bin", sink)
    assert second.exit_code == 0, sink.stderr_text
    assert second.changes == {"run": second.changes["run"], "files": 1, "dropped": [first]}
    said = sink.stderr_text
    assert f"dropped run {first} (cell, 1 file," in said and "max_day_mb" in said and "can no longer be rewound" in said
    listed = describe_runs(iter_changes(session.journal))
    dropped_line = next(line for line in listed.splitlines() if line.startswith(f"run {first}"))
    assert "DROPPED" in dropped_line and f"to make room for run {second.changes['run']}" in dropped_line
    with pytest.raises(RewindError, match=f"run {first} was dropped .* to make room for run"):
        rewind(session.journal, first)
    rewind(session.journal, second.changes["run"])  # the run that made room is whole
    assert (root / "b.bin").exists()


def test_a_report_naming_dropped_runs_fits_the_schema(session):
    root = session.workdir
    (root / "a.bin").write_bytes(os.urandom(600 * 1024))
    first = session.run_script("rm a.bin", RecordingSink()).changes["run"]
    (root / "b.bin").write_bytes(os.urandom(600 * 1024))
    result = session.run_script("rm b.bin\nf=../outside.txt\ntools write-file --path \"$f\" --content x",
                                RecordingSink())  # stops at a question: a report
    assert result.report["changes"]["dropped"] == [first]
    schema = json.loads((Path(__file__).parents[2] / "docs" / "report.schema.json").read_text())
    jsonschema.validate(result.report, schema)


def test_dropped_records_go_after_keep_days(session):
    import time

    root = session.workdir
    (root / "a.bin").write_bytes(os.urandom(600 * 1024))
    session.run_script("rm a.bin", RecordingSink())
    (root / "b.bin").write_bytes(os.urandom(600 * 1024))
    session.run_script("rm b.bin", RecordingSink())
    assert len(session.journal.dropped_runs()) == 1
    session.journal.remove_old(now=time.time() + 30 * 86400)
    assert session.journal.dropped_runs() == [] and session.journal.runs() == []
