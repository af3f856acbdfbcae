"""Fast DDS's shared-memory segments left by processes that ended without closing them.

The graph's processes talk through Fast DDS shared memory (config/fastdds_shm_loopback.xml: a 64 MB
segment per participant, a file in /dev/shm). A process that is killed, or crashes, leaves its
segment there, in memory, until the machine restarts: a node that launch respawns after each crash
would leak 64 MB a time. Fast DDS marks a segment in use with an exclusive `flock` on its lock file
(`<segment>_el`), held by the owner while it lives; a lock that can be taken has no owner, as Fast
DDS's own `fastdds shm clean` reads it. Every process of the graph removes such segments when it
starts, before its own participant exists.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from pathlib import Path

SHM_FOLDER = Path("/dev/shm")
MIN_AGE_S = 60.0  # younger lock files are left alone: their owner may be between creating and locking them
_SEGMENT_LOCK = re.compile(r"(fastdds|fastrtps)_[0-9a-f]{16}_el")


def remove_dead_segments(folder: Path = SHM_FOLDER, min_age_s: float = MIN_AGE_S) -> tuple[int, int]:
    """Remove the segments in `folder` whose lock no process holds (and their lock files); the number
    removed and the bytes they held. Files this user may not remove, or that go meanwhile, are skipped."""
    try:
        names = os.listdir(folder)
    except OSError:  # no such folder: not Linux, or no shared memory
        return 0, 0
    removed = freed = 0
    now = time.time()
    for name in names:
        if not _SEGMENT_LOCK.fullmatch(name):
            continue
        lock, segment = folder / name, folder / name[:-len("_el")]
        try:
            if now - lock.stat().st_mtime < min_age_s:
                continue
            with open(lock, "ab") as held:
                try:
                    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its owner lives
                size = segment.stat().st_size if segment.exists() else 0
                segment.unlink(missing_ok=True)
                lock.unlink()
        except OSError:
            continue
        removed, freed = removed + 1, freed + size
    return removed, freed
