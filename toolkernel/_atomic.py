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
import stat
import tempfile
import time
from pathlib import Path
from typing import Callable

STALE_TEMP_SECONDS = 15 * 60
_TEMP_SUFFIX = ".toolkernel.tmp"  # marks the temporary files as ours
_TEMP_NAME = re.compile(r"\..+\.[a-z0-9_]{8}" + re.escape(_TEMP_SUFFIX))  # mkstemp's names with our affixes


def write_atomic(path: Path | str, data: bytes | str, *, check: Callable[[], None] | None = None,
                 replaces: Callable[[Path], bool] | None = None, resolved: bool = False) -> None:
    """Replace `path` with `data` (str is written as UTF-8) in one step.

    Missing parent folders are created. An existing file keeps its permission
    bits (and owner, where allowed); a symlink keeps pointing where it did and
    its target is replaced. A new file gets the usual 0o666 minus umask.
    `check`, if given, runs just before the rename; what it raises aborts the
    write and leaves the file as it is; with `replaces`, also when the file the rename
    would replace fails `replaces(path_of_that_file)`. `resolved`: `path` is a real path already
    (a tool hands the path the dispatcher resolved and checked).
    """
    target = Path(path) if resolved else Path(os.path.realpath(path))
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(folder)
    payload = _as_bytes(data)
    existing = _stat_or_none(target)
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=_TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as tmp:
            _write_all(tmp.fileno(), payload)
            _copy_metadata(tmp.fileno(), existing)
            tmp.flush()
            os.fsync(tmp.fileno())
        if check is not None:
            check()
        if replaces is None or not _swap_in(tmp_name, target, replaces, check):
            os.replace(tmp_name, target)
    except BaseException:
        _unlink_quietly(tmp_name)
        raise
    _fsync_folder(folder)


def remove_stale_temps(folder: Path) -> None:
    """Remove temporary files that killed writers left in `folder` (see the module's doc)."""
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
                os.unlink(entry.path)
        except OSError:
            continue  # gone already, or not ours to remove


def _as_bytes(data: bytes | str) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"write_atomic takes bytes or str, not {type(data).__name__}")


def _stat_or_none(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
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


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # some filesystems do not open folders; the rename already happened
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _unlink_quietly(name: str) -> None:
    try:
        os.unlink(name)
    except FileNotFoundError:
        pass


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: str, b: str | Path) -> bool:
    """Swap two paths in one step (Linux renameat2); False where that cannot be done."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    return renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE) == 0


@functools.cache
def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _swap_in(tmp_name: str, target: Path, replaces: Callable[[Path], bool],
             check: Callable[[], None] | None) -> bool:
    """Swap the new file in and keep it only if what it replaced may be replaced.

    False when swapping cannot be done here (no target yet, another system or
    filesystem): the caller renames as usual. Raises what `check` raises (or
    FileExistsError) when an outside save came in after the check: it is put back.
    """
    ours = os.stat(tmp_name).st_ino
    if not _exchange(tmp_name, target):
        return False
    if replaces(Path(tmp_name)):
        _unlink_quietly(tmp_name)  # the file it replaced: the one the caller meant to replace
        return True
    _put_back(tmp_name, target, ours)
    if check is not None:
        check()
    raise FileExistsError(f"{target} changed while it was being replaced; it was left as it is")


def _put_back(tmp_name: str, target: Path, ours: int) -> None:
    """`tmp_name` holds an outside save that the swap took out: put it back at `target`.

    Swapping again takes out what `target` holds then: our file (done), or an even
    newer outside save that replaced ours meanwhile, which must stay; then the older
    one is swapped out again, and so on while saves keep coming.
    """
    held = os.stat(tmp_name).st_ino
    for _ in range(16):
        _exchange(tmp_name, target)
        if os.stat(tmp_name).st_ino == ours:
            break  # our file is out and the outside save is back
        _exchange(tmp_name, target)  # a newer save had replaced ours: it goes back in
        if os.stat(tmp_name).st_ino == held:
            break  # the older save is out, the newer one stays
        held = os.stat(tmp_name).st_ino
    _unlink_quietly(tmp_name)
