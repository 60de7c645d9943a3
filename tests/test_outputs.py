"""Large outputs: head and tail in the cell, the whole in a file."""

import pytest

from toolkernel import _saved
from toolkernel._runners._outputs import HEAD, LIMIT, TAIL, OutputLimiter
from toolkernel._saved import SavingStream


def run(tmp_path, chunks):
    shown = []
    limiter = OutputLimiter(tmp_path, shown.append)
    for chunk in chunks:
        limiter.write(chunk)
    saved = limiter.close()
    return "".join(shown), saved, limiter


def test_small_output_passes_through_whole(tmp_path):
    text = "x" * (LIMIT - 10)
    shown, saved, _ = run(tmp_path, [text[:100], text[100:]])
    assert shown == text and saved is None


def test_large_output_shows_head_and_tail_and_saves_everything(tmp_path):
    text = "".join(f"line {i}\n" for i in range(40_000))
    shown, saved, limiter = run(tmp_path, [text[i:i + 997] for i in range(0, len(text), 997)])
    assert shown.startswith(text[:HEAD])
    assert shown.endswith(text[-TAIL:])
    assert str(saved) in shown and "omitted" in shown
    assert len(shown) < LIMIT + 500
    assert (tmp_path / saved).read_text() == text
    assert limiter.text() == text


@pytest.mark.parametrize("sizes", [[3 * LIMIT], [HEAD - 10, LIMIT, 5], [HEAD, TAIL + 1], [10] * 6000])
def test_a_cut_output_is_saved_whole_while_only_its_ends_are_held(tmp_path, sizes):
    text = "".join(f"{i:07d}\n" for i in range(sum(sizes) // 8 + 1))[:sum(sizes)]
    chunks, at = [], 0
    for size in sizes:
        chunks.append(text[at:at + size])
        at += size
    shown, saved, limiter = run(tmp_path, chunks)
    assert (tmp_path / saved).read_text() == text
    assert shown.startswith(text[:HEAD]) and shown.endswith(text[-TAIL:])
    assert sum(map(len, limiter.head + limiter.held)) <= HEAD + 2 * TAIL  # not the whole output
    assert [p.name for p in (tmp_path / saved).parent.iterdir()] == [saved.name]  # no partial file left


# -- kept 7 days --------------------------------------------------------------------------


def test_saved_outputs_older_than_seven_days_go_when_a_session_starts(tmp_path, monkeypatch):
    import os
    import time

    from kernel_helpers import isolated_env
    from toolkernel._saved import OUTPUT_DIR
    from toolkernel._session import Session

    for name, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    project = tmp_path / "project"
    outputs = project / OUTPUT_DIR
    outputs.mkdir(parents=True)
    day = 24 * 3600
    ages = {"output-old.txt": 8 * day, "web-fetch-old.txt": 7 * day + 60, "output-new.txt": 6 * day,
            "output-now.txt": 0}
    for name, age in ages.items():
        (outputs / name).write_text(name)
        then = time.time() - age
        os.utime(outputs / name, (then, then))
    elsewhere = project / "old-notes.txt"  # only the outputs folder is swept
    elsewhere.write_text("keep")
    os.utime(elsewhere, (time.time() - 30 * day,) * 2)
    Session(project).close()
    assert sorted(p.name for p in outputs.iterdir()) == ["output-new.txt", "output-now.txt"]
    assert elsewhere.exists()


def test_a_session_starts_without_an_outputs_folder(tmp_path, monkeypatch):
    from kernel_helpers import isolated_env
    from toolkernel._session import Session

    for name, value in isolated_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    Session(tmp_path).close()
    assert not (tmp_path / ".toolkernel").exists()


def test_two_outputs_saved_in_the_same_microsecond_keep_their_own_files(tmp_path, monkeypatch):
    # The clock names a saved output; a frozen clock stands for two sessions saving at once.
    monkeypatch.setattr(_saved.time, "time_ns", lambda: 1_700_000_000_123_456_000)
    monkeypatch.setattr(_saved.time, "strftime", lambda fmt: "20261130-120000")
    first, second = SavingStream(tmp_path), SavingStream(tmp_path)
    first.write("first\n")
    second.write("second\n")
    names = first.finish(), second.finish()
    assert names[0] != names[1]
    assert [(tmp_path / n).read_text() for n in names] == ["first\n", "second\n"]
