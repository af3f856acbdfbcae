"""Replay metrics as plain functions over arrays: action errors, latency, periods, staleness, frames.

Every function returns a JSON-ready dict (floats, ints, lists, None) so the report writes them as is.
Times in: integer nanoseconds; times out: milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from embodied_ros.replay.episode import JointSeries

PERCENTILES = (50, 95, 99)


def distribution_ms(samples_ms: Sequence[float] | np.ndarray) -> dict:
    """count, mean, std, min, p50, p95, p99, max of finite samples (None when there are none)."""
    values = np.asarray(samples_ms, dtype=np.float64).reshape(-1)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return {"count": 0, "mean": None, "std": None, "min": None, "p50": None, "p95": None, "p99": None,
                "max": None}
    p50, p95, p99 = np.percentile(values, PERCENTILES)
    return {"count": int(values.size), "mean": float(values.mean()), "std": float(values.std()),
            "min": float(values.min()), "p50": float(p50), "p95": float(p95), "p99": float(p99),
            "max": float(values.max())}


def period_stats(stamps_ns: Sequence[int] | np.ndarray, nominal_period_s: float) -> dict:
    """Periods between consecutive events vs the nominal one: distribution, jitter, missed periods.

    jitter_ms is the standard deviation of the period; error_ms the distribution of |period - nominal|;
    missed counts gaps longer than 1.5 nominal periods (a command that never went out).
    """
    if nominal_period_s <= 0:
        raise ValueError(f"nominal period must be positive, got {nominal_period_s} s")
    stamps = np.sort(np.asarray(stamps_ns, dtype=np.int64))
    periods_ms = np.diff(stamps) / 1e6
    nominal_ms = nominal_period_s * 1e3
    return {
        "nominal_ms": nominal_ms,
        "period_ms": distribution_ms(periods_ms),
        "error_ms": distribution_ms(np.abs(periods_ms - nominal_ms)),
        "jitter_ms": float(periods_ms.std()) if periods_ms.size else None,
        "missed": int(np.sum(periods_ms > 1.5 * nominal_ms)),
    }


@dataclass(frozen=True)
class PredictedChunk:
    observation_ns: int
    actions: np.ndarray  # (horizon, action_dim)
    action_period_s: float


def _reference_columns(predicted_names: Sequence[str], reference: JointSeries) -> list[int] | str:
    """Reference column of each predicted column, or the reason they cannot be matched."""
    if reference.names:
        missing = [n for n in predicted_names if n not in reference.names]
        if missing:
            return f"recorded {reference.topic} lacks joints {missing} (it has {list(reference.names)})"
        return [reference.names.index(n) for n in predicted_names]
    if reference.positions.shape[1] != len(predicted_names):
        return (f"recorded {reference.topic} has {reference.positions.shape[1]} unnamed values per command, "
                f"the policy predicts {len(predicted_names)} joints")
    return list(range(len(predicted_names)))


def action_errors(chunks: Sequence[PredictedChunk], joint_names: Sequence[str], reference: JointSeries | None
                  ) -> dict:
    """Predicted actions vs recorded targets at the instants they are meant for.

    Row i of a chunk is meant for observation + (i + 1) * action_period (see msg/ActionChunk.msg).
    Rows whose instant lies outside the recording are not compared (`compared_rows` counts the rest).
    """
    base = {"reference": reference.topic if reference else None, "joint_names": list(joint_names)}
    if reference is None:
        return {**base, "available": False, "reason": "the bag has no usable recorded commands"}
    if not chunks:
        return {**base, "available": False, "reason": "no chunk was produced"}
    columns = _reference_columns(joint_names, reference)
    if isinstance(columns, str):
        return {**base, "available": False, "reason": columns}
    horizon = max(c.actions.shape[0] for c in chunks)
    errors = np.full((len(chunks), horizon, len(joint_names)), np.nan)  # (chunks, offset, joint)
    for k, chunk in enumerate(chunks):
        rows = np.arange(chunk.actions.shape[0])
        times = chunk.observation_ns + np.round((rows + 1) * chunk.action_period_s * 1e9).astype(np.int64)
        errors[k, rows] = chunk.actions - reference.at(times)[:, columns]
    valid = np.isfinite(errors).all(axis=2)  # (chunks, offset)
    if not valid.any():
        return {**base, "available": False, "reason": "no predicted action falls inside the recorded commands"}
    squared = errors**2
    with np.errstate(invalid="ignore"):
        per_offset_mse = [float(np.nanmean(squared[:, i])) if valid[:, i].any() else None
                          for i in range(horizon)]
        per_offset_max = [float(np.nanmax(np.abs(errors[:, i]))) if valid[:, i].any() else None
                          for i in range(horizon)]
    flat = errors[valid]  # (rows, joint)
    return {
        **base, "available": True, "compared_rows": int(valid.sum()), "total_rows": int(valid.size),
        "mse": float(np.mean(flat**2)),
        "per_joint": {name: {"mse": float(np.mean(flat[:, j] ** 2)), "max_abs": float(np.max(np.abs(flat[:, j])))}
                      for j, name in enumerate(joint_names)},
        "per_offset": {"mse": per_offset_mse, "max_abs": per_offset_max},
    }


def frame_usage(frame_stamps: Mapping[str, np.ndarray], used_stamps: Mapping[str, Sequence[int]]) -> dict:
    """Per camera: frames recorded, frames some observation used, frames never used (dropped)."""
    out = {}
    for camera, stamps in frame_stamps.items():
        used = np.intersect1d(np.asarray(stamps), np.asarray(list(used_stamps.get(camera, ())), dtype=np.int64))
        out[camera] = {"recorded": int(len(stamps)), "used": int(used.size),
                       "dropped": int(len(stamps) - used.size)}
    return out


def staleness_stats(staleness_ms: Sequence[float], stale_after_ms: float) -> dict:
    """Age of the observation behind each output: distribution, and how many exceeded the limit."""
    values = np.asarray(staleness_ms, dtype=np.float64)
    return {**distribution_ms(values), "stale_after_ms": float(stale_after_ms),
            "stale": int(np.sum(values > stale_after_ms))}


def command_smoothness(stamps_ns: Sequence[int] | np.ndarray, positions: Sequence[np.ndarray] | np.ndarray,
                       switches_ns: Sequence[int] | np.ndarray = (), joint_names: Sequence[str] = ()) -> dict:
    """How smoothly the streamed commands move, above all where a new chunk takes over.

    max_abs_step: the largest |command - previous command| over all joints; `at_switch` over the
    steps across which a new chunk arrived (previous stamp < arrival <= stamp), `within_chunk` over
    the others; the `mean_` values average each step's largest joint change. jerk: third derivative of the commands by finite differences over their stamps,
    units / s^3 (max |.| and root mean square over all joints).
    """
    stamps = np.asarray(stamps_ns, dtype=np.int64).reshape(-1)
    values = np.asarray(positions, dtype=np.float64)
    values = values.reshape(len(stamps), -1) if len(stamps) else np.empty((0, 0))
    order = np.argsort(stamps, kind="stable")
    stamps, values = stamps[order], values[order]
    steps = np.abs(np.diff(values, axis=0))  # (N - 1, J)
    switches = np.sort(np.asarray(switches_ns, dtype=np.int64))
    crossed = np.searchsorted(switches, stamps[1:], side="right") > np.searchsorted(switches, stamps[:-1],
                                                                                     side="right")

    def largest(rows: np.ndarray) -> float | None:
        return float(rows.max()) if rows.size else None

    def mean_largest(rows: np.ndarray) -> float | None:
        return float(rows.max(axis=1).mean()) if rows.size else None

    times_s = stamps / 1e9
    derivative = values
    spans = times_s
    for _ in range(3):  # position -> velocity -> acceleration -> jerk, each at the midpoints of the last
        gaps = np.diff(spans)
        if gaps.size == 0 or np.any(gaps <= 0):
            derivative = np.empty((0, values.shape[1]))
            break
        derivative = np.diff(derivative, axis=0) / gaps[:, None]
        spans = (spans[1:] + spans[:-1]) / 2
    names = list(joint_names) if len(joint_names) == values.shape[1] else [f"joint_{j}" for j in range(values.shape[1])]
    return {
        "count": int(len(stamps)),
        "switches": int(crossed.sum()),
        "max_abs_step": largest(steps),
        "max_abs_step_at_switch": largest(steps[crossed]),
        "max_abs_step_within_chunk": largest(steps[~crossed]),
        "mean_abs_step_at_switch": mean_largest(steps[crossed]),
        "mean_abs_step_within_chunk": mean_largest(steps[~crossed]),
        "per_joint_max_abs_step": {name: largest(steps[:, j]) for j, name in enumerate(names)},
        "jerk": {"max_abs": largest(np.abs(derivative)),
                 "rms": float(np.sqrt(np.mean(derivative**2))) if derivative.size else None},
    }
