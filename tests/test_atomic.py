import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from toolkernel._atomic import STALE_TEMP_SECONDS, write_atomic

REPO = Path(__file__).resolve().parents[1]


def test_writes_text_and_bytes_and_creates_folders(tmp_path):
    target = tmp_path / "a" / "b" / "f.txt"
    write_atomic(target, "héllo")
    assert target.read_bytes() == "héllo".encode()
    write_atomic(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.txt"]


def test_keeps_permission_bits(tmp_path):
    target = tmp_path / "run.sh"
    target.write_text("old")
    target.chmod(0o755)
    write_atomic(target, "new")
    assert target.stat().st_mode & 0o777 == 0o755
    target.chmod(0o600)
    write_atomic(target, "newer")
    assert target.stat().st_mode & 0o777 == 0o600


def test_new_file_follows_umask(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "n.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "n.txt").stat().st_mode & 0o777 == 0o640


def test_symlink_stays_a_symlink(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_refuses_what_is_not_bytes_or_text(tmp_path):
    with pytest.raises(TypeError):
        write_atomic(tmp_path / "f", 12345)  # type: ignore[arg-type]
    assert not (tmp_path / "f").exists()


def test_failed_write_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "f.txt"
    target.write_text("old")

    def disk_failure(fd):
        raise OSError(28, "No space left on device")

    # a full disk cannot be arranged here; fsync failing is where it would show
    monkeypatch.setattr("toolkernel._atomic.os.fsync", disk_failure)
    with pytest.raises(OSError):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from toolkernel._atomic import write_atomic
    target = Path(sys.argv[1])
    size = int(sys.argv[2])
    contents = [b"A" * size, b"B" * size]
    i = 1
    while True:
        sys.stdout.write("writing\\n")
        sys.stdout.flush()
        write_atomic(target, contents[i % 2])
        i += 1
""")


@pytest.mark.slow
def test_killed_writer_leaves_old_or_new_never_a_mix(tmp_path):
    killed_mid_write = 0
    for round_ in range(8):
        folder = tmp_path / f"round{round_}"
        folder.mkdir()
        kill_a_writer(folder)
        leftovers = [p for p in folder.iterdir() if p.name != "big.bin"]
        killed_mid_write += bool(leftovers)  # a temp file left: the kill hit between create and rename
    assert killed_mid_write >= 1, "no kill landed inside a write; the test proved nothing"


def kill_a_writer(folder):
    size = 8 * 1024 * 1024
    target = folder / "big.bin"
    target.write_bytes(b"A" * size)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(target), str(size)],
                             stdout=subprocess.PIPE, env=env)
    try:
        for _ in range(random.randint(1, 4)):
            assert child.stdout.readline() == b"writing\n"  # a write has started
        # land the kill somewhere inside a write (they take tens of milliseconds)
        time.sleep(random.uniform(0.0, 0.05))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        child.stdout.close()
    data = target.read_bytes()
    assert data in (b"A" * size, b"B" * size), "the target holds a mix of old and new content"


def test_a_failing_check_aborts_before_the_rename(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("theirs")

    def changed_meanwhile():
        raise RuntimeError("someone saved it")

    with pytest.raises(RuntimeError, match="someone saved it"):
        write_atomic(target, "ours", check=changed_meanwhile)
    assert target.read_text() == "theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_a_killed_writers_temp_file_is_removed_once_stale_never_while_fresh(tmp_path):
    leftovers = []
    for round_ in range(12):
        folder = tmp_path / f"round{round_}"
        folder.mkdir()
        kill_a_writer(folder)
        leftovers = [p for p in folder.iterdir() if p.name != "big.bin"]
        if leftovers:
            break
    assert leftovers, "no kill landed inside a write; the test proved nothing"
    [temp] = leftovers
    someone_elses = folder / ".notes.abcdefgh.tmp"  # a name of another program's pattern
    someone_elses.write_text("keep")

    write_atomic(folder / "other.txt", "x")  # the next write in that folder
    assert temp.exists(), "a temp file as young as a live write's was removed"

    long_ago = time.time() - STALE_TEMP_SECONDS - 60
    for path in (temp, someone_elses):
        os.utime(path, (long_ago, long_ago))
    write_atomic(folder / "other.txt", "y")
    assert not temp.exists()
    assert someone_elses.read_text() == "keep"
    assert (folder / "big.bin").stat().st_size == 8 * 1024 * 1024


def _outside_save(path: Path, text: str) -> None:
    """An editor's save: a new file renamed over the old one."""
    (path.parent / "editor.tmp").write_text(text)
    os.replace(path.parent / "editor.tmp", path)


def test_a_save_between_the_check_and_the_rename_is_not_lost(tmp_path):
    target = tmp_path / "nb.json"
    target.write_text("read")

    def check():
        if target.read_text() != "read":
            raise RuntimeError("changed since it was read")
        _outside_save(target, "outside")  # lands right after the check passed

    with pytest.raises(RuntimeError, match="changed since it was read"):
        write_atomic(target, "ours", check=check, replaces=lambda old: old.read_text() == "read")
    assert target.read_text() == "outside"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nb.json"]


def test_with_no_outside_save_the_swapped_write_lands_and_leaves_no_temp(tmp_path):
    target = tmp_path / "nb.json"
    target.write_text("read")
    target.chmod(0o640)
    write_atomic(target, "ours", check=lambda: None, replaces=lambda old: old.read_text() == "read")
    assert target.read_text() == "ours" and (target.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nb.json"]


def test_a_folder_swapped_for_a_link_after_resolving_gets_no_write(tmp_path):
    from toolkernel._checked_open import PathChanged

    (tmp_path / "work" / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    target = (tmp_path / "work" / "sub" / "f.txt").resolve()  # resolved, then judged, by a caller
    (tmp_path / "work" / "sub").rename(tmp_path / "work" / "sub.moved")
    (tmp_path / "work" / "sub").symlink_to(tmp_path / "outside")
    with pytest.raises(PathChanged):
        write_atomic(target, "x", resolved=True)
    assert list((tmp_path / "outside").iterdir()) == []
