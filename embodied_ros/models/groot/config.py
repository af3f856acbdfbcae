"""GR00T N1.7 dimensions and settings, validated once; every other module trusts them.

A config comes from a bundle's metadata (`from_dict`) or from a reference-record folder's
config.json (`from_fixture_json`). Full size (LeRobot's hard-coded Cosmos-Reason2-2B backbone and
GR00T_N1_7_DEFAULTS): vision 1024 x 24 (16 heads, 48x48 position table, deepstack after blocks 5,
11, 17), text 2048 (16 heads, 8 kv heads, head_dim 128, M-RoPE sections [24, 20, 20]) cut to 16 of
28 layers, action head hidden 1024, DiT 32 blocks x 32 heads x 48, horizon 40, 4 Euler steps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

from embodied_ros.backbone.checks import positive, require
from embodied_ros.backbone.qwen3_vl import QwenTextConfig, QwenVisionConfig
from embodied_ros.models.groot.processor import ProcessorConfig


@dataclass(frozen=True)
class TokenIds:
    image: int
    vision_start: int
    vision_end: int
    im_start: int
    im_end: int


@dataclass(frozen=True)
class ActionHeadConfig:
    """Flow-matching DiT head: vl_self_attention over the backbone rows, then the DiT over [state; actions]."""

    backbone_width: int
    hidden_size: int
    width: int  # the DiT's inner dim D (= input_embedding_dim)
    num_heads: int
    head_dim: int
    block_kinds: tuple[str, ...]  # "self_attn", "cross_attn_text", "cross_attn_image"
    vl_depth: int
    vl_num_heads: int
    vl_head_dim: int
    max_seq_len: int
    num_embodiments: int
    horizon: int
    max_state_dim: int
    max_action_dim: int
    num_inference_steps: int
    num_timestep_buckets: int = 1000

    def __post_init__(self) -> None:
        positive("action_head", backbone_width=self.backbone_width, hidden_size=self.hidden_size,
                  width=self.width, num_heads=self.num_heads, head_dim=self.head_dim, vl_depth=self.vl_depth,
                  vl_num_heads=self.vl_num_heads, vl_head_dim=self.vl_head_dim, num_embodiments=self.num_embodiments,
                  horizon=self.horizon, max_state_dim=self.max_state_dim, max_action_dim=self.max_action_dim,
                  num_inference_steps=self.num_inference_steps)
        require(self.num_heads * self.head_dim == self.width,
                 f"action_head: {self.num_heads} heads x {self.head_dim} != width {self.width}")
        require(self.vl_num_heads * self.vl_head_dim == self.backbone_width,
                 f"action_head: vl {self.vl_num_heads} heads x {self.vl_head_dim} != {self.backbone_width}")
        unknown = set(self.block_kinds) - {"self_attn", "cross_attn_text", "cross_attn_image"}
        require(not unknown and self.block_kinds, f"action_head.block_kinds has unknown kinds {sorted(unknown)}")
        require(self.horizon <= self.max_seq_len, f"action_head.horizon {self.horizon} > max_seq_len")

    @property
    def depth(self) -> int:
        return len(self.block_kinds)


@dataclass(frozen=True)
class GrootConfig:
    vision: QwenVisionConfig
    text: QwenTextConfig
    head: ActionHeadConfig
    tokens: TokenIds
    state_dim: int
    action_dim: int
    camera_names: tuple[str, ...] = field(default=())  # the order views enter the prompt
    processor: ProcessorConfig = field(default_factory=ProcessorConfig)

    def __post_init__(self) -> None:
        require(self.vision.out_dim == self.text.width == self.head.backbone_width,
                 f"vision out {self.vision.out_dim}, text width {self.text.width} and the head's backbone width "
                 f"{self.head.backbone_width} must agree")
        require(0 < self.state_dim <= self.head.max_state_dim, f"state_dim {self.state_dim} out of range")
        require(0 < self.action_dim <= self.head.max_action_dim, f"action_dim {self.action_dim} out of range")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "GrootConfig":
        def build(kind, values):
            names = {f.name for f in fields(kind)}
            return kind(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if k in names})

        return cls(vision=build(QwenVisionConfig, data["vision"]), text=build(QwenTextConfig, data["text"]),
                   head=build(ActionHeadConfig, data["head"]), tokens=build(TokenIds, data["tokens"]),
                   state_dim=int(data["state_dim"]), action_dim=int(data["action_dim"]),
                   camera_names=tuple(data.get("camera_names", ())),
                   processor=build(ProcessorConfig, data.get("processor", {})))

    @classmethod
    def from_fixture_json(cls, data: Mapping[str, Any]) -> "GrootConfig":
        """The config.json of a GR00T reference record (test/data/groot_tiny)."""
        v, t, h, ids = data["vision"], data["text_model"], data["action_head"], data["special_token_ids"]
        dit, vl = h["dit"], h["vl_self_attention"]
        return cls(
            vision=QwenVisionConfig(
                width=v["width"], depth=v["depth"], mlp_dim=v["mlp_dim"], num_heads=v["num_heads"],
                patch_size=v["patch_size"], temporal_patch_size=v["temporal_patch_size"],
                spatial_merge_size=v["spatial_merge_size"], num_position_embeddings=v["num_position_embeddings"],
                deepstack_indexes=tuple(v["deepstack_visual_indexes"]), out_dim=v["out_dim"],
                eps=v.get("layer_norm_eps", 1e-6), rope_theta=v.get("rope_theta", 10000.0)),
            text=QwenTextConfig(
                width=t["width"], depth=data["select_layer"], mlp_dim=t["mlp_dim"], num_heads=t["num_heads"],
                num_kv_heads=t["num_kv_heads"], head_dim=t["head_dim"], vocab_size=t["vocab_size"],
                mrope_section=tuple(t["mrope_section"]), rope_theta=float(t["rope_theta"]),
                eps=t.get("rms_norm_eps", 1e-6)),
            head=ActionHeadConfig(
                backbone_width=h["backbone_embedding_dim"], hidden_size=h["hidden_size"],
                width=h["input_embedding_dim"], num_heads=dit["num_heads"], head_dim=dit["head_dim"],
                block_kinds=tuple(dit["block_kinds"]), vl_depth=vl["num_layers"], vl_num_heads=vl["num_heads"],
                vl_head_dim=vl["head_dim"], max_seq_len=h["max_seq_len"], num_embodiments=h["max_num_embodiments"],
                horizon=h["action_horizon"], max_state_dim=h["max_state_dim"], max_action_dim=h["max_action_dim"],
                num_inference_steps=h["num_inference_timesteps"],
                num_timestep_buckets=h.get("num_timestep_buckets", 1000)),
            tokens=TokenIds(image=ids["image_token_id"], vision_start=ids["vision_start_token_id"],
                            vision_end=ids["vision_end_token_id"], im_start=ids["im_start_id"], im_end=ids["im_end_id"]),
            state_dim=data["state_dim"], action_dim=data["action_dim"],
            camera_names=tuple(data.get("camera_names", ())))


def block_kinds(num_layers: int, attend_text_every_n_blocks: int = 2) -> tuple[str, ...]:
    """DiT block kinds: odd blocks self-attend; even block b cross-attends to the text rows when
    b % (2 * attend_text_every_n_blocks) == 0, else to the image rows."""
    return tuple("self_attn" if b % 2 else
                 "cross_attn_text" if b % (2 * attend_text_every_n_blocks) == 0 else "cross_attn_image"
                 for b in range(num_layers))


def n1_7_config(state_dim: int, action_dim: int, camera_names: tuple[str, ...] = ()) -> GrootConfig:
    """Full-size GR00T N1.7 as LeRobot 0.6.1 builds it (test/data/groot_n1_7_shapes.json)."""
    return GrootConfig(
        vision=QwenVisionConfig(width=1024, depth=24, mlp_dim=4096, num_heads=16, patch_size=16,
                                temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=2304,
                                deepstack_indexes=(5, 11, 17), out_dim=2048),
        text=QwenTextConfig(width=2048, depth=16, mlp_dim=6144, num_heads=16, num_kv_heads=8, head_dim=128,
                            vocab_size=151936, mrope_section=(24, 20, 20), rope_theta=5e6),
        head=ActionHeadConfig(backbone_width=2048, hidden_size=1024, width=1536, num_heads=32, head_dim=48,
                              block_kinds=block_kinds(32), vl_depth=4, vl_num_heads=32, vl_head_dim=64,
                              max_seq_len=1024, num_embodiments=32, horizon=40, max_state_dim=132,
                              max_action_dim=132, num_inference_steps=4),
        tokens=TokenIds(image=151655, vision_start=151652, vision_end=151653, im_start=151644, im_end=151645),
        state_dim=state_dim, action_dim=action_dim, camera_names=camera_names)
