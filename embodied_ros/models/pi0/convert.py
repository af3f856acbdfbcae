"""pi0 checkpoint -> bundle.

The two source layouts of pi0.5 (models/pi05/convert.py), in `PI0Policy` naming:

reference record  config.json lists every dimension and the suffix layout (test/data/pi0_tiny);
                  no normalization stats, no tokenizer.
LeRobot save      `policy.save_pretrained` output: config.json is a `PI0Config` ("type": "pi0")
                  without model sizes, plus policy_preprocessor*.json / policy_postprocessor*.json
                  with their normalizer stats (pi0's default: MEAN_STD), and optionally
                  `tokenizer.model` (or `--tokenizer FILE`).

Dimensions come from tensor shapes and head counts from the same hints as pi0.5's (`--set`,
a cases.json "model_dims" beside the checkpoint, or the Gemma variant names).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from embodied_ros.bundle.source import map_safetensors

from embodied_ros.models.kit import lerobot_save
from embodied_ros.models import paligemma_save as paligemma
from embodied_ros.models.paligemma_save import OVERRIDE_KEYS, TOKENIZER_FILE, stack_projections
from embodied_ros.models.pi0.config import ARCHITECTURE, Pi0Config
from embodied_ros.models.pi0.weights import check_weights, rename_lerobot, tensor_group

CONFIG_FILE, WEIGHTS_FILE = lerobot_save.CONFIG_FILE, lerobot_save.WEIGHTS_FILE


def detect(source: Path) -> bool:
    """True for a folder holding a pi0 checkpoint in either layout (file names and config only)."""
    config = lerobot_save.saved_config(source)
    if config is None:
        return False
    return config.get("type") == "pi0" or ({"vision", "language_model", "expert", "suffix"} <= set(config))


def read_checkpoint(source: Path, overrides: Mapping[str, Any] | None = None,
                    reference: Path | None = None) -> paligemma.Checkpoint:
    source = Path(source)
    overrides = lerobot_save.check_overrides(overrides, OVERRIDE_KEYS, "pi0")
    if not detect(source):
        raise ValueError(f"{source}: not a pi0 checkpoint folder (needs {CONFIG_FILE} and {WEIGHTS_FILE} "
                         "of a LeRobot pi0 policy or a reference record)")
    raw_config = json.loads((source / CONFIG_FILE).read_text())
    weights = rename_lerobot(map_safetensors(source / WEIGHTS_FILE))
    if raw_config.get("type") == "pi0":
        hints = paligemma.recorded_hints(source, reference)
        hints.update(overrides)
        config = Pi0Config.from_dict(paligemma.config_from_lerobot(raw_config, weights, hints).to_dict())
        stats = lerobot_save.lerobot_stats(source, raw_config, default_mode="MEAN_STD")
    else:
        config = lerobot_save.record_config(Pi0Config.from_fixture_json(raw_config), overrides, source)
        stats = {}
    weights = stack_projections(weights)
    check_weights(weights, config)
    tokenizer = lerobot_save.tokenizer_bytes(source, overrides, TOKENIZER_FILE, "tokenizer model")
    return paligemma.Checkpoint(config, weights, stats, tokenizer, str(source))


def convert(source: Path, output: Path, quant_plan: Any = None, reference: Path | None = None,
            progress: bool = False, overrides: Mapping[str, Any] | None = None) -> None:
    """Write the bundle of the checkpoint in `source` to `output` (arguments as pi0.5's convert);
    a `reference` folder of recorded cases becomes the bundle's reference record, which the written
    bundle must reproduce."""
    from embodied_ros.models.pi0 import RECORDS

    checkpoint = read_checkpoint(source, overrides, reference)
    lerobot_save.write_policy_bundle(ARCHITECTURE, checkpoint, quant_plan, tensor_group, Path(output), reference,
                                     progress, RECORDS)
