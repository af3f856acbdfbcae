"""The prefix K/V cache and its lifecycle.

    allocate   PrefixCacheBuilder.allocate(...)  one per observation, arrays sized once
    fill       builder.write(layer, k, v)        by the language model's single prefix pass
    seal       builder.seal(valid, stamp_ns)     -> PrefixCache: arrays read-only from then on
    read       every solver step of the action expert reads the same sealed object
    supersede  a newer observation seals a new cache; an old one is never modified, so a solve
               that started on it finishes on it, and it is freed when nothing refers to it

Layout: keys, values [layers, n, kv_heads, head_dim] float32, keys after RoPE. Rows are prefix
tokens; `valid` marks the real ones. A compacted cache holds only real rows (all valid); the
masked form (every prefix row, padding included) is what the reference computes and is used as
the test oracle. `tensors()` / `from_tensors()` carry a cache across processes without copying.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from embodied_ros.kernels.attention import MASKED

TENSOR_NAMES = ("keys", "values", "valid")


@dataclass(frozen=True, eq=False)
class PrefixCache:
    keys: np.ndarray  # [layers, n, kv_heads, head_dim]
    values: np.ndarray  # [layers, n, kv_heads, head_dim]
    valid: np.ndarray  # [n] bool
    stamp_ns: int = 0  # stamp of the observation the prefix was built from
    key_bias: np.ndarray | None = field(init=False)  # [n] additive bias of invalid rows, None if all valid

    def __post_init__(self) -> None:
        keys, values, valid = self.keys, self.values, np.asarray(self.valid, dtype=bool)
        if keys.ndim != 4 or keys.shape != values.shape or keys.dtype != np.float32 or values.dtype != np.float32:
            raise ValueError(f"prefix cache needs float32 keys and values of equal shape [layers, n, kv_heads, "
                             f"head_dim], got {keys.dtype} {keys.shape} and {values.dtype} {values.shape}")
        if valid.shape != (keys.shape[1],):
            raise ValueError(f"prefix cache: valid mask {valid.shape} does not match {keys.shape[1]} rows")
        if not valid.any():
            raise ValueError("prefix cache has no valid row (no camera and no token)")
        for array in (keys, values, valid):
            array.flags.writeable = False
        object.__setattr__(self, "valid", valid)
        bias = None if valid.all() else np.where(valid, np.float32(0.0), MASKED).astype(np.float32)
        if bias is not None:
            bias.flags.writeable = False
        object.__setattr__(self, "key_bias", bias)

    @property
    def num_layers(self) -> int:
        return self.keys.shape[0]

    @property
    def num_rows(self) -> int:
        return self.keys.shape[1]

    @property
    def n_valid(self) -> int:
        """Real prefix tokens; the first action token takes this position."""
        return int(self.valid.sum())

    def tensors(self) -> dict[str, np.ndarray]:
        return {"keys": self.keys, "values": self.values, "valid": self.valid}

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, np.ndarray], stamp_ns: int = 0) -> "PrefixCache":
        missing = [name for name in TENSOR_NAMES if name not in tensors]
        if missing:
            raise ValueError(f"prefix tensors lack {missing}; got {sorted(tensors)}")
        return cls(np.asarray(tensors["keys"]), np.asarray(tensors["values"]), np.asarray(tensors["valid"]),
                   stamp_ns)


class PrefixCacheBuilder:
    """A cache being filled by the prefix pass; `seal` hands out the read-only `PrefixCache`."""

    def __init__(self, keys: np.ndarray, values: np.ndarray) -> None:
        self.keys, self.values = keys, values
        self._written = np.zeros(keys.shape[0], dtype=bool)
        self._sealed = False

    @classmethod
    def allocate(cls, num_layers: int, num_rows: int, kv_heads: int, head_dim: int) -> "PrefixCacheBuilder":
        shape = (num_layers, num_rows, kv_heads, head_dim)
        return cls(np.empty(shape, np.float32), np.empty(shape, np.float32))

    def write(self, layer: int, keys: np.ndarray, values: np.ndarray) -> None:
        """keys, values: [n, kv_heads, head_dim] of one layer."""
        if self._sealed:
            raise RuntimeError("prefix cache is sealed; a new observation needs a new cache")
        self.keys[layer] = keys
        self.values[layer] = values
        self._written[layer] = True

    def seal(self, valid: np.ndarray, stamp_ns: int = 0) -> PrefixCache:
        if not self._written.all():
            raise RuntimeError(f"prefix cache layers {np.flatnonzero(~self._written).tolist()} were never written")
        self._sealed = True
        return PrefixCache(self.keys, self.values, valid, stamp_ns)
