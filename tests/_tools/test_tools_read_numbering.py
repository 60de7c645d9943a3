"""read_file numbers plain text in one pass (`_numbered_text`: in C where the package was built
with a compiler, else in Python); each must give exactly what the line-by-line reader
(`_numbered_window`) gives, for every window."""

from __future__ import annotations

import io
import os

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from toolkernel._providers._tools import files
from toolkernel._providers._tools.files import MAX_LINE_BYTES, _number, _numbered_window, _plain


@pytest.fixture(scope="module", params=["c", "python"])
def numbered_text(request):
    """Each one-pass numbering in turn (module-scoped: hypothesis runs many examples per test)."""
    if request.param == "python":
        return files._numbered_text_in_python
    if files._number_in_c is None:
        if os.environ.get("CI"):  # CI installs the package as a person does: a compiler is there
            pytest.fail("read_file's C numbering was not built (see hatch_build.py)")
        pytest.skip("read_file's C numbering was not built here (see hatch_build.py)")
    return files._numbered_text_in_c


def test_read_file_numbers_in_c_where_it_was_built():
    expected = files._numbered_text_in_python if files._number_in_c is None else files._numbered_text_in_c
    assert files._numbered_text is expected

LINES = st.lists(st.text(alphabet=st.characters(blacklist_characters="\r\n\0", blacklist_categories=("Cs",)),
                         max_size=30), max_size=12)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(lines=LINES, ends_with_newline=st.booleans(), bom=st.booleans(),
       offset=st.integers(0, 14), limit=st.integers(1, 14))
def test_one_pass_numbering_matches_the_line_by_line_reader(numbered_text, lines, ends_with_newline, bom, offset, limit):
    text = ("\ufeff" if bom else "") + "\n".join(lines) + ("\n" if ends_with_newline and lines else "")
    data = text.encode("utf-8")
    assert _plain(data)
    assert numbered_text(data, "f.txt", offset, limit) == _numbered_window(io.BytesIO(data), "f.txt", offset, limit)


def test_text_that_needs_a_second_look_goes_line_by_line():
    for data in (b"a\r\nb\n", b"a\0b\n"):
        assert not _plain(data)


_BYTES_LINES = st.lists(st.one_of(st.binary(max_size=8).filter(lambda b: b"\n" not in b),
                                  st.sampled_from([b"ok", b"\xc3\xa9", b"\xe2\x82", b"\xff"])), max_size=10)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(lines=_BYTES_LINES, offset=st.integers(0, 12), limit=st.integers(1, 12))
def test_bytes_that_are_not_utf8_outside_the_window_are_not_read(numbered_text, lines, offset, limit):
    """Only the window is decoded, as the line-by-line reader decodes only the lines it shows:
    a window of UTF-8 is numbered alike, and one that is not is left to that reader (which says
    where the undecodable byte is)."""
    data = b"\n".join(lines) + b"\n"
    if not _plain(data):
        return
    numbered = numbered_text(data, "f.txt", offset, limit)
    try:
        expected = _numbered_window(io.BytesIO(data), "f.txt", offset, limit)
    except Exception:  # noqa: BLE001 - the reader's own error for an undecodable window
        assert numbered is None
    else:
        assert numbered in (None, expected)
        if all(_decodes(line) for line in lines[offset:offset + limit]):
            assert numbered == expected


def _decodes(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# Lines around the 2000-byte cut, in characters of 1 to 4 bytes: the one-pass numbering leaves
# exactly the lines the cut applies to to the line-by-line reader.
_NEAR_THE_CUT = st.builds(lambda char, count: char * count, st.sampled_from(["x", "é", "€", "😀"]),
                          st.sampled_from([499, 500, 501, 666, 667, 668, 999, 1000, 1001, 1999, 2000, 2001]))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(lines=st.lists(st.one_of(_NEAR_THE_CUT, st.just("short")), min_size=1, max_size=5),
       offset=st.integers(0, 5), limit=st.integers(1, 5))
@example(lines=["x" * 2001, "x" * 2000], offset=1, limit=1)  # a line of exactly the cut, a long one before it
def test_lines_over_the_cut_go_line_by_line_and_the_rest_are_alike(numbered_text, lines, offset, limit):
    data = ("\n".join(lines) + "\n").encode("utf-8")
    window = lines[offset:offset + limit]
    numbered = numbered_text(data, "f.txt", offset, limit)
    if any(len(line.encode("utf-8")) > MAX_LINE_BYTES for line in window):
        assert numbered is None
    else:
        assert numbered == _numbered_window(io.BytesIO(data), "f.txt", offset, limit)


def test_numbers_past_the_made_prefixes_are_formatted_alike(monkeypatch):
    data = "".join(f"line {i}\n" for i in range(10)).encode()
    made = files._numbered_text_in_python(data, "f.txt", 2, 6)
    monkeypatch.setattr(files, "_MAX_PREFIXES", 3)
    assert files._numbered_text_in_python(data, "f.txt", 2, 6) == made
    assert made == _numbered_window(io.BytesIO(data), "f.txt", 2, 6)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(before=st.lists(st.integers(0, 1200), max_size=4), char=st.sampled_from(["x", "é", "€", "😀"]),
       count=st.integers(490, 2100), after=st.lists(st.integers(0, 1200), max_size=4))
def test_the_quick_look_never_misses_a_line_over_the_cut(before, char, count, after):
    """Wherever a long line starts, `_may_hold_a_long_line` sees it: only a False answer skips the
    line-by-line measure."""
    from toolkernel._providers._tools.files import _may_hold_a_long_line

    lines = ["y" * n for n in before] + [char * count] + ["y" * n for n in after]
    text = "\n".join(lines) + "\n"
    if len((char * count).encode("utf-8")) > MAX_LINE_BYTES:
        assert _may_hold_a_long_line(text.encode("utf-8"))


# -- reading again: each read gives what a first read gives -------------------------------------


def _read(path, **window):
    from toolkernel._providers._tools.files import read_file
    from toolkernel._tool import ToolContext

    result = read_file.call_now({"path": path.name, **window}, ToolContext(path.parent))
    assert not result.is_error, result.texts
    return result.texts[0]


def test_a_file_changed_in_place_is_read_anew_whatever_its_size_and_times(tmp_path):
    """A file rewritten with as many bytes and its times set back is read anew: nothing is
    taken from a read before."""
    path = tmp_path / "f.txt"
    path.write_text("alpha\nbravo\n")
    stat = path.stat()
    assert _read(path) == "     1\talpha\n     2\tbravo"
    with open(path, "r+b") as file:  # the same inode, the same size
        file.write(b"ALPHA\nBRAVO\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert _read(path) == "     1\tALPHA\n     2\tBRAVO"


_WINDOWS = st.lists(st.tuples(st.integers(0, 8), st.integers(1, 8), st.booleans()), min_size=1, max_size=6)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(lines=LINES, bom=st.booleans(), windows=_WINDOWS)
def test_windows_read_one_after_another_are_each_what_a_first_read_gives(tmp_path_factory, lines, bom, windows):
    """Reading a file window by window (and the file changing between some reads) gives each
    time what the line-by-line reader gives: nothing a read does to its lines reaches the next."""
    path = tmp_path_factory.mktemp("again") / "f.txt"
    text = ("\ufeff" if bom else "") + "\n".join(lines) + ("\n" if lines else "")
    for offset, limit, change in windows:
        if change:
            text += "one more line\n"
        path.write_text(text, encoding="utf-8")
        expected = _numbered_window(io.BytesIO(text.encode("utf-8")), "f.txt", offset, limit)
        assert _read(path, offset=offset, limit=limit) == expected


def test_the_same_window_of_the_same_file_named_otherwise_says_its_own_name(tmp_path):
    """The same window of the same file, read under another name, says that name."""
    from toolkernel._providers._tools.files import read_file
    from toolkernel._tool import ToolContext

    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "empty.txt"
    path.write_text("")
    for workdir, name in ((tmp_path, "sub/empty.txt"), (tmp_path / "sub", "empty.txt"), (tmp_path, "sub/empty.txt")):
        result = read_file.call_now({"path": str(path)}, ToolContext(workdir))
        assert result.texts == [f"({name} is empty)"]


# -- the whole file in one formatting (`_numbered_whole`) ---------------------------------------

_SHAPED = st.lists(st.sampled_from(["", "%", "%%", "%s", "%b", "100%", "a%\tb", "%6d", "x" * 70, "é%€", "\ufeff"]),
                   max_size=12)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(lines=st.one_of(LINES, _SHAPED), ends_with_newline=st.booleans(), bom=st.booleans(),
       limit=st.integers(1, 14))
def test_the_whole_file_in_one_formatting_is_what_the_line_by_line_reader_gives(numbered_text, lines, ends_with_newline, bom, limit):
    """`%` in the text stays text; a file of newlines only, no last newline, a byte order mark
    alone, more lines than the limit: each as the reader numbers it."""
    text = ("\ufeff" if bom else "") + "\n".join(lines) + ("\n" if ends_with_newline else "")
    data = text.encode("utf-8")
    assert numbered_text(data, "f.txt", 0, limit) == _numbered_window(io.BytesIO(data), "f.txt", 0, limit)


def test_the_whole_file_in_one_formatting_takes_what_it_is_made_for(monkeypatch):
    from toolkernel._providers._tools import files
    from toolkernel._providers._tools.files import _numbered_whole

    assert _numbered_whole(b"", 5) is None  # empty: the reader says so
    assert _numbered_whole(b"\n\n\n", 5) == ("     1\t\n     2\t\n     3\t", 3)
    assert _numbered_whole("\ufeff".encode(), 5) == ("     1\t", 1)
    assert _numbered_whole(b"a%sb\nc%%d", 5) == ("     1\ta%sb\n     2\tc%%d", 2)
    assert _numbered_whole(b"a\nb\nc\n", 2) is None  # more lines than the window
    assert _numbered_whole(b"caf\xc3\n\xa9\n", 5) is None  # not UTF-8: the reader says where
    assert _numbered_whole(b"x" * 300 + b"\n", 2) is None  # more bytes than a window of 2 lines would take
    monkeypatch.setattr(files, "_MAX_PREFIXES", 3)  # numbers past the prefixes made before
    data = "".join(f"line {i}\n" for i in range(10)).encode()
    assert _numbered_whole(data, 10)[0] == _numbered_window(io.BytesIO(data), "f.txt", 0, 10)


@pytest.mark.slow
def test_a_million_lines_and_more_are_numbered_as_the_reader_does(numbered_text):
    """Past 999,999 the number is wider than its six places, in both."""
    data = b"\n" * 1_000_002
    numbered = numbered_text(data, "f.txt", 0, 1_000_002)
    assert numbered == _numbered_window(io.BytesIO(data), "f.txt", 0, 1_000_002)
    assert numbered.endswith("999999\t\n1000000\t\n1000001\t\n1000002\t")


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(lengths=st.lists(st.integers(0, 4500), min_size=1, max_size=6), newline_last=st.booleans())
def test_the_look_for_a_long_line_is_exact(lengths, newline_last):
    """True exactly when a line has more bytes than the cut (so files without one are numbered
    in one pass, and those with one, line by line)."""
    from toolkernel._providers._tools.files import _may_hold_a_long_line

    data = b"\n".join(b"y" * n for n in lengths) + (b"\n" if newline_last else b"")
    assert _may_hold_a_long_line(data) == any(n > MAX_LINE_BYTES for n in lengths)


# -- the C numbering on any bytes: what the Python pieces give, never a byte out of place --------

def _reference(data: bytes, offset: int, limit: int, max_line: int):
    """What `_numbering.number` must give, from the Python numbering's own pieces."""
    lines = io.BytesIO(data).readlines()
    window = lines[offset:offset + limit]
    if any(len(line.rstrip(b"\n")) > max_line for line in window):
        return None
    return _number(window, offset + 1), len(window), len(lines)


_ANY_LINES = st.lists(st.one_of(st.binary(max_size=12), st.sampled_from([b"\n", b"\r\n", b"\0", b"\xef\xbb\xbf", b"%b"])),
                      max_size=20)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(pieces=_ANY_LINES, offset=st.integers(0, 25), limit=st.integers(1, 25), max_line=st.integers(0, 30))
def test_the_c_numbering_gives_what_the_python_pieces_give_for_any_bytes(numbered_text, pieces, offset, limit, max_line):
    if numbered_text is files._numbered_text_in_python:
        return  # the Python numbering is those pieces
    data = b"".join(pieces)
    assert _as_bytes(files._number_in_c(data, offset, limit, max_line), data) == _reference(data, offset, limit, max_line)


def _as_bytes(made, data: bytes):
    """The C numbering's answer with its window as bytes: a window of ASCII comes as a str, unless
    a byte past ASCII lies in the file near it (read with it in one step); any other as bytes."""
    if made is None:
        return None
    numbered, count, total = made
    if isinstance(numbered, str):
        return numbered.encode("ascii"), count, total  # a str holds ASCII only
    assert not numbered.isascii() or not data.isascii(), numbered
    return made


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(lengths=st.lists(st.integers(0, 80), max_size=40), high=st.sampled_from([b"", b"\xc3\xa9", b"\xff"]),
       at=st.integers(0, 4000), offset=st.integers(0, 3), limit=st.sampled_from([1, 5, 40, 2000]),
       max_line=st.sampled_from([0, 15, 16, 17, 31, 32, 33, 64, 80]))
def test_the_c_numbering_of_lines_longer_than_its_steps_is_exact(numbered_text, lengths, high, at, offset, limit, max_line):
    """Lines of many lengths around the 16 bytes the copy takes a step (and the 64 the count
    takes), a byte past ASCII anywhere or nowhere: what the Python pieces give."""
    if numbered_text is files._numbered_text_in_python:
        return
    data = b"".join(b"%d" % i + b"y" * n + b"\n" for i, n in enumerate(lengths))
    data = data[:at] + high + data[at:]
    assert _as_bytes(files._number_in_c(data, offset, limit, max_line), data) == _reference(data, offset, limit, max_line)


def test_the_c_numbering_refuses_what_is_not_a_window(numbered_text):
    if numbered_text is files._numbered_text_in_python:
        return
    for args in ((b"a", -1, 1, 10), (b"a", 0, 0, 10), (b"a", 0, 1, -1)):
        with pytest.raises(ValueError):
            files._number_in_c(*args)
    for data in ("text", bytearray(b"a"), memoryview(b"a")):  # only bytes, which no thread can change
        with pytest.raises(TypeError):
            files._number_in_c(data, 0, 1, 10)
    big = 2**62
    assert files._number_in_c(b"a\nb\n", 1, big, 10) == ("     2\tb", 1, 2)  # offset + limit past any size
    assert files._number_in_c(b"a\nb", big, 1, 10) == ("", 0, 2)
    assert files._number_in_c("é\nb".encode(), 0, 5, 10) == ("     1\té\n     2\tb".encode(), 2, 2)  # bytes: decoded after
    assert files._number_in_c(b"a\nb\n", 0, 5, 10) == ("     1\ta\n     2\tb", 2, 2)  # ASCII: a str as it is
    assert files._number_in_c("\ufeffa\nb\nc\n".encode(), 0, 2, 10) == ("     1\ta\n     2\tb", 2, 3)  # the mark left out


def test_the_c_numbering_of_a_large_file_lets_other_threads_run_and_is_alike(numbered_text):
    data = b"".join(b"%d " % i + b"y" * (i % 90) + b"\n" for i in range(60_000))  # past the GIL's threshold
    for offset, limit in ((5, 50_000), (0, 2000), (0, 60_000)):  # measured first; written into room for the whole file
        assert numbered_text(data, "f.txt", offset, limit) == _numbered_window(io.BytesIO(data), "f.txt", offset, limit)


@pytest.mark.parametrize("size", [15, 16, 17, 4079, 4080, 4081, 8160, 8177, 3 * 4080 + 7])
def test_the_c_count_of_lines_holds_across_its_steps_and_their_sums(numbered_text, size):
    # The count goes 16 bytes a step and sums its byte lanes every 255 steps (4,080 bytes):
    # all newlines fills every lane to its top; a line of text after them is counted once.
    if numbered_text is files._numbered_text_in_python:
        return
    assert files._number_in_c(b"\n" * size, 0, 1, 10)[2] == size
    assert files._number_in_c(b"\n" * size + b"z", 0, 1, 10)[2] == size + 1
    assert files._number_in_c(b"x" * size, 0, 1, 10**9)[2] == 1
