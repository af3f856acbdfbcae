"""GR00T N1.7 checkpoint -> bundle.

Two source layouts, both a folder with `model.safetensors` in LeRobot's parameter naming
(`GrootPolicy.state_dict()`, see weights.py):

reference record  config.json lists every dimension (test/data/groot_tiny; its keys are described
                  in docs/reference.md).
LeRobot save      `policy.save_pretrained` output with the processors' save beside it: config.json
                  is a `GrootConfig` ("type": "groot") without model sizes; policy_preprocessor.json
                  and policy_postprocessor.json hold the pack step (state min/max, embodiment tag
                  and mapping, language formatting), the view transform's geometry and the action
                  decode (action min/max) with their statistics files. Sizes come from the tensor
                  shapes; what shapes cannot say (attention head counts of the vision tower, DiT and
                  vl_self_attention, deepstack indexes, M-RoPE sections) comes from the overrides
                  (`--set vision.num_heads=16`), a cases.json "model_dims" beside the checkpoint or
                  in the reference folder, else the released N1.7's values. The cameras (in prompt
                  order: sorted, or the processor's video modality keys) and the state and action
                  widths come from the config's features; state joint names from the overrides or
                  cases.json "state_names". The Qwen tokenizer (a Hugging Face tokenizer.json; a
                  LeRobot save only names it, nvidia/Cosmos-Reason2-2B) is the `tokenizer` override
                  (`--tokenizer FILE`), else tokenizer/tokenizer.json beside the checkpoint, and
                  tokenizer/preprocessor_config.json gives the image processor's pixel bounds and
                  mean/std when present.

LM layers past select_layer and the LM's final norm / lm_head are dropped; a save that kept only the
tied lm_head gives the token embeddings.

Weights are stored per the quantization plan by group: vision, lm, embedding (the token table),
head. The model computes in float32 and expands quantized tensors once at load (model.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone.qwen3_vl import QwenTextConfig, QwenVisionConfig
from embodied_ros.bundle.source import map_safetensors
from embodied_ros.models.groot.config import ActionHeadConfig, GrootConfig, TokenIds, block_kinds, n1_7_config
from embodied_ros.models.kit import lerobot_save
from embodied_ros.models.groot.processor import ProcessorConfig
from embodied_ros.models.groot.weights import check_weights, from_lerobot

ARCHITECTURE = "groot"
WEIGHTS_FILE, CONFIG_FILE = lerobot_save.WEIGHTS_FILE, lerobot_save.CONFIG_FILE
DEFAULT_ACTION_PERIOD_S = 1.0 / 30  # LeRobot's GR00T datasets run at 30 Hz; checkpoints do not record it


@dataclass(frozen=True)
class Checkpoint:
    config: GrootConfig
    weights: dict[str, np.ndarray]
    source: str
    stats: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    tokenizer: bytes | None = None
    state_names: tuple[str, ...] = ()
    action_period_s: float = DEFAULT_ACTION_PERIOD_S


def _read_config(source: Path) -> dict[str, Any] | None:
    try:
        return json.loads((source / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return None


def detect(source: Path) -> bool:
    """True for a folder holding a GR00T N1.7 checkpoint in the record layout."""
    source = Path(source)
    if not (source / WEIGHTS_FILE).is_file():
        return False
    config = _read_config(source)
    if not isinstance(config, dict):
        return False
    return config.get("type") == "groot" or {"vision", "text_model", "action_head", "special_token_ids"} <= set(config)


OVERRIDE_KEYS = frozenset({"vision.num_heads", "vision.deepstack_indexes", "vision.temporal_patch_size",
                           "text.mrope_section", "text.rope_theta", "head.num_heads", "head.vl_num_heads",
                           "head.attend_text_every_n_blocks", "embodiment_id", "state_names", "action_period_s",
                           "tokenizer"})
# what tensor shapes cannot say, at the released size (LeRobot's Cosmos-Reason2-2B backbone, N1.7 head)
RELEASED_HINTS = {"vision.num_heads": 16, "vision.deepstack_indexes": [5, 11, 17], "vision.temporal_patch_size": 2,
                  "text.mrope_section": [24, 20, 20], "text.rope_theta": 5e6, "head.num_heads": 32,
                  "head.vl_num_heads": 32, "head.attend_text_every_n_blocks": 2}
QWEN_TOKENS = {"image": "<|image_pad|>", "vision_start": "<|vision_start|>", "vision_end": "<|vision_end|>",
               "im_start": "<|im_start|>", "im_end": "<|im_end|>"}
TOKENIZER_FILE = "tokenizer/tokenizer.json"
IMAGE_PROCESSOR_FILE = "tokenizer/preprocessor_config.json"
PACK_STEP, VLM_STEP, DECODE_STEP = ("groot_n1_7_pack_inputs_v1", "groot_n1_7_vlm_encode_v1",
                                    "groot_action_unpack_unnormalize_v2")


def _count(weights: dict[str, np.ndarray], prefix: str) -> int:
    return len({name.split(".")[len(prefix.split("."))] for name in weights if name.startswith(prefix + ".")})


def _camera_names(raw: dict[str, Any], order: list[str] | None) -> tuple[str, ...]:
    features = raw.get("input_features", {})
    cameras = sorted(key.removeprefix("observation.images.") for key, feature in features.items()
                     if feature.get("type") == "VISUAL")
    if order:
        unknown = [name for name in order if name not in cameras]
        if unknown:
            raise ValueError(f"the processor's video modality keys {unknown} name no camera of the policy {cameras}")
        cameras = list(order)
    return tuple(cameras)


def _special_ids(tokenizer: bytes | None) -> TokenIds:
    """Qwen's special token ids from the tokenizer, else the released ones."""
    released = n1_7_config(1, 1).tokens
    if tokenizer is None:
        return released
    added = {entry["content"]: entry["id"] for entry in json.loads(tokenizer).get("added_tokens", [])}
    missing = [token for token in QWEN_TOKENS.values() if token not in added]
    if missing:
        raise ValueError(f"the tokenizer lacks Qwen's special tokens {missing}")
    return TokenIds(**{field: added[token] for field, token in QWEN_TOKENS.items()})


def _processor_config(source: Path, hints: dict[str, Any]) -> tuple[ProcessorConfig, list[str] | None]:
    pack, _ = lerobot_save.processor_step(source, "policy_preprocessor.json", PACK_STEP)
    vlm, _ = lerobot_save.processor_step(source, "policy_preprocessor.json", VLM_STEP)
    unsupported = [name for name, value in (("use_albumentations", vlm.get("use_albumentations")),
                                            ("letter_box_transform", vlm.get("letter_box_transform")),
                                            ("use_percentiles", pack.get("use_percentiles")),
                                            ("modality_config", pack.get("modality_config")),
                                            ("raw_stats", pack.get("raw_stats"))) if value]
    if unsupported:
        raise ValueError(f"GR00T processor settings {unsupported} are not supported (the runtime reproduces "
                         "LeRobot's default N1.7 pipeline: min/max statistics, torch view transform)")
    if pack and not pack.get("normalize_min_max", True):
        raise ValueError("a GR00T processor without min/max normalization is not supported")
    mapping = pack.get("embodiment_mapping") or {}
    embodiment = hints.get("embodiment_id", mapping.get(pack.get("embodiment_tag", "new_embodiment"), 0)
                           if pack else ProcessorConfig.embodiment_id)
    image: dict[str, Any] = {}
    path = source / IMAGE_PROCESSOR_FILE
    if path.is_file():
        settings = json.loads(path.read_text())
        size = settings.get("size", {})
        image = {key: value for key, value in (("min_pixels", size.get("shortest_edge")),
                                               ("max_pixels", size.get("longest_edge")),
                                               ("image_mean", settings.get("image_mean")),
                                               ("image_std", settings.get("image_std"))) if value is not None}
    crop = vlm.get("image_crop_size", ProcessorConfig.image_crop_size) if vlm else ProcessorConfig.image_crop_size
    target = vlm.get("image_target_size") or ProcessorConfig.image_target_size
    if vlm.get("crop_fraction") is not None:
        crop = (round(vlm["crop_fraction"] * target[0]), round(vlm["crop_fraction"] * target[1]))
    config = ProcessorConfig(
        image_target_size=tuple(target), image_crop_size=() if crop is None else tuple(crop),
        shortest_image_edge=int(vlm.get("shortest_image_edge") or 0), formalize_language=bool(pack.get("formalize_language", True)),
        clip_state=bool(pack.get("clip_outliers", True)), embodiment_id=int(embodiment),
        **{key: tuple(value) if isinstance(value, list) else int(value) for key, value in image.items()})
    return config, pack.get("video_modality_keys")


def config_from_lerobot(source: Path, raw: dict[str, Any], weights: dict[str, np.ndarray], hints: dict[str, Any],
                        tokenizer: bytes | None) -> GrootConfig:
    """The config of a LeRobot save: sizes from the tensor shapes, head counts and position settings
    from `hints` (overrides, a recorded cases.json), else the released model's."""
    hints = {**RELEASED_HINTS, **hints}
    features = raw.get("input_features", {})
    state_dim = int(features.get("observation.state", {}).get("shape", [0])[0])
    action_dim = int(raw.get("output_features", {}).get("action", {}).get("shape", [0])[0])
    processor, order = _processor_config(source, hints)
    cameras = _camera_names(raw, order)
    if not cameras or not state_dim or not action_dim:
        raise ValueError("the LeRobot GR00T config names no cameras, state or action features")
    try:
        patch = weights["vision.patch.weight"]
        width, temporal = patch.shape[0], int(hints["vision.temporal_patch_size"])
        patch_size = math.isqrt(patch.shape[1] // (3 * temporal))
        merge = math.isqrt(weights["vision.merger.fc1.weight"].shape[1] // width)
        head_dim = weights["lm.blk.0.q_norm.weight"].shape[0]
        embed = weights["lm.token_embd"]
        dit_width = weights["head.position"].shape[1]
        vision = QwenVisionConfig(
            width=width, depth=_count(weights, "vision.blk"), mlp_dim=weights["vision.blk.0.fc1.weight"].shape[0],
            num_heads=int(hints["vision.num_heads"]), patch_size=patch_size, temporal_patch_size=temporal,
            spatial_merge_size=merge, num_position_embeddings=weights["vision.position"].shape[0],
            deepstack_indexes=tuple(hints["vision.deepstack_indexes"]),
            out_dim=weights["vision.merger.fc2.weight"].shape[0])
        text = QwenTextConfig(
            width=embed.shape[1], depth=_count(weights, "lm.blk"), mlp_dim=weights["lm.blk.0.ffn_gate.weight"].shape[0],
            num_heads=weights["lm.blk.0.attn_q.weight"].shape[0] // head_dim,
            num_kv_heads=weights["lm.blk.0.attn_k.weight"].shape[0] // head_dim, head_dim=head_dim,
            vocab_size=embed.shape[0], mrope_section=tuple(hints["text.mrope_section"]),
            rope_theta=float(hints["text.rope_theta"]))
        heads, vl_heads = int(hints["head.num_heads"]), int(hints["head.vl_num_heads"])
        state_in = weights["head.state.1.weight"]
        head = ActionHeadConfig(
            backbone_width=weights["head.vlln.weight"].shape[0], hidden_size=weights["head.out_2.weight"].shape[0],
            width=dit_width, num_heads=heads, head_dim=dit_width // heads,
            block_kinds=block_kinds(_count(weights, "head.dit"), int(hints["head.attend_text_every_n_blocks"])),
            vl_depth=_count(weights, "head.vl"), vl_num_heads=vl_heads, vl_head_dim=embed.shape[1] // vl_heads,
            max_seq_len=weights["head.position"].shape[0], num_embodiments=state_in.shape[0],
            horizon=int(raw.get("chunk_size") or 40), max_state_dim=state_in.shape[1],
            max_action_dim=weights["head.action_in.1.weight"].shape[1],
            num_inference_steps=int(raw.get("num_inference_timesteps") or 4))
    except KeyError as error:
        raise ValueError(f"{source}: the GR00T save lacks the tensor {error}") from None
    if len(vision.deepstack_indexes) != _count(weights, "vision.deepstack"):
        raise ValueError(f"{_count(weights, 'vision.deepstack')} deepstack mergers in the save, "
                         f"{len(vision.deepstack_indexes)} deepstack indexes (set vision.deepstack_indexes)")
    if not 0 <= processor.embodiment_id < head.num_embodiments:
        raise ValueError(f"embodiment id {processor.embodiment_id} is outside the save's "
                         f"{head.num_embodiments} embodiments (set embodiment_id)")
    return GrootConfig(vision=vision, text=text, head=head, tokens=_special_ids(tokenizer), state_dim=state_dim,
                       action_dim=action_dim, camera_names=cameras, processor=processor)


def _lerobot_stats(source: Path) -> dict[str, dict[str, np.ndarray]]:
    """State and action min/max of the save's pack and decode steps."""
    stats = {}
    for pipeline, step, feature, what in (("policy_preprocessor.json", PACK_STEP, "observation.state", "state"),
                                          ("policy_postprocessor.json", DECODE_STEP, "action", "action")):
        _, tensors = lerobot_save.processor_step(source, pipeline, step)
        if tensors:
            stats[what] = lerobot_save.mode_stats(tensors, feature, "MIN_MAX", what)
    return stats


def tensor_group(name: str) -> str:
    return "embedding" if name == "lm.token_embd" else name.split(".", 1)[0]


def _recorded_hints(source: Path, reference: Path | None) -> dict[str, Any]:
    recorded = lerobot_save.recorded_case_notes(source, reference) or {}
    hints = dict(recorded.get("model_dims", {}))
    if "state_names" in recorded:
        hints["state_names"] = recorded["state_names"]
    return hints


def read_checkpoint(source: Path, overrides: Mapping[str, Any] | None = None,
                    reference: Path | None = None) -> Checkpoint:
    source = Path(source)
    overrides = lerobot_save.check_overrides(overrides, OVERRIDE_KEYS, "groot")
    if not detect(source):
        raise ValueError(f"{source}: not a GR00T N1.7 checkpoint folder (needs {WEIGHTS_FILE} in LeRobot "
                         f"GrootPolicy naming and a {CONFIG_FILE} with vision, text_model and action_head)")
    raw = _read_config(source)
    if raw.get("type") != "groot":
        try:
            config = GrootConfig.from_fixture_json(raw)
        except (KeyError, TypeError, IndexError) as error:
            raise ValueError(f"{source / CONFIG_FILE}: incomplete GR00T config ({error})") from None
        weights = from_lerobot(map_safetensors(source / WEIGHTS_FILE), config.text.depth)
        check_weights(weights, config)
        return Checkpoint(config, weights, str(source))
    hints = {**_recorded_hints(source, reference), **overrides}
    weights = from_lerobot(map_safetensors(source / WEIGHTS_FILE))
    tokenizer = lerobot_save.tokenizer_bytes(source, overrides, TOKENIZER_FILE, "tokenizer file")
    config = config_from_lerobot(source, raw, weights, hints, tokenizer)
    check_weights(weights, config)
    names = tuple(hints.get("state_names") or (f"state_{i}" for i in range(config.state_dim)))
    if len(names) != config.state_dim:
        raise ValueError(f"{len(names)} state names for the save's {config.state_dim} state values")
    period = float(hints.get("action_period_s", DEFAULT_ACTION_PERIOD_S))
    if not period > 0:
        raise ValueError(f"action_period_s must be positive, got {period}")
    return Checkpoint(config, weights, str(source), _lerobot_stats(source), tokenizer, names, period)


def convert(source: Path, output: Path, quant_plan: Any = None, reference: Path | None = None,
            progress: bool = False, overrides: Mapping[str, Any] | None = None) -> None:
    """Write the bundle of the checkpoint in `source` to `output`; with `reference` (a record
    folder, parity.py) its cases become the bundle's reference record, which the written bundle
    must reproduce (else it is removed)."""
    from embodied_ros.bundle import BundleWriter, QuantPlan, RobotMetadata
    from embodied_ros.models.groot import parity

    checkpoint = read_checkpoint(source, overrides, reference)
    cfg = checkpoint.config
    plan = quant_plan if isinstance(quant_plan, QuantPlan) else QuantPlan.parse(quant_plan)
    writer = BundleWriter(ARCHITECTURE, plan, group_of=tensor_group)
    writer.set_config(cfg.to_dict())
    writer.set_solver({"method": "euler", "num_inference_steps": cfg.head.num_inference_steps,
                       "time_direction": "noise_at_0"})
    writer.set_robot(RobotMetadata(checkpoint.state_names or tuple(f"state_{i}" for i in range(cfg.state_dim)),
                                   tuple(f"action_{i}" for i in range(cfg.action_dim)), checkpoint.action_period_s))
    writer.set_source(checkpoint.source)
    writer.add_weights(checkpoint.weights)
    if checkpoint.stats:
        writer.set_stats(checkpoint.stats)
    if checkpoint.tokenizer is not None:
        writer.set_tokenizer(checkpoint.tokenizer, kind="huggingface-json")
    lerobot_save.write_checked(writer, Path(output), reference, progress, parity)
