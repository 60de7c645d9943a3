"""Background runs' kept output (toolkernel/_runners/_background.py): the most recent part unread,
what was dropped counted, each read taking what came since the last."""

from toolkernel._runners._background import KeptOutput


def test_reads_take_what_came_since_the_last():
    kept = KeptOutput(keep=100)
    kept.write("a\n")
    kept.write("b\n")
    assert kept.read() == ("a\nb\n", 0)
    assert kept.read() == ("", 0)
    kept.write("c\n")
    assert kept.read() == ("c\n", 0)


def test_past_its_size_the_oldest_unread_lines_are_dropped_and_counted():
    kept = KeptOutput(keep=20)
    for i in range(10):
        kept.write(f"line-{i}\n")  # 7 characters each
    text, dropped = kept.read()
    assert len(text) <= 20 and text.startswith("line-") and text.endswith("line-9\n")
    assert dropped + len(text) == 70
    assert kept.read() == ("", 0)  # counted once
