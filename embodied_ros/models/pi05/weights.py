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

from embodied_ros.backbone import gemma, siglip
from embodied_ros.bundle.source import Stacked
from embodied_ros.models.pi05.config import Pi05Config

_PALIGEMMA = r"model\.paligemma_with_expert\.paligemma\."
_VISION = _PALIGEMMA + r"model\.vision_tower\.vision_model\."
_LM = _PALIGEMMA + r"model\.language_model\."
LEROBOT_EXPERT = r"model\.paligemma_with_expert\.gemma_expert\.model\."
_LM_HEAD = "model.paligemma_with_expert.paligemma.lm_head.weight"

_VISION_LAYER = siglip.TRANSFORMERS_LAYER_NAMES
_GEMMA_LAYER = gemma.TRANSFORMERS_LAYER_NAMES
_NORMS = gemma.TRANSFORMERS_NORM_NAMES


Rules = list[tuple[re.Pattern, str | None]]


def paligemma_rules(expert_rules: list[tuple[str, str | None]]) -> Rules:
    """LeRobot -> runtime name rules of the PaliGemma parts pi0 and pi0.5 share (SigLIP, projector,
    the Gemma LM, the expert's linear layers, the unused lm_heads), plus a family's own
    (`expert_rules`: (pattern, replacement) pairs, patterns unanchored)."""
    rules = [
        (_VISION + r"embeddings\.patch_embedding\.(weight|bias)", r"vision.patch.\1"),
        (_VISION + r"embeddings\.position_embedding\.weight", "vision.position"),
        (_VISION + r"post_layernorm\.(weight|bias)", r"vision.post_ln.\1"),
        (_PALIGEMMA + r"model\.multi_modal_projector\.linear\.(weight|bias)", r"projector.\1"),
        (_LM + r"embed_tokens\.weight", "lm.token_embd"),
        (_LM + r"norm\.weight", None),
        (re.escape(_LM_HEAD), None),
        (LEROBOT_EXPERT.replace(r"\.model\.", r"\.") + r"lm_head\.weight", None),
        (r"model\.(action_in|action_out)_proj\.(weight|bias)", r"\1.\2"),
    ]
    for theirs, ours in _VISION_LAYER.items():
        rules.append((_VISION + rf"encoder\.layers\.(\d+)\.{re.escape(theirs)}\.(weight|bias)",
                      rf"vision.blk.\1.{ours}.\2"))
    for theirs, ours in _GEMMA_LAYER.items():
        rules.append((_LM + rf"layers\.(\d+)\.{re.escape(theirs)}\.weight", rf"lm.blk.\1.{ours}.weight"))
        rules.append((LEROBOT_EXPERT + rf"layers\.(\d+)\.{re.escape(theirs)}\.weight", rf"expert.blk.\1.{ours}.weight"))
    for theirs, ours in _NORMS.items():
        rules.append((_LM + rf"layers\.(\d+)\.{theirs}\.weight", rf"lm.blk.\1.{ours}.weight"))
    rules += expert_rules
    return [(re.compile(pattern + "$"), replacement) for pattern, replacement in rules]


def _pi05_rules() -> Rules:
    own = [(LEROBOT_EXPERT + r"norm\.dense\.(weight|bias)", r"expert.final_norm.\1"),
           (r"model\.time_mlp_(in|out)\.(weight|bias)", r"time_\1.\2")]
    own += [(LEROBOT_EXPERT + rf"layers\.(\d+)\.{theirs}\.dense\.(weight|bias)", rf"expert.blk.\1.{ours}.\2")
            for theirs, ours in _NORMS.items()]
    return paligemma_rules(own)


_RULES = _pi05_rules()


def runtime_name(lerobot_name: str, rules: Rules = _RULES, family: str = "pi0.5") -> str | None:
    """Runtime name of a LeRobot pi0.5 parameter; None for tensors inference never reads.

    Raises ValueError for a name that is not part of pi0.5 (e.g. a checkpoint of another policy).
    """
    for pattern, replacement in rules:
        if pattern.match(lerobot_name):
            return None if replacement is None else pattern.sub(replacement, lerobot_name)
    raise ValueError(f"{lerobot_name!r} is not a {family} parameter (LeRobot naming)")


def rename_lerobot(state_dict: Mapping[str, Any], rules: Rules = _RULES,
                   family: str = "pi0.5") -> dict[str, np.ndarray]:
    """LeRobot `PI05Policy.state_dict()` -> runtime prefixes with each projection on its own
    (`attn_q`, `attn_k`, `attn_v`, `ffn_gate`, `ffn_up`): the shapes dimensions are read from.
    Dtypes are kept; the patch conv is flattened to a linear. pi0 passes its own `rules`."""
    unknown = []
    renamed: dict[str, np.ndarray] = {}
    for name in state_dict:
        try:
            ours = runtime_name(name, rules, family)
        except ValueError:
            unknown.append(name)
            continue
        if ours is not None:
            renamed[ours] = np.asarray(state_dict[name])
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise ValueError(f"checkpoint is not a LeRobot {family} policy: unexpected tensors {shown}")
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


def paligemma_shapes(config: Pi05Config) -> dict[str, tuple[int, ...]]:
    """Shapes of the tensors pi0 and pi0.5 share: SigLIP, projector, the LM, the expert's linear
    layers and LM norms, the action projections."""
    v, lm, ex = config.vision, config.lm, config.expert
    shapes: dict[str, tuple[int, ...]] = {
        **siglip.tensor_shapes(v, "vision"),
        "projector.weight": (lm.width, v.width), "projector.bias": (lm.width,),
        "lm.token_embd": (config.vocab_size, lm.width),
    }
    for stack, cfg in (("lm", lm), ("expert", ex)):
        for i in range(cfg.depth):
            shapes.update({f"{stack}.blk.{i}.{part}.weight": shape for part, shape in gemma.linear_shapes(cfg).items()})
    for i in range(lm.depth):
        for norm in ("attn_norm", "ffn_norm"):
            shapes[f"lm.blk.{i}.{norm}.weight"] = (lm.width,)
    shapes.update({
        "action_in.weight": (ex.width, config.max_action_dim), "action_in.bias": (ex.width,),
        "action_out.weight": (config.max_action_dim, ex.width), "action_out.bias": (config.max_action_dim,),
    })
    return shapes


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


def check_weights(weights: Mapping[str, Any], config: Pi05Config,
                  expected: Mapping[str, tuple[int, ...]] | None = None, family: str = "pi05") -> None:
    """Every expected tensor present with its shape (ndarray or quantized tensor); else a ValueError."""
    expected = expected_shapes(config) if expected is None else expected
    missing = [name for name in expected if name not in weights]
    if missing:
        raise ValueError(f"{family} weights lack {len(missing)} tensors, e.g. {', '.join(missing[:4])}")
    wrong = [f"{name} {tuple(weights[name].shape)} (expected {shape})"
             for name, shape in expected.items() if tuple(weights[name].shape) != shape]
    if wrong:
        raise ValueError(f"{family} weights do not match the config: {'; '.join(wrong[:4])}")


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
