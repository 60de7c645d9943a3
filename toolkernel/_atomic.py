"""Atomic file writes: a reader sees the old file or the new one, never a mix.

The data goes to a temporary file in the same folder (so the rename stays on
one filesystem), is fsynced, then renamed over the target with `os.replace`,
and the folder is fsynced so the rename itself survives a crash.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def write_atomic(path: Path | str, data: bytes | str) -> None:
    """Replace `path` with `data` (str is written as UTF-8) in one step.

    Missing parent folders are created. An existing file keeps its permission
    bits (and owner, where allowed); a symlink keeps pointing where it did and
    its target is replaced. A new file gets the usual 0o666 minus umask.
    """
    target = Path(os.path.realpath(path))
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    payload = _as_bytes(data)
    existing = _stat_or_none(target)
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as tmp:
            _write_all(tmp.fileno(), payload)
            _copy_metadata(tmp.fileno(), existing)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        _unlink_quietly(tmp_name)
        raise
    _fsync_folder(folder)


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
