"""Run a program under Landlock: `python -I -S _landlock_exec.py SPEC_JSON PROGRAM [ARG...]`.

The fallback of the OS sandbox (`_sandbox.py`) where bubblewrap cannot make one (no user
namespaces). Landlock is the Linux security module Codex CLI uses: a process restricts
itself, unprivileged, and what it starts inherits the restriction, which cannot be undone.
It only grants, so the spec lists where writing is allowed (each entry of the workspace but
the protected ones, a private temporary folder, /dev/null and the like); everything else,
the protected entries included, cannot be written, and new top-level names cannot be made.
A link is never granted (the grant would be its target's). Reading stays allowed everywhere
(Landlock cannot hide a folder inside an allowed tree). TCP bind and connect are refused
(ABI 4, required), ioctls on devices (ABI 5: no TIOCSTI into a terminal), and abstract Unix
sockets and signals to processes outside (ABI 6). A network grant is none of Landlock's: the
caller asks a person instead. Last, the system call filter the spec carries (`_seccomp`: no
keyring, no typing into a terminal) is installed, and the program runs under this process, which
ends whatever it left running when it ends (`supervise`).

Before that, every capability goes: the ambient ones, the bounding set, the effective,
permitted and inheritable ones, with the securebits locked so that running as uid 0 gives
none back. Run as root (a container, CI), a process with capabilities writes what it likes
whatever Landlock says of paths (CAP_DAC_OVERRIDE is no path right), so where they cannot all be
dropped nothing runs (exit 126). An unprivileged process holds none, and no_new_privs keeps
setuid programs and file capabilities from giving any.

Standard library only, started with `-I -S`: it runs before the program, on every call.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import stat
import struct
import sys

_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446  # the same numbers on every architecture
_PATH_BENEATH, _NET_PORT = 1, 2
_VERSION_FLAG = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP, _PR_GET_SECUREBITS, _PR_SET_SECUREBITS = 24, 27, 28
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_PR_SET_CHILD_SUBREAPER = 36
_CAPSET = {"x86_64": 126, "aarch64": 91, "i686": 185, "armv7l": 185, "ppc64le": 184, "s390x": 185, "riscv64": 91}
_CAPABILITY_V3 = 0x20080522
# NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE and KEEP_CAPS off, each locked.
_SECUREBITS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 3) | (1 << 5) | (1 << 6) | (1 << 7)
MIN_ABI = 4

_WRITE_FILE, _REMOVE_DIR, _REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
_MAKE = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
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
    if version >= 5:
        bits |= _IOCTL_DEV  # handled and granted nowhere: no ioctl on any device
    return bits


def capabilities() -> dict[str, int]:
    """This process's capability sets (`CapEff`, `CapBnd`, ...) and `NoNewPrivs`, from /proc."""
    found = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name.startswith("Cap"):
                found[name] = int(value.strip(), 16)
            elif name == "NoNewPrivs":
                found[name] = int(value.strip())
    return found


def privileged() -> bool:
    held = capabilities()
    return os.geteuid() == 0 or any(held.get(name, 0) for name in ("CapEff", "CapPrm", "CapAmb", "CapInh"))


def drop_capabilities(libc) -> None:
    """Every capability gone for good, or OSError: ambient cleared, the bounding set emptied
    and the securebits locked (which need CAP_SETPCAP, so first), then effective, permitted
    and inheritable zeroed. Checked in /proc afterwards."""
    if not privileged():
        return  # none held; no_new_privs (set next) keeps any from being gained
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    try:
        with open("/proc/sys/kernel/cap_last_cap") as last:
            top = int(last.read())
    except (OSError, ValueError):
        top = 63
    for cap in range(top + 1):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"the bounding set kept capability {cap}")
    if libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "the securebits could not be locked")
    number = _CAPSET.get(os.uname().machine)
    if number is None:
        raise OSError(f"no capset system call known for {os.uname().machine}")
    header = struct.pack("=Ii", _CAPABILITY_V3, 0)
    data = bytes(24)  # two (effective, permitted, inheritable) triples of 32 bits, all zero
    if libc.syscall(number, ctypes.c_char_p(header), ctypes.c_char_p(data)) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    held = capabilities()
    left = [name for name in ("CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd") if held.get(name)]
    if left or libc.prctl(_PR_GET_SECUREBITS, 0, 0, 0, 0) & _SECUREBITS != _SECUREBITS:
        raise OSError(f"capabilities are still held ({', '.join(left) or 'securebits unlocked'})")


def restrict(writable: list[str], network: bool) -> None:
    """Restrict this process (and what it starts) to writing only beneath `writable`, with no
    capability."""
    version = abi()
    if version < MIN_ABI:
        raise OSError(f"this kernel's Landlock (ABI {version}) cannot refuse TCP; {MIN_ABI} or later is needed")
    libc = _libc()
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    drop_capabilities(libc)
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
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # gone since the plan was made: nothing to allow
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISLNK(mode):
            return  # a link made since the plan: never granted (its target's grant it would be)
        allowed = handled & ~_IOCTL_DEV if stat.S_ISDIR(mode) else handled & _FILE_WRITES
        rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, fd), 12)
        if libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_PATH_BENEATH), rule, ctypes.c_uint32(0)):
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
    finally:
        os.close(fd)


def holds() -> list[str]:
    """What Landlock holds on this machine, one line each (for `toolkernel doctor`)."""
    version = abi()
    lines = [f"ABI {version} ({MIN_ABI} or later is needed to refuse TCP){'' if version >= MIN_ABI else ': too old'}"]
    if privileged():
        lines.append("run with capabilities: each cell drops them all, empties the bounding set and locks the"
                     " securebits, or does not run")
    else:
        lines.append("unprivileged: no capability held, and no_new_privs keeps setuid programs from giving one")
    lines.append("device ioctls refused (no TIOCSTI into a terminal)" if version >= 5 else
                 "device ioctls NOT refused (ABI 5 is needed): a process could type into an open terminal")
    lines.append(f"writable: the workspace's unprotected entries, a private temporary folder, {', '.join(DEVICES)}")
    lines.append("links in the workspace are never granted; new top-level names cannot be made")
    lines.append("NOT held: reading (credentials, the home folder), Unix sockets by path, the environment's"
                 " allow-list only; a network grant asks a person instead")
    return lines


# The devices a sandboxed process may write (a terminal of the person's is not one).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def filter_calls(program: bytes) -> None:
    """Install the system call filter `program` (BPF, made by `_seccomp`: no keyring, no typing
    into a terminal) on this process and what it starts; no_new_privs is set already."""
    class _Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    code = ctypes.create_string_buffer(program, len(program))
    fprog = _Program(len(program) // 8, ctypes.addressof(code))
    libc = _libc()
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if not program or libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "the system call filter could not be installed")


def main(argv: list[str]) -> None:
    spec = json.loads(argv[1])
    program = argv[2:]
    try:
        restrict(spec["writable"], spec.get("network", False))
        filter_calls(bytes.fromhex(spec.get("seccomp", "")))
    except OSError as exc:
        sys.stderr.write(f"toolkernel: the Landlock sandbox could not be set up ({exc}); nothing ran\n")
        sys.exit(126)
    supervise(program)


def supervise(program: list[str]) -> None:
    """Run `program` and, once it has ended, end whatever it left running, then exit as it did.

    Landlock makes no process table of its own (bubblewrap's ends every process in it with the
    cell), so a process that left the cell's group (`setsid`, a double fork) outlived the cell and
    wrote the workspace after the end of the run had looked (a `.git` made a minute later stayed).
    This process is their subreaper: each orphan of the program's comes to it, and is ended."""
    _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    child = os.fork()
    if child == 0:
        try:
            os.execvp(program[0], program)
        except OSError as exc:
            sys.stderr.write(f"{program[0]}: {exc.strerror}\n")
            os._exit(127)
    # The program (in this process group) takes an interrupt as it would alone; this one follows it out.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    _, status = os.waitpid(child, 0)
    _end_orphans()
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128 + os.WTERMSIG(status))


def _end_orphans() -> None:
    """Kill this process's children until it has none: those of a killed one come here as it ends,
    before it can be reaped, so the next look finds them."""
    while True:
        try:
            with open(f"/proc/self/task/{os.getpid()}/children") as listed:
                children = [int(pid) for pid in listed.read().split()]
        except OSError:
            children = []
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


if __name__ == "__main__":
    main(sys.argv)
