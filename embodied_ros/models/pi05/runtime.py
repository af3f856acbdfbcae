"""pi0.5 behind the stage contract (models/kit/flow_vla.py): its prompt carries the state, discretized
(models/pi05/prompt.py), and its model reads no state token; on backend "cuda" the model runs whole on
the GPU (gpu/pi05.py)."""

from __future__ import annotations

from typing import Any, Mapping


from embodied_ros.models.kit.flow_vla import FlowVLARuntime
from embodied_ros.models.pi05 import prompt as prompts
from embodied_ros.models.pi05.config import Pi05Config
from embodied_ros.models.pi05.model import Pi05Model
from embodied_ros.pipeline.stages import ModelSpec
from embodied_ros.pipeline.types import Observation
from embodied_ros.sequence.tokenizer import PromptTokenizer


class Pi05Runtime(FlowVLARuntime):
    architecture = "pi05"
    config_type = Pi05Config
    state_use = "pi0.5 writes the robot state into its prompt"
    make_tokenizer = PromptTokenizer

    @staticmethod
    def make_model(config: Pi05Config, weights: Mapping[str, Any], backend: str):
        """The model on `backend`: on "cuda" the device-resident one (gpu/pi05.py), else on a kernel set."""
        if backend == "cuda":
            from embodied_ros.gpu import cuda_engine
            from embodied_ros.gpu.pi05 import DevicePi05Model
            return DevicePi05Model(config, weights, cuda_engine())
        return Pi05Model(config, weights, backend)

    def prompt(self, observation: Observation) -> str:
        return prompts.build_prompt(observation.instruction, prompts.discretize_state(self.normalized_state(observation)))

    def prefix_state(self, observation: Observation) -> tuple:
        return ()


def spec_of(bundle) -> ModelSpec:
    return Pi05Runtime.spec_of(bundle)


def load_runtime(bundle, backend: str = "numba") -> Pi05Runtime:
    return Pi05Runtime.from_bundle(bundle, backend)
