"""Wan block tensors (diffusers' `WanTransformerBlock` naming, backbone/wan_block.py) in a blocks-only bundle.

A Wan block record (one block's state dict, the Wan block parity records) is stored as block 0 of
a blocks-only bundle under these names; the block kernels read them (backbone/wan_block.py).
LeRobot's LingBot-VA keeps its own names in its bundles (lerobot_bundle.py).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from embodied_ros.backbone.wan_block import DIFFUSERS_BLOCK_NAMES


def convert_block_tensors(tensors: Mapping[str, np.ndarray], index: int = 0) -> dict[str, np.ndarray]:
    """The tensors of one block saved on its own (names without "blocks.{i}.", e.g. a
    `WanTransformerBlock.state_dict()`) as block `index` of a bundle, float32, the modulation
    table (1, 6, D) as (6, D)."""
    converted = {}
    for source, array in tensors.items():
        if source not in DIFFUSERS_BLOCK_NAMES:
            raise ValueError(f"Wan block tensor {source!r} has no place in a lingbot_va bundle")
        name = f"blk.{index}.{DIFFUSERS_BLOCK_NAMES[source]}"
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
