"""Small prior contents, many to a file (issue 44, item 2): one SQLite database, `contents.sqlite`
in the journal's folder, a row a content (its SHA-256, its size, when it was stored, the bytes,
zlib-compressed when that saves room). SQLite is the pack and its index at once: many writers
(a kernel, a `toolkernel rewind` in a terminal) take its lock, a crash leaves the last whole
transaction, and a dropped run's rows free pages that later ones reuse.

One file a content cost a file creation each (0.7-1 ms on this machine's disks): storing the
first cells' prior contents of a 100,000-file folder took 23.8 s, and held 447 MB for a 395 MB
folder. Large contents (1 MiB and up) stay files of their own (`blobs/<sha256>`): the kernel
copies them without passing through Python (`_parts`). Every content read back is checked
against its hash by the journal (`Journal.blob`).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
import zlib
from pathlib import Path
from typing import Iterable, Iterator

FILE = "contents.sqlite"
_PLAIN, _ZLIB = 0, 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS contents (
    hash TEXT PRIMARY KEY,
    size INTEGER NOT NULL,      -- the content's own size
    stored INTEGER NOT NULL,    -- the bytes it takes here
    time REAL NOT NULL,         -- when it was stored (the day's limit counts it for a day)
    codec INTEGER NOT NULL,
    data BLOB NOT NULL
) WITHOUT ROWID;
"""


class Packs:
    """The small contents of one journal. Thread-safe: one connection under a lock."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / FILE
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        # Within `batch()`: contents to write in one transaction when its outermost block ends
        # (held here, not under a lock held across the journal's own: those are taken meanwhile).
        self._batches = threading.local()
        self._waiting: dict[str, tuple] = {}

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            # WAL: readers never wait for the writer; NORMAL: synced at checkpoints only. A content
            # a crash lost fails its run's restore as "missing", a clear error; syncing each cost
            # a shell run its time (the journal is a way back, not a store of record).
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            db.executescript(_SCHEMA)
            with contextlib.suppress(OSError):
                self.path.chmod(0o600)
            self._db = db
        return self._db

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Every content this thread stores within the block written in one transaction as it
        ends (a shell run stores thousands: a transaction each cost it its time)."""
        depth = getattr(self._batches, "depth", 0)
        self._batches.depth = depth + 1
        try:
            yield
        finally:
            self._batches.depth = depth
            if depth == 0:
                self._flush()

    def _flush(self) -> None:
        with self._lock:
            rows, self._waiting = list(self._waiting.values()), {}
            if rows:
                db = self._connection()
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.executemany("INSERT OR IGNORE INTO contents (hash, size, stored, time, codec, data) "
                                   "VALUES (?, ?, ?, ?, ?, ?)", rows)
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")

    def has(self, digest: str) -> bool:
        with self._lock:
            if digest in self._waiting:
                return True
            return self._connection().execute("SELECT 1 FROM contents WHERE hash = ?", (digest,)).fetchone() is not None

    def put(self, digest: str, data: bytes) -> int:
        """`data` stored under `digest` (kept as it is when it was there already); the bytes it takes."""
        packed = zlib.compress(data, 1) if len(data) > 64 else data
        codec = _ZLIB if len(packed) < len(data) else _PLAIN
        body = packed if codec == _ZLIB else data
        row = (digest, len(data), len(body), time.time(), codec, body)
        with self._lock:
            if getattr(self._batches, "depth", 0):
                self._waiting.setdefault(digest, row)
            else:
                self._connection().execute("INSERT OR IGNORE INTO contents (hash, size, stored, time, codec, data) "
                                           "VALUES (?, ?, ?, ?, ?, ?)", row)
        return len(body)

    def get(self, digest: str) -> bytes | None:
        """The content stored under `digest`, None when there is none (unchecked: see `Journal.blob`)."""
        with self._lock:
            waiting = self._waiting.get(digest)
            row = waiting[4:] if waiting else self._connection().execute(
                "SELECT codec, data FROM contents WHERE hash = ?", (digest,)).fetchone()
        if row is None:
            return None
        codec, body = row
        try:
            return zlib.decompress(body) if codec == _ZLIB else bytes(body)
        except zlib.error:
            return b""  # damaged: fails its hash where it is read

    def hashes(self) -> list[str]:
        with self._lock:
            return [row[0] for row in self._connection().execute("SELECT hash FROM contents")] + list(self._waiting)

    def stored_since(self, cutoff: float) -> list[tuple[float, int]]:
        """(time, size) of each content stored since `cutoff`, oldest first."""
        with self._lock:
            return list(self._connection().execute(
                "SELECT time, size FROM contents WHERE time >= ? ORDER BY time", (cutoff,))) + [
                (row[3], row[1]) for row in self._waiting.values() if row[3] >= cutoff]

    def remove(self, digests: Iterable[str]) -> None:
        digests = list(digests)
        if not digests:
            return
        with self._lock:
            for digest in digests:
                self._waiting.pop(digest, None)
            db = self._connection()
            db.execute("BEGIN IMMEDIATE")
            db.executemany("DELETE FROM contents WHERE hash = ?", ((d,) for d in digests))
            db.execute("COMMIT")
            db.execute("PRAGMA incremental_vacuum")

    def close(self) -> None:
        self._flush()
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
