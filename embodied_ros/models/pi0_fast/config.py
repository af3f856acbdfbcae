"""pi0-FAST dimensions and settings, validated once; every other module trusts them.

A config comes from a bundle's metadata (`from_bundle_sections`) or from a LeRobot save's config.json
and tensor shapes (models/pi0_fast/convert.py). Full size is PaliGemma's: SigLIP so400m + Gemma 2B
(2048 x 18, 8 heads, 1 kv head, head_dim 256), vocabulary 257152; no action expert.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from embodied_ros.backbone.checks import positive, require
from embodied_ros.backbone.gemma import GemmaConfig
from embodied_ros.backbone.siglip import VisionConfig
from embodied_ros.heads.fast_tokens import FastTokenizer
from embodied_ros.models.kit import configs

ARCHITECTURE = "pi0_fast"
DEFAULT_ACTION_PERIOD_S = 0.02  # as pi0.5's: LeRobot saves do not record the control rate
DECODING = "greedy"  # the bundle's solver.method


@dataclass(frozen=True)
class TokenIds:
    """The PaliGemma tokenizer's ids that decoding reads (taken from the tokenizer at conversion)."""

    bos: int  # ends the prefix; decoding starts after it
    end_of_action: int  # "|": decoding stops after it, the actions are the tokens before it
    action_prefix: tuple[int, ...]  # "Action: " without special tokens, removed wherever it occurs
    action_check: tuple[int, int]  # the pieces "Action" and ":" a valid sequence starts with (-1: none)
    vocab_size: int  # the tokenizer's: FAST token a is PaliGemma id vocab_size - 1 - fast_skip_tokens - a

    def __post_init__(self) -> None:
        object.__setattr__(self, "action_prefix", tuple(int(i) for i in self.action_prefix))
        object.__setattr__(self, "action_check", tuple(int(i) for i in self.action_check))
        require(len(self.action_check) == 2, f"action_check holds two ids, got {self.action_check}")
        positive("token_ids", vocab_size=self.vocab_size)


@dataclass(frozen=True)
class Pi0FastConfig(configs.ActionChunkConfig):  # its embed_scale: transformers' Gemma scales by sqrt(width)
    vision: VisionConfig
    lm: GemmaConfig
    vocab_size: int  # rows of the LM's token embeddings and output
    camera_names: tuple[str, ...]  # model camera order
    state_names: tuple[str, ...]
    action_names: tuple[str, ...]
    token_ids: TokenIds
    action_tokenizer: FastTokenizer
    chunk_size: int = 50  # LeRobot's n_action_steps: the rows a token sequence decodes to
    tokenizer_max_length: int = 200
    max_decoding_steps: int = 256
    fast_skip_tokens: int = 128
    validate_action_token_prefix: bool = True
    action_period_s: float = DEFAULT_ACTION_PERIOD_S
    # per action column: add the raw state of the same index after de-normalization (LeRobot's
    # relative actions); empty = absolute actions
    relative_action_mask: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        for name in ("camera_names", "state_names", "action_names"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "relative_action_mask", tuple(bool(b) for b in self.relative_action_mask))
        positive("pi0_fast", vocab_size=self.vocab_size, chunk_size=self.chunk_size,
                 tokenizer_max_length=self.tokenizer_max_length, max_decoding_steps=self.max_decoding_steps)
        require(self.fast_skip_tokens >= 0, f"fast_skip_tokens must be >= 0, got {self.fast_skip_tokens}")
        require(len(self.camera_names) > 0, "pi0_fast needs at least one camera")
        require(len(set(self.camera_names)) == len(self.camera_names), f"camera names repeat: {self.camera_names}")
        require(len(self.action_names) > 0, "pi0_fast needs at least one action column")
        require(self.action_period_s > 0, f"action_period_s must be positive, got {self.action_period_s}")
        ids = self.token_ids
        require(0 <= ids.bos < self.vocab_size and 0 <= ids.end_of_action < self.vocab_size,
                f"bos {ids.bos} and end-of-action {ids.end_of_action} ids must lie below the LM vocabulary "
                f"{self.vocab_size}")
        fast_tokens = self.action_tokenizer.vocab_size
        highest = ids.vocab_size - 1 - self.fast_skip_tokens
        lowest = highest - (fast_tokens - 1)
        require(lowest >= 0 and highest < self.vocab_size,
                f"FAST tokens 0..{fast_tokens - 1} map to PaliGemma ids {lowest}..{highest}, outside the LM "
                f"vocabulary 0..{self.vocab_size - 1}")
        if self.relative_action_mask:
            require(len(self.relative_action_mask) == self.action_dim <= self.state_dim,
                    f"relative actions need one flag per action ({self.action_dim}) and a state at least as long, "
                    f"got {len(self.relative_action_mask)} flags and {self.state_dim} state values")


    @property
    def expert(self) -> GemmaConfig:
        """The stack that reads the prefix cache (backbone/paligemma.py's name for it): every decoding
        step runs the LM itself over every layer's cache."""
        return self.lm

    # ---- plain values and bundle sections ----------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        values = configs.plain_config(self, ("camera_names", "state_names", "action_names", "relative_action_mask"))
        values["action_tokenizer"] = self.action_tokenizer.plain()
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "Pi0FastConfig":
        return configs.config_from_plain(cls, values, "pi0_fast", {"vision": VisionConfig, "lm": GemmaConfig,
                                                                   "token_ids": TokenIds,
                                                                   "action_tokenizer": FastTokenizer})

    def bundle_sections(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """(model config, decoding settings, robot metadata) as a bundle stores them."""
        values = self.to_dict()
        solver = {"method": DECODING, "max_decoding_steps": values.pop("max_decoding_steps")}
        robot = {key: values.pop(key) for key in configs.ROBOT_KEYS}
        return values, solver, robot

    @classmethod
    def from_bundle_sections(cls, model: Mapping[str, Any], solver: Mapping[str, Any],
                             robot: Mapping[str, Any]) -> "Pi0FastConfig":
        method = solver.get("method")
        require(method == DECODING, f"pi0_fast decodes its action tokens greedily; the bundle asks for {method!r}")
        values = {**model, "max_decoding_steps": solver["max_decoding_steps"],
                  **{key: robot[key] for key in configs.ROBOT_KEYS}}
        values.setdefault("relative_action_mask", ())
        return cls.from_dict(values)

