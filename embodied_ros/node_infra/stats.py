"""Rolling statistics of a stage (rate, latency, staleness) and of a periodic stream, as diagnostics."""

from __future__ import annotations

import re
import threading
from collections import deque

import numpy as np
from diagnostic_msgs.msg import DiagnosticStatus, KeyValue


def percentiles(values, qs=(50, 99)) -> list[float]:
    """Percentiles of `values` (NaN when empty), the way every report in this package takes them:
    linear between the two nearest ranks, as numpy's default. Not np.percentile itself: its first
    call in a process takes 7 ms (38 ms on a loaded 2-core machine), and the controller's first
    streaming tick reports its period errors."""
    values = np.asarray(values, dtype=np.float64)
    ordered = np.sort(values[np.isfinite(values)])
    if ordered.size == 0:
        return [float("nan")] * len(qs)
    result = []
    for q in qs:
        rank = q / 100 * (ordered.size - 1)
        below = int(rank)
        above = min(below + 1, ordered.size - 1)
        result.append(float(ordered[below] + (ordered[above] - ordered[below]) * (rank - below)))
    return result


class StageStats:
    """Runs of one stage over a recent window: how often, how long, how old its inputs were."""

    def __init__(self, window_s: float):
        self.window_ns = int(window_s * 1e9)
        self._runs: deque[tuple[int, float, float]] = deque()  # (wall ns, compute ms, staleness ms)
        self._lock = threading.Lock()
        self.total_runs = 0
        self.skipped = 0
        self.errors = 0
        self.problem = ""  # why the last attempt produced nothing; "" after a good run
        self.level = DiagnosticStatus.OK

    def record_run(self, wall_ns: int, compute_ms: float, staleness_ms: float) -> None:
        with self._lock:
            self._runs.append((wall_ns, compute_ms, staleness_ms))
            self._trim(wall_ns)
            self.total_runs += 1
            self.problem, self.level = "", DiagnosticStatus.OK

    def record_skip(self, reason: str, level: bytes = DiagnosticStatus.WARN) -> None:
        with self._lock:
            self.skipped += 1
            self.problem, self.level = reason, level

    def record_error(self, reason: str) -> None:
        with self._lock:
            self.errors += 1
            self.problem, self.level = reason, DiagnosticStatus.ERROR

    def summary(self, wall_ns: int) -> dict[str, float]:
        with self._lock:
            self._trim(wall_ns)
            runs = list(self._runs)
        rate = 0.0
        if len(runs) >= 2 and runs[-1][0] > runs[0][0]:
            rate = (len(runs) - 1) / ((runs[-1][0] - runs[0][0]) / 1e9)
        compute = percentiles([r[1] for r in runs])
        staleness = percentiles([r[2] for r in runs])
        return {"rate_hz": rate, "compute_ms_p50": compute[0], "compute_ms_p99": compute[1],
                "staleness_ms_p50": staleness[0], "staleness_ms_p99": staleness[1],
                "runs": float(self.total_runs), "skipped": float(self.skipped), "errors": float(self.errors)}

    def status(self, name: str, hardware_id: str, wall_ns: int, extra: dict[str, str] | None = None
               ) -> DiagnosticStatus:
        values = {key: f"{value:.3f}" for key, value in self.summary(wall_ns).items()}
        values.update(extra or {})
        return diagnostic_status(name, hardware_id, self.level, self.problem or "running", values)

    def _trim(self, wall_ns: int) -> None:
        while self._runs and wall_ns - self._runs[0][0] > self.window_ns:
            self._runs.popleft()


class PeriodStats:
    """Intervals between ticks of a stream meant to be periodic, and their error from the period."""

    def __init__(self, period_s: float, keep: int = 3000):
        self.period_ms = period_s * 1e3
        self._ticks: deque[int] = deque(maxlen=keep)
        self._lock = threading.Lock()

    def tick(self, wall_ns: int) -> None:
        with self._lock:
            self._ticks.append(wall_ns)

    def errors_ms(self) -> np.ndarray:
        with self._lock:
            ticks = np.asarray(self._ticks, dtype=np.float64)
        return np.abs(np.diff(ticks) / 1e6 - self.period_ms)

    def summary(self) -> dict[str, float]:
        p50, p99 = percentiles(self.errors_ms())
        return {"period_error_ms_p50": p50, "period_error_ms_p99": p99}


def reason_kind(reason: str) -> str:
    """A reason with its measured numbers replaced by N ("... 612 ms old (limit 500 ms)" -> "... N ms
    old (limit N ms)"), so repeats of one kind compare equal; numbers inside names (base_0_rgb) stay."""
    return re.sub(r"(?<![\w.])-?\d+(\.\d+)?([eE][-+]?\d+)?(?![\w.])", "N", reason)


def diagnostic_status(name: str, hardware_id: str, level: bytes, message: str,
                      values: dict[str, str]) -> DiagnosticStatus:
    return DiagnosticStatus(level=level, name=name, message=message, hardware_id=hardware_id,
                            values=[KeyValue(key=k, value=str(v)) for k, v in values.items()])


def status_values(status: DiagnosticStatus) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}
