"""Linear layers: y = x @ W^T + b, with W stored (out_features, in_features) as in the checkpoints."""

from __future__ import annotations

import numpy as np

from embodied_ros.kernels.registry import reference


def _examples(rng: np.random.Generator) -> list[tuple]:
    cases = []
    for rows, n_in, n_out in ((1, 7, 5), (13, 33, 17), (50, 64, 96)):
        x = rng.standard_normal((rows, n_in), dtype=np.float32)
        w = rng.standard_normal((n_out, n_in), dtype=np.float32)
        b = rng.standard_normal(n_out, dtype=np.float32)
        cases.append((x, w, b))
        cases.append((x, w, None))
    return cases


@reference("linear", examples=_examples, rtol=1e-4, atol=1e-4)
def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    # x: [N, in], weight: [out, in] -> [N, out]
    y = x @ weight.T
    if bias is not None:
        y += bias
    return y
