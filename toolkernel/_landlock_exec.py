"""Run a program under Landlock: `python -I -S _landlock_exec.py SPEC_JSON PROGRAM [ARG...]`.

The fallback of the OS sandbox (`_sandbox.py`) where bubblewrap cannot make one (no user
namespaces). Landlock is the Linux security module Codex CLI uses: a process restricts
itself, unprivileged, and what it starts inherits the restriction, which cannot be undone.
It only grants, so the spec lists where writing is allowed (each top-level entry of the
workspace but the protected ones, a private temporary folder, /dev); everything else,
the protected entries included, cannot be written, and new top-level names cannot be made.
Reading stays allowed everywhere (Landlock cannot hide a folder inside an allowed tree).
Unless the spec allows the network, TCP bind and connect are refused (ABI 4+), and so are
abstract Unix sockets and signals to processes outside (ABI 6+).

Standard library only, started with `-I -S`: it runs before the program, on every call.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import sys

_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446  # the same numbers on every architecture
_PATH_BENEATH, _NET_PORT = 1, 2
_VERSION_FLAG = 1
_PR_SET_NO_NEW_PRIVS = 38

_WRITE_FILE, _REMOVE_DIR, _REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
_MAKE = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER, _TRUNCATE = 1 << 13, 1 << 14
_FILE_WRITES = _WRITE_FILE | _TRUNCATE
_TCP = (1 << 0) | (1 << 1)  # bind, connect
_SCOPED = (1 << 0) | (1 << 1)  # abstract Unix sockets, signals


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi() -> int:
    """The Landlock ABI version this kernel offers (0: none)."""
    if not sys.platform.startswith("linux"):
        return 0
    version = _libc().syscall(_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION_FLAG))
    return max(0, int(version))


def _writes(version: int) -> int:
    bits = _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE
    if version >= 2:
        bits |= _REFER
    if version >= 3:
        bits |= _TRUNCATE
    return bits


def restrict(writable: list[str], network: bool) -> None:
    """Restrict this process (and what it starts) to writing only beneath `writable`."""
    version = abi()
    if version < 1:
        raise OSError("this kernel has no Landlock")
    libc = _libc()
    handled = _writes(version)
    attr = struct.pack("Q", handled)
    if version >= 4:
        attr += struct.pack("Q", 0 if network else _TCP)
    if version >= 6:
        attr += struct.pack("Q", 0 if network else _SCOPED)
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(_CREATE, buffer, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        for path in writable:
            _allow(libc, ruleset, path, handled)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(_RESTRICT, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _allow(libc, ruleset: int, path: str, handled: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone since the plan was made: nothing to allow
    try:
        is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
        allowed = handled if is_dir else handled & _FILE_WRITES
        rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, fd), 12)
        if libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_PATH_BENEATH), rule, ctypes.c_uint32(0)):
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
    finally:
        os.close(fd)


def main(argv: list[str]) -> None:
    spec = json.loads(argv[1])
    program = argv[2:]
    try:
        restrict(spec["writable"], spec.get("network", False))
    except OSError as exc:
        sys.stderr.write(f"toolkernel: the Landlock sandbox could not be set up ({exc}); nothing ran\n")
        sys.exit(126)
    os.execvp(program[0], program)


if __name__ == "__main__":
    main(sys.argv)
