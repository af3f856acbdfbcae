"""pi0.5 checkpoint -> bundle.

Two source layouts, both a folder with `config.json` and `model.safetensors` in LeRobot's
parameter naming (`PI05Policy.state_dict()`):

reference record  config.json lists every dimension (the format of test/data/pi05_tiny); no
                  normalization stats, no tokenizer.
LeRobot save      `policy.save_pretrained` output: config.json is a `PI05Config` ("type": "pi05")
                  without model sizes, plus policy_preprocessor*.json / policy_postprocessor*.json
                  with their normalizer stats files, and optionally `tokenizer.model`.

Dimensions come from tensor shapes where they can: widths, depths, MLP sizes, vocabulary, patch
size, tokens per camera, padded action width, kv heads (given the query heads). Query head counts
cannot be read from shapes; they come, in this order, from `overrides` ({"vision.num_heads": 4}),
from a `cases.json` "model_dims" next to the checkpoint or in the reference folder, or from the
variant the config names: gemma_2b / gemma_300m have 8 query heads at any width (LeRobot builds
pi0.5 that way), SigLIP so400m 16 heads when the width is its 1152. A count that none of these
gives is an error naming the override to pass. State joint names come from `overrides` or that
cases.json ("state_names"), else state_0, state_1, ... A real LeRobot save names its tokenizer
(google/paligemma-3b-pt-224) without carrying it: pass the SentencePiece model file as the
`tokenizer` override (`--tokenizer FILE`), or put it beside the checkpoint as tokenizer.model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from embodied_ros.bundle.source import map_safetensors
from embodied_ros.models import family_kit
from embodied_ros.models.pi05.config import (DEFAULT_ACTION_PERIOD_S, GemmaConfig, Pi05Config, VisionConfig,
                                             camera_name)
from embodied_ros.models.pi05.weights import check_weights, rename_lerobot, stack_projections, tensor_group

WEIGHTS_FILE, CONFIG_FILE = family_kit.WEIGHTS_FILE, family_kit.CONFIG_FILE
TOKENIZER_FILE = "tokenizer.model"

# head counts LeRobot builds for each variant name (the one thing shapes cannot tell). pi0.5's
# attention shape is fixed by the variant (8 query heads; the expert must match the LM's K/V), so
# the Gemma counts hold for any width; SigLIP's are only known for the so400m width.
_GEMMA_VARIANTS = {"gemma_2b": {"num_heads": 8}, "gemma_300m": {"num_heads": 8}}
_SIGLIP_SO400M = {"width": 1152, "num_heads": 16}


@dataclass(frozen=True)
class Checkpoint:
    """Everything a bundle holds, read from a checkpoint folder."""

    config: Pi05Config
    weights: dict[str, np.ndarray]  # runtime names
    stats: dict[str, dict[str, np.ndarray]]  # {"state": {"q01", "q99"}, "action": {...}}; may be empty
    tokenizer: bytes | None
    source: str


def detect(source: Path) -> bool:
    """True for a folder holding a pi0.5 checkpoint in either layout (file names and config only)."""
    config = family_kit.saved_config(source)
    if config is None:
        return False
    return config.get("type") == "pi05" or ({"vision", "language_model", "expert"} <= set(config)
                                            and "suffix" not in config)  # a pi0 record has a suffix


# What `overrides` may set (`embodied-ros bundle convert --set KEY=VALUE`, --tokenizer FILE).
OVERRIDE_KEYS = frozenset({f"{part}.{key}" for part in ("lm", "expert") for key in ("num_heads", "head_dim")}
                          | {"vision.num_heads", "state_names", "action_period_s", "tokenizer"})


def read_checkpoint(source: Path, overrides: Mapping[str, Any] | None = None,
                    reference: Path | None = None) -> Checkpoint:
    source = Path(source)
    unknown = sorted(set(overrides or {}) - OVERRIDE_KEYS)
    if unknown:
        raise ValueError(f"unknown pi0.5 conversion setting(s) {unknown}; known: {sorted(OVERRIDE_KEYS)}")
    if not detect(source):
        raise ValueError(f"{source}: not a pi0.5 checkpoint folder (needs {CONFIG_FILE} and {WEIGHTS_FILE} "
                         "of a LeRobot pi05 policy or a reference record)")
    raw_config = json.loads((source / CONFIG_FILE).read_text())
    weights = rename_lerobot(map_safetensors(source / WEIGHTS_FILE))  # views of the file, read when written
    if raw_config.get("type") == "pi05":
        hints = recorded_hints(source, reference)
        hints.update(overrides or {})
        config = config_from_lerobot(raw_config, weights, hints)
        stats = lerobot_stats(source, raw_config)
    else:
        config = Pi05Config.from_fixture_json(raw_config)
        stats = {}
    weights = stack_projections(weights)
    check_weights(weights, config)
    tokenizer_path = Path((overrides or {}).get("tokenizer") or source / TOKENIZER_FILE)
    if (overrides or {}).get("tokenizer") and not tokenizer_path.is_file():
        raise ValueError(f"tokenizer model {tokenizer_path} does not exist")
    tokenizer = tokenizer_path.read_bytes() if tokenizer_path.is_file() else None
    return Checkpoint(config, weights, stats, tokenizer, str(source))


def convert(source: Path, output: Path, quant_plan: Any = None, reference: Path | None = None,
            progress: bool = False, overrides: Mapping[str, Any] | None = None) -> None:
    """Write the bundle of the checkpoint in `source` to `output`.

    quant_plan: a QuantPlan or its text ("lm=q8_0,expert=q4_k"; groups: vision, lm, expert,
    embedding, heads, conditioning). reference: a folder of recorded cases (either record
    format, see models/pi05/parity.py): they become the bundle's reference record, with the
    tolerance of the weakest stored type, and the written bundle must reproduce them.
    """
    from embodied_ros.bundle import BundleWriter, QuantPlan
    from embodied_ros.models.pi05 import parity

    checkpoint = read_checkpoint(source, overrides, reference)
    plan = quant_plan if isinstance(quant_plan, QuantPlan) else QuantPlan.parse(quant_plan)
    writer = BundleWriter("pi05", plan, group_of=tensor_group)
    family_kit.set_policy_sections(writer, checkpoint.config)
    writer.set_source(checkpoint.source)
    writer.add_weights(checkpoint.weights)
    if checkpoint.stats:
        writer.set_stats(checkpoint.stats)
    if checkpoint.tokenizer is not None:
        writer.set_tokenizer(checkpoint.tokenizer)
    family_kit.write_checked(writer, Path(output), reference, progress, parity)


# ---- LeRobot layout ------------------------------------------------------------------------

def recorded_hints(source: Path, reference: Path | None) -> dict[str, Any]:
    """What a reference-case description (cases.json) beside the checkpoint or in the reference
    folder records and the checkpoint lacks: head counts ("model_dims") and the state's joint
    names ("state_names")."""
    recorded = family_kit.recorded_case_notes(source, reference)
    if recorded is None:
        return {}
    dims = recorded.get("model_dims", {})
    hints = {f"{part}.{k}": v for part in ("vision", "lm", "expert") for k, v in dims.get(part, {}).items()
             if k.endswith(("num_heads", "num_kv_heads", "head_dim"))}
    if recorded.get("state_names"):
        hints["state_names"] = list(recorded["state_names"])
    return hints


def _layer_count(weights: Mapping[str, np.ndarray], stack: str) -> int:
    return len({name.split(".")[2] for name in weights if name.startswith(f"{stack}.blk.")})


def _heads(hints: Mapping[str, Any], part: str, variant: Mapping[str, int] | None, width: int,
           key: str) -> int:
    hint = hints.get(f"{part}.{key}")
    if hint is not None:
        return int(hint)
    if variant is not None and variant.get("width", width) == width and key in variant:
        return variant[key]
    raise ValueError(f"{part}.{key} cannot be read from the weights ({part} width {width} matches no known "
                     f"variant); pass it as an override, e.g. {part}.{key}=N")


def _gemma_from_weights(weights, stack: str, variant_name: str, hints) -> GemmaConfig:
    variant = _GEMMA_VARIANTS.get(variant_name)
    q_rows, width = weights[f"{stack}.blk.0.attn_q.weight"].shape
    kv_rows = weights[f"{stack}.blk.0.attn_k.weight"].shape[0]
    num_heads = _heads(hints, stack, variant, width, "num_heads")
    if q_rows % num_heads:
        raise ValueError(f"{stack}: query projection has {q_rows} rows, not divisible by {num_heads} heads")
    head_dim = int(hints.get(f"{stack}.head_dim", q_rows // num_heads))
    if kv_rows % head_dim:
        raise ValueError(f"{stack}: key projection has {kv_rows} rows, not a multiple of head_dim {head_dim}")
    return GemmaConfig(width=width, depth=_layer_count(weights, stack),
                       mlp_dim=weights[f"{stack}.blk.0.ffn_gate.weight"].shape[0], num_heads=num_heads,
                       num_kv_heads=kv_rows // head_dim, head_dim=head_dim)


def config_from_lerobot(raw: Mapping[str, Any], weights: Mapping[str, np.ndarray], hints) -> Pi05Config:
    patch_features = weights["vision.patch.weight"].shape[1]
    patch = int(round((patch_features / 3) ** 0.5))
    tokens = weights["vision.position"].shape[0]
    side = int(round(tokens ** 0.5))
    width = weights["vision.patch.weight"].shape[0]
    vision = VisionConfig(image_size=side * patch, patch_size=patch, width=width,
                          depth=_layer_count(weights, "vision"),
                          mlp_dim=weights["vision.blk.0.fc1.weight"].shape[0],
                          num_heads=_heads(hints, "vision", _SIGLIP_SO400M, width, "num_heads"))
    resolution = tuple(raw.get("image_resolution", (vision.image_size, vision.image_size)))
    if resolution != (vision.image_size, vision.image_size):
        raise ValueError(f"config image_resolution {resolution} disagrees with the vision weights "
                         f"({side}x{side} patches of {patch} = {vision.image_size})")
    features = raw.get("input_features", {})
    cameras = [camera_name(key) for key, f in features.items() if f.get("type") == "VISUAL"]
    cameras += [f"empty_camera_{i}" for i in range(int(raw.get("empty_cameras", 0)))]
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
    return Pi05Config(
        vision=vision,
        lm=_gemma_from_weights(weights, "lm", raw.get("paligemma_variant", ""), hints),
        expert=_gemma_from_weights(weights, "expert", raw.get("action_expert_variant", ""), hints),
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


def lerobot_stats(source: Path, raw: Mapping[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    return family_kit.lerobot_stats(source, raw, default_mode="QUANTILES")
