"""Quantile normalization of the state and de-normalization of actions (LeRobot QUANTILES mode).

    normalize:    n = 2 * (x - q01) / (q99 - q01) - 1     (a zero range is replaced by eps)
    denormalize:  x = (n + 1) * (q99 - q01) / 2 + q01

Both in float32 in the reference's operation order, and without clipping: values outside
[q01, q99] map outside [-1, 1] (the prompt's state bins then saturate at -1 / 255).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_EPS = 1e-8


@dataclass(frozen=True)
class QuantileStats:
    q01: np.ndarray  # [dim] float32
    q99: np.ndarray  # [dim] float32
    eps: float = DEFAULT_EPS

    def __post_init__(self) -> None:
        q01 = np.asarray(self.q01, dtype=np.float32).reshape(-1)
        q99 = np.asarray(self.q99, dtype=np.float32).reshape(-1)
        if q01.shape != q99.shape:
            raise ValueError(f"quantile stats differ in size: q01 {q01.shape}, q99 {q99.shape}")
        if not (np.all(np.isfinite(q01)) and np.all(np.isfinite(q99))):
            raise ValueError("quantile stats contain non-finite values")
        object.__setattr__(self, "q01", q01)
        object.__setattr__(self, "q99", q99)

    @property
    def dim(self) -> int:
        return self.q01.size

    def _check(self, values: np.ndarray, what: str) -> np.ndarray:
        values = np.asarray(values, dtype=np.float32)
        if values.shape[-1] != self.dim:
            raise ValueError(f"{what} has {values.shape[-1]} values, the normalization stats have {self.dim}")
        return values

    def normalize(self, values: np.ndarray) -> np.ndarray:
        values = self._check(values, "state")
        span = self.q99 - self.q01
        span = np.where(span == 0, np.float32(self.eps), span).astype(np.float32)
        return (np.float32(2.0) * (values - self.q01)) / span - np.float32(1.0)

    def denormalize(self, values: np.ndarray) -> np.ndarray:
        values = self._check(values, "action")
        return ((values + np.float32(1.0)) * (self.q99 - self.q01)) / np.float32(2.0) + self.q01


@dataclass(frozen=True)
class MeanStdStats:
    """LeRobot MEAN_STD mode: n = (x - mean) / (std + eps); x = n * std + mean (float32)."""

    mean: np.ndarray  # [dim] float32
    std: np.ndarray  # [dim] float32
    eps: float = DEFAULT_EPS

    def __post_init__(self) -> None:
        mean = np.asarray(self.mean, dtype=np.float32).reshape(-1)
        std = np.asarray(self.std, dtype=np.float32).reshape(-1)
        if mean.shape != std.shape:
            raise ValueError(f"mean/std stats differ in size: mean {mean.shape}, std {std.shape}")
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std))):
            raise ValueError("mean/std stats contain non-finite values")
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)

    @property
    def dim(self) -> int:
        return self.mean.size

    def _check(self, values: np.ndarray, what: str) -> np.ndarray:
        values = np.asarray(values, dtype=np.float32)
        if values.shape[-1] != self.dim:
            raise ValueError(f"{what} has {values.shape[-1]} values, the normalization stats have {self.dim}")
        return values

    def normalize(self, values: np.ndarray) -> np.ndarray:
        return (self._check(values, "state") - self.mean) / (self.std + np.float32(self.eps))

    def denormalize(self, values: np.ndarray) -> np.ndarray:
        return self._check(values, "action") * self.std + self.mean
