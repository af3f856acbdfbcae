"""A LeRobot PaliGemma-based policy save (pi0.5 and pi0): what the two families read alike.

The runtime names of the parts both share (SigLIP, projector, the Gemma LM, the expert's linear
layers; models/pi05/weights.py lists them), how LeRobot's names map onto them, their shapes, the
projection stacking, and the pi0.5-shaped config read from a save's tensor shapes and hints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from embodied_ros.backbone import gemma, siglip
from embodied_ros.backbone.gemma import GemmaConfig
from embodied_ros.backbone.siglip import VisionConfig
from embodied_ros.bundle.source import Stacked
from embodied_ros.models.kit import lerobot_save
from embodied_ros.models.kit.lerobot_save import Rules, runtime_name

if TYPE_CHECKING:  # the config module is imported where it is used: importing the pi05 package from here
    from embodied_ros.models.pi05.config import Pi05Config  # would run its __init__, which imports this module

TOKENIZER_FILE = "tokenizer.model"

_PALIGEMMA = r"model\.paligemma_with_expert\.paligemma\."
_VISION = _PALIGEMMA + r"model\.vision_tower\.vision_model\."
_LM = _PALIGEMMA + r"model\.language_model\."
LEROBOT_EXPERT = r"model\.paligemma_with_expert\.gemma_expert\.model\."
_LM_HEAD = "model.paligemma_with_expert.paligemma.lm_head.weight"

_VISION_LAYER = siglip.TRANSFORMERS_LAYER_NAMES
_GEMMA_LAYER = gemma.TRANSFORMERS_LAYER_NAMES
_NORMS = gemma.TRANSFORMERS_NORM_NAMES




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


def rename_lerobot(state_dict: Mapping[str, Any], rules: Rules, family: str) -> dict[str, np.ndarray]:
    """A LeRobot policy's `state_dict()` -> runtime names with each projection on its own (`attn_q`,
    `attn_k`, `attn_v`, `ffn_gate`, `ffn_up`): the shapes dimensions are read from."""
    return lerobot_save.rename_lerobot(state_dict, lambda name: runtime_name(name, rules, family), family, _LM_HEAD)


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


def check_weights(weights: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]], family: str) -> None:
    """Every expected tensor present with its shape (ndarray or quantized tensor); else a ValueError."""
    lerobot_save.check_weight_shapes(weights, expected, family)


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


# ---- the save's config ------------------------------------------------------------------

# head counts LeRobot builds for each variant name (the one thing shapes cannot tell). pi0.5's
# attention shape is fixed by the variant (8 query heads; the expert must match the LM's K/V), so
# the Gemma counts hold for any width; SigLIP's are only known for the so400m width.
_GEMMA_VARIANTS = {"gemma_2b": {"num_heads": 8}, "gemma_300m": {"num_heads": 8}}
SIGLIP_SO400M = {"width": 1152, "num_heads": 16}


@dataclass(frozen=True)
class Checkpoint:
    """Everything a bundle holds, read from a checkpoint folder."""

    config: Pi05Config
    weights: dict[str, np.ndarray]  # runtime names
    stats: dict[str, dict[str, np.ndarray]]  # {"state": {"q01", "q99"}, "action": {...}}; may be empty
    tokenizer: bytes | None
    source: str


# What `overrides` may set (`embodied-ros bundle convert --set KEY=VALUE`, --tokenizer FILE).
OVERRIDE_KEYS = frozenset({f"{part}.{key}" for part in ("lm", "expert") for key in ("num_heads", "head_dim")}
                          | {"vision.num_heads", "state_names", "action_period_s", "tokenizer"})


def recorded_hints(source: Path, reference: Path | None) -> dict[str, Any]:
    """What a reference-case description (cases.json) beside the checkpoint or in the reference
    folder records and the checkpoint lacks: head counts ("model_dims") and the state's joint
    names ("state_names")."""
    recorded = lerobot_save.recorded_case_notes(source, reference)
    if recorded is None:
        return {}
    dims = recorded.get("model_dims", {})
    hints = {f"{part}.{k}": v for part in ("vision", "lm", "expert") for k, v in dims.get(part, {}).items()
             if k.endswith(("num_heads", "num_kv_heads", "head_dim"))}
    if recorded.get("state_names"):
        hints["state_names"] = list(recorded["state_names"])
    return hints


def layer_count(weights: Mapping[str, np.ndarray], stack: str) -> int:
    return len({name.split(".")[2] for name in weights if name.startswith(f"{stack}.blk.")})


def heads_of(hints: Mapping[str, Any], part: str, variant: Mapping[str, int] | None, width: int,
           key: str) -> int:
    hint = hints.get(f"{part}.{key}")
    if hint is not None:
        return int(hint)
    if variant is not None and variant.get("width", width) == width and key in variant:
        return variant[key]
    raise ValueError(f"{part}.{key} cannot be read from the weights ({part} width {width} matches no known "
                     f"variant); pass it as an override, e.g. {part}.{key}=N")


def gemma_from_weights(weights, stack: str, variant_name: str, hints) -> GemmaConfig:
    variant = _GEMMA_VARIANTS.get(variant_name)
    q_rows, width = weights[f"{stack}.blk.0.attn_q.weight"].shape
    kv_rows = weights[f"{stack}.blk.0.attn_k.weight"].shape[0]
    num_heads = heads_of(hints, stack, variant, width, "num_heads")
    if q_rows % num_heads:
        raise ValueError(f"{stack}: query projection has {q_rows} rows, not divisible by {num_heads} heads")
    head_dim = int(hints.get(f"{stack}.head_dim", q_rows // num_heads))
    if kv_rows % head_dim:
        raise ValueError(f"{stack}: key projection has {kv_rows} rows, not a multiple of head_dim {head_dim}")
    return GemmaConfig(width=width, depth=layer_count(weights, stack),
                       mlp_dim=weights[f"{stack}.blk.0.ffn_gate.weight"].shape[0], num_heads=num_heads,
                       num_kv_heads=kv_rows // head_dim, head_dim=head_dim)


def robot_io(raw: Mapping[str, Any], hints: Mapping[str, Any]) -> tuple[list, list, list, tuple]:
    """A LeRobot PaliGemma policy config's cameras, state names, action names and which actions are
    relative (use_relative_actions), with generic names where the save gives none."""
    from embodied_ros.models.pi05.config import camera_name

    features = raw.get("input_features", {})
    cameras = [camera_name(key) for key, f in features.items() if f.get("type") == "VISUAL"]
    cameras += [f"empty_camera_{i}" for i in range(int(raw.get("empty_cameras", 0)))]
    cameras = list(dict.fromkeys(cameras))  # LeRobot lists an empty camera in input_features too
    state_dim = int(features.get("observation.state", {}).get("shape", [0])[0])
    action_dim = int(raw.get("output_features", {}).get("action", {}).get("shape", [0])[0])
    action_names = list(raw.get("action_feature_names") or [])
    if len(action_names) != action_dim:
        action_names = [f"action_{i}" for i in range(action_dim)]
    state_names = list(hints.get("state_names") or [])
    if len(state_names) != state_dim:
        state_names = [f"state_{i}" for i in range(state_dim)]
    relative = ()
    if raw.get("use_relative_actions"):
        excluded = tuple(raw.get("relative_exclude_joints") or ())
        relative = tuple(not any(part in name for part in excluded) for name in action_names)
    return cameras, state_names, action_names, relative


def config_from_lerobot(raw: Mapping[str, Any], weights: Mapping[str, np.ndarray], hints) -> Pi05Config:
    from embodied_ros.models.pi05.config import DEFAULT_ACTION_PERIOD_S, Pi05Config

    patch_features = weights["vision.patch.weight"].shape[1]
    patch = int(round((patch_features / 3) ** 0.5))
    tokens = weights["vision.position"].shape[0]
    side = int(round(tokens ** 0.5))
    width = weights["vision.patch.weight"].shape[0]
    vision = VisionConfig(image_size=side * patch, patch_size=patch, width=width,
                          depth=layer_count(weights, "vision"),
                          mlp_dim=weights["vision.blk.0.fc1.weight"].shape[0],
                          num_heads=heads_of(hints, "vision", SIGLIP_SO400M, width, "num_heads"))
    resolution = tuple(raw.get("image_resolution", (vision.image_size, vision.image_size)))
    if resolution != (vision.image_size, vision.image_size):
        raise ValueError(f"config image_resolution {resolution} disagrees with the vision weights "
                         f"({side}x{side} patches of {patch} = {vision.image_size})")
    cameras, state_names, action_names, relative = robot_io(raw, hints)
    return Pi05Config(
        vision=vision,
        lm=gemma_from_weights(weights, "lm", raw.get("paligemma_variant", ""), hints),
        expert=gemma_from_weights(weights, "expert", raw.get("action_expert_variant", ""), hints),
        vocab_size=weights["lm.token_embd"].shape[0],
        camera_names=tuple(cameras), state_names=tuple(state_names), action_names=tuple(action_names),
        chunk_size=int(raw.get("chunk_size", 50)),
        max_action_dim=weights["action_in.weight"].shape[1],
        max_state_dim=int(raw.get("max_state_dim", 32)),
        num_inference_steps=int(raw.get("num_inference_steps", 10)),
        tokenizer_max_length=int(raw.get("tokenizer_max_length", 200)),
        time_min_period=float(raw.get("min_period", 4e-3)),
        time_max_period=float(raw.get("max_period", 4.0)),
        action_period_s=float(hints.get("action_period_s", DEFAULT_ACTION_PERIOD_S)),
        relative_action_mask=relative,
    )
