"""The runtime's tensor names for pi0, and how LeRobot's `PI0Policy` parameter names map onto them.

SigLIP, projector, LM and the expert's linear layers are named as in pi0.5 (models/pi05/weights.py;
the shared naming is models/paligemma_save.py); pi0's expert has plain Gemma norms and its own
input projections:

    expert.blk.{i}.{attn_norm,ffn_norm}.weight, expert.final_norm.weight   [expert width]
    state_in.{weight,bias}            state (padded to max_state_dim) -> the state token
    action_time_in.{weight,bias}      [action token | time embedding] -> expert width, [E, 2E]
    action_time_out.{weight,bias}     [E, E]
    action_in.{weight,bias}, action_out.{weight,bias}
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone import gemma
from embodied_ros.models.pi0.config import Pi0Config
from embodied_ros.models import paligemma_save as paligemma

FAMILY = "pi0"

_EXPERT = paligemma.LEROBOT_EXPERT
_RULES = paligemma.paligemma_rules(
    [(_EXPERT + r"norm\.weight", "expert.final_norm.weight"),
     (r"model\.state_proj\.(weight|bias)", r"state_in.\1"),
     (r"model\.action_time_mlp_(in|out)\.(weight|bias)", r"action_time_\1.\2")]
    + [(_EXPERT + rf"layers\.(\d+)\.{theirs}\.weight", rf"expert.blk.\1.{ours}.weight")
       for theirs, ours in gemma.TRANSFORMERS_NORM_NAMES.items()])


def rename_lerobot(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """LeRobot `PI0Policy.state_dict()` -> runtime names, projections not yet stacked."""
    return paligemma.rename_lerobot(state_dict, _RULES, FAMILY)


def from_lerobot(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return paligemma.stack_projections(rename_lerobot(state_dict))


def expected_shapes(config: Pi0Config) -> dict[str, tuple[int, ...]]:
    ex = config.expert
    shapes = paligemma.paligemma_shapes(config)
    for i in range(ex.depth):
        for norm in ("attn_norm", "ffn_norm"):
            shapes[f"expert.blk.{i}.{norm}.weight"] = (ex.width,)
    shapes.update({
        "expert.final_norm.weight": (ex.width,),
        "state_in.weight": (ex.width, config.max_state_dim), "state_in.bias": (ex.width,),
        "action_time_in.weight": (ex.width, 2 * ex.width), "action_time_in.bias": (ex.width,),
        "action_time_out.weight": (ex.width, ex.width), "action_time_out.bias": (ex.width,),
    })
    return shapes


def check_weights(weights: Mapping[str, Any], config: Pi0Config) -> None:
    paligemma.check_weights(weights, expected_shapes(config), FAMILY)


def is_linear_weight(name: str) -> bool:
    """Weights a matrix product reads (`ks.linear`), so they may be stored quantized."""
    if name.endswith("_norm.weight") or name == "action_time_in.weight":  # the latter is split at load
        return False
    return paligemma.is_linear_weight(name) or name in ("state_in.weight", "action_time_out.weight")


def tensor_group(name: str) -> str:
    """Groups as pi0.5's (vision, lm, expert, embedding, heads); the state and action-time
    projections are heads; the expert's norms stay float32."""
    if name.startswith(("state_in.", "action_time_")):
        return "heads"
    return paligemma.tensor_group(name)
