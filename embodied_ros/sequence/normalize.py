"""Normalization of the state and de-normalization of actions, LeRobot's modes:

    QUANTILES  n = 2 * (x - q01) / (q99 - q01) - 1       x = (n + 1) * (q99 - q01) / 2 + q01
    MEAN_STD   n = (x - mean) / (std + eps)              x = n * std + mean
    MIN_MAX    n = 2 * (x - min) / (max - min) - 1       x = (n + 1) / 2 * (max - min) + min

(a zero range of QUANTILES / MIN_MAX is replaced by eps). All in float32 in the reference's
operation order, and without clipping. MEAN_STD statistics may also be a table [rows, dim], one row
per step of an action chunk (HY-VLA's): rows [R, dim] of actions read the table's first R rows. One protocol, `Normalizer` (`dim`, `normalize`,
`denormalize`); `normalizer_of(stats)` picks the mode from the statistics a bundle stores for one
quantity ({"q01", "q99"}, {"mean", "std"} or {"min", "max"}).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol

import numpy as np

DEFAULT_EPS = 1e-8


class Normalizer(Protocol):
    @property
    def dim(self) -> int: ...

    def normalize(self, values: np.ndarray) -> np.ndarray: ...

    def denormalize(self, values: np.ndarray) -> np.ndarray: ...


def _vector(values, name: str) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float32).reshape(-1)
    if not np.all(np.isfinite(vector)):
        raise ValueError(f"normalization stats {name} contain non-finite values")
    return vector


def _check(values: np.ndarray, dim: int, what: str) -> np.ndarray:
    values = np.asarray(values, dtype=np.float32)
    if values.shape[-1] != dim:
        raise ValueError(f"{what} has {values.shape[-1]} values, the normalization stats have {dim}")
    return values


def _pair(first, second, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    a, b = _vector(first, names[0]), _vector(second, names[1])
    if a.shape != b.shape:
        raise ValueError(f"normalization stats differ in size: {names[0]} {a.shape}, {names[1]} {b.shape}")
    return a, b


def _span(low: np.ndarray, high: np.ndarray, eps: float) -> np.ndarray:
    span = high - low
    return np.where(span == 0, np.float32(eps), span).astype(np.float32)


@dataclass(frozen=True)
class QuantileStats:
    q01: np.ndarray  # [dim] float32
    q99: np.ndarray  # [dim] float32
    eps: float = DEFAULT_EPS

    def __post_init__(self) -> None:
        q01, q99 = _pair(self.q01, self.q99, ("q01", "q99"))
        object.__setattr__(self, "q01", q01)
        object.__setattr__(self, "q99", q99)

    @property
    def dim(self) -> int:
        return self.q01.size

    def normalize(self, values: np.ndarray) -> np.ndarray:
        values = _check(values, self.dim, "state")
        return (np.float32(2.0) * (values - self.q01)) / _span(self.q01, self.q99, self.eps) - np.float32(1.0)

    def denormalize(self, values: np.ndarray) -> np.ndarray:
        values = _check(values, self.dim, "action")
        return ((values + np.float32(1.0)) * (self.q99 - self.q01)) / np.float32(2.0) + self.q01


@dataclass(frozen=True)
class MeanStdStats:
    """LeRobot MEAN_STD mode: n = (x - mean) / (std + eps); x = n * std + mean (float32); the statistics
    [dim], or a table [rows, dim] for the rows of an action chunk."""

    mean: np.ndarray  # [dim] or [rows, dim] float32
    std: np.ndarray
    eps: float = DEFAULT_EPS

    def __post_init__(self) -> None:
        tables = [np.asarray(values, dtype=np.float32) for values in (self.mean, self.std)]
        if all(table.ndim == 2 for table in tables):
            mean, std = tables
            if mean.shape != std.shape or not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std))):
                raise ValueError(f"normalization tables must be finite and of one shape, got mean {mean.shape}, "
                                 f"std {std.shape}")
        else:
            mean, std = _pair(self.mean, self.std, ("mean", "std"))
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)

    @property
    def dim(self) -> int:
        return self.mean.shape[-1]

    def _rows(self, values: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        values = _check(values, self.dim, what)
        if self.mean.ndim == 1:
            return values, self.mean, self.std
        rows = values.shape[0] if values.ndim == 2 else 0
        if not 0 < rows <= self.mean.shape[0]:
            raise ValueError(f"{what} of shape {values.shape}: per-row statistics need [rows <= "
                             f"{self.mean.shape[0]}, {self.dim}]")
        return values, self.mean[:rows], self.std[:rows]

    def normalize(self, values: np.ndarray) -> np.ndarray:
        values, mean, std = self._rows(values, "state")
        return (values - mean) / (std + np.float32(self.eps))

    def denormalize(self, values: np.ndarray) -> np.ndarray:
        values, mean, std = self._rows(values, "action")
        return values * std + mean


@dataclass(frozen=True)
class MinMaxStats:
    min: np.ndarray  # [dim] float32
    max: np.ndarray  # [dim] float32
    eps: float = DEFAULT_EPS

    def __post_init__(self) -> None:
        low, high = _pair(self.min, self.max, ("min", "max"))
        object.__setattr__(self, "min", low)
        object.__setattr__(self, "max", high)

    @property
    def dim(self) -> int:
        return self.min.size

    def normalize(self, values: np.ndarray) -> np.ndarray:
        values = _check(values, self.dim, "state")
        return np.float32(2.0) * (values - self.min) / _span(self.min, self.max, self.eps) - np.float32(1.0)

    def denormalize(self, values: np.ndarray) -> np.ndarray:
        values = _check(values, self.dim, "action")
        return (values + np.float32(1.0)) / np.float32(2.0) * _span(self.min, self.max, self.eps) + self.min


_MODES = ((("q01", "q99"), QuantileStats), (("mean", "std"), MeanStdStats), (("min", "max"), MinMaxStats))


def normalizer_of(stats: Mapping[str, np.ndarray] | None, eps: float = DEFAULT_EPS) -> Normalizer | None:
    """The normalizer for one quantity's stored statistics; None when there are none (identity)."""
    if not stats:
        return None
    for keys, kind in _MODES:
        if set(keys) <= set(stats):
            return kind(*(stats[key] for key in keys), eps=eps)
    raise ValueError(f"normalization stats {sorted(stats)} match no mode (q01/q99, mean/std or min/max)")
