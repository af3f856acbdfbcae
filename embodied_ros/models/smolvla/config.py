"""SmolVLA dimensions and settings, validated once; every other module trusts them.

A config comes from a bundle's metadata (`from_bundle_sections`), from a reference-record
folder's config.json (`from_fixture_json`) or from a LeRobot save (models/smolvla/convert.py).
Released size (lerobot/smolvla_base): SmolVLM2-500M's SigLIP tower (768 x 12, 12 heads, mlp 3072,
512 px, patch 16, pixel shuffle 4 -> 64 tokens per image) and its first 16 of 32 text layers
(960 wide, 15 heads, 5 kv heads, head_dim 64, mlp 2560), an expert 0.75 x 960 = 720 wide with 16
layers (mlp 2048), self-attention every 2nd layer, chunk 50, 10 Euler steps.

Rotary embeddings use base 10000 in every layer (SmolVLA's own rotary code, whatever the text
config's rope_theta says).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from embodied_ros.backbone.llama import LlamaConfig
from embodied_ros.backbone.smolvlm import SmolVLMVisionConfig
from embodied_ros.heads.interleaved_expert import layer_plan
from embodied_ros.models.kit import configs

DEFAULT_ACTION_PERIOD_S = 0.02  # LeRobot saves do not record the control rate
DEFAULT_NOISE_SEED = 0
ROPE_THETA = 10000.0
LEROBOT_CAMERA_PREFIX = "observation.images."


def camera_name(feature_key: str) -> str:
    """"observation.images.wrist" -> "wrist"."""
    return feature_key[len(LEROBOT_CAMERA_PREFIX):] if feature_key.startswith(LEROBOT_CAMERA_PREFIX) else feature_key


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def expert_mlp_dim(width: int) -> int:
    """LeRobot's rule for the expert's MLP width: 256 * ceil(4 * int(2 * width / 3) / 256)."""
    return 256 * math.ceil(4 * int(2 * width / 3) / 256)


@dataclass(frozen=True)
class SmolVLAConfig(configs.ActionChunkConfig):
    FAMILY: ClassVar[str] = "smolvla"
    NESTED: ClassVar[Mapping[str, type]] = {"vision": SmolVLMVisionConfig, "lm": LlamaConfig, "expert": LlamaConfig}

    vision: SmolVLMVisionConfig
    lm: LlamaConfig  # the kept VLM text layers only
    expert: LlamaConfig
    vocab_size: int
    camera_names: tuple[str, ...]  # config order
    state_names: tuple[str, ...]
    action_names: tuple[str, ...]
    empty_cameras: int = 0  # padding image slots LeRobot adds for absent cameras (masked, never read)
    self_attn_every_n_layers: int = 2
    chunk_size: int = 50
    max_action_dim: int = 32
    max_state_dim: int = 32
    num_inference_steps: int = 10
    tokenizer_max_length: int = 48
    time_min_period: float = 4e-3
    time_max_period: float = 4.0
    action_period_s: float = DEFAULT_ACTION_PERIOD_S
    noise_seed: int = DEFAULT_NOISE_SEED

    def __post_init__(self) -> None:
        for key in ("camera_names", "state_names", "action_names"):
            object.__setattr__(self, key, tuple(getattr(self, key)))
        self.check_chunk_settings("smolvla")
        _require(self.empty_cameras >= 0, f"empty_cameras must be >= 0, got {self.empty_cameras}")
        lm, expert = self.lm, self.expert
        _require((expert.num_heads, expert.num_kv_heads, expert.head_dim) == (lm.num_heads, lm.num_kv_heads,
                                                                              lm.head_dim),
                 "the expert uses the VLM's heads, kv heads and head_dim (it reads the VLM's cache)")
        layer_plan(lm.depth, expert.depth, self.self_attn_every_n_layers)  # raises for a pairing that cannot be

    @property
    def layer_plan(self) -> list[tuple[str, int]]:
        return layer_plan(self.lm.depth, self.expert.depth, self.self_attn_every_n_layers)

    @classmethod
    def from_fixture_json(cls, record: Mapping[str, Any]) -> "SmolVLAConfig":
        """The config.json of a reference-record folder (format: test/data/smolvla_tiny/config.json)."""
        try:
            vision, text, expert = record["vision"], record["text_model"], record["expert"]
            time = record.get("time_embedding", {})
            return cls(
                vision=SmolVLMVisionConfig(vision["image_size"], vision["patch_size"], vision["width"],
                                           vision["depth"], vision["mlp_dim"], vision["num_heads"],
                                           record["connector"]["scale_factor"], vision.get("layer_norm_eps", 1e-6)),
                lm=_llama_from_record(text, record["num_vlm_layers"]),
                expert=_llama_from_record(expert, record["num_expert_layers"]),
                vocab_size=text["vocab_size"],
                camera_names=tuple(camera_name(key) for key in record["camera_names"]),
                state_names=tuple(f"state_{i}" for i in range(record["state_dim"])),
                action_names=tuple(f"action_{i}" for i in range(record["action_dim"])),
                empty_cameras=record.get("empty_cameras", 0),
                self_attn_every_n_layers=record["self_attn_every_n_layers"],
                chunk_size=record["chunk_size"],
                max_action_dim=record["max_action_dim"],
                max_state_dim=record["max_state_dim"],
                num_inference_steps=record["num_steps"],
                tokenizer_max_length=record["tokenizer_max_length"],
                time_min_period=time.get("min_period", 4e-3),
                time_max_period=time.get("max_period", 4.0),
            )
        except KeyError as error:
            raise ValueError(f"reference record config.json lacks {error}") from None


def _llama_from_record(part: Mapping[str, Any], depth: int) -> LlamaConfig:
    return LlamaConfig(part["width"], depth, part["mlp_dim"], part["num_heads"], part["num_kv_heads"],
                       part["head_dim"], part.get("rms_norm_eps", 1e-5), ROPE_THETA)
