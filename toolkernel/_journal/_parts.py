"""A large file's prior content kept before a shell run without holding the run up (issue 38).

Before a shell run, a file that moved since the journal's index must be kept whole before the
run's process can touch it: a host process may rewrite it in place (`dd of=big.bin` truncates
the same inode, so a hard link is no copy, and ext4 has no reflinks). Read through Python and
hashed on the way, a 50 MB file held the run's start up about 60 ms. Here the kernel copies it
into a part file of the store (`copy_file_range`: no pass through Python's memory), and a thread
hashes the part while the run works, then renames it `<part>.<hash>`: a reader who finds it
later, its run's process dead, checks it against that hash. Making the part a stored content
(`blobs/<hash>`, within the day's limit) is the journal's (`Journal.file_part`).

A run's parts are named in its scan and removed once its end is written: a run whose process
died before its end is settled by the next reader, who finds each part (hashed or not) there.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import threading
from pathlib import Path
from typing import Callable

PART = re.compile(r"\.part-[0-9a-f]{16}")  # a part's name, as a scan holds it
_HASHED = re.compile(r"(\.part-[0-9a-f]{16})\.([0-9a-f]{64})")  # a part once hashed: `<part>.<hash>`
_CHUNK = 1 << 20
_KERNEL_STEP = 1 << 30
# copy_file_range refused for this pair of files (another filesystem on an older kernel, a FUSE
# mount, a kernel or a seccomp filter without it): the read-and-write loop copies instead.
_NO_KERNEL_COPY = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM)


def new_part(blobs: Path) -> Path:
    return blobs / f".part-{secrets.token_hex(8)}"


def copy_into(src: int, dst: int) -> None:
    """Everything from `src`'s offset on, appended to `dst`: by the kernel where it can."""
    kernel_copy = getattr(os, "copy_file_range", None)
    if kernel_copy is not None:
        try:
            while kernel_copy(src, dst, _KERNEL_STEP):
                pass
        except OSError as exc:
            if exc.errno not in _NO_KERNEL_COPY:
                raise
    # Also what the kernel's copy left: some filesystems answer 0 (done) before the end.
    while chunk := os.read(src, _CHUNK):
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view):]


def copy_part(blobs: Path, src: int) -> Path:
    """The open file `src` copied whole into a new part of the store (removed if the copy fails)."""
    part = new_part(blobs)
    out = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        copy_into(src, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)
        raise
    finally:
        os.close(out)
    return part


def hash_of(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        digest = hashlib.sha256()
        while chunk := os.read(fd, _CHUNK):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def checked(blobs: Path, name: str) -> tuple[Path | None, str]:
    """The part `name`'s file and hash, checked against the hash its name took when it was
    hashed (if its process lived that long); or (None, why there is none)."""
    plain = blobs / name
    try:
        return plain, hash_of(plain)  # its process died before it was hashed
    except FileNotFoundError:
        pass
    hashed = _hashed(blobs, name)
    if hashed is None:
        return None, "its copy from before the run is missing from the journal"
    digest = hashed.name.rpartition(".")[2]
    if hash_of(hashed) != digest:
        return None, "its copy from before the run is damaged in the journal (its hash does not match)"
    return hashed, digest


def _hashed(blobs: Path, name: str) -> Path | None:
    for entry in _listed(blobs):
        match = _HASHED.fullmatch(entry)
        if match and match[1] == name:
            return blobs / entry
    return None


def remove(blobs: Path, name: str) -> None:
    """The part `name` gone, hashed or not (a folder listing: for a reader settling a dead run)."""
    for path in (blobs / name, _hashed(blobs, name)):
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _listed(blobs: Path) -> list[str]:
    try:
        return os.listdir(blobs)
    except FileNotFoundError:
        return []


def is_part(name: str) -> bool:
    return bool(PART.fullmatch(name) or _HASHED.fullmatch(name))


def name_of(file_name: str) -> str:
    """The name a scan knows a part by, from its file's name (hashed or not)."""
    match = _HASHED.fullmatch(file_name)
    return match[1] if match else file_name


def _hashed_and_renamed(part: Path) -> tuple[Path | None, str]:
    """The part hashed, then renamed `<part>.<hash>`: so that a reader settling its run if its
    process dies checks it against the hash it had here, instead of storing whatever it holds
    then. (A rename to a new name: no file made or freed, which waits after a large write.)"""
    try:
        digest = hash_of(part)
        hashed = part.with_name(f"{part.name}.{digest}")
        os.rename(part, hashed)
        return hashed, digest
    except OSError as exc:
        return None, f"its copy could not be hashed ({exc.strerror})"


def _removed(part: Path, done: tuple[Path | None, str] | None) -> None:
    """The part gone, under the name it has now (hashed or not)."""
    with contextlib.suppress(OSError):  # one left is swept once old (`Journal._collect`)
        os.unlink((done or (None, ""))[0] or part)


class Hashing:
    """Parts hashed on a thread while the run works, each renamed `<part>.<hash>` when done.
    `hashes()` waits for the thread: each part's hashed file and hash, or why there is none."""

    def __init__(self, parts: list[Path]) -> None:
        self._parts = parts
        self._done: dict[str, tuple[Path | None, str]] = {}
        # A daemon: a kernel told to exit mid-run is not held up; the part stays for the next reader.
        self._thread = threading.Thread(target=self._run, name="toolkernel-rewind-hash", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for part in self._parts:
            self._done[part.name] = _hashed_and_renamed(part)

    def hashes(self) -> dict[str, tuple[Path | None, str]]:
        self._thread.join()
        return self._done

    def remove(self, part: Path) -> None:
        """`part` gone, hashed or not (once `hashes()` returned)."""
        _removed(part, self._done.get(part.name))


def _identity(info: os.stat_result) -> tuple[int, int, int, int]:
    """(size, mtime_ns, ctime_ns, inode): what a copy of a file was made from."""
    return info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino


def identity_of(path: str) -> tuple[int, int, int, int] | None:
    try:
        return _identity(os.lstat(path))
    except OSError:
        return None


class Ahead:
    """Large files a shell run left changed, copied into parts right after it (while its output
    is read) and hashed: the next run, which must keep each file that moved before it starts,
    takes the part of one still as it was copied instead of copying it then (`_scan`).

    A copy is kept only when the file was the same (size, mtime, ctime, inode) before and after
    it was made, and as the run's end saw it; `take` also wants it the same now. What no run
    takes is removed (`discard`), by the thread if it is still at work."""

    def __init__(self, blobs: Path, files: dict[str, tuple[str, tuple]], make_room: Callable[[int], None]) -> None:
        self._blobs = blobs
        self._files = files  # name -> (path, (size, mtime_ns, mode, inode, kind) as the run's end saw it)
        self._make_room = make_room  # the oldest runs dropped for the copies, here rather than in the next run
        self._copies: dict[str, tuple[tuple, Path]] = {}  # name -> (identity copied, part), until taken
        self._taken: set[Path] = set()
        self._done: dict[str, tuple[Path | None, str]] = {}
        self._copied = threading.Event()
        self._lock = threading.Lock()
        self._discarded = self._finished = False
        self._thread = threading.Thread(target=self._run, name="toolkernel-rewind-ahead", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        made = []
        try:
            for name, (path, seen) in self._files.items():
                if self._discarded:  # no run comes (the session closes): stop at once
                    break
                copy = self._copy(path, seen)
                if copy is not None:
                    self._copies[name] = copy
                    made.append(copy)
        finally:
            self._copied.set()
        if made and not self._discarded:
            try:
                self._make_room(sum(identity[0] for identity, _ in made))
            except Exception:  # noqa: BLE001 - tried again as the content is stored; a part taken must be hashed
                pass
        for _, part in made:
            with self._lock:
                wanted = part in self._taken or not self._discarded
            if wanted:
                self._done[part.name] = _hashed_and_renamed(part)
        with self._lock:
            self._finished = True
            if self._discarded:
                self._remove_untaken()

    def _copy(self, path: str, seen: tuple) -> tuple[tuple, Path] | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            before = _identity(os.fstat(fd))
            if (before[0], before[1], before[3]) != (seen[0], seen[1], seen[3]):
                return None  # changed since the run's end: the next run copies it
            part = copy_part(self._blobs, fd)
            if _identity(os.fstat(fd)) != before:  # written while it was copied
                os.unlink(part)
                return None
            return before, part
        except OSError:
            return None
        finally:
            os.close(fd)

    def take(self, name: str, seen: tuple, now: tuple | None) -> Path | None:
        """The part of `name` when the file is as it was copied: `seen`, a walk's (size, mtime_ns,
        mode, inode, kind), and `now`, its `identity_of`. Waits for the copies, not the hashes."""
        self._copied.wait()
        with self._lock:
            copy = self._copies.get(name)
            if self._discarded or copy is None or now != copy[0] or (seen[0], seen[1], seen[3]) != now[:2] + now[3:]:
                return None
            del self._copies[name]
            self._taken.add(copy[1])
            return copy[1]

    def hashes(self) -> dict[str, tuple[Path | None, str]]:
        """As `Hashing.hashes`, for the parts taken."""
        self._thread.join()
        return self._done

    def remove(self, part: Path) -> None:
        _removed(part, self._done.get(part.name))

    def wait(self) -> None:
        self._thread.join()

    def discard(self) -> None:
        """The parts no run took removed, now or once the thread is done."""
        with self._lock:
            self._discarded = True
            if self._finished:
                self._remove_untaken()

    def _remove_untaken(self) -> None:
        for _, part in self._copies.values():
            _removed(part, self._done.get(part.name))
        self._copies.clear()
