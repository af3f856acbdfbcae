"""Latency budgets and the checks the latency tests make (launch_testing and pytest alike).

A budget (config/budgets/<deployment>.yaml) bounds, for one deployment, the end-to-end latency
(input stamp -> ActionChunk received) at p50 and p99, and the error of the command stream's period
(|period - nominal|) at p50 and p99, timed by the controller's send stamps (JointTrajectory headers;
arrival times for Float64MultiArray, which has none), and at p99 on arrival (when the middleware
received each command); and, optionally, each stage's compute time in the graph (p50) against the
same call timed alone back to back (`embodied_ros.pipeline.timing`): at most `stage_ratio` times
it plus `stage_allowance_ms`. The allowance is what any call pays after a pause, and a graph's
stage pauses before every call (it waits for its input): a fixed 0.5-0.8 ms a call on the 2-core
machines, whatever filled the pause (BENCHMARKS.md, command_timing), which on its own puts a 1 ms
call at 1.5x and a 40 ms one at 1.02x. `evaluate` compares a
`LatencyMeasurement` with a budget and always reports the measured numbers, pass or fail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from embodied_ros.replay.metrics import distribution_ms, period_stats
from embodied_ros.share import share_path

@dataclass(frozen=True)
class PercentileBound:
    p50_ms: float
    p99_ms: float

    def __post_init__(self) -> None:
        if not 0 < self.p50_ms <= self.p99_ms:
            raise ValueError(f"bounds need 0 < p50_ms <= p99_ms, got p50_ms={self.p50_ms}, p99_ms={self.p99_ms}")


@dataclass(frozen=True)
class LatencyBudget:
    deployment: str
    end_to_end: PercentileBound  # input stamp -> ActionChunk received
    command_period_s: float  # nominal period of the controller's command stream
    command_period_error: PercentileBound  # |period - nominal|
    arrival_error_p99_ms: float | None = None  # |period - nominal| of the commands as received; None: not checked
    stage_ratio: dict[str, float] = field(default_factory=dict)  # stage -> bound on in-graph p50 / alone
    stage_allowance_ms: float = 0.0  # added to each stage's bound (ratio x alone): a call's cost after a pause
    chunks: int = 20  # chunks measured, after warm-up
    warmup_chunks: int = 3  # first chunks ignored (caches, page faults)
    input_rate_hz: float = 10.0  # how often the probe publishes a stamped observation
    timeout_s: float = 120.0  # the whole measurement, including waiting for the graph to come up

    def __post_init__(self) -> None:
        if self.command_period_s <= 0:
            raise ValueError(f"{self.deployment}: command_period_s must be positive, got {self.command_period_s}")
        if self.chunks < 5 or self.warmup_chunks < 0:
            raise ValueError(f"{self.deployment}: need chunks >= 5 and warmup_chunks >= 0, "
                             f"got {self.chunks} and {self.warmup_chunks}")
        if self.arrival_error_p99_ms is not None and self.arrival_error_p99_ms <= 0:
            raise ValueError(f"{self.deployment}: arrival_error_p99_ms must be positive, got {self.arrival_error_p99_ms}")
        if any(not bound >= 1.0 for bound in self.stage_ratio.values()):
            raise ValueError(f"{self.deployment}: stage_ratio bounds must be >= 1, got {self.stage_ratio}")
        if not self.stage_allowance_ms >= 0:
            raise ValueError(f"{self.deployment}: stage_allowance_ms must be >= 0, got {self.stage_allowance_ms}")
        if not 0 < self.input_rate_hz <= 1000 or self.timeout_s <= 0:
            raise ValueError(f"{self.deployment}: input_rate_hz must be in (0, 1000] and timeout_s positive, "
                             f"got {self.input_rate_hz} and {self.timeout_s}")

    def stage_bound_ms(self, stage: str, alone_ms: float) -> float:
        """The most a budgeted stage's compute p50 in the graph may be, given its time alone."""
        return self.stage_ratio[stage] * alone_ms + self.stage_allowance_ms


_BUDGET_KEYS = {"deployment", "end_to_end_ms", "command_period", "stage_ratio", "stage_allowance_ms", "chunks",
                "warmup_chunks", "input_rate_hz", "timeout_s"}


def load_budget(name_or_path: str | Path) -> LatencyBudget:
    """A budget by deployment name (config/budgets/<name>.yaml) or by file path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = share_path("config", "budgets") / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in share_path("config", "budgets").glob("*.yaml"))
        raise FileNotFoundError(f"no latency budget {name_or_path!r} ({path}); known deployments: {known}")
    values = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(values) - _BUDGET_KEYS)
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {unknown}; known: {sorted(_BUDGET_KEYS)}")
    try:
        period = values["command_period"]
        return LatencyBudget(
            deployment=str(values.get("deployment", path.stem)),
            end_to_end=PercentileBound(p50_ms=values["end_to_end_ms"]["p50"], p99_ms=values["end_to_end_ms"]["p99"]),
            command_period_s=float(period["nominal_s"]),
            command_period_error=PercentileBound(p50_ms=period["error_p50_ms"], p99_ms=period["error_p99_ms"]),
            arrival_error_p99_ms=period.get("arrival_error_p99_ms"),
            stage_ratio={str(stage): float(bound) for stage, bound in (values.get("stage_ratio") or {}).items()},
            stage_allowance_ms=float(values.get("stage_allowance_ms", 0.0)),
            **{k: values[k] for k in ("chunks", "warmup_chunks", "input_rate_hz", "timeout_s") if k in values},
        )
    except (KeyError, TypeError) as error:
        raise ValueError(f"{path}: malformed budget ({error}); see config/budgets/ci.yaml for the layout") from None


@dataclass
class LatencyMeasurement:
    """What a latency probe saw."""

    end_to_end_ms: list[float] = field(default_factory=list)  # one per chunk whose stamp the probe sent
    command_stamps_ns: list[int] = field(default_factory=list)  # when the controller sent each command
    # (its header stamp; the arrival time for messages without a header)
    command_arrivals_ns: list[int] = field(default_factory=list)  # when each command reached the probe
    unmatched_chunks: int = 0  # chunks whose observation stamp the probe never sent
    stage_compute_ms: dict[str, list[float]] = field(default_factory=dict)  # stage -> compute time of each run
    stage_alone_ms: dict[str, float] = field(default_factory=dict)  # stage -> the same call timed alone
    problem: str = ""  # why the measurement stopped early ("" when it ran to the end)


@dataclass(frozen=True)
class LatencyResult:
    passed: bool
    failures: tuple[str, ...]
    summary: dict
    measurement: LatencyMeasurement = field(default_factory=LatencyMeasurement)  # what the numbers came from

    def report(self) -> str:
        e2e = self.summary["end_to_end_ms"]
        lines = [
            f"latency [{self.summary['deployment']}]: {'PASS' if self.passed else 'FAIL'}",
            f"  end-to-end ms     n={e2e['count']}  p50={_num(e2e['p50'])}  p95={_num(e2e['p95'])}  "
            f"p99={_num(e2e['p99'])}  max={_num(e2e['max'])}",
            _period_line("command period", self.summary["command_period"]),
            _period_line("  as received", self.summary["command_arrival_period"]),
        ]
        for stage, row in self.summary["stage_ratio"].items():
            lines.append(f"  {stage:<16}compute p50 in the graph {_num(row['in_graph_ms'])} ms, alone "
                         f"{row['alone_ms']:.2f} ms: ratio {_num(row['ratio'])}")
        lines.extend(f"  over budget: {failure}" for failure in self.failures)
        return "\n".join(lines)


def _period_line(label: str, period: dict) -> str:
    return (f"  {label:<16}nominal={period['nominal_ms']:.1f} ms  n={period['period_ms']['count']}  "
            f"p50={_num(period['period_ms']['p50'])}  p99={_num(period['period_ms']['p99'])}  "
            f"|error| p50={_num(period['error_ms']['p50'])}  p99={_num(period['error_ms']['p99'])}  "
            f"jitter={_num(period['jitter_ms'])}  missed={period['missed']}")


def _num(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def evaluate(measurement: LatencyMeasurement, budget: LatencyBudget) -> LatencyResult:
    """Measured numbers vs the budget; a failure names the number, its bound and the deployment."""
    e2e = distribution_ms(measurement.end_to_end_ms[budget.warmup_chunks:])
    period = period_stats(measurement.command_stamps_ns, budget.command_period_s)
    failures = [measurement.problem] if measurement.problem else []
    if e2e["count"] < budget.chunks:
        failures.append(f"only {e2e['count']} chunks measured after {budget.warmup_chunks} warm-up, "
                        f"budget asks for {budget.chunks}")
    if period["period_ms"]["count"] < 2:
        failures.append(f"only {len(measurement.command_stamps_ns)} commands received")
    checks = [("end-to-end p50", e2e["p50"], budget.end_to_end.p50_ms),
              ("end-to-end p99", e2e["p99"], budget.end_to_end.p99_ms),
              ("command period |error| p50", period["error_ms"]["p50"], budget.command_period_error.p50_ms),
              ("command period |error| p99", period["error_ms"]["p99"], budget.command_period_error.p99_ms)]
    arrival = period_stats(measurement.command_arrivals_ns, budget.command_period_s)
    if budget.arrival_error_p99_ms is not None:
        checks.append(("command period |error| p99 as received", arrival["error_ms"]["p99"],
                       budget.arrival_error_p99_ms))
    for name, value, bound in checks:
        if value is not None and value > bound:
            failures.append(f"{name} {value:.2f} ms > {bound:.2f} ms ({budget.deployment})")
    ratios = stage_ratios(measurement)
    for stage, bound in budget.stage_ratio.items():
        if stage not in ratios:
            continue  # a stage this model does not have (world), or no time alone given
        row = ratios[stage]
        if row["in_graph_ms"] is None:
            failures.append(f"{stage} stage: no compute time measured in the graph ({budget.deployment})")
        elif row["in_graph_ms"] > budget.stage_bound_ms(stage, row["alone_ms"]):
            failures.append(f"{stage} stage compute in the graph {row['in_graph_ms']:.2f} ms, {_num(row['ratio'])}x "
                            f"its {row['alone_ms']:.2f} ms alone > {bound:.2f}x + {budget.stage_allowance_ms:.2f} ms "
                            f"({budget.deployment})")
    summary = {"deployment": budget.deployment, "end_to_end_ms": e2e, "command_period": period,
               "command_arrival_period": arrival, "stage_ratio": ratios,
               "unmatched_chunks": measurement.unmatched_chunks}
    return LatencyResult(not failures, tuple(failures), summary, measurement)


def stage_ratios(measurement: LatencyMeasurement) -> dict[str, dict]:
    """Per stage timed alone: compute p50 in the graph, the time alone and their ratio (None: not run)."""
    ratios = {}
    for stage, alone_ms in measurement.stage_alone_ms.items():
        runs = measurement.stage_compute_ms.get(stage, [])
        in_graph = float(np.median(runs)) if runs else None
        ratios[stage] = {"in_graph_ms": in_graph, "alone_ms": alone_ms,
                         "ratio": in_graph / alone_ms if in_graph is not None and alone_ms > 0 else None}
    return ratios


def end_to_end_ms(sent_stamps_ns: set[int], observation_ns: int, received_ns: int) -> float | None:
    """Latency of one chunk, or None when its observation is not one the probe stamped."""
    if observation_ns not in sent_stamps_ns:
        return None
    return float(np.float64(received_ns - observation_ns) / 1e6)
