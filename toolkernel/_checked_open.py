"""Open a path that was resolved and checked earlier, and make sure the kernel opened that one.

The approval layer judges a call by where its paths lead (symlinks and `..` resolved),
and the tool then opens that real path. Between the two, another process (a second
script, a second `serve` session) can swap a folder on the way for a symlink that leads
out of the workspace: the open would then follow it, to a file that nobody checked.

So the open never follows a symlink in the last name (`O_NOFOLLOW`), and afterwards the
kernel is asked where the descriptor it gave really is (its name in `/proc/self/fd`). A
name other than the checked one, or one outside the folder it must lie in, means the path
changed: the descriptor is closed and `PathChanged` raised, before anything is read or
written. Without `/proc`, the path is resolved again after the open and must still lead to
the file opened: that catches a swap still in place, not one undone in between.
"""

from __future__ import annotations

import ctypes
import errno
import io
import os
import platform
import stat

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class PathChanged(OSError):
    """What a checked path names changed after the check (a folder on the way was replaced)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path} changed while it was being opened (a folder on the way was "
                         "replaced or is a link now); nothing was read or written")
        self.path = path


def open_checked(path: str, flags: int = os.O_RDONLY, mode: int = 0o666, *,
                 inside: str | None = None) -> int:
    """A descriptor for the real path `path`, opened without following links.

    It must be `path` itself or, with `inside`, anything in that (real) folder. A link in
    the last name raises `PathChanged` as well: a real path has none there.
    """
    fd = _opened(path, flags, mode)
    try:
        _confirm(fd, path, inside)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _opened(path: str, flags: int, mode: int) -> int:
    """`path` opened without following a link in its last name (a link there is `PathChanged`)."""
    try:
        return os.open(path, flags | _NOFOLLOW | _CLOEXEC, mode)
    except OSError as exc:
        if _is_link(path):
            raise PathChanged(path) from exc
        raise


class NotAFile(OSError):
    """The path is a pipe, a device or a socket: reading it could wait, or never end."""


def file_checked(path: str, *, inside: str | None = None) -> tuple[io.FileIO, int]:
    """`open_checked` for reading a regular file: an unbuffered binary file, and its size.

    Opened without waiting (a pipe with no writer would hold the open, and the thread, for
    ever); a folder raises IsADirectoryError, anything else that is not a file `NotAFile`.
    """
    fd, size = regular_checked(path, inside=inside)
    try:
        return io.FileIO(fd, "rb"), size
    except BaseException:
        os.close(fd)
        raise


class Resolved(str):
    """A real path and the identity (device, inode) of the file it led to when it was resolved
    (`_paths.real_name`): a descriptor found to be that very file is the file the checks judged,
    whatever its name is now, so `regular_checked` need not ask the kernel for the name."""

    identity: tuple[int, int] | None = None


def regular_checked(path: str, *, inside: str | None = None) -> tuple[int, int]:
    """`file_checked` as a bare descriptor (the caller closes it) and the file's size, for a
    reader that reads it in one call: a FileIO made over it asks fstat once more."""
    identity = getattr(path, "identity", None) if inside is None else None
    if identity is None:
        fd = open_checked(path, os.O_RDONLY | os.O_NONBLOCK, inside=inside)
    else:
        fd = _opened(path, os.O_RDONLY | os.O_NONBLOCK, 0o666)
    try:
        status = os.fstat(fd)
        if identity is not None and (status.st_dev, status.st_ino) != identity:
            _confirm(fd, path, None)  # another file now: as good as a first open only by its name
        kind = stat.S_IFMT(status.st_mode)
        if kind == stat.S_IFDIR:
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        if kind != stat.S_IFREG:
            raise NotAFile(errno.EINVAL, "Not a regular file", path)
        return fd, status.st_size
    except BaseException:
        os.close(fd)
        raise


def read_checked(path: str, *, inside: str | None = None) -> bytes:
    """The whole of the file `path`, opened as `open_checked` does."""
    file, _ = file_checked(path, inside=inside)
    with file:
        return file.readall()


class TooLarge(OSError):
    """The file is larger than its reader takes."""


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The whole of the regular file `path` leads to (links followed: resolved once, then opened
    as `file_checked` does), of at most `limit` bytes; a bigger one raises `TooLarge`.

    For files a person may link to another of theirs (config files): a link to a device or a
    pipe (`/dev/zero`, a FIFO) would otherwise be read until memory runs out, or for ever.
    """
    # strict: a link to nothing, or a loop of links, is said as the error it is.
    file, _ = file_checked(os.path.realpath(path, strict=True))
    with file:
        data = file.read(limit + 1)  # not the size fstat said: a file may grow meanwhile
    if len(data) > limit:
        raise TooLarge(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
    return data


class NotAFolder(PathChanged):
    """A folder toolkernel keeps its own files in is a link, or a file holds its name."""

    def __init__(self, path: str) -> None:
        OSError.__init__(self, f"{path} is a link or a file, not a folder: toolkernel keeps its own "
                               "files there and follows no link out of the workspace; remove it, "
                               "and toolkernel makes the folder again")
        self.path = path


def open_folder_below(root: str, relative: str | os.PathLike[str], *, create: bool = True,
                      mode: int = 0o777) -> int:
    """A descriptor for the folder `relative` below the real folder `root` (toolkernel's own
    folders in the workspace: `.toolkernel/outputs`, `tool-images`), opened name by name
    without following a link, each missing one made (`create`, with `mode`).

    A cloned repository can put a link where such a folder goes; followed, it would lead a
    write, or the clean-up of old outputs, anywhere the link points. A link, or anything but a
    folder, raises `NotAFolder`; a missing folder without `create` raises FileNotFoundError.
    """
    fd = open_checked(root, os.O_RDONLY | os.O_DIRECTORY)
    for name in os.fspath(relative).split("/"):
        try:
            child = _open_child_folder(fd, name, create, mode, os.path.join(root, relative))
        finally:
            os.close(fd)
        fd = child
    return fd


def _open_child_folder(parent: int, name: str, create: bool, mode: int, shown: str) -> int:
    """`name` in the open folder `parent`, opened as a folder."""
    if create:
        try:
            os.mkdir(name, mode, dir_fd=parent)
        except FileExistsError:
            pass
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a link, or a file, holds the name
            raise NotAFolder(shown) from exc
        raise


class LinkOnTheWay(OSError):
    """A folder on the way to a path below a workspace is a link now, or no folder: a write
    there would lead where nobody checked, so nothing is written."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.ELOOP, f"a folder on its way ({path}) is a link or not a folder now (it changed "
                                      "since it was checked): not followed, nothing written there")
        self.path = path


# openat2(2) (Linux 5.6): the kernel resolves the whole path below a folder's descriptor, refusing
# any link and any way out, in one call. The same number on every architecture of the generic table.
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "armv7l": 437, "ppc64le": 437, "s390x": 437, "riscv64": 437}
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_openat2_missing = platform.system() != "Linux" or platform.machine() not in _SYS_OPENAT2


def _openat2(folder: int, relative: str, flags: int) -> int | None:
    """`relative` opened below the open `folder` by openat2, no link and no `..` out followed;
    None where the kernel (or a seccomp filter) has no openat2. Raises OSError as open does."""
    global _openat2_missing
    if _openat2_missing:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    how = _OpenHow(flags | _CLOEXEC, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
    fd = libc.syscall(ctypes.c_long(_SYS_OPENAT2[platform.machine()]), ctypes.c_int(folder),
                      ctypes.c_char_p(os.fsencode(relative)), ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd >= 0:
        return fd
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EPERM, errno.E2BIG):  # no openat2 here: the walk below does it
        _openat2_missing = True
        return None
    raise OSError(code, os.strerror(code), relative)


def folder_beneath(root: int, relative: str, *, create: bool = False, walk_only: bool = False) -> int:
    """A descriptor for the folder `relative` (a plain relative path, `/`-separated) below the
    open folder `root`, reached without following any link: by openat2 where the kernel has it,
    else name by name with O_NOFOLLOW (`walk_only` forces that). Missing folders are made with
    `create`, else FileNotFoundError. A link, or a file, on the way raises `LinkOnTheWay`."""
    if relative in ("", "."):
        return os.dup(root)
    if not walk_only:
        try:
            fd = _openat2(root, relative, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR):
                raise LinkOnTheWay(relative) from exc
            if exc.errno != errno.ENOENT or not create:
                raise
            fd = None  # made below, name by name
        if fd is not None:
            return fd
    fd = os.dup(root)
    for name in relative.split("/"):
        try:
            child = _open_child_folder(fd, name, create, 0o777, relative)
        except NotAFolder as exc:
            raise LinkOnTheWay(relative) from exc
        finally:
            os.close(fd)
        fd = child
    return fd


def named_in(folder: int, name: str) -> bool:
    """Whether the open folder `folder` holds an entry `name` (a link counts as itself)."""
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def opened_name(fd: int) -> str | None:
    """Where descriptor `fd` really is, as the kernel says; None where it cannot say."""
    try:
        name = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    # A file unlinked meanwhile is named "... (deleted)"; anything not absolute is no path.
    return name if name.startswith("/") and not name.endswith(" (deleted)") else None


def _confirm(fd: int, path: str, inside: str | None) -> None:
    name = opened_name(fd)
    if name is None:  # no /proc: where the path leads now, if that is still the file opened
        name = os.path.realpath(path) if _same_file(fd, path) else None
    if name is None or not (name == path if inside is None else _is_in(name, inside)):
        raise PathChanged(path)


def _is_in(name: str, folder: str) -> bool:
    return name == folder or name.startswith(folder.rstrip("/") + "/")


def _same_file(fd: int, path: str) -> bool:
    try:
        now, opened = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino)


def _is_link(path: str) -> bool:
    try:
        return os.path.islink(path)
    except (OSError, ValueError):
        return False
