"""The prefix layout: [camera 0 tokens, camera 1 tokens, ..., language tokens].

pad[i] says token i is real (a present camera's patch, or a valid language token). The attention
rule inside the prefix is bidirectional over real tokens: query i may read key j iff pad[i] and
pad[j]. Position ids count real tokens only: positions = cumsum(pad) - 1, so padding and missing
cameras take no position, and dropping the padding rows ("compacting") leaves the positions of
the real rows unchanged: 0..n_valid-1. The action tokens then sit at n_valid, n_valid + 1, ...
"""

from __future__ import annotations

import numpy as np

from embodied_ros.kernels.attention import MASKED


def prefix_pad_mask(camera_mask: np.ndarray, tokens_per_camera: int, token_mask: np.ndarray) -> np.ndarray:
    """[n_cameras] bool, [L] bool -> [n_cameras * tokens_per_camera + L] bool."""
    return np.concatenate([np.repeat(np.asarray(camera_mask, bool), tokens_per_camera),
                           np.asarray(token_mask, bool)])


def position_ids(pad: np.ndarray) -> np.ndarray:
    return np.cumsum(pad, dtype=np.int64) - 1


def attention_allowed(pad: np.ndarray) -> np.ndarray:
    """[n, n] bool: query i may read key j (bidirectional over real tokens)."""
    pad = np.asarray(pad, bool)
    return pad[:, None] & pad[None, :]


def attention_bias(pad: np.ndarray) -> np.ndarray | None:
    """Additive attention bias [n, n] (0 allowed, MASKED not), or None when every pair is allowed."""
    allowed = attention_allowed(pad)
    if allowed.all():
        return None
    return np.where(allowed, np.float32(0.0), MASKED).astype(np.float32)
