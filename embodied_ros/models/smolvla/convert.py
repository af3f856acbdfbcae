"""SmolVLA checkpoint -> bundle.

Two source layouts, both a folder with `config.json` and `model.safetensors` in LeRobot's
parameter naming (`SmolVLAPolicy.state_dict()`):

reference record  config.json lists every dimension (the format of test/data/smolvla_tiny); no
                  normalization stats, no tokenizer.
LeRobot save      `policy.save_pretrained` output: config.json is a `SmolVLAConfig` ("type":
                  "smolvla"), plus policy_preprocessor*.json / policy_postprocessor*.json with their
                  normalizer stats files (MEAN_STD), and optionally `tokenizer.json`.

Dimensions come from tensor shapes: widths, depths, MLP sizes, vocabulary, patch size, image size,
pixel-shuffle scale (connector input / vision width), padded state and action widths, kv heads
given the head width. Query head counts cannot be read from shapes; they come from `overrides`
({"lm.num_heads": 15}), from a `cases.json` "model_dims" beside the checkpoint, or from the VLM
the config names when its widths match (SmolVLM2-500M: vision 768 wide with 12 heads, text 960
wide with 15 heads of 64). The tokenizer (a Hugging Face tokenizer.json) comes from the
`tokenizer` override (`--tokenizer FILE`) or from tokenizer.json beside the checkpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone.llama import LlamaConfig
from embodied_ros.backbone.smolvlm import SmolVLMVisionConfig
from embodied_ros.bundle.source import map_safetensors
from embodied_ros.models.kit import lerobot_save
from embodied_ros.models.smolvla.config import DEFAULT_ACTION_PERIOD_S, ROPE_THETA, SmolVLAConfig, camera_name
from embodied_ros.models.smolvla.weights import check_weights, rename_lerobot, stack_projections, tensor_group

WEIGHTS_FILE, CONFIG_FILE = lerobot_save.WEIGHTS_FILE, lerobot_save.CONFIG_FILE
TOKENIZER_FILE = "tokenizer.json"

_VLM_VARIANTS = {"HuggingFaceTB/SmolVLM2-500M-Video-Instruct": {
    "vision": {"width": 768, "num_heads": 12}, "lm": {"width": 960, "num_heads": 15, "head_dim": 64}}}

OVERRIDE_KEYS = frozenset({"vision.num_heads", "lm.num_heads", "lm.head_dim", "state_names", "action_period_s",
                           "tokenizer"})


@dataclass(frozen=True)
class Checkpoint:
    config: SmolVLAConfig
    weights: dict[str, np.ndarray]
    stats: dict[str, dict[str, np.ndarray]]  # {"state": {"mean", "std"}, "action": {...}}; may be empty
    tokenizer: bytes | None
    source: str


def detect(source: Path) -> bool:
    """True for a folder holding a SmolVLA checkpoint in either layout (file names and config only)."""
    config = lerobot_save.saved_config(source)
    if config is None:
        return False
    return config.get("type") == "smolvla" or {"vision", "connector", "text_model", "expert"} <= set(config)


def read_checkpoint(source: Path, overrides: Mapping[str, Any] | None = None,
                    reference: Path | None = None) -> Checkpoint:
    source = Path(source)
    overrides = lerobot_save.check_overrides(overrides, OVERRIDE_KEYS, "smolvla")
    if not detect(source):
        raise ValueError(f"{source}: not a SmolVLA checkpoint folder (needs {CONFIG_FILE} and {WEIGHTS_FILE} "
                         "of a LeRobot smolvla policy or a reference record)")
    raw = json.loads((source / CONFIG_FILE).read_text())
    weights = rename_lerobot(map_safetensors(source / WEIGHTS_FILE))
    if raw.get("type") == "smolvla":
        hints = _recorded_hints(source, reference)
        hints.update(overrides)
        config = _config_from_lerobot(raw, weights, hints)
        stats = _lerobot_stats(source, raw)
    else:
        config = lerobot_save.record_config(SmolVLAConfig.from_fixture_json(raw), overrides, source)
        stats = {}
    weights = stack_projections(weights, config)
    check_weights(weights, config)
    tokenizer = lerobot_save.tokenizer_bytes(source, overrides, TOKENIZER_FILE, "tokenizer file")
    return Checkpoint(config, weights, stats, tokenizer, str(source))


def convert(source: Path, output: Path, quant_plan: Any = None, reference: Path | None = None,
            progress: bool = False, overrides: Mapping[str, Any] | None = None) -> None:
    """Write the bundle of the checkpoint in `source` to `output` (see models/pi05/convert.py for
    `quant_plan` and `reference`; groups here: vision, lm, expert, embedding, heads)."""
    from embodied_ros.models.smolvla import RECORDS

    checkpoint = read_checkpoint(source, overrides, reference)
    lerobot_save.write_policy_bundle("smolvla", checkpoint, quant_plan, tensor_group, Path(output), reference,
                                     progress, RECORDS, tokenizer_kind="huggingface-json")


# ---- LeRobot layout ------------------------------------------------------------------------

def _recorded_hints(source: Path, reference: Path | None) -> dict[str, Any]:
    """Head counts ("model_dims") and joint names ("state_names") of a cases.json beside the
    checkpoint or in the reference folder."""
    recorded = lerobot_save.recorded_case_notes(source, reference)
    if recorded is None:
        return {}
    dims = recorded.get("model_dims", {})
    hints = {f"{part}.{key}": value for part in ("vision", "lm") for key, value in dims.get(part, {}).items()
             if key in ("num_heads", "head_dim")}
    if recorded.get("state_names"):
        hints["state_names"] = list(recorded["state_names"])
    return hints


def _count(weights: Mapping[str, np.ndarray], stack: str) -> int:
    return len({name.split(".")[2] for name in weights if name.startswith(f"{stack}.blk.")})


def _hint(hints: Mapping[str, Any], variant: Mapping[str, Any] | None, part: str, key: str, width: int) -> int | None:
    if f"{part}.{key}" in hints:
        return int(hints[f"{part}.{key}"])
    known = (variant or {}).get(part, {})
    if known.get("width") == width and key in known:
        return int(known[key])
    return None


def _config_from_lerobot(raw: Mapping[str, Any], weights: Mapping[str, np.ndarray], hints) -> SmolVLAConfig:
    if raw.get("adapt_to_pi_aloha") or raw.get("use_delta_joint_actions_aloha"):
        raise ValueError("the checkpoint converts ALOHA joint/gripper spaces (adapt_to_pi_aloha); this runtime "
                         "does not, so its actions would differ")
    variant = _VLM_VARIANTS.get(raw.get("vlm_model_name", ""))
    width, patch_features = weights["vision.patch.weight"].shape
    patch = int(round((patch_features / 3) ** 0.5))
    side = int(round(weights["vision.position"].shape[0] ** 0.5))
    text_width, connector_in = weights["connector.weight"].shape
    vision_heads = _hint(hints, variant, "vision", "num_heads", width)
    lm_heads = _hint(hints, variant, "lm", "num_heads", text_width)
    for value, key in ((vision_heads, "vision.num_heads"), (lm_heads, "lm.num_heads")):
        if value is None:
            raise ValueError(f"{key} cannot be read from the weights and the config's VLM "
                             f"{raw.get('vlm_model_name')!r} does not have these widths; pass it as an override, "
                             f"e.g. {key}=N")
    vision = SmolVLMVisionConfig(image_size=side * patch, patch_size=patch, width=width,
                                 depth=_count(weights, "vision"),
                                 mlp_dim=weights["vision.blk.0.fc1.weight"].shape[0], num_heads=vision_heads,
                                 scale_factor=int(round((connector_in / width) ** 0.5)))
    resize = raw.get("resize_imgs_with_padding")
    if resize and tuple(resize) != (vision.image_size, vision.image_size):
        raise ValueError(f"config resize_imgs_with_padding {tuple(resize)} disagrees with the vision weights "
                         f"({side}x{side} patches of {patch} = {vision.image_size})")
    q_rows = weights["lm.blk.0.attn_q.weight"].shape[0]
    head_dim = _hint(hints, variant, "lm", "head_dim", text_width) or q_rows // lm_heads
    kv_rows = weights["lm.blk.0.attn_k.weight"].shape[0]
    if q_rows != lm_heads * head_dim or kv_rows % head_dim:
        raise ValueError(f"text model projections ({q_rows} query, {kv_rows} key rows) do not fit {lm_heads} heads "
                         f"of {head_dim}")
    eps = 1e-5
    lm = LlamaConfig(text_width, _count(weights, "lm"), weights["lm.blk.0.ffn_gate.weight"].shape[0], lm_heads,
                     kv_rows // head_dim, head_dim, eps, ROPE_THETA)
    expert_width = weights["action_in.weight"].shape[0]
    expert = LlamaConfig(expert_width, _count(weights, "expert"), weights["expert.blk.0.ffn_gate.weight"].shape[0],
                         lm_heads, kv_rows // head_dim, head_dim, eps, ROPE_THETA)
    features = raw.get("input_features", {})
    empty = {f"empty_camera_{i}" for i in range(int(raw.get("empty_cameras", 0)))}  # never given, always padding
    cameras = [camera_name(key) for key, f in features.items() if f.get("type") == "VISUAL"
               and camera_name(key) not in empty]
    state_dim = int(features.get("observation.state", {}).get("shape", [0])[0])
    action_dim = int(raw.get("output_features", {}).get("action", {}).get("shape", [0])[0])
    state_names = list(hints.get("state_names") or [])
    if len(state_names) != state_dim:
        state_names = [f"state_{i}" for i in range(state_dim)]
    mode = raw.get("attention_mode", "cross_attn")
    every = int(raw.get("self_attn_every_n_layers", 2)) if "cross" in mode else 1
    return SmolVLAConfig(
        vision=vision, lm=lm, expert=expert, vocab_size=weights["lm.token_embd"].shape[0],
        camera_names=tuple(cameras), state_names=tuple(state_names),
        action_names=tuple(f"action_{i}" for i in range(action_dim)),
        empty_cameras=int(raw.get("empty_cameras", 0)), self_attn_every_n_layers=every,
        chunk_size=int(raw.get("chunk_size", 50)), max_action_dim=weights["action_in.weight"].shape[1],
        max_state_dim=weights["state_in.weight"].shape[1], num_inference_steps=int(raw.get("num_steps", 10)),
        tokenizer_max_length=int(raw.get("tokenizer_max_length", 48)),
        time_min_period=float(raw.get("min_period", 4e-3)), time_max_period=float(raw.get("max_period", 4.0)),
        action_period_s=float(hints.get("action_period_s", DEFAULT_ACTION_PERIOD_S)))


def _lerobot_stats(source: Path, raw: Mapping[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """SmolVLA normalizes with MEAN_STD (or IDENTITY)."""
    return lerobot_save.lerobot_stats(source, raw, default_mode="MEAN_STD", supported=("MEAN_STD",))
