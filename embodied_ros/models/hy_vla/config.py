"""HY-VLA dimensions and settings, validated once; every other module trusts them.

A config comes from a bundle's metadata (`from_bundle_sections`) or from a checkpoint in the released
layout (models/hy_vla/convert.py). Released size (tencent/Hy-VLA-*): HYViT2 1152 x 27, 16 heads,
mlp 4304, patch 16, 224 px (14 x 14 patches, 7 x 7 image tokens after the 2x2 merger), positions for
128 x 128 patches; the Hy-Embodied-0.5 MoT LM 2048 x 32, 16 / 4 heads of 128, mlp 6144, vocab 120818;
the expert 1024 wide (mlp 2048) with the LM's depth and heads; 10 Euler steps; action dim 20.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

from embodied_ros.backbone.checks import require
from embodied_ros.backbone.hunyuan_mot import MoTConfig
from embodied_ros.backbone.hyvit import HyViTConfig
from embodied_ros.models.kit import configs

ARCHITECTURE = "hy_vla"
DEFAULT_ACTION_PERIOD_S = 0.04  # the checkpoints do not record the control rate
DEFAULT_NOISE_SEED = 0
ASSISTANT = "<｜hy_Assistant｜>"  # every prompt ends with it
SPECIAL_TOKENS = {"bos": "<｜hy_begin▁of▁sentence｜>", "user": "<｜hy_User｜>",
                  "vision_start": "<｜hy_place▁holder▁no▁666｜>", "vision_end": "<｜hy_place▁holder▁no▁667｜>",
                  "vision_split": "<｜hy_place▁holder▁no▁671｜>"}


@dataclass(frozen=True)
class HyVLAConfig(configs.ActionChunkConfig):
    FAMILY: ClassVar[str] = ARCHITECTURE
    NESTED: ClassVar[Mapping[str, type]] = {"vision": HyViTConfig, "lm": MoTConfig, "expert": MoTConfig}

    vision: HyViTConfig
    lm: MoTConfig
    expert: MoTConfig
    vocab_size: int
    special_ids: dict[str, int]  # SPECIAL_TOKENS' ids in the tokenizer
    camera_names: tuple[str, ...]  # config order
    state_names: tuple[str, ...]
    action_names: tuple[str, ...]
    empty_cameras: int = 0  # padding image slots for absent cameras (masked, never read)
    visual_segment_isolation: bool = False  # image rows read only their own image (the released post-train)
    memory_frames: int = 1  # K frames per camera, the current last (> 1 with space-time blocks only)
    memory_interval: int = 1  # observations between two memory frames
    chunk_size: int = 50
    max_action_dim: int = 32
    max_state_dim: int = 32
    num_inference_steps: int = 10
    tokenizer_max_length: int = 64
    time_min_period: float = 4e-3
    time_max_period: float = 4.0
    action_period_s: float = DEFAULT_ACTION_PERIOD_S
    noise_seed: int = DEFAULT_NOISE_SEED

    def __post_init__(self) -> None:
        for key in ("camera_names", "state_names", "action_names"):
            object.__setattr__(self, key, tuple(getattr(self, key)))
        object.__setattr__(self, "special_ids", {k: int(v) for k, v in dict(self.special_ids).items()})
        self.check_chunk_settings(ARCHITECTURE)
        missing = sorted(set(SPECIAL_TOKENS) - set(self.special_ids))
        require(not missing, f"hy_vla needs the ids of its special tokens {missing}")
        require(all(0 <= v < self.vocab_size for v in self.special_ids.values()),
                f"special token ids {self.special_ids} outside the vocabulary of {self.vocab_size}")
        lm, expert = self.lm, self.expert
        require((expert.depth, expert.num_heads, expert.num_kv_heads, expert.head_dim)
                == (lm.depth, lm.num_heads, lm.num_kv_heads, lm.head_dim),
                "the expert has the LM's depth, heads and head_dim (it reads the LM's cache)")
        require(self.vision.out_width == lm.width,
                f"the merger writes {self.vision.out_width} wide tokens, the LM is {lm.width} wide")
        require(self.memory_frames >= 1 and self.memory_interval >= 1,
                f"memory_frames and memory_interval must be >= 1, got {self.memory_frames}, {self.memory_interval}")
        require(self.memory_frames == 1 or self.vision.spacetime_stride > 0,
                f"{self.memory_frames} memory frames need a tower with space-time blocks")

    @property
    def embed_scale(self) -> float:
        return 1.0  # HY's embeddings are not scaled
