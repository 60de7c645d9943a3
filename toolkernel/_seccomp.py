"""The system calls an agent's sandboxed processes may not make: a seccomp filter, made with
libseccomp (through `pyseccomp`), as Flatpak lays one under bubblewrap.

- The kernel's keyrings (`keyctl`, `add_key`, `request_key`). Neither a mount nor Landlock
  reaches them, and a process of the person's user finds the user's keyring and its session's,
  with what is kept there: a Kerberos ticket (`KEYRING:persistent`, the default of Fedora and
  RHEL), a token a credential helper cached. A cell read them from inside either sandbox.
- Typing into a terminal (`ioctl` TIOCSTI, TIOCLINUX), which Landlock refuses only from ABI 5.
  The request is compared in its low 32 bits, as the kernel reads it.

A call of another architecture (a 32-bit one on x86-64, where the same call has another number)
ends the process: libseccomp's filter kills on a foreign architecture. The filter is made once
per process; where libseccomp cannot be loaded there is none, and no sandbox is offered
(`_sandbox.mechanism`): the callers ask a person instead.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile

REFUSED_CALLS = ("keyctl", "add_key", "request_key")
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C


@functools.lru_cache(maxsize=1)
def made() -> bytes | str:
    """The filter as a BPF program, or why it cannot be made here."""
    try:
        import pyseccomp
    except (ImportError, RuntimeError, OSError) as exc:  # RuntimeError: it found no libseccomp
        return f"no system call filter here: libseccomp cannot be loaded ({exc}); apt-get install libseccomp2"
    refuse = pyseccomp.ERRNO(errno.EPERM)
    calls = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    try:
        for name in REFUSED_CALLS:
            calls.add_rule(refuse, name)
        for request in (_TIOCSTI, _TIOCLINUX):
            calls.add_rule(refuse, "ioctl", pyseccomp.Arg(1, pyseccomp.MASKED_EQ, 0xFFFFFFFF, request))
        with tempfile.TemporaryFile() as out:
            calls.export_bpf(out)
            out.seek(0)
            return out.read()
    except OSError as exc:
        return f"the system call filter could not be made ({exc})"


def program() -> bytes:
    """The filter; raises OSError where it cannot be made (check `made()` first)."""
    found = made()
    if isinstance(found, str):
        raise OSError(found)
    return found


def program_file() -> str:
    """A path that opens `program()` anew each time, for bubblewrap to read from a descriptor
    (`--seccomp FD`) at each start: this process's memory file, nothing on disk (a kernel that
    is killed leaves nothing behind); made again in a forked child."""
    return f"/proc/{os.getpid()}/fd/{_memory_file(os.getpid())}"


@functools.lru_cache(maxsize=2)
def _memory_file(pid: int) -> int:
    fd = os.memfd_create("toolkernel-seccomp")  # close-on-exec: no child holds it
    os.write(fd, program())
    return fd
