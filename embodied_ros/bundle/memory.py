"""How much memory a load may take, checked before it starts.

A load that does not fit is refused up front (`check_fits`, one line: needed vs available) rather
than left to the kernel's OOM killer, which ends the process without a word. Available memory is
the smaller of the system's MemAvailable (free memory plus the page cache it can reclaim) and what
the process's cgroup still allows: its limit less its working set, the usage without the inactive
file pages the kernel reclaims first (memory.max - memory.current + inactive_file, v2; limit - usage +
total_inactive_file, v1). A bundle read before stays in the cgroup's page cache and counts in its
usage; counting it as taken refused loads that fit.
"""

from __future__ import annotations

from pathlib import Path

from embodied_ros.bundle.errors import BundleError

GIB = 1 << 30


class BundleMemoryError(BundleError):
    """The machine has less memory available than the load needs."""


def available_memory(proc: Path = Path("/proc"), cgroup: Path = Path("/sys/fs/cgroup")) -> tuple[int, str]:
    """(bytes available to this process, where the figure comes from)."""
    figures = []
    meminfo = _meminfo(proc / "meminfo")
    if "MemAvailable" in meminfo:
        figures.append((meminfo["MemAvailable"], "MemAvailable"))
    limit = _cgroup_room(cgroup, *_own_cgroups(proc))
    if limit is not None:
        figures.append((limit, "cgroup limit"))
    if not figures:
        return 1 << 62, "unknown"
    return min(figures)


def check_fits(needed: int, what: str, proc: Path = Path("/proc"), cgroup: Path = Path("/sys/fs/cgroup")) -> None:
    """Raise BundleMemoryError (one line) if `needed` bytes exceed the memory available."""
    available, source = available_memory(proc, cgroup)
    if needed > available:
        raise BundleMemoryError(f"{what} needs {needed / GIB:.1f} GiB of memory, {available / GIB:.1f} GiB are "
                                f"available ({source}); refusing to load (use a smaller weight type, e.g. "
                                "--quant q8_0 or q4_k, or free memory)")


def _meminfo(path: Path) -> dict[str, int]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    values = {}
    for line in lines:  # /proc/meminfo: "Key: value kB"; a cgroup's memory.stat: "key value" (bytes)
        key, _, rest = line.partition(":") if ":" in line else line.partition(" ")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return values


def _read_number(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _own_cgroups(proc: Path) -> tuple[str, str]:
    """The process's cgroup paths (v2, v1 memory controller) relative to their hierarchy's root."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return "", ""
    fields = [line.split(":", 2) for line in lines if line.count(":") >= 2]
    v2 = next((path for _, controllers, path in fields if not controllers), "/")
    v1 = next((path for _, controllers, path in fields if "memory" in controllers.split(",")), "/")
    return v2.lstrip("/"), v1.lstrip("/")


def _cgroup_room(root: Path, v2: str, v1: str) -> int | None:
    """Bytes the process's cgroup may still take, or None where it sets no limit."""
    own = root / v2 if (root / v2 / "memory.max").exists() else root
    limit, usage = _read_number(own / "memory.max"), _read_number(own / "memory.current")
    reclaimable = _meminfo(own / "memory.stat").get("inactive_file", 0)
    if limit is None:  # cgroup v1 (a huge number means no limit)
        memory = root / "memory" / v1 if (root / "memory" / v1 / "memory.limit_in_bytes").exists() else root / "memory"
        limit, usage = (_read_number(memory / "memory.limit_in_bytes"), _read_number(memory / "memory.usage_in_bytes"))
        reclaimable = _meminfo(memory / "memory.stat").get("total_inactive_file", 0)
        if limit is not None and limit >= 1 << 60:
            limit = None
    if limit is None:
        return None
    return max(0, limit - max(0, (usage or 0) - reclaimable))
