"""GR00T N1.7 checkpoint -> bundle.

Two source layouts, both a folder with `model.safetensors` in LeRobot's parameter naming
(`GrootPolicy.state_dict()`, see weights.py):

reference record  config.json lists every dimension (test/data/groot_tiny; its keys are described
                  in docs/reference.md).
LeRobot save      `policy.save_pretrained` output: config.json is a `GrootConfig` ("type": "groot")
                  without model sizes. LeRobot builds N1.7 at one size only, so the dimensions are
                  the full-size ones (config.n1_7_config), checked against every tensor's shape; the
                  state and action widths and the cameras come from its input and output features.

LM layers past select_layer and the LM's final norm / lm_head are dropped; a save that kept only the
tied lm_head gives the token embeddings.

Weights are stored per the quantization plan by group: vision, lm, embedding (the token table),
head. The model computes in float32 and expands quantized tensors once at load (model.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file

from embodied_ros.models import family_kit
from embodied_ros.models.groot.config import GrootConfig, n1_7_config
from embodied_ros.models.groot.weights import check_weights, from_lerobot

ARCHITECTURE = "groot"
WEIGHTS_FILE, CONFIG_FILE = family_kit.WEIGHTS_FILE, family_kit.CONFIG_FILE
DEFAULT_ACTION_PERIOD_S = 1.0 / 30  # LeRobot's GR00T datasets run at 30 Hz; checkpoints do not record it


@dataclass(frozen=True)
class Checkpoint:
    config: GrootConfig
    weights: dict[str, np.ndarray]
    source: str


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


def config_from_lerobot(raw: dict[str, Any]) -> GrootConfig:
    """The config of a LeRobot save: full-size N1.7 with the save's state, action and camera features."""
    features = raw.get("input_features", {})
    cameras = tuple(key for key, feature in features.items() if feature.get("type") == "VISUAL")
    state_dim = int(features.get("observation.state", {}).get("shape", [0])[0])
    action_dim = int(raw.get("output_features", {}).get("action", {}).get("shape", [0])[0])
    if not cameras or not state_dim or not action_dim:
        raise ValueError("the LeRobot GR00T config names no cameras, state or action features")
    return n1_7_config(state_dim, action_dim, cameras)


def tensor_group(name: str) -> str:
    return "embedding" if name == "lm.token_embd" else name.split(".", 1)[0]


def read_checkpoint(source: Path) -> Checkpoint:
    source = Path(source)
    if not detect(source):
        raise ValueError(f"{source}: not a GR00T N1.7 checkpoint folder (needs {WEIGHTS_FILE} in LeRobot "
                         f"GrootPolicy naming and a {CONFIG_FILE} with vision, text_model and action_head)")
    raw = _read_config(source)
    lerobot_save = raw.get("type") == "groot"
    try:
        config = config_from_lerobot(raw) if lerobot_save else GrootConfig.from_fixture_json(raw)
    except (KeyError, TypeError, IndexError) as error:
        raise ValueError(f"{source / CONFIG_FILE}: incomplete GR00T config ({error})") from None
    weights = from_lerobot(load_file(str(source / WEIGHTS_FILE)), config.text.depth)
    try:
        check_weights(weights, config)
    except ValueError as error:
        if not lerobot_save:
            raise
        raise ValueError(f"{source}: a LeRobot GR00T save must hold full-size N1.7 weights: {error}") from None
    return Checkpoint(config, weights, str(source))


def convert(source: Path, output: Path, quant_plan: Any = None, reference: Path | None = None,
            progress: bool = False) -> None:
    """Write the bundle of the checkpoint in `source` to `output`; with `reference` (a record
    folder, parity.py) its cases become the bundle's reference record, which the written bundle
    must reproduce (else it is removed)."""
    from embodied_ros.bundle import BundleWriter, QuantPlan, RobotMetadata
    from embodied_ros.models.groot import parity

    checkpoint = read_checkpoint(source)
    cfg = checkpoint.config
    plan = quant_plan if isinstance(quant_plan, QuantPlan) else QuantPlan.parse(quant_plan)
    writer = BundleWriter(ARCHITECTURE, plan, group_of=tensor_group)
    writer.set_config(cfg.to_dict())
    writer.set_solver({"method": "euler", "num_inference_steps": cfg.head.num_inference_steps,
                       "time_direction": "noise_at_0"})
    writer.set_robot(RobotMetadata(tuple(f"state_{i}" for i in range(cfg.state_dim)),
                                   tuple(f"action_{i}" for i in range(cfg.action_dim)), DEFAULT_ACTION_PERIOD_S))
    writer.set_source(checkpoint.source)
    writer.add_weights(checkpoint.weights)
    family_kit.write_checked(writer, Path(output), reference, progress, parity)
