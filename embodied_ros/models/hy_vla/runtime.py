"""HY-VLA behind the stage contract (models/kit/flow_vla.py): camera images resized keeping their aspect
ratio and padded with black around them (centred); the task cleaned as the reference does (trimmed,
underscores and newlines to spaces) and ended with the assistant token, tokenized without special
tokens; the normalized state read by the expert as a token (appended to the prefix cache)."""

from __future__ import annotations

import numpy as np

from embodied_ros.models.hy_vla.config import ARCHITECTURE, ASSISTANT, HyVLAConfig
from embodied_ros.models.hy_vla.model import HyVLAModel
from embodied_ros.models.kit.flow_vla import FlowVLARuntime
from embodied_ros.models.smolvla.tokenizer import SmolVLATokenizer
from embodied_ros.pipeline.stages import ModelSpec
from embodied_ros.pipeline.types import Observation


class HyVLATokenizer(SmolVLATokenizer):
    """The prompt's ids without the tokenizer's own special tokens (the reference passes
    add_special_tokens=False), truncated and right-padded to max_length."""

    def encode(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids[: self.max_length]
        tokens = np.full(self.max_length, self.pad_id, dtype=np.int64)
        tokens[: len(ids)] = ids
        return tokens, np.arange(self.max_length) < len(ids)


def prompt_text(task: str) -> str:
    text = task.strip().replace("_", " ").replace("\n", " ")
    return text if text.endswith(ASSISTANT) else f"{text}{ASSISTANT}"


class HyVLARuntime(FlowVLARuntime):
    architecture = ARCHITECTURE
    config_type = HyVLAConfig
    state_use = "hy_vla reads the robot state as a token"
    make_model = HyVLAModel
    make_tokenizer = HyVLATokenizer

    def prompt(self, observation: Observation) -> str:
        return prompt_text(observation.instruction)


def spec_of(bundle) -> ModelSpec:
    return HyVLARuntime.spec_of(bundle)


def load_runtime(bundle, backend: str = "numba") -> HyVLARuntime:
    return HyVLARuntime.from_bundle(bundle, backend)
