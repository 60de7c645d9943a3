"""read_file numbers plain text in one pass (`_numbered_text`); it must give exactly what the
line-by-line reader (`_numbered_window`) gives, for every window."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from toolkernel._providers._tools.files import _numbered_text, _numbered_window, _plain_text

LINES = st.lists(st.text(alphabet=st.characters(blacklist_characters="\r\n\0", blacklist_categories=("Cs",)),
                         max_size=30), max_size=12)


@settings(max_examples=300, deadline=None)
@given(lines=LINES, ends_with_newline=st.booleans(), bom=st.booleans(),
       offset=st.integers(0, 14), limit=st.integers(1, 14))
def test_one_pass_numbering_matches_the_line_by_line_reader(lines, ends_with_newline, bom, offset, limit):
    text = ("\ufeff" if bom else "") + "\n".join(lines) + ("\n" if ends_with_newline and lines else "")
    data = text.encode("utf-8")
    plain = _plain_text(_File(data))
    assert plain == text
    assert _numbered_text(plain, "f.txt", offset, limit) == _numbered_window(io.BytesIO(data), "f.txt", offset, limit)


def test_text_that_needs_a_second_look_goes_line_by_line():
    for data in (b"a\r\nb\n", b"a\0b\n", b"\xff\xfe", b"x" * 2001 + b"\n"):
        assert _plain_text(_File(data)) is None


class _File(io.BytesIO):
    """BytesIO with a descriptor to stat, as a real file has."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        import tempfile

        self._real = tempfile.TemporaryFile()
        self._real.write(data)
        self._real.flush()

    def fileno(self) -> int:
        return self._real.fileno()


def test_numbers_past_the_made_prefixes_are_formatted_alike(monkeypatch):
    from toolkernel._providers._tools import files

    data = "".join(f"line {i}\n" for i in range(10)).encode()
    made = files._numbered_text(data.decode(), "f.txt", 2, 6)
    monkeypatch.setattr(files, "_MAX_PREFIXES", 3)
    assert files._numbered_text(data.decode(), "f.txt", 2, 6) == made
    assert made == _numbered_window(io.BytesIO(data), "f.txt", 2, 6)
