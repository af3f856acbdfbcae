"""HY-VLA behind the stage contract (models/kit/flow_vla.py): camera images resized keeping their aspect
ratio and padded with black around them (centred); the task cleaned as the reference does (trimmed,
underscores and newlines to spaces) and ended with the assistant token, tokenized without special
tokens; the normalized state read by the expert as a token (appended to the prefix cache).

With memory frames (a checkpoint with the space-time tower, `memory_frames` K > 1) the perception stage
keeps each camera's recent model images: the frames it encoded, `memory_interval` encodes apart, the
current one last; slots before the first encode are black (-1), as the reference's evaluation zeroes
them at an episode's start. A new episode starts (the memory is emptied) when the task changes or an
observation is older than the last one encoded (a replay started again), or on `reset_memory()`.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from embodied_ros.models.hy_vla.config import ARCHITECTURE, ASSISTANT, HyVLAConfig
from embodied_ros.models.hy_vla.model import HyVLAModel
from embodied_ros.models.kit.flow_vla import FlowVLARuntime, camera_batch
from embodied_ros.models.smolvla.tokenizer import SmolVLATokenizer
from embodied_ros.pipeline.stages import ModelSpec
from embodied_ros.pipeline.types import Observation, StageResult


class HyVLATokenizer(SmolVLATokenizer):
    """SmolVLA's, without the tokenizer's own special tokens (the reference passes add_special_tokens=False)."""

    add_special_tokens = False


def prompt_text(task: str) -> str:
    text = task.strip().replace("_", " ").replace("\n", " ")
    return text if text.endswith(ASSISTANT) else f"{text}{ASSISTANT}"


class HyVLARuntime(FlowVLARuntime):
    architecture = ARCHITECTURE
    config_type = HyVLAConfig
    state_use = "hy_vla reads the robot state as a token"
    make_model = HyVLAModel
    make_tokenizer = HyVLATokenizer

    def __init__(self, model, tokenizer=None, state_stats=None, action_stats=None) -> None:
        super().__init__(model, tokenizer, state_stats, action_stats)
        cfg = self.config
        self.memory = deque(maxlen=(cfg.memory_frames - 1) * cfg.memory_interval + 1)
        self.memory_episode: tuple[str, int] | None = None  # (task, stamp) of the last frame remembered

    def prompt(self, observation: Observation) -> str:
        return prompt_text(observation.instruction)

    def reset_memory(self) -> None:
        self.memory.clear()
        self.memory_episode = None

    def frames(self, images: np.ndarray) -> np.ndarray:
        """The current camera batch [N, 3, S, S] -> [N, K, 3, S, S] with the remembered frames before it."""
        cfg = self.config
        self.memory.append(images)
        newest = len(self.memory) - 1
        stack = [self.memory[newest - back * cfg.memory_interval] if newest >= back * cfg.memory_interval
                 else np.full_like(images, -1.0) for back in range(cfg.memory_frames - 1, -1, -1)]
        return np.stack(stack, axis=1)

    def encode(self, observation: Observation) -> StageResult:
        if self.config.memory_frames == 1:
            return super().encode(observation)
        images, present = camera_batch(observation, self.config.camera_names, self.config.vision.image_size,
                                       self.architecture, self.model_image)
        if self.memory_episode is not None and (observation.instruction != self.memory_episode[0]
                                                or observation.stamp_ns < self.memory_episode[1]):
            self.reset_memory()
        self.memory_episode = (observation.instruction, observation.stamp_ns)
        tokens = self.model.image_tokens(self.frames(images), present)
        return StageResult("perception", observation.stamp_ns, {"image_tokens": tokens, "camera_mask": present})


def spec_of(bundle) -> ModelSpec:
    return HyVLARuntime.spec_of(bundle)


def load_runtime(bundle, backend: str = "numba") -> HyVLARuntime:
    return HyVLARuntime.from_bundle(bundle, backend)
