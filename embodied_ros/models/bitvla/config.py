"""BitVLA dimensions and settings, validated once; the other modules trust them.

Full size (the released LIBERO fine-tunes, `hongyuw/ft-bitvla-bitsiglipL-224px-*`): a SigLIP-L tower
at 224 px (patch 14, 256 tokens per camera, 1024 x 24, 16 heads, mlp 4096) whose linears are
BitLinear (ternary weights, int8 activations), a GELU connector 1024 -> 2560 -> 2560, the BitNet
b1.58 2B4T LM (2560 x 30, 20 heads and 5 KV heads of 128, mlp 6912, vocab 128256, RoPE 500000),
OFT's L1 head over 8 x 7 action slots and a proprio projector from 8 values; two cameras.

What a checkpoint does not carry (OpenVLA-OFT keeps it in its evaluation script and module constants)
comes from conversion settings (`--set`, or a cases.json's "settings" beside the checkpoint): the
chunk size, the cameras, whether the evaluation center-crops, which dataset's statistics
un-normalize, the robot's joint and action names and its control period.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from embodied_ros.backbone.bitnet import BitNetConfig
from embodied_ros.backbone.checks import positive, require
from embodied_ros.backbone.siglip import VisionConfig

ARCHITECTURE = "bitvla"
INPUT_SIZE = 224  # OFT's evaluation resizes every camera image to this before anything else
QUESTION = "What action should the robot take to {task}?"  # OFT's instruction, the task lower-cased
LIBERO_ACTIONS = ("x", "y", "z", "roll", "pitch", "yaw", "gripper")


@dataclass(frozen=True)
class TokenIds:
    image: int  # the image pad token, one per image token
    proprio: int  # the proprio pad token
    stop: int  # the end-of-text token after the action slots


@dataclass(frozen=True)
class BitVLAConfig:
    vision: VisionConfig  # depth: the layers that run (up to the feature layer the connector reads)
    vision_weight_bits: int  # 1: ternary BitLinear weights; 32: full precision
    vision_act_bits: int  # 8: activations quantized per token; 32: full precision
    lm: BitNetConfig
    tokens: TokenIds
    prompt_before: str  # the chat template's text before the user's message
    prompt_after: str  # ... and after it (the generation prompt included)
    camera_names: tuple[str, ...]
    state_names: tuple[str, ...]  # the proprio values, in order
    action_names: tuple[str, ...]
    chunk_size: int
    use_proprio: bool = True
    center_crop: bool = False
    pixel_bf16: bool = True  # OFT's evaluation casts pixel values to bfloat16 before the model
    head_blocks: int = 2
    action_period_s: float = 0.05
    question: str = QUESTION

    def __post_init__(self) -> None:
        positive("bitvla", chunk_size=self.chunk_size, head_blocks=self.head_blocks)
        require(self.vision_weight_bits in (1, 32), f"vision weight bits must be 1 or 32, got {self.vision_weight_bits}")
        require(self.vision_act_bits in (8, 32), f"vision act bits must be 8 or 32, got {self.vision_act_bits}")
        require(len(self.camera_names) > 0 and len(set(self.camera_names)) == len(self.camera_names),
                f"bitvla needs one or more distinct camera names, got {self.camera_names}")
        require(len(self.action_names) > 0, "bitvla needs action names")
        require(not self.use_proprio or len(self.state_names) > 0, "a proprio projector needs state names")
        require(self.action_period_s > 0, f"action_period_s must be positive, got {self.action_period_s}")
        require("{task}" in self.question, f"the question must hold {{task}}, got {self.question!r}")

    @property
    def action_dim(self) -> int:
        return len(self.action_names)

    @property
    def proprio_dim(self) -> int:
        return len(self.state_names)

    @property
    def action_slots(self) -> int:
        return self.chunk_size * self.action_dim

    @property
    def ternary_vision(self) -> bool:
        return self.vision_weight_bits == 1

    # ---- as plain values and back ------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        for key in ("camera_names", "state_names", "action_names"):
            values[key] = list(values[key])
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "BitVLAConfig":
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        require(not unknown, f"unknown bitvla config keys: {unknown}")
        values = dict(values)
        try:
            values["vision"] = VisionConfig(**values["vision"])
            values["lm"] = BitNetConfig(**values["lm"])
            values["tokens"] = TokenIds(**values["tokens"])
            for key in ("camera_names", "state_names", "action_names"):
                values[key] = tuple(values[key])
            return cls(**values)
        except (KeyError, TypeError) as error:
            raise ValueError(f"incomplete or malformed bitvla config: {error}") from None

    ROBOT_KEYS = ("state_names", "action_names", "action_period_s")

    def bundle_sections(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """(model config, solver settings, robot metadata) as a bundle stores them. There is no solver:
        the chunk comes from one LM pass (its settings say so)."""
        values = self.to_dict()
        robot = {key: values.pop(key) for key in self.ROBOT_KEYS}
        return values, {"method": "parallel_decoding", "noise_seed": 0}, robot

    @classmethod
    def from_bundle(cls, bundle) -> "BitVLAConfig":
        robot = bundle.robot
        if robot is None:
            raise ValueError(f"{bundle.path}: bitvla bundle lacks robot metadata (state/action names, action period)")
        values = dict(bundle.config)
        values.update(state_names=list(robot.state_names), action_names=list(robot.action_names),
                      action_period_s=robot.action_period_s)
        return cls.from_dict(values)
