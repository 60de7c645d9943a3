"""A tracked, unmodified file's prior content, referenced from git's own objects (issue 44, item 2).

In a git repository, the content of a file git's index holds as it is now is already kept, by
git: the journal names its blob (`git:<blob id>:<repository>`) instead of storing a copy. "As it
is now" is git's own test, read from its index with `git ls-files --stage --debug` (a stat a
file, as git compares them: size, mtime to the nanosecond, inode, the executable bit), and an
entry as new as the index itself is "racily clean" to git, so it is stored as any other file.
Only `ls-files` and `cat-file` run, with the filesystem monitor off and no optional lock: no
filter, hook or monitor a repository's config names is started, and git's index is never
written. Read back (`cat-file --batch`), each content is checked against its blob id.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from typing import Iterable, Mapping

PREFIX = "git:"
REF = re.compile(r"git:([0-9a-f]{40}|[0-9a-f]{64}):(/.*)", re.S)
_ENTRY = re.compile(
    rb"(\d{6}) ([0-9a-f]{40,64}) (\d)\t([^\0]*)\0"
    rb"\s*ctime: \d+:\d+\n\s*mtime: (\d+):(\d+)\n\s*dev: \d+\tino: (\d+)\n\s*uid: \d+\tgid: \d+\n"
    rb"\s*size: (\d+)\tflags: [0-9a-f]+\n")
_GIT = ("git", "-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false", "--no-optional-locks")
_TIMEOUT = 60


def ref(blob: str, repository: str) -> str:
    return f"{PREFIX}{blob}:{repository}"


def is_ref(digest: object) -> bool:
    return isinstance(digest, str) and digest.startswith(PREFIX)


def repository_above(folder: str) -> str | None:
    """The repository whose work tree holds `folder` (a real path), found upward; None if none."""
    here = folder
    while True:
        if os.path.lexists(os.path.join(here, ".git")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def unmodified(repository: str, workdir: str, files: Mapping[str, tuple]) -> dict[str, str]:
    """Of the workspace's `files` (relative path -> (size, mtime_ns, mode, inode, kind)) in the
    repository at `repository` (a real path), those git's index holds as they are now: path ->
    blob reference. Empty when git cannot say (no git, not a repository git will open)."""
    try:
        index_mtime = os.stat(os.path.join(repository, ".git", "index")).st_mtime_ns
    except OSError:
        return {}
    try:
        listed = subprocess.run([*_GIT, "-C", repository, "ls-files", "--stage", "--debug", "-z"],
                                capture_output=True, timeout=_TIMEOUT, env=_environment(), check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    if listed.returncode != 0:
        return {}
    found = {}
    prefix = os.path.relpath(repository, workdir)
    for match in _ENTRY.finditer(listed.stdout):
        mode, blob, stage, name, seconds, nanos, inode, size = match.groups()
        if stage != b"0" or mode not in (b"100644", b"100755"):
            continue
        path = os.path.normpath(os.path.join(prefix, os.fsdecode(name))) if prefix != "." else os.fsdecode(name)
        state = files.get(path)
        if state is None or state[4] != "file":
            continue
        mtime_ns = int(seconds) * 1_000_000_000 + int(nanos)
        if mtime_ns >= index_mtime:
            continue  # racily clean: git itself would compare the content
        if (state[0], state[1], state[3]) != (int(size), mtime_ns, int(inode)):
            continue
        if bool(state[2] & 0o100) != (mode == b"100755"):
            continue
        found[path] = ref(blob.decode(), repository)
    return found


def read(refs: Iterable[str]) -> dict[str, bytes | str]:
    """Each reference's content, checked against its blob id, or why there is none."""
    by_repository: dict[str, list[str]] = {}
    for reference in set(refs):
        match = REF.fullmatch(reference)
        if match is None:
            continue
        by_repository.setdefault(match[2], []).append(match[1])
    found: dict[str, bytes | str] = {}
    for repository, blobs in by_repository.items():
        found.update({ref(blob, repository): data for blob, data in _batch(repository, blobs).items()})
    return found


def _batch(repository: str, blobs: list[str]) -> dict[str, bytes | str]:
    try:
        done = subprocess.run([*_GIT, "-C", repository, "cat-file", "--batch"], input="".join(
            f"{blob}\n" for blob in blobs).encode(), capture_output=True, timeout=_TIMEOUT, env=_environment(),
            check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return {blob: f"git could not read its objects ({exc})" for blob in blobs}
    out, at, found = done.stdout, 0, {}
    for blob in blobs:
        end = out.find(b"\n", at)
        head = out[at:end].split() if end >= 0 else []
        if len(head) != 3 or head[0].decode() != blob or head[1] != b"blob":
            found[blob] = "missing from the repository's objects (pruned, or the repository moved)"
            at = end + 1 if end >= 0 else len(out)
            continue
        size = int(head[2])
        data = out[end + 1:end + 1 + size]
        at = end + 1 + size + 1
        digest = (hashlib.sha1 if len(blob) == 40 else hashlib.sha256)(b"blob %d\0" % size + data).hexdigest()
        found[blob] = data if digest == blob else "damaged in the repository's objects (its id does not match)"
    return found


def _environment() -> dict[str, str]:
    """git's environment: no repository, index or work tree named from outside, no prompt."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env
