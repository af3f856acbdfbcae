"""The robot-side probe's events (testbed/probe.py), collected as they come, and what they measure.

Times are ns on the machine's clock. A fault starts at `fault_ns` (the link cut, the inference
processes killed) and ends at `healed_ns` (the link back, the processes restarted):
- hold delay: the controller's first "action chunk ran out" hold after the fault, minus the end
  of the chunk it had followed (the report names the observation behind it; the probe's own
  chunks may differ from the controller's under loss, each reader getting its own resends)
  (<= one command period means it held in time; it may be negative: a trajectory command is meant
  one period ahead);
- resume: the first "streaming" state after the heal, minus the heal;
- stale commands: commands after the hold that moved the arm while the controller followed a chunk
  made from an observation taken before the fault began, or while it reported holding (the
  controller's reports name the observation behind the chunk it follows; a command goes out up to
  one period before the report of the state it starts); counted until it follows a fresh chunk;
and over a whole run: chunk rate, the age of the observation behind each chunk at its arrival,
the command period error.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import IO, Iterable

import numpy as np

RAN_OUT = "holding: action chunk ran out"
STREAMING = "streaming"


@dataclass(frozen=True)
class Chunk:
    arrival_ns: int
    stamp_ns: int  # the observation it was made from
    end_ns: int  # the instant of its last row


@dataclass(frozen=True)
class FaultOutcome:
    hold_delay_ms: float  # hold minus the last chunk's end
    resume_ms: float  # first streaming state after the heal, from the heal
    stale_commands: int


class Recording:
    def __init__(self):
        self._lock = threading.Lock()
        self.states: list[tuple[int, str, int | None]] = []  # (t, message, stamp of the chunk it follows)
        self.chunks: list[Chunk] = []
        self.commands: list[tuple[int, tuple[float, ...]]] = []

    def add_line(self, line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return  # not an event (a log line of the probe's process)
        with self._lock:
            if event.get("kind") == "state":
                self.states.append((event["t"], event["message"], event.get("chunk_stamp")))
            elif event.get("kind") == "chunk":
                self.chunks.append(Chunk(event["t"], event["stamp"], event["end"]))
            elif event.get("kind") == "command":
                self.commands.append((event["t"], tuple(event["positions"])))

    def follow(self, stream: IO[str]) -> threading.Thread:
        """Read `stream` (the probe's stdout) on a thread of its own until it ends."""
        thread = threading.Thread(target=self._read, args=(stream,), daemon=True, name="probe-reader")
        thread.start()
        return thread

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.add_line(line)

    # queries ---------------------------------------------------------------------------------------

    def first_state(self, prefix: str, after_ns: int) -> int | None:
        with self._lock:
            return next((t for t, message, _ in self.states if t >= after_ns and message.startswith(prefix)), None)

    def streaming_since(self, after_ns: int) -> bool:
        return self.first_state(STREAMING, after_ns) is not None

    def chunks_since(self, after_ns: int) -> int:
        with self._lock:
            return sum(chunk.arrival_ns >= after_ns for chunk in self.chunks)

    def hold_after(self, fault_ns: int) -> tuple[float, bool] | None:
        """(ms from the followed chunk's end to the controller's hold after `fault_ns`, whether every
        command since the hold stayed at the held position); None before the controller holds."""
        hold_ns = self.first_state(RAN_OUT, fault_ns)
        if hold_ns is None:
            return None
        with self._lock:
            last_end = self._end_of_followed(hold_ns)
            positions = [p for t, p in self.commands if t >= hold_ns]
        if last_end is None:
            raise ValueError("no chunk arrived before the hold")
        return (hold_ns - last_end) / 1e6, all(p == positions[0] for p in positions)

    def fault_outcome(self, fault_ns: int, healed_ns: int, period_ns: int) -> FaultOutcome:
        """What one fault measured; ValueError when the controller never held or never resumed."""
        hold_ns = self.first_state(RAN_OUT, fault_ns)
        resumed_ns = self.first_state(STREAMING, healed_ns)
        if hold_ns is None or resumed_ns is None:
            raise ValueError(f"the controller {'never held' if hold_ns is None else 'never resumed'} "
                             f"after the fault at {fault_ns}")
        with self._lock:
            last_end = self._end_of_followed(hold_ns)
            reports = [(t, stamp) for t, message, stamp in self.states
                       if t >= hold_ns and message.startswith(STREAMING)]
            commands = [(t, p) for t, p in self.commands if t >= hold_ns]
        if last_end is None:
            raise ValueError("no chunk arrived before the hold")
        fresh_ns = next((t for t, stamp in reports if stamp is not None and stamp >= fault_ns), None)
        held = commands[0][1] if commands else ()
        stale = 0
        for t, positions in commands:
            if fresh_ns is not None and t >= fresh_ns - period_ns:
                break
            followed = [stamp for report_t, stamp in reports if report_t <= t + period_ns]
            if positions != held and (not followed or followed[-1] is None or followed[-1] < fault_ns):
                stale += 1
        return FaultOutcome((hold_ns - last_end) / 1e6, (resumed_ns - healed_ns) / 1e6, stale)

    def _end_of_followed(self, hold_ns: int) -> int | None:
        """The end of the chunk the controller followed until its hold at `hold_ns` (its report's
        stamp plus a chunk's length); without a stamp, the newest end among the probe's chunks."""
        stamp = next((stamp for t, _, stamp in self.states if t == hold_ns), None)
        if stamp is not None and self.chunks:
            return stamp + self.chunks[-1].end_ns - self.chunks[-1].stamp_ns
        return max((c.end_ns for c in self.chunks if c.arrival_ns <= hold_ns), default=None)

    def stream_figures(self, start_ns: int, end_ns: int, period_s: float) -> dict[str, float]:
        """Chunk rate, observation age at the chunk's arrival (p50/p99), command period error p99,
        over [start_ns, end_ns)."""
        with self._lock:
            chunks = [c for c in self.chunks if start_ns <= c.arrival_ns < end_ns]
            ticks = np.array([t for t, _ in self.commands if start_ns <= t < end_ns], dtype=np.int64)
        ages_ms = np.array([(c.arrival_ns - c.stamp_ns) / 1e6 for c in chunks])
        errors_ms = np.abs(np.diff(ticks) / 1e6 - period_s * 1e3) if len(ticks) > 1 else np.array([np.nan])
        return {
            "chunk_rate_hz": len(chunks) / ((end_ns - start_ns) / 1e9),
            "chunk_age_p50_ms": _percentile(ages_ms, 50), "chunk_age_p99_ms": _percentile(ages_ms, 99),
            "command_rate_hz": len(ticks) / ((end_ns - start_ns) / 1e9),
            "period_error_p99_ms": _percentile(errors_ms, 99),
        }


def _percentile(values: Iterable[float] | np.ndarray, q: float) -> float:
    values = np.asarray(values, dtype=np.float64)
    return float(np.percentile(values, q)) if values.size else float("nan")
