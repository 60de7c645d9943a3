"""Atomic file writes: a reader sees the old file or the new one, never a mix.

The data goes to a temporary file in the same folder (so the rename stays on
one filesystem), is fsynced, then renamed over the target with `os.replace`,
and the folder is fsynced so the rename itself survives a crash.

A caller that must not overwrite someone else's change passes `check`, run
right before the rename (after the slow write and fsync), so the window in
which an outside save could be lost is the rename alone.

A writer killed mid-write (kill -9, power loss) leaves its temporary file
behind; each write removes such leftovers in its folder: only names of our own
pattern (`.<name>.<8 random chars>.toolkernel.tmp`), only our own files, and only when
untouched for STALE_TEMP_SECONDS, which no live write takes.
"""

from __future__ import annotations

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
                 resolved: bool = False) -> None:
    """Replace `path` with `data` (str is written as UTF-8) in one step.

    Missing parent folders are created. An existing file keeps its permission
    bits (and owner, where allowed); a symlink keeps pointing where it did and
    its target is replaced. A new file gets the usual 0o666 minus umask.
    `check`, if given, runs just before the rename; what it raises aborts the
    write and leaves the file as it is. `resolved`: `path` is a real path already
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
