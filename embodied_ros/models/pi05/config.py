"""pi0.5 dimensions and settings, validated once; every other module trusts them.

A config comes from a bundle's metadata (`from_dict`), from a reference-record folder's config.json
(`from_fixture_json`) or from a checkpoint's tensor shapes (`models/pi05/convert.py`). Full size is
SigLIP so400m (1152 x 27, 16 heads, mlp 4304) + Gemma 2B (2048 x 18, mlp 16384) + a Gemma 300M
action expert (1024 x 18, mlp 4096); both Gemmas use 8 query heads, 1 kv head, head_dim 256.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from embodied_ros.backbone.checks import require as _require
from embodied_ros.backbone.gemma import GemmaConfig
from embodied_ros.backbone.siglip import VisionConfig
from embodied_ros.models.kit import configs

DEFAULT_ACTION_PERIOD_S = 0.02  # 50 Hz; LeRobot checkpoints do not record the control rate
DEFAULT_NOISE_SEED = 0
LEROBOT_CAMERA_PREFIX = "observation.images."


def camera_name(feature_key: str) -> str:
    """LeRobot's camera feature key -> the camera's name ("observation.images.wrist" -> "wrist")."""
    return feature_key[len(LEROBOT_CAMERA_PREFIX):] if feature_key.startswith(LEROBOT_CAMERA_PREFIX) else feature_key


@dataclass(frozen=True)
class Pi05Config(configs.ActionChunkConfig):
    FAMILY: ClassVar[str] = "pi05"
    NESTED: ClassVar[Mapping[str, type]] = {"vision": VisionConfig, "lm": GemmaConfig, "expert": GemmaConfig}
    TUPLE_FIELDS: ClassVar[tuple[str, ...]] = ("camera_names", "state_names", "action_names", "relative_action_mask")

    vision: VisionConfig
    lm: GemmaConfig
    expert: GemmaConfig
    vocab_size: int
    camera_names: tuple[str, ...]  # model camera order
    state_names: tuple[str, ...]
    action_names: tuple[str, ...]
    chunk_size: int = 50
    max_action_dim: int = 32
    max_state_dim: int = 32
    num_inference_steps: int = 10
    tokenizer_max_length: int = 200
    time_min_period: float = 4e-3
    time_max_period: float = 4.0
    action_period_s: float = DEFAULT_ACTION_PERIOD_S
    noise_seed: int = DEFAULT_NOISE_SEED
    # per action column: add the raw state of the same index after de-normalization (LeRobot's
    # relative actions); empty = absolute actions
    relative_action_mask: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "camera_names", tuple(self.camera_names))
        object.__setattr__(self, "state_names", tuple(self.state_names))
        object.__setattr__(self, "action_names", tuple(self.action_names))
        object.__setattr__(self, "relative_action_mask", tuple(bool(b) for b in self.relative_action_mask))
        self.check_chunk_settings("pi05")
        lm, expert = self.lm, self.expert
        _require(expert.depth <= lm.depth,
                 f"expert layer i reads LM layer i's cache: expert depth {expert.depth} > LM depth {lm.depth}")
        _require((expert.num_kv_heads, expert.head_dim) == (lm.num_kv_heads, lm.head_dim),
                 f"expert kv heads x head_dim {expert.num_kv_heads}x{expert.head_dim} must equal the LM's "
                 f"{lm.num_kv_heads}x{lm.head_dim} (the expert attends to the LM's cache)")
        if self.relative_action_mask:
            _require(len(self.relative_action_mask) == self.action_dim <= self.state_dim,
                     f"relative actions need one flag per action ({self.action_dim}) and a state at least as long, "
                     f"got {len(self.relative_action_mask)} flags and {self.state_dim} state values")

    @property
    def max_prefix_len(self) -> int:
        return len(self.camera_names) * self.vision.tokens_per_camera + self.tokenizer_max_length

    @classmethod
    def from_bundle_sections(cls, model: Mapping[str, Any], solver: Mapping[str, Any],
                             robot: Mapping[str, Any]) -> "Pi05Config":
        values = configs.join_bundle_sections(cls.FAMILY, model, solver, robot, cls.DEFAULT_NOISE_SEED)
        values.setdefault("relative_action_mask", ())  # bundles written before the field
        return cls.from_dict(values)

    @classmethod
    def from_fixture_json(cls, record: Mapping[str, Any]) -> "Pi05Config":
        """The config.json of a reference-record folder (format: test/data/pi05_tiny/config.json)."""
        try:
            vision, lm, expert = record["vision"], record["language_model"], record["expert"]
            time = record.get("time_embedding", {})
            return cls(
                vision=VisionConfig(vision["image_size"], vision["patch_size"], vision["width"], vision["depth"],
                                    vision["mlp_dim"], vision["num_heads"], vision.get("layer_norm_eps", 1e-6)),
                lm=_gemma_from_record(lm),
                expert=_gemma_from_record(expert),
                vocab_size=lm["vocab_size"],
                camera_names=tuple(camera_name(key) for key in record["camera_names"]),
                state_names=tuple(f"state_{i}" for i in range(record["state_dim"])),
                action_names=tuple(f"action_{i}" for i in range(record["action_dim"])),
                chunk_size=record["chunk_size"],
                max_action_dim=record["max_action_dim"],
                max_state_dim=record["max_state_dim"],
                num_inference_steps=record["num_inference_steps"],
                tokenizer_max_length=record["tokenizer_max_length"],
                time_min_period=time.get("min_period", 4e-3),
                time_max_period=time.get("max_period", 4.0),
            )
        except KeyError as error:
            raise ValueError(f"reference record config.json lacks {error}") from None


def _gemma_from_record(part: Mapping[str, Any]) -> GemmaConfig:
    return GemmaConfig(part["width"], part["depth"], part["mlp_dim"], part["num_heads"], part["num_kv_heads"],
                       part["head_dim"], part.get("rms_norm_eps", 1e-6), part.get("rope_theta", 10000.0))
