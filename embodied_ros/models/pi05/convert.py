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
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from embodied_ros.bundle.source import map_safetensors
from embodied_ros.models.kit import lerobot_save
from embodied_ros.models.paligemma_save import (OVERRIDE_KEYS, TOKENIZER_FILE, Checkpoint, config_from_lerobot,
                                                recorded_hints)
from embodied_ros.models.pi05.config import Pi05Config
from embodied_ros.models.pi05.weights import check_weights, rename_lerobot, stack_projections, tensor_group

WEIGHTS_FILE, CONFIG_FILE = lerobot_save.WEIGHTS_FILE, lerobot_save.CONFIG_FILE


def detect(source: Path) -> bool:
    """True for a folder holding a pi0.5 checkpoint in either layout (file names and config only)."""
    config = lerobot_save.saved_config(source)
    if config is None:
        return False
    return config.get("type") == "pi05" or ({"vision", "language_model", "expert"} <= set(config)
                                            and "suffix" not in config)  # a pi0 record has a suffix


def read_checkpoint(source: Path, overrides: Mapping[str, Any] | None = None,
                    reference: Path | None = None) -> Checkpoint:
    source = Path(source)
    overrides = lerobot_save.check_overrides(overrides, OVERRIDE_KEYS, "pi0.5")
    if not detect(source):
        raise ValueError(f"{source}: not a pi0.5 checkpoint folder (needs {CONFIG_FILE} and {WEIGHTS_FILE} "
                         "of a LeRobot pi05 policy or a reference record)")
    raw_config = json.loads((source / CONFIG_FILE).read_text())
    weights = rename_lerobot(map_safetensors(source / WEIGHTS_FILE))  # views of the file, read when written
    if raw_config.get("type") == "pi05":
        hints = recorded_hints(source, reference)
        hints.update(overrides)
        config = config_from_lerobot(raw_config, weights, hints)
        stats = lerobot_stats(source, raw_config)
    else:
        config = lerobot_save.record_config(Pi05Config.from_fixture_json(raw_config), overrides, source)
        stats = {}
    weights = stack_projections(weights)
    check_weights(weights, config)
    tokenizer = lerobot_save.tokenizer_bytes(source, overrides, TOKENIZER_FILE, "tokenizer model")
    return Checkpoint(config, weights, stats, tokenizer, str(source))


def convert(source: Path, output: Path, quant_plan: Any = None, reference: Path | None = None,
            progress: bool = False, overrides: Mapping[str, Any] | None = None) -> None:
    """Write the bundle of the checkpoint in `source` to `output`.

    quant_plan: a QuantPlan or its text ("lm=q8_0,expert=q4_k"; groups: vision, lm, expert,
    embedding, heads, conditioning). reference: a folder of recorded cases (either record
    format, see models/kit/records.py, FlowRecords): they become the bundle's reference record, with
    the tolerance of the weakest stored type, and the written bundle must reproduce them.
    """
    from embodied_ros.models.pi05 import RECORDS

    checkpoint = read_checkpoint(source, overrides, reference)
    lerobot_save.write_policy_bundle("pi05", checkpoint, quant_plan, tensor_group, Path(output), reference, progress,
                                     RECORDS)


# ---- LeRobot layout ------------------------------------------------------------------------

def lerobot_stats(source: Path, raw: Mapping[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    return lerobot_save.lerobot_stats(source, raw, default_mode="QUANTILES")
