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


class FreeRunTrigger:
    """When a free-running stage runs: as soon as an upstream delivers, but at most once per
    period, and not while another upstream is due to deliver (its period has passed since its
    last output), so a stage fed by a slower upstream waits for it on the steps both run, as in
    lock-step. Timing is judged with half a step of slack: jittery arrivals still count.

    A stage that re-solves (the action head: new noise on the same prefix) runs at once whenever
    new input arrives, and in between on its timer, every period: on the steps where its upstreams
    made nothing new it re-solves, and when new input is due within the slack it leaves the run to
    that input (two runs close together would only delay the fresh one). The other stages' timer,
    a step longer than their period, only covers upstreams that fell silent.
    """

    def __init__(self, period_ns: int, upstream_periods_ns: Mapping[str, int], slack_ns: int,
                 resolves: bool = False):
        self.period_ns = period_ns
        self.upstream_periods_ns = dict(upstream_periods_ns)
        self.slack_ns = slack_ns
        self.resolves = resolves
        self._arrivals: dict[str, int] = {}
        self._last_run_ns: int | None = None

    @property
    def timer_period_ns(self) -> int:
        return self.period_ns if self.resolves else self.period_ns + 2 * self.slack_ns

    def arrived(self, name: str, now_ns: int) -> bool:
        """An output of `name` arrived; True when the stage should run now."""
        self._arrivals[name] = now_ns
        awaited = any(self._expected(other, now_ns) for other in self.upstream_periods_ns if other != name)
        return not awaited and (self.resolves or self._spaced(now_ns))

    def timer_fired(self, now_ns: int) -> bool:
        """The stage's timer fired; True when the stage should run now on the inputs it has."""
        if not self.resolves:
            return True
        due_ns = self.next_input_run_ns()
        return due_ns is None or not due_ns - self.slack_ns <= now_ns <= due_ns + self.slack_ns

    def ran(self, now_ns: int) -> None:
        self._last_run_ns = now_ns

    def next_input_run_ns(self) -> int | None:
        """When arriving input will next make the stage run, if every upstream keeps its period: the
        first upstream due whose arrival does not wait for another one due just after it. None
        until every upstream has delivered once."""
        if len(self._arrivals) < len(self.upstream_periods_ns):
            return None
        due = sorted((last + self.upstream_periods_ns[name], name) for name, last in self._arrivals.items())
        for time_ns, name in due:
            if not any(other_ns - self.slack_ns <= time_ns < other_ns for other_ns, other in due if other != name):
                return time_ns
        return due[-1][0]

    def _spaced(self, now_ns: int) -> bool:
        return self._last_run_ns is None or now_ns - self._last_run_ns >= self.period_ns - self.slack_ns

    def _expected(self, name: str, now_ns: int) -> bool:
        last = self._arrivals.get(name)
        return last is not None and now_ns - last >= self.upstream_periods_ns[name] - self.slack_ns
