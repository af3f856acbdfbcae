"""Tensor names: the diffusers / Wan checkpoint naming -> this runtime's bundle naming.

Wan parts keep diffusers' `WanTransformer3DModel` names (as in the released Wan2.2 checkpoints
converted by diffusers); the parts LingBot-VA adds (action stream, state and text token tables,
the image encoder standing in for the VAE, normalization statistics) use names of the same style.
Normalization statistics go to the bundle's stats section. Every checkpoint tensor must have a
place and every bundle tensor a source: the converter refuses anything unknown or missing.
"""

from __future__ import annotations

import re
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

# diffusers name outside the blocks -> bundle name
TOP_NAMES = {
    # Wan2.2 (diffusers WanTransformer3DModel)
    "patch_embedding.weight": "patch_embed.weight",  # Conv3d (D, C, 1, 2, 2) -> Linear (D, C*4)
    "patch_embedding.bias": "patch_embed.bias",
    "condition_embedder.time_embedder.linear_1.weight": "time_embed.in.weight",
    "condition_embedder.time_embedder.linear_1.bias": "time_embed.in.bias",
    "condition_embedder.time_embedder.linear_2.weight": "time_embed.out.weight",
    "condition_embedder.time_embedder.linear_2.bias": "time_embed.out.bias",
    "condition_embedder.time_proj.weight": "time_proj.weight",
    "condition_embedder.time_proj.bias": "time_proj.bias",
    "condition_embedder.text_embedder.linear_1.weight": "text_embed.in.weight",
    "condition_embedder.text_embedder.linear_1.bias": "text_embed.in.bias",
    "condition_embedder.text_embedder.linear_2.weight": "text_embed.out.weight",
    "condition_embedder.text_embedder.linear_2.bias": "text_embed.out.bias",
    "scale_shift_table": "out.modulation",  # (1, 2, D) -> (2, D)
    "proj_out.weight": "out.proj.weight",
    "proj_out.bias": "out.proj.bias",
    # LingBot-VA action stream: own input projection, time embedder and output head, shared blocks
    "action_embedder.weight": "action.in.weight",
    "action_embedder.bias": "action.in.bias",
    "action_time_embedder.linear_1.weight": "action.time_embed.in.weight",
    "action_time_embedder.linear_1.bias": "action.time_embed.in.bias",
    "action_time_embedder.linear_2.weight": "action.time_embed.out.weight",
    "action_time_embedder.linear_2.bias": "action.time_embed.out.bias",
    "action_time_proj.weight": "action.time_proj.weight",
    "action_time_proj.bias": "action.time_proj.bias",
    "action_scale_shift_table": "action.out.modulation",  # (1, 2, D) -> (2, D)
    "action_proj_out.weight": "action.out.proj.weight",
    "action_proj_out.bias": "action.out.proj.bias",
    # condition inputs of this runtime (see models/lingbot_va/README.md)
    "state_embedder.weight": "state.in.weight",
    "state_embedder.bias": "state.in.bias",
    "text_token_embedding.weight": "text.token_embedding",
    "image_encoder.proj.weight": "image_encoder.weight",
    "image_encoder.proj.bias": "image_encoder.bias",
}

# normalization statistics: checkpoint tensor -> (quantity, statistic) of the bundle's stats
STATS_NAMES = {
    "normalization.state_mean": ("state", "mean"),
    "normalization.state_std": ("state", "std"),
    "normalization.action_mean": ("action", "mean"),
    "normalization.action_std": ("action", "std"),
}

_BLOCK = re.compile(r"blocks\.(\d+)\.(.+)")


def bundle_name(diffusers_name: str) -> str:
    """The bundle name of a checkpoint tensor; ValueError for a name this runtime does not know."""
    match = _BLOCK.fullmatch(diffusers_name)
    if match and match.group(2) in BLOCK_NAMES:
        return f"blk.{int(match.group(1))}.{BLOCK_NAMES[match.group(2)]}"
    if not match and diffusers_name in TOP_NAMES:
        return TOP_NAMES[diffusers_name]
    raise ValueError(f"checkpoint tensor {diffusers_name!r} has no place in a lingbot_va bundle")


def to_bundle_layout(name: str, array: np.ndarray) -> np.ndarray:
    """Reshape a checkpoint tensor to its bundle layout (bundle name given)."""
    if name.endswith("modulation"):
        return array.reshape(array.shape[-2], array.shape[-1])  # (1, k, D) -> (k, D)
    if name == "patch_embed.weight":
        return array.reshape(array.shape[0], -1)  # (D, C, 1, 2, 2) -> (D, C*4), C slowest
    return array


def convert_tensors(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Checkpoint weights (diffusers names) -> bundle weights (bundle names and layouts), float32.
    Statistics (STATS_NAMES) are left out: see `convert_stats`."""
    converted = {}
    for source, array in tensors.items():
        if source in STATS_NAMES:
            continue
        name = bundle_name(source)
        converted[name] = np.ascontiguousarray(to_bundle_layout(name, np.asarray(array)), dtype=np.float32)
    return converted


def convert_block_tensors(tensors: Mapping[str, np.ndarray], index: int = 0) -> dict[str, np.ndarray]:
    """The tensors of one block saved on its own (names without "blocks.{i}.", e.g. a
    `WanTransformerBlock.state_dict()`) as block `index` of a bundle."""
    return convert_tensors({f"blocks.{index}.{name}": array for name, array in tensors.items()})


def convert_stats(tensors: Mapping[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Checkpoint normalization tensors -> {"state": {"mean", "std"}, "action": {...}} (all required)."""
    missing = sorted(set(STATS_NAMES) - set(tensors))
    if missing:
        raise ValueError(f"checkpoint lacks normalization statistics: {', '.join(missing)}")
    stats: dict[str, dict[str, np.ndarray]] = {}
    for source, (quantity, statistic) in STATS_NAMES.items():
        stats.setdefault(quantity, {})[statistic] = np.asarray(tensors[source], dtype=np.float32)
    return stats


def weight_group(name: str) -> str:
    """Quantization group of a bundle weight; plans choose a stored type per group.

    modulation  the blocks' and heads' shift/scale tables (small, added to temb: keep f32)
    self_attn, cross_attn, ffn   the block matrices (almost all of the model's weights)
    embed       patch, time, text, state and action input projections
    head        the video and action output projections
    encoder     the image encoder (VAE stand-in);  text   the token feature table
    """
    parts = name.split(".")
    if parts[-1] == "modulation":
        return "modulation"
    if parts[0] == "blk":
        return "ffn" if parts[2].startswith("ffn") else parts[2]
    if parts[0] == "out" or parts[:2] == ["action", "out"]:
        return "head"
    if parts[0] == "image_encoder":
        return "encoder"
    if parts[0] == "text":
        return "text"
    return "embed"
