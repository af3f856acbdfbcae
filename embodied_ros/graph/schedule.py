"""The multi-rate schedule: which step each stage runs on, and lock-step readiness.

Steps are numbered from 0. A stage with period P runs on steps k with k % P == 0 and reads, from
each upstream stage with period Q, the output of step k - k % Q (the newest one made at or before
k). In lock-step mode a stage waits for exactly those outputs, so every run sees the same inputs
whatever the timing; an upstream that had nothing to give publishes a skip marker for its step,
and the consumer falls back to that upstream's newest earlier output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

SKIPPED = None  # value of an upstream output that was a skip marker


@dataclass(frozen=True)
class StepClock:
    """Lock-step time axis: step k happens at start + k * period."""

    start_ns: int
    period_ns: int

    def stamp_of(self, step: int) -> int:
        return self.start_ns + step * self.period_ns

    def step_of(self, stamp_ns: int) -> int | None:
        """The step at `stamp_ns`, or None when the stamp is not on the step grid."""
        offset = stamp_ns - self.start_ns
        if offset < 0 or offset % self.period_ns:
            return None
        return offset // self.period_ns


def runs_on(step: int, period: int) -> bool:
    return step % period == 0


def source_step(step: int, upstream_period: int) -> int:
    """The step of the upstream output a stage reads at `step`."""
    return step - step % upstream_period


class LockstepGate:
    """Tracks the steps a stage still owes and tells when all their inputs have arrived."""

    def __init__(self, period: int, upstream_periods: Mapping[str, int]):
        self.period = period
        self.upstream_periods = dict(upstream_periods)
        self._pending: list[int] = []
        self._last_seen_step = -1
        self._arrived: dict[str, dict[int, Any]] = {name: {} for name in upstream_periods}
        self._fallback: dict[str, tuple[int, Any]] = {}  # name -> (step, newest non-skipped value used)

    def on_step(self, step: int) -> None:
        """A step began (from the step clock); remember it if this stage runs on it."""
        if step <= self._last_seen_step:
            return
        self._last_seen_step = step
        if runs_on(step, self.period):
            self._pending.append(step)

    def on_upstream(self, name: str, step: int, value: Any) -> None:
        """An upstream output (or SKIPPED) for `step` arrived."""
        self._arrived[name][step] = value

    def next_ready(self) -> tuple[int, dict[str, Any]] | None:
        """(step, upstream values) for the oldest owed step whose inputs are all in; values may be None."""
        if not self._pending:
            return None
        step = self._pending[0]
        wanted = {name: source_step(step, period) for name, period in self.upstream_periods.items()}
        if any(want not in self._arrived[name] for name, want in wanted.items()):
            return None
        self._pending.pop(0)
        return step, {name: self._take(name, want) for name, want in wanted.items()}

    def _take(self, name: str, step: int) -> Any:
        arrived = self._arrived[name]
        for older in [s for s in arrived if s < step]:
            value = arrived.pop(older)
            if value is not SKIPPED and older > self._fallback.get(name, (-1, None))[0]:
                self._fallback[name] = (older, value)
        value = arrived[step]
        if value is not SKIPPED:
            self._fallback[name] = (step, value)
            return value
        return self._fallback.get(name, (-1, SKIPPED))[1]
