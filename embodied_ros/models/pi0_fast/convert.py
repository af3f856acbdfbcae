"""pi0-FAST checkpoint -> bundle.

Source: a LeRobot save (`PI0FastPolicy.save_pretrained`: config.json with "type": "pi0_fast" and
model.safetensors, optionally policy_preprocessor*.json / policy_postprocessor*.json with their
normalizer stats, MEAN_STD by default). A save only names its two tokenizers; both are needed:

tokenizer         PaliGemma's SentencePiece `tokenizer.model` (`--tokenizer FILE`, else beside the
                  checkpoint): the prompt's ids, and the ids decoding reads (bos, "|", "Action: ")
action_tokenizer  the FAST processor's folder (`--set action_tokenizer=DIR`, else `action_tokenizer/`
                  beside the checkpoint): tokenizer.json (a byte-level BPE), processor_config.json
                  (scale, min_token), optionally tokenizer_config.json (clean_up_tokenization_spaces)

Dimensions come from tensor shapes; head counts as pi0.5's (`--set`, a cases.json "model_dims" beside
the checkpoint, or the Gemma variant names). Decoding is greedy: a save with temperature > 0 is
refused unless `--set temperature=0` accepts greedy decoding for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from embodied_ros.bundle.source import map_safetensors

from embodied_ros.backbone.siglip import VisionConfig
from embodied_ros.heads.fast_tokens import FastTokenizer
from embodied_ros.models import paligemma_save as paligemma
from embodied_ros.models.kit import lerobot_save
from embodied_ros.models.pi0_fast.config import ARCHITECTURE, DEFAULT_ACTION_PERIOD_S, Pi0FastConfig
from embodied_ros.models.pi0_fast.tokens import token_ids_of
from embodied_ros.models.pi0_fast.weights import check_weights, rename_lerobot, tensor_group
from embodied_ros.sequence.tokenizer import PromptTokenizer

CONFIG_FILE, WEIGHTS_FILE = lerobot_save.CONFIG_FILE, lerobot_save.WEIGHTS_FILE
TOKENIZER_FILE, ACTION_TOKENIZER_FOLDER = paligemma.TOKENIZER_FILE, "action_tokenizer"
OVERRIDE_KEYS = frozenset({"lm.num_heads", "lm.head_dim", "vision.num_heads", "state_names", "action_period_s",
                           "tokenizer", "action_tokenizer", "temperature"})


def detect(source: Path) -> bool:
    """True for a folder holding a LeRobot pi0-FAST save (file names and config only)."""
    config = lerobot_save.saved_config(source)
    return config is not None and config.get("type") == ARCHITECTURE


def read_action_tokenizer(folder: Path) -> FastTokenizer:
    """A FAST processor folder (tokenizer.json, processor_config.json) -> its decoding state."""
    folder = Path(folder)
    try:
        processor = json.loads((folder / "processor_config.json").read_text())
        text = (folder / "tokenizer.json").read_text()
    except OSError as error:
        raise ValueError(f"FAST action tokenizer folder {folder}: {error.strerror or error} ({error.filename}); "
                         "it needs tokenizer.json and processor_config.json") from None
    settings_file = folder / "tokenizer_config.json"
    settings = json.loads(settings_file.read_text()) if settings_file.is_file() else {}
    return FastTokenizer.from_tokenizer_json(text, processor.get("scale", 10), processor.get("min_token", 0),
                                             settings.get("clean_up_tokenization_spaces", False))


def _vision(weights, hints) -> VisionConfig:
    patch = int(round((weights["vision.patch.weight"].shape[1] / 3) ** 0.5))
    side = int(round(weights["vision.position"].shape[0] ** 0.5))
    width = weights["vision.patch.weight"].shape[0]
    return VisionConfig(image_size=side * patch, patch_size=patch, width=width,
                        depth=paligemma.layer_count(weights, "vision"),
                        mlp_dim=weights["vision.blk.0.fc1.weight"].shape[0],
                        num_heads=paligemma.heads_of(hints, "vision", paligemma.SIGLIP_SO400M, width, "num_heads"))


def config_from_lerobot(raw: Mapping[str, Any], weights, hints, tokenizer: PromptTokenizer,
                        action_tokenizer: FastTokenizer) -> Pi0FastConfig:
    vision = _vision(weights, hints)
    resolution = tuple(raw.get("image_resolution", (vision.image_size, vision.image_size)))
    if resolution != (vision.image_size, vision.image_size):
        raise ValueError(f"config image_resolution {resolution} disagrees with the vision weights "
                         f"({vision.image_size} square)")
    if float(hints.get("temperature", raw.get("temperature", 0.0))) != 0.0:
        raise ValueError(f"the save samples its tokens (temperature {raw.get('temperature')}); this runtime decodes "
                         "greedily: pass --set temperature=0 to convert it for greedy decoding")
    cameras, state_names, action_names, relative = paligemma.robot_io(raw, hints)
    return Pi0FastConfig(
        vision=vision, lm=paligemma.gemma_from_weights(weights, "lm", raw.get("paligemma_variant", ""), hints),
        vocab_size=weights["lm.token_embd"].shape[0], camera_names=tuple(cameras), state_names=tuple(state_names),
        action_names=tuple(action_names), token_ids=token_ids_of(tokenizer), action_tokenizer=action_tokenizer,
        chunk_size=int(raw.get("n_action_steps", 50)), tokenizer_max_length=int(raw.get("tokenizer_max_length", 200)),
        max_decoding_steps=int(raw.get("max_decoding_steps", 256)),
        fast_skip_tokens=int(raw.get("fast_skip_tokens", 128)),
        validate_action_token_prefix=bool(raw.get("validate_action_token_prefix", True)),
        action_period_s=float(hints.get("action_period_s", DEFAULT_ACTION_PERIOD_S)), relative_action_mask=relative)


def read_checkpoint(source: Path, overrides: Mapping[str, Any] | None = None,
                    reference: Path | None = None) -> paligemma.Checkpoint:
    source = Path(source)
    overrides = lerobot_save.check_overrides(overrides, OVERRIDE_KEYS, "pi0_fast")
    if not detect(source):
        raise ValueError(f"{source}: not a pi0-FAST checkpoint folder (needs {CONFIG_FILE} of a LeRobot pi0_fast "
                         f"policy and {WEIGHTS_FILE})")
    raw = json.loads((source / CONFIG_FILE).read_text())
    tokenizer_data = lerobot_save.tokenizer_bytes(source, overrides, TOKENIZER_FILE, "tokenizer model")
    if tokenizer_data is None:
        raise ValueError(f"{source}: no PaliGemma tokenizer ({TOKENIZER_FILE} beside the checkpoint or --tokenizer "
                         "FILE): pi0-FAST's decoding needs its ids")
    tokenizer = PromptTokenizer(tokenizer_data, int(raw.get("tokenizer_max_length", 200)))
    action_tokenizer = read_action_tokenizer(overrides.get("action_tokenizer") or source / ACTION_TOKENIZER_FOLDER)
    weights = rename_lerobot(map_safetensors(source / WEIGHTS_FILE))
    hints = {**paligemma.recorded_hints(source, reference), **overrides}
    config = config_from_lerobot(raw, weights, hints, tokenizer, action_tokenizer)
    weights = paligemma.stack_projections(weights)
    check_weights(weights, config)
    stats = lerobot_save.lerobot_stats(source, raw, default_mode="MEAN_STD")
    return paligemma.Checkpoint(config, weights, stats, tokenizer_data, str(source))


def convert(source: Path, output: Path, quant_plan: Any = None, reference: Path | None = None,
            progress: bool = False, overrides: Mapping[str, Any] | None = None) -> None:
    """Write the bundle of the checkpoint in `source` to `output`; a `reference` folder of recorded
    cases becomes the bundle's reference record, which the written bundle must reproduce."""
    from embodied_ros.models.pi0_fast import parity

    checkpoint = read_checkpoint(source, overrides, reference)
    lerobot_save.write_policy_bundle(ARCHITECTURE, checkpoint, quant_plan, tensor_group, Path(output), reference,
                                     progress, parity)
