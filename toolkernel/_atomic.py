"""Atomic file writes: a reader sees the old file or the new one, never a mix.

The data goes to a temporary file in the same folder (so the rename stays on
one filesystem), is fsynced, then renamed over the target with `os.replace`,
and the folder is fsynced so the rename itself survives a crash.

A caller that must not overwrite someone else's change passes `check`, run
right before the rename (after the slow write and fsync). That leaves the
moment between the check and the rename, in which an outside save would still
be lost; a caller that also passes `replaces` (is the file at this path the one
the write may replace?) closes it on Linux: the new file is swapped in with
renameat2's RENAME_EXCHANGE, the file swapped out is looked at, and when it was
an outside save, it is swapped back (`_put_back`).

A writer killed mid-write (kill -9, power loss) leaves its temporary file
behind; each write removes such leftovers in its folder: only names of our own
pattern (`.<name>.<8 random chars>.toolkernel.tmp`), only our own files, and only when
untouched for STALE_TEMP_SECONDS, which no live write takes.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import Callable, Iterator

from ._checked_open import open_checked
from ._longtext import LongText

STALE_TEMP_SECONDS = 15 * 60
_TEMP_SUFFIX = ".toolkernel.tmp"  # marks the temporary files as ours
_TEMP_NAME = re.compile(r"\..+\.[a-z0-9_]{8}" + re.escape(_TEMP_SUFFIX))  # mkstemp's names with our affixes


def write_atomic(path: Path | str, data: bytes | str | LongText, *, check: Callable[[], None] | None = None,
                 replaces: Callable[[Path], bool] | None = None, resolved: bool = False,
                 durable: bool = True, sweep: bool = True) -> None:
    """Replace `path` with `data` (str is written as UTF-8) in one step.

    Missing parent folders are created. An existing file keeps its permission
    bits (and owner, where allowed); a symlink keeps pointing where it did and
    its target is replaced. A new file gets the usual 0o666 minus umask.
    `check`, if given, runs just before the rename; what it raises aborts the
    write and leaves the file as it is; with `replaces`, also when the file the rename
    would replace fails `replaces(path_of_that_file)`. `resolved`: `path` is a real path already
    (a tool hands the path the dispatcher resolved and checked). `durable=False` skips the fsyncs:
    still all or nothing for a reader, but a power loss may leave the old file or an empty one
    (for content that is checked when read back, such as the journal's hash-named contents).
    `sweep=False` leaves the folder's leftover temporary files to another write: a caller writing
    many files in one folder sweeps it once (each sweep lists the whole folder).

    Every step after the folder is opened works in that open folder, not by its name: a
    folder on the way swapped for a link meanwhile raises `PathChanged` before anything is
    written (see `_checked_open`), and cannot lead the write anywhere else.
    """
    target = Path(path) if resolved else Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    folder = open_checked(str(target.parent), os.O_RDONLY | os.O_DIRECTORY)
    try:
        _write_in(folder, target, data, check, replaces, durable, sweep)
    finally:
        os.close(folder)


def write_at(folder: int, name: str, data: bytes, *, mode: int, mtime_ns: int | None = None,
             sweep: bool = True) -> None:
    """`data` as the file `name` in the open `folder`, in one step, with the permission bits
    `mode` and (given) the modification time `mtime_ns`; what was there (a file, or a link,
    which is replaced, not followed) goes. Not fsynced: the caller syncs once for many files.
    Every step works in the open folder, never by a path (a rewind puts files back so)."""
    if sweep:
        _remove_stale_temps(folder)
    fd, tmp_name = _make_temp(folder, name)
    try:
        try:
            _write_all(fd, data)
            os.fchmod(fd, mode)
            if mtime_ns is not None:
                os.utime(fd, ns=(mtime_ns, mtime_ns))
        finally:
            os.close(fd)
        os.replace(tmp_name, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        _unlink_quietly(tmp_name, folder)
        raise


def _write_in(folder: int, target: Path, payload: bytes | str | LongText, check: Callable[[], None] | None,
              replaces: Callable[[Path], bool] | None, durable: bool = True, sweep: bool = True) -> None:
    """`write_atomic` in the open folder `folder`, which holds `target`."""
    if sweep:
        _remove_stale_temps(folder)
    existing = _stat_or_none(target.name, folder)
    fd, tmp_name = _make_temp(folder, target.name)
    try:
        with os.fdopen(fd, "wb") as tmp:
            for part in _as_bytes(payload):
                _write_all(tmp.fileno(), part)
            _copy_metadata(tmp.fileno(), existing)
            tmp.flush()
            if durable:
                os.fsync(tmp.fileno())
        if check is not None:
            check()
        if replaces is None or not _swap_in(folder, tmp_name, target, replaces, check):
            os.replace(tmp_name, target.name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        _unlink_quietly(tmp_name, folder)
        raise
    if durable:
        _fsync(folder)


def _remove_stale_temps(folder: int) -> None:
    """Remove temporary files that killed writers left in the open `folder` (see the module's doc)."""
    cutoff = time.time() - STALE_TEMP_SECONDS
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if not _TEMP_NAME.fullmatch(entry.name):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_mtime < cutoff:
                os.unlink(entry.name, dir_fd=folder)
        except OSError:
            continue  # gone already, or not ours to remove


def _make_temp(folder: int, name: str) -> tuple[int, str]:
    """A new file of our temporary pattern in `folder`, readable by us only, and its name."""
    for _ in range(100):
        tmp_name = f".{name}.{secrets.token_hex(4)}{_TEMP_SUFFIX}"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
            return os.open(tmp_name, flags, 0o600, dir_fd=folder), tmp_name
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name for {name}")


def _as_bytes(data: bytes | str | LongText) -> Iterator[bytes]:
    """The bytes to write, in parts: a `LongText` a piece at a time, never whole."""
    if isinstance(data, str):
        yield data.encode("utf-8")
    elif isinstance(data, (bytes, bytearray, memoryview)):
        yield bytes(data)
    elif isinstance(data, LongText):
        for piece in data.pieces():
            yield piece.encode("utf-8")
    else:
        raise TypeError(f"write_atomic takes bytes or str, not {type(data).__name__}")


def _stat_or_none(name: str, folder: int) -> os.stat_result | None:
    try:
        # Not through a link: a real path has none in its last name, so a link there now was
        # put in meanwhile, and whose metadata it leads to is no business of this write.
        return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _copy_metadata(fd: int, existing: os.stat_result | None) -> None:
    if existing is None:
        os.fchmod(fd, 0o666 & ~_umask())
        return
    os.fchmod(fd, stat.S_IMODE(existing.st_mode))
    try:
        os.fchown(fd, existing.st_uid, existing.st_gid)
    except PermissionError:
        pass  # not ours to give away; the file then belongs to us, as any new file would


def _umask() -> int:
    # Reading the umask through os.umask() changes it for every thread for a
    # moment; /proc gives it without that race.
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync(folder: int) -> None:
    try:
        os.fsync(folder)
    except OSError:
        pass  # some filesystems do not sync folders; the rename already happened


def _unlink_quietly(name: str, folder: int) -> None:
    try:
        os.unlink(name, dir_fd=folder)
    except FileNotFoundError:
        pass


_RENAME_EXCHANGE = 2


def _exchange(folder: int, a: str, b: str) -> bool:
    """Swap two names in `folder` in one step (Linux renameat2); False where that cannot be done."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    return renameat2(folder, os.fsencode(a), folder, os.fsencode(b), _RENAME_EXCHANGE) == 0


@functools.cache
def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _swap_in(folder: int, tmp_name: str, target: Path, replaces: Callable[[Path], bool],
             check: Callable[[], None] | None) -> bool:
    """Swap the new file in and keep it only if what it replaced may be replaced.

    False when swapping cannot be done here (no target yet, another system or
    filesystem): the caller renames as usual. Raises what `check` raises (or
    FileExistsError) when an outside save came in after the check: it is put back.
    """
    ours = _inode(folder, tmp_name)
    if not _exchange(folder, tmp_name, target.name):
        return False
    if replaces(target.parent / tmp_name):
        _unlink_quietly(tmp_name, folder)  # the file it replaced: the one the caller meant to replace
        return True
    _put_back(folder, tmp_name, target.name, ours)
    if check is not None:
        check()
    raise FileExistsError(f"{target} changed while it was being replaced; it was left as it is")


def _put_back(folder: int, tmp_name: str, name: str, ours: int) -> None:
    """`tmp_name` holds an outside save that the swap took out: put it back at `name`.

    Swapping again takes out what `name` holds then: our file (done), or an even
    newer outside save that replaced ours meanwhile, which must stay; then the older
    one is swapped out again, and so on while saves keep coming.
    """
    held = _inode(folder, tmp_name)
    for _ in range(16):
        _exchange(folder, tmp_name, name)
        if _inode(folder, tmp_name) == ours:
            break  # our file is out and the outside save is back
        _exchange(folder, tmp_name, name)  # a newer save had replaced ours: it goes back in
        if _inode(folder, tmp_name) == held:
            break  # the older save is out, the newer one stays
        held = _inode(folder, tmp_name)
    _unlink_quietly(tmp_name, folder)


def _inode(folder: int, name: str) -> int:
    return os.stat(name, dir_fd=folder, follow_symlinks=False).st_ino
