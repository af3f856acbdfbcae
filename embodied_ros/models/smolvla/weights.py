"""The runtime's tensor names for SmolVLA, and how LeRobot's parameter names map onto them.

The vision tower and connector are named by backbone/smolvlm.py, the VLM text layers (`lm.`) by
backbone/llama.py, the expert layers (`expert.blk.{j}.`) by heads/interleaved_expert.py. The rest:

    lm.token_embd                        text_model.embed_tokens.weight   [vocab, D]
    expert.final_norm.weight             lm_expert.norm.weight
    state_in.{weight,bias}               model.state_proj                 [D, max_state_dim]
    action_in.{weight,bias}              model.action_in_proj             [E, max_action_dim]
    action_time_in.{weight,bias}         model.action_time_mlp_in         [E, 2E]
    action_time_out.{weight,bias}        model.action_time_mlp_out        [E, E]
    action_out.{weight,bias}             model.action_out_proj            [max_action_dim, E]

Linear weights are [out, in] as in the checkpoint; q/k/v and gate/up are stacked (one product
each), in cross-attention expert layers k/v only (`attn_kv`). Unused tensors (lm_head, the text
model's final norm) are dropped; a tied save holding only `lm_head` gives `lm.token_embd`.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone import llama, smolvlm
from embodied_ros.heads import interleaved_expert
from embodied_ros.heads.interleaved_expert import CROSS
from embodied_ros.models.kit import lerobot_save

_VLM = r"model\.vlm_with_expert\.vlm\."
_VISION = _VLM + r"model\.vision_model\."
_TEXT = _VLM + r"model\.text_model\."
_EXPERT = r"model\.vlm_with_expert\.lm_expert\."
_LM_HEAD = "model.vlm_with_expert.vlm.lm_head.weight"
_HEADS = {"state_proj": "state_in", "action_in_proj": "action_in", "action_time_mlp_in": "action_time_in",
          "action_time_mlp_out": "action_time_out", "action_out_proj": "action_out"}


def _rules() -> list[tuple[re.Pattern, str | None]]:
    rules = [
        (_VISION + r"embeddings\.patch_embedding\.(weight|bias)", r"vision.patch.\1"),
        (_VISION + r"embeddings\.position_embedding\.weight", "vision.position"),
        (_VISION + r"post_layernorm\.(weight|bias)", r"vision.post_ln.\1"),
        (_VLM + r"model\.connector\.modality_projection\.proj\.weight", "connector.weight"),
        (_TEXT + r"embed_tokens\.weight", "lm.token_embd"),
        (_TEXT + r"norm\.weight", None),
        (re.escape(_LM_HEAD), None),
        (_EXPERT + r"norm\.weight", "expert.final_norm.weight"),
    ]
    rules += [(rf"model\.{theirs}\.(weight|bias)", rf"{ours}.\1") for theirs, ours in _HEADS.items()]
    for theirs, ours in smolvlm.VISION_LAYER_NAMES.items():
        rules.append((_VISION + rf"encoder\.layers\.(\d+)\.{re.escape(theirs)}\.(weight|bias)",
                      rf"vision.blk.\1.{ours}.\2"))
    for theirs, ours in llama.LAYER_NAMES.items():
        rules.append((_TEXT + rf"layers\.(\d+)\.{re.escape(theirs)}\.weight", rf"lm.blk.\1.{ours}.weight"))
        rules.append((_EXPERT + rf"layers\.(\d+)\.{re.escape(theirs)}\.weight", rf"expert.blk.\1.{ours}.weight"))
    return [(re.compile(pattern + "$"), replacement) for pattern, replacement in rules]


_RULES = _rules()


def runtime_name(lerobot_name: str) -> str | None:
    """Runtime name of a LeRobot SmolVLA parameter; None for tensors inference never reads."""
    return lerobot_save.runtime_name(lerobot_name, _RULES, "SmolVLA")


def rename_lerobot(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """LeRobot `SmolVLAPolicy.state_dict()` -> runtime names, each projection on its own (the shapes
    dimensions are read from); the patch conv is flattened to a linear."""
    return lerobot_save.rename_lerobot(state_dict, runtime_name, "SmolVLA", _LM_HEAD)


def stack_projections(renamed: Mapping[str, np.ndarray], config) -> dict[str, np.ndarray]:
    """Projections read by one matrix product stacked along their output rows."""
    stacked = dict(renamed)
    cross = {index for index, (kind, _) in enumerate(config.layer_plan) if kind == CROSS}

    def join(layer: str, target: str, sources: tuple[str, ...], kind: str) -> None:
        names = [f"{layer}.{source}.{kind}" for source in sources]
        if all(name in stacked for name in names):
            stacked[f"{layer}.{target}.{kind}"] = np.concatenate([stacked.pop(name) for name in names])

    layers = {name.rsplit(".", 2)[0] for name in renamed if ".blk." in name}
    for layer in layers:
        for kind in ("weight", "bias"):
            if layer.startswith("expert.") and int(layer.split(".")[2]) in cross:
                join(layer, "attn_kv", ("attn_k", "attn_v"), kind)
            else:
                join(layer, "attn_qkv", ("attn_q", "attn_k", "attn_v"), kind)
            join(layer, "ffn_gate_up", ("ffn_gate", "ffn_up"), kind)
    return dict(sorted(stacked.items(), key=lambda item: _natural_key(item[0])))


def _natural_key(name: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in name.split("."))


def expected_shapes(config) -> dict[str, tuple[int, ...]]:
    """Every runtime tensor and its shape for `config`: the bundle's tensor table."""
    lm, ex = config.lm, config.expert
    shapes = smolvlm.expected_shapes(config.vision, lm.width)
    shapes["lm.token_embd"] = (config.vocab_size, lm.width)
    for i in range(lm.depth):
        shapes.update({f"lm.blk.{i}.{name}": shape for name, shape in llama.layer_shapes(lm).items()})
    for j, (kind, _) in enumerate(config.layer_plan):
        shapes.update({f"expert.blk.{j}.{name}": shape
                       for name, shape in interleaved_expert.layer_shapes(ex, kind).items()})
    shapes["expert.final_norm.weight"] = (ex.width,)
    for name, (out, inp) in {"state_in": (lm.width, config.max_state_dim),
                             "action_in": (ex.width, config.max_action_dim),
                             "action_time_in": (ex.width, 2 * ex.width), "action_time_out": (ex.width, ex.width),
                             "action_out": (config.max_action_dim, ex.width)}.items():
        shapes[f"{name}.weight"], shapes[f"{name}.bias"] = (out, inp), (out,)
    return shapes


def check_weights(weights: Mapping[str, Any], config) -> None:
    """Every expected tensor present with its shape, and no other; else a ValueError."""
    lerobot_save.check_weight_shapes(weights, expected_shapes(config), "smolvla", exact=True)


_NOT_PRODUCTS = ("ln1", "ln2", "post_ln", "attn_norm", "ffn_norm", "final_norm")


def is_linear_weight(name: str) -> bool:
    """Weights a matrix product reads (`ks.linear`), so they may be stored quantized."""
    return (name.endswith(".weight") and name.split(".")[-2] not in _NOT_PRODUCTS) or name == "lm.token_embd"


def tensor_group(name: str) -> str:
    """Group for quantization plans: vision (tower + connector), lm, expert, embedding, heads."""
    if name == "lm.token_embd":
        return "embedding"
    if name.startswith("connector."):
        return "vision"
    if name.startswith(("state_in.", "action_")):
        return "heads"
    return name.split(".", 1)[0]
