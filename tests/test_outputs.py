"""Large outputs: head and tail in the cell, the whole in a file."""

from toolkernel._runners._outputs import HEAD, LIMIT, TAIL, OutputLimiter


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
