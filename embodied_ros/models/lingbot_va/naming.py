"""Wan block tensor names: diffusers' `WanTransformerBlock` naming -> the blocks-only bundle's.

A Wan block record (one block's state dict, the Wan block parity records) is stored as block 0 of
a blocks-only bundle under these names; the block kernels read them (backbone/wan_block.py).
LeRobot's LingBot-VA keeps its own names in its bundles (lerobot_bundle.py).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

# diffusers block suffix (inside "blocks.{i}.") -> bundle block suffix (inside "blk.{i}.")
BLOCK_NAMES = {
    "scale_shift_table": "modulation",
    "norm2.weight": "cross_norm.weight",
    "norm2.bias": "cross_norm.bias",
    "ffn.net.0.proj.weight": "ffn_in.weight",
    "ffn.net.0.proj.bias": "ffn_in.bias",
    "ffn.net.2.weight": "ffn_out.weight",
    "ffn.net.2.bias": "ffn_out.bias",
}
for _source, _target in (("attn1", "self_attn"), ("attn2", "cross_attn")):
    for _projection, _short in (("to_q", "q"), ("to_k", "k"), ("to_v", "v"), ("to_out.0", "o")):
        BLOCK_NAMES[f"{_source}.{_projection}.weight"] = f"{_target}.{_short}.weight"
        BLOCK_NAMES[f"{_source}.{_projection}.bias"] = f"{_target}.{_short}.bias"
    BLOCK_NAMES[f"{_source}.norm_q.weight"] = f"{_target}.q_norm.weight"
    BLOCK_NAMES[f"{_source}.norm_k.weight"] = f"{_target}.k_norm.weight"


def convert_block_tensors(tensors: Mapping[str, np.ndarray], index: int = 0) -> dict[str, np.ndarray]:
    """The tensors of one block saved on its own (names without "blocks.{i}.", e.g. a
    `WanTransformerBlock.state_dict()`) as block `index` of a bundle, float32, the modulation
    table (1, 6, D) as (6, D)."""
    converted = {}
    for source, array in tensors.items():
        if source not in BLOCK_NAMES:
            raise ValueError(f"Wan block tensor {source!r} has no place in a lingbot_va bundle")
        name = f"blk.{index}.{BLOCK_NAMES[source]}"
        array = np.asarray(array)
        if name.endswith("modulation"):
            array = array.reshape(array.shape[-2], array.shape[-1])
        converted[name] = np.ascontiguousarray(array, dtype=np.float32)
    return converted


def weight_group(name: str) -> str:
    """Quantization group of a blocks-only bundle weight: modulation (the shift/scale table, kept
    f32 unless a plan names it), self_attn, cross_attn, ffn."""
    parts = name.split(".")
    if parts[-1] == "modulation":
        return "modulation"
    return "ffn" if parts[2].startswith("ffn") else parts[2]
