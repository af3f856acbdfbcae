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

import re
from typing import Any, Mapping

import numpy as np

from embodied_ros.bundle.source import Stacked
from embodied_ros.models.pi05.config import Pi05Config

_PALIGEMMA = r"model\.paligemma_with_expert\.paligemma\."
_VISION = _PALIGEMMA + r"model\.vision_tower\.vision_model\."
_LM = _PALIGEMMA + r"model\.language_model\."
_EXPERT = r"model\.paligemma_with_expert\.gemma_expert\.model\."
_LM_HEAD = "model.paligemma_with_expert.paligemma.lm_head.weight"

_VISION_LAYER = {"layer_norm1": "ln1", "layer_norm2": "ln2", "self_attn.q_proj": "attn_q",
                 "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.out_proj": "attn_out",
                 "mlp.fc1": "fc1", "mlp.fc2": "fc2"}
_GEMMA_LAYER = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                "self_attn.o_proj": "attn_out", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                "mlp.down_proj": "ffn_down"}
_NORMS = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def _rules() -> list[tuple[re.Pattern, str | None]]:
    rules = [
        (_VISION + r"embeddings\.patch_embedding\.(weight|bias)", r"vision.patch.\1"),
        (_VISION + r"embeddings\.position_embedding\.weight", "vision.position"),
        (_VISION + r"post_layernorm\.(weight|bias)", r"vision.post_ln.\1"),
        (_PALIGEMMA + r"model\.multi_modal_projector\.linear\.(weight|bias)", r"projector.\1"),
        (_LM + r"embed_tokens\.weight", "lm.token_embd"),
        (_LM + r"norm\.weight", None),
        (re.escape(_LM_HEAD), None),
        (_EXPERT.replace(r"\.model\.", r"\.") + r"lm_head\.weight", None),
        (_EXPERT + r"norm\.dense\.(weight|bias)", r"expert.final_norm.\1"),
        (r"model\.(action_in|action_out)_proj\.(weight|bias)", r"\1.\2"),
        (r"model\.time_mlp_(in|out)\.(weight|bias)", r"time_\1.\2"),
    ]
    for theirs, ours in _VISION_LAYER.items():
        rules.append((_VISION + rf"encoder\.layers\.(\d+)\.{re.escape(theirs)}\.(weight|bias)",
                      rf"vision.blk.\1.{ours}.\2"))
    for theirs, ours in _GEMMA_LAYER.items():
        rules.append((_LM + rf"layers\.(\d+)\.{re.escape(theirs)}\.weight", rf"lm.blk.\1.{ours}.weight"))
        rules.append((_EXPERT + rf"layers\.(\d+)\.{re.escape(theirs)}\.weight", rf"expert.blk.\1.{ours}.weight"))
    for theirs, ours in _NORMS.items():
        rules.append((_LM + rf"layers\.(\d+)\.{theirs}\.weight", rf"lm.blk.\1.{ours}.weight"))
        rules.append((_EXPERT + rf"layers\.(\d+)\.{theirs}\.dense\.(weight|bias)", rf"expert.blk.\1.{ours}.\2"))
    return [(re.compile(pattern + "$"), replacement) for pattern, replacement in rules]


_RULES = _rules()


def runtime_name(lerobot_name: str) -> str | None:
    """Runtime name of a LeRobot pi0.5 parameter; None for tensors inference never reads.

    Raises ValueError for a name that is not part of pi0.5 (e.g. a checkpoint of another policy).
    """
    for pattern, replacement in _RULES:
        if pattern.match(lerobot_name):
            return None if replacement is None else pattern.sub(replacement, lerobot_name)
    raise ValueError(f"{lerobot_name!r} is not a pi0.5 parameter (LeRobot PI05Policy naming)")


def rename_lerobot(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """LeRobot `PI05Policy.state_dict()` -> runtime prefixes with each projection on its own
    (`attn_q`, `attn_k`, `attn_v`, `ffn_gate`, `ffn_up`): the shapes dimensions are read from.
    Dtypes are kept; the patch conv is flattened to a linear."""
    unknown = []
    renamed: dict[str, np.ndarray] = {}
    for name in state_dict:
        try:
            ours = runtime_name(name)
        except ValueError:
            unknown.append(name)
            continue
        if ours is not None:
            renamed[ours] = np.asarray(state_dict[name])
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise ValueError(f"checkpoint is not a LeRobot pi0.5 policy: unexpected tensors {shown}")
    if "lm.token_embd" not in renamed and _LM_HEAD in state_dict:
        renamed["lm.token_embd"] = np.asarray(state_dict[_LM_HEAD])  # tied save: embeddings live in lm_head
    patch = renamed.get("vision.patch.weight")
    if patch is not None and patch.ndim == 4:
        renamed["vision.patch.weight"] = patch.reshape(patch.shape[0], -1)
    return renamed


_STACKS = (("attn_qkv", ("attn_q", "attn_k", "attn_v")), ("ffn_gate_up", ("ffn_gate", "ffn_up")))


def stack_projections(renamed: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Projections read by one matrix product stacked along their output rows (see module doc), as
    `Stacked` tensors: the copy is made only when a tensor is written or used."""
    stacked = dict(renamed)
    for name in renamed:
        if not name.endswith((".attn_q.weight", ".attn_q.bias", ".ffn_gate.weight")):
            continue
        layer, part, kind = name.rsplit(".", 2)
        target, sources = next((t, srcs) for t, srcs in _STACKS if srcs[0] == part)
        parts = [stacked.pop(f"{layer}.{source}.{kind}") for source in sources]
        stacked[f"{layer}.{target}.{kind}"] = Stacked(parts)  # concatenated when it is written or used
    return dict(sorted(stacked.items(), key=lambda item: _natural_key(item[0])))


def from_lerobot(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """LeRobot `PI05Policy.state_dict()` tensors -> the runtime's tensors."""
    return stack_projections(rename_lerobot(state_dict))


def _natural_key(name: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in name.split("."))


def expected_shapes(config: Pi05Config) -> dict[str, tuple[int, ...]]:
    """Every runtime tensor and its shape for `config`: the bundle's tensor table."""
    v, lm, ex = config.vision, config.lm, config.expert
    shapes: dict[str, tuple[int, ...]] = {
        "vision.patch.weight": (v.width, v.patch_features), "vision.patch.bias": (v.width,),
        "vision.position": (v.tokens_per_camera, v.width),
        "vision.post_ln.weight": (v.width,), "vision.post_ln.bias": (v.width,),
        "projector.weight": (lm.width, v.width), "projector.bias": (lm.width,),
        "lm.token_embd": (config.vocab_size, lm.width),
    }
    for i in range(v.depth):
        layer = {"ln1": (v.width,), "ln2": (v.width,), "attn_qkv": (3 * v.width, v.width),
                 "attn_out": (v.width, v.width), "fc1": (v.mlp_dim, v.width), "fc2": (v.width, v.mlp_dim)}
        for part, shape in layer.items():
            if len(shape) == 2:
                shapes[f"vision.blk.{i}.{part}.weight"], shapes[f"vision.blk.{i}.{part}.bias"] = shape, shape[:1]
            else:
                shapes[f"vision.blk.{i}.{part}.weight"] = shapes[f"vision.blk.{i}.{part}.bias"] = shape
    for stack, cfg in (("lm", lm), ("expert", ex)):
        for i in range(cfg.depth):
            shapes.update({f"{stack}.blk.{i}.{part}.weight": shape
                           for part, shape in _gemma_linear_shapes(cfg).items()})
            for norm in ("attn_norm", "ffn_norm"):
                if stack == "lm":
                    shapes[f"lm.blk.{i}.{norm}.weight"] = (lm.width,)
                else:
                    shapes[f"expert.blk.{i}.{norm}.weight"] = (3 * ex.width, ex.width)
                    shapes[f"expert.blk.{i}.{norm}.bias"] = (3 * ex.width,)
    shapes.update({
        "expert.final_norm.weight": (3 * ex.width, ex.width), "expert.final_norm.bias": (3 * ex.width,),
        "action_in.weight": (ex.width, config.max_action_dim), "action_in.bias": (ex.width,),
        "action_out.weight": (config.max_action_dim, ex.width), "action_out.bias": (config.max_action_dim,),
        "time_in.weight": (ex.width, ex.width), "time_in.bias": (ex.width,),
        "time_out.weight": (ex.width, ex.width), "time_out.bias": (ex.width,),
    })
    return shapes


def _gemma_linear_shapes(cfg) -> dict[str, tuple[int, int]]:
    q_rows, kv_rows = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    return {"attn_qkv": (q_rows + 2 * kv_rows, cfg.width), "attn_out": (cfg.width, q_rows),
            "ffn_gate_up": (2 * cfg.mlp_dim, cfg.width), "ffn_down": (cfg.width, cfg.mlp_dim)}


def check_weights(weights: Mapping[str, Any], config: Pi05Config) -> None:
    """Every expected tensor present with its shape (ndarray or quantized tensor); else a ValueError."""
    expected = expected_shapes(config)
    missing = [name for name in expected if name not in weights]
    if missing:
        raise ValueError(f"pi05 weights lack {len(missing)} tensors, e.g. {', '.join(missing[:4])}")
    wrong = [f"{name} {tuple(weights[name].shape)} (expected {shape})"
             for name, shape in expected.items() if tuple(weights[name].shape) != shape]
    if wrong:
        raise ValueError(f"pi05 weights do not match the config: {'; '.join(wrong[:4])}")


def is_linear_weight(name: str) -> bool:
    """Weights a matrix product reads (`ks.linear`), so they may be stored quantized."""
    return name.endswith(".weight") and name.split(".")[-2] not in ("ln1", "ln2", "post_ln") and (
        name.startswith(("vision.", "projector.", "lm.blk.", "expert.", "action_", "time_"))
        and not (name.startswith("lm.blk.") and name.split(".")[-2].endswith("_norm")))


def tensor_group(name: str) -> str:
    """Group of a runtime tensor, for per-group quantization plans and size reports.

    vision, lm, expert: the linear weights of each stack (vision also its position table);
    embedding: the token embeddings; heads: projector, action in/out; conditioning: the time MLP
    and the expert's adaptive-norm projections (run once per solver step time, at load).
    Norm weights and biases are 1-D and always stay float32.
    """
    if name == "lm.token_embd":
        return "embedding"
    if name.startswith(("time_", "expert.final_norm.")) or (name.startswith("expert.") and "_norm." in name):
        return "conditioning"
    if name.startswith(("projector.", "action_")):
        return "heads"
    return name.split(".", 1)[0]
