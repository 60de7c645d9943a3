import asyncio
import os
import shutil
import subprocess
import zlib
import struct
from pathlib import Path

import pytest

from toolkernel._tool import Image, ToolContext
from toolkernel._providers._tools import own_tools
from toolkernel._providers._tools.files import edit_file, read_file, write_file


def call(tool, args, workdir):
    return asyncio.run(tool.call(args, ToolContext(workdir=Path(workdir))))


def text_of(result):
    return "\n".join(result.texts)


def tiny_png() -> bytes:
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


# ---- schemas


def test_every_own_tool_has_a_strict_described_schema():
    tools = {t.name: t for t in own_tools()}
    assert set(tools) == {"read_file", "write_file", "edit_file", "glob_search", "grep_search", "web_fetch", "todo_write",
                          "changes", "rewind"}
    for tool in tools.values():
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert schema.get("required") or tool.name == "changes"  # a listing whose filters are all optional
        for name, prop in schema["properties"].items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"
    assert {n: t.kind for n, t in tools.items()} == {
        "read_file": "read", "write_file": "edit", "edit_file": "edit", "glob_search": "read",
        "grep_search": "read", "web_fetch": "read", "todo_write": "read", "changes": "read", "rewind": "edit",
    }
    assert tools["read_file"].path_keys == ("path",) and tools["grep_search"].path_keys == ("path",)


# ---- read_file


def test_read_file_numbers_lines_and_pages(tmp_path):
    (tmp_path / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = text_of(call(read_file, {"path": "a.txt"}, tmp_path))
    assert out.splitlines()[0] == "     1\tline 1"
    assert out.splitlines()[-1] == "    10\tline 10"
    page = call(read_file, {"path": "a.txt", "offset": 2, "limit": 3}, tmp_path)
    assert not page.is_error
    lines = text_of(page).splitlines()
    assert lines[:3] == ["     3\tline 3", "     4\tline 4", "     5\tline 5"]
    assert "offset=5" in lines[3] and "of 10" in lines[3]


def test_read_file_cuts_long_lines(tmp_path):
    (tmp_path / "long.txt").write_text("x" * 2500 + "\nshort\n")
    lines = text_of(call(read_file, {"path": "long.txt"}, tmp_path)).splitlines()
    assert lines[0] == "     1\t" + "x" * 2000 + " (line truncated)"
    assert lines[1] == "     2\tshort"


def test_read_file_cut_inside_a_multibyte_character_stays_text(tmp_path):
    (tmp_path / "u.txt").write_text("a" + "é" * 1500 + "\n", encoding="utf-8")
    result = call(read_file, {"path": "u.txt"}, tmp_path)
    assert not result.is_error and text_of(result).endswith("(line truncated)")


def test_read_file_missing_and_directory(tmp_path):
    missing = call(read_file, {"path": "nope.txt"}, tmp_path)
    assert missing.is_error and "not found" in text_of(missing) and "nope.txt" in text_of(missing)
    (tmp_path / "d").mkdir()
    folder = call(read_file, {"path": "d"}, tmp_path)
    assert folder.is_error and "directory" in text_of(folder)


def test_read_file_and_edit_file_refuse_a_pipe_at_once(tmp_path):
    import threading

    os.mkfifo(tmp_path / "pipe")
    stop = threading.Event()

    def late_writer():  # frees an open that waits for a writer, so a failure is not a hang
        while not stop.wait(0.2):
            try:
                fd = os.open(tmp_path / "pipe", os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue  # no reader waiting yet
            os.write(fd, b"late\n")
            os.close(fd)

    writer = threading.Thread(target=late_writer, daemon=True)
    writer.start()
    try:
        read = call(read_file, {"path": "pipe"}, tmp_path)
        edit = call(edit_file, {"path": "pipe", "old_string": "late", "new_string": "x"}, tmp_path)
    finally:
        stop.set()
    assert read.is_error and "not a regular file" in text_of(read)
    assert edit.is_error and "not a regular file" in text_of(edit)


def test_read_file_refuses_binary_and_non_utf8(tmp_path):
    (tmp_path / "blob.bin").write_bytes(b"ELF\x00\x01\x02stuff")
    binary = call(read_file, {"path": "blob.bin"}, tmp_path)
    assert binary.is_error and "binary" in text_of(binary)
    (tmp_path / "latin.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    latin = call(read_file, {"path": "latin.txt"}, tmp_path)
    assert latin.is_error and "UTF-8" in text_of(latin)


def test_read_file_returns_images(tmp_path):
    png = tiny_png()
    (tmp_path / "pic.png").write_bytes(png)
    result = call(read_file, {"path": "pic.png"}, tmp_path)
    assert not result.is_error and result.images == [Image(png, "image/png")]
    (tmp_path / "photo.dat").write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 20)
    assert call(read_file, {"path": "photo.dat"}, tmp_path).images[0].mime_type == "image/jpeg"
    (tmp_path / "anim").write_bytes(b"GIF89a" + b"\x00" * 10)
    assert call(read_file, {"path": "anim"}, tmp_path).images[0].mime_type == "image/gif"
    (tmp_path / "w.webp").write_bytes(b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8)
    assert call(read_file, {"path": "w.webp"}, tmp_path).images[0].mime_type == "image/webp"


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_read_file_refuses_git_objects_loose_and_packed(tmp_path):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}
    run = lambda *args: subprocess.run(["git", *args], cwd=tmp_path, env=env, check=True, capture_output=True)
    run("init", "-q")
    (tmp_path / "f.txt").write_text("hello\n")
    run("add", "f.txt")
    run("commit", "-q", "-m", "one")
    loose = next(p for p in (tmp_path / ".git" / "objects").rglob("*") if p.is_file() and len(p.parent.name) == 2)
    result = call(read_file, {"path": str(loose.relative_to(tmp_path))}, tmp_path)
    assert result.is_error and "git object store" in text_of(result)
    run("gc", "-q")
    pack = next((tmp_path / ".git" / "objects" / "pack").glob("*.pack"))
    packed = call(read_file, {"path": str(pack)}, tmp_path)
    assert packed.is_error and "git object store" in text_of(packed)
    # the working tree file itself is fine
    assert "hello" in text_of(call(read_file, {"path": "f.txt"}, tmp_path))


def test_read_file_empty_and_past_the_end(tmp_path):
    (tmp_path / "e.txt").write_text("")
    assert "empty" in text_of(call(read_file, {"path": "e.txt"}, tmp_path))
    (tmp_path / "s.txt").write_text("one\n")
    assert "past the end" in text_of(call(read_file, {"path": "s.txt", "offset": 5}, tmp_path))
    # Numbers past any file's length (an agent's "all of it"): past the end, or the whole file;
    # once an error result saying "OverflowError: Python int too large to convert to C ssize_t".
    assert "past the end" in text_of(call(read_file, {"path": "s.txt", "offset": 10**30}, tmp_path))
    assert text_of(call(read_file, {"path": "s.txt", "limit": 10**30}, tmp_path)).endswith("one")


# ---- write_file


def test_write_file_creates_parents_and_reports(tmp_path):
    result = call(write_file, {"path": "deep/er/new.py", "content": "a = 1\nb = 2\n"}, tmp_path)
    assert not result.is_error
    assert (tmp_path / "deep/er/new.py").read_text() == "a = 1\nb = 2\n"
    assert text_of(result) == "Created deep/er/new.py (2 lines, 12 bytes)"
    again = call(write_file, {"path": "deep/er/new.py", "content": "c\n"}, tmp_path)
    assert text_of(again).startswith("Overwrote deep/er/new.py")
    assert [p.name for p in (tmp_path / "deep/er").iterdir()] == ["new.py"]  # no temp files left


def test_write_file_keeps_permission_bits(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\necho old\n")
    script.chmod(0o755)
    call(write_file, {"path": "run.sh", "content": "#!/bin/sh\necho new\n"}, tmp_path)
    assert script.stat().st_mode & 0o777 == 0o755
    assert script.read_text().endswith("echo new\n")


def test_write_file_refuses_a_directory(tmp_path):
    (tmp_path / "d").mkdir()
    assert call(write_file, {"path": "d", "content": "x"}, tmp_path).is_error


# ---- edit_file


def test_edit_file_replaces_exactly_one(tmp_path):
    (tmp_path / "x.py").write_text("a = 1\nb = 2\n")
    result = call(edit_file, {"path": "x.py", "old_string": "b = 2", "new_string": "b = 3"}, tmp_path)
    assert text_of(result) == "Replaced 1 occurrence in x.py (first at line 2)"
    assert (tmp_path / "x.py").read_text() == "a = 1\nb = 3\n"


def test_edit_file_refuses_non_unique_without_replace_all(tmp_path):
    (tmp_path / "x.py").write_text("x = 1\nx = 1\n")
    refused = call(edit_file, {"path": "x.py", "old_string": "x = 1", "new_string": "y"}, tmp_path)
    assert refused.is_error and "2 times" in text_of(refused) and "replace_all" in text_of(refused)
    assert (tmp_path / "x.py").read_text() == "x = 1\nx = 1\n"
    done = call(edit_file, {"path": "x.py", "old_string": "x = 1", "new_string": "y", "replace_all": True}, tmp_path)
    assert text_of(done).startswith("Replaced 2 occurrences in x.py")
    assert (tmp_path / "x.py").read_text() == "y\ny\n"


def test_edit_file_errors(tmp_path):
    (tmp_path / "x.py").write_text("abc\n")
    missing = call(edit_file, {"path": "x.py", "old_string": "zzz", "new_string": "y"}, tmp_path)
    assert missing.is_error and "not found" in text_of(missing)
    same = call(edit_file, {"path": "x.py", "old_string": "abc", "new_string": "abc"}, tmp_path)
    assert same.is_error
    nofile = call(edit_file, {"path": "none.py", "old_string": "a", "new_string": "b"}, tmp_path)
    assert nofile.is_error and "write_file" in text_of(nofile)
    (tmp_path / "b.bin").write_bytes(b"a\x00b")
    assert call(edit_file, {"path": "b.bin", "old_string": "a", "new_string": "c"}, tmp_path).is_error


def test_edit_file_keeps_mode_and_crlf(tmp_path):
    target = tmp_path / "tool.sh"
    target.write_bytes(b"echo one\r\necho two\r\n")
    target.chmod(0o755)
    call(edit_file, {"path": "tool.sh", "old_string": "one", "new_string": "uno"}, tmp_path)
    assert target.read_bytes() == b"echo uno\r\necho two\r\n"
    assert target.stat().st_mode & 0o777 == 0o755


# ---- how the file is read (one unbuffered read of the size fstat gives)


def test_a_file_over_the_one_read_size_is_numbered_line_by_line_alike(tmp_path, monkeypatch):
    from toolkernel._providers._tools import files

    (tmp_path / "f.txt").write_text("".join(f"line {i}\n" for i in range(50)))
    whole = text_of(call(read_file, {"path": "f.txt", "offset": 5, "limit": 7}, tmp_path))
    monkeypatch.setattr(files, "PLAIN_TEXT_BYTES", 10)  # the sniff, then a buffered reader
    assert text_of(call(read_file, {"path": "f.txt", "offset": 5, "limit": 7}, tmp_path)) == whole
    assert whole.startswith("     6\tline 5\n") and whole.endswith("(lines 6-12 of 50; use offset=12 to read on)")


@pytest.mark.skipif(not Path("/proc/version").is_file(), reason="needs Linux /proc")
def test_a_file_whose_size_says_zero_is_read_to_its_end(tmp_path):
    assert os.stat("/proc/version").st_size == 0
    shown = text_of(call(read_file, {"path": "/proc/version"}, tmp_path))
    assert shown == "     1\t" + Path("/proc/version").read_text().rstrip("\n")


def open_below(folder: Path) -> list[str]:
    """What this process has open under `folder`, by /proc."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target == str(folder) or target.startswith(f"{folder}/"):
            found.append(target)
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")
def test_read_file_closes_the_file_it_opened_on_every_way_out(tmp_path, monkeypatch):
    """The tool reads a bare descriptor: every way out of it (numbered at once, line by line, an
    image, a refusal, a cancelled count) closes it, and each reads what it read before."""
    from toolkernel._providers._tools import files

    (tmp_path / "f.txt").write_text("".join(f"line {i}\n" for i in range(50)))
    (tmp_path / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    (tmp_path / "pic.png").write_bytes(tiny_png())
    (tmp_path / "bin.dat").write_bytes(b"a\0b")
    (tmp_path / "latin.txt").write_bytes(b"caf\xe9\n")
    (tmp_path / "long.log").write_bytes(b"x\n" * 70_000)
    cases = [({"path": "f.txt"}, False), ({"path": "f.txt", "offset": 5, "limit": 7}, False),
             ({"path": "crlf.txt"}, False), ({"path": "pic.png"}, False), ({"path": "bin.dat"}, True),
             ({"path": "latin.txt"}, True), ({"path": "."}, True)]
    assert open_below(tmp_path) == []
    results = [call(read_file, args, tmp_path) for args, _ in cases]
    monkeypatch.setattr(files, "PLAIN_TEXT_BYTES", 10)  # the sniff, then a buffered reader
    window = call(read_file, {"path": "f.txt", "offset": 5, "limit": 7}, tmp_path)
    with pytest.raises(asyncio.CancelledError):
        read_file.call_now({"path": "long.log"}, ToolContext(workdir=tmp_path, cancelled=lambda: True))
    import gc
    gc.collect()
    assert open_below(tmp_path) == []  # by path: the process's other descriptors come and go with other threads
    assert [result.is_error for result in results] == [failed for _, failed in cases]
    assert text_of(window) == text_of(results[1])
    assert text_of(results[2]) == "     1\ta\n     2\tb"
    assert isinstance(results[3].images[0], Image) and results[3].images[0].data == tiny_png()


def test_read_file_stops_counting_a_long_file_when_the_run_is_cancelled(tmp_path):
    from toolkernel._providers._tools.files import PLAIN_TEXT_BYTES

    # Over the size read whole: read line by line, every line counted.
    (tmp_path / "big.log").write_bytes(b"x\n" * (PLAIN_TEXT_BYTES // 2 + 70_000))
    asked = []

    def cancelled() -> bool:
        asked.append(True)
        return True

    with pytest.raises(asyncio.CancelledError):
        read_file.call_now({"path": "big.log"}, ToolContext(workdir=tmp_path, cancelled=cancelled))
    assert len(asked) == 1
