"""The runtime's tensor names for pi0.5, and how LeRobot's parameter names map onto them.

Runtime names are short (GGUF allows 64 characters) and say what a tensor does:

    vision.patch.{weight,bias}          patch embedding as a linear [width, 3*p*p] (LeRobot: a conv
                                        [width, 3, p, p]; flattened in (channel, row, column) order)
    vision.position                     learned position embedding [tokens_per_camera, width]
    vision.blk.{i}.{ln1,ln2}.{weight,bias}
    vision.blk.{i}.{attn_qkv,attn_out,fc1,fc2}.{weight,bias}
    vision.post_ln.{weight,bias}
    projector.{weight,bias}             SigLIP width -> LM width
    lm.token_embd                       [vocab, lm width]
    lm.blk.{i}.{attn_norm,ffn_norm}.weight
    lm.blk.{i}.{attn_qkv,attn_out,ffn_gate_up,ffn_down}.weight
    expert.blk.{i}.{attn_norm,ffn_norm}.{weight,bias}   adaptive RMSNorm: time conditioning ->
                                        (scale, shift, gate), [3*expert width, cond width]
    expert.blk.{i}.{attn_qkv,attn_out,ffn_gate_up,ffn_down}.weight
    expert.final_norm.{weight,bias}
    action_in.{weight,bias}, action_out.{weight,bias}, time_in.{weight,bias}, time_out.{weight,bias}

Linear weights are [out, in], as in the checkpoint. The query, key and value projections of a
layer are stacked into one `attn_qkv` [q rows + k rows + v rows, in], and the Gemma MLP's gate
and up projections into one `ffn_gate_up` [2 * mlp, in]: one matrix product each, and the bundle
stores them that way so the runtime maps them without a copy. Unused checkpoint tensors (both
lm_heads, the LM's final norm) are dropped; a tied save that holds only `lm_head` gives
`lm.token_embd`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone import gemma
from embodied_ros.models import paligemma_save
from embodied_ros.models.paligemma_save import (LEROBOT_EXPERT, Rules, is_linear_weight, paligemma_rules,
                                                paligemma_shapes, stack_projections, tensor_group)
from embodied_ros.models.pi05.config import Pi05Config

__all__ = ["runtime_name", "rename_lerobot", "stack_projections", "from_lerobot", "paligemma_rules",
           "paligemma_shapes", "expected_shapes", "check_weights", "is_linear_weight", "tensor_group"]

_NORMS = gemma.TRANSFORMERS_NORM_NAMES


def _pi05_rules() -> Rules:
    own = [(LEROBOT_EXPERT + r"norm\.dense\.(weight|bias)", r"expert.final_norm.\1"),
           (r"model\.time_mlp_(in|out)\.(weight|bias)", r"time_\1.\2")]
    own += [(LEROBOT_EXPERT + rf"layers\.(\d+)\.{theirs}\.dense\.(weight|bias)", rf"expert.blk.\1.{ours}.\2")
            for theirs, ours in _NORMS.items()]
    return paligemma_rules(own)


_RULES = _pi05_rules()


def runtime_name(lerobot_name: str) -> str | None:
    """Runtime name of a LeRobot pi0.5 parameter; None for tensors inference never reads.

    Raises ValueError for a name that is not part of pi0.5 (e.g. a checkpoint of another policy).
    """
    return paligemma_save.runtime_name(lerobot_name, _RULES, "pi0.5")


def rename_lerobot(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """LeRobot `PI05Policy.state_dict()` -> runtime names, projections not yet stacked."""
    return paligemma_save.rename_lerobot(state_dict, _RULES, "pi0.5")


def from_lerobot(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """LeRobot `PI05Policy.state_dict()` tensors -> the runtime's tensors."""
    return stack_projections(rename_lerobot(state_dict))


def expected_shapes(config: Pi05Config) -> dict[str, tuple[int, ...]]:
    """Every runtime tensor and its shape for `config`: the bundle's tensor table."""
    ex = config.expert
    shapes = paligemma_shapes(config)
    for i in range(ex.depth):
        for norm in ("attn_norm", "ffn_norm"):
            shapes[f"expert.blk.{i}.{norm}.weight"] = (3 * ex.width, ex.width)
            shapes[f"expert.blk.{i}.{norm}.bias"] = (3 * ex.width,)
    shapes.update({
        "expert.final_norm.weight": (3 * ex.width, ex.width), "expert.final_norm.bias": (3 * ex.width,),
        "time_in.weight": (ex.width, ex.width), "time_in.bias": (ex.width,),
        "time_out.weight": (ex.width, ex.width), "time_out.bias": (ex.width,),
    })
    return shapes


def check_weights(weights: Mapping[str, Any], config: Pi05Config) -> None:
    """Every expected tensor present with its shape (ndarray or quantized tensor); else a ValueError."""
    paligemma_save.check_weights(weights, expected_shapes(config), "pi05")
