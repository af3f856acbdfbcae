"""pi0 behind the stage contract (models/kit/flow_vla.py): the task as its prompt, the normalized state
read by the model as a token (appended to the prefix cache)."""

from __future__ import annotations

from embodied_ros.models.kit.flow_vla import FlowVLARuntime
from embodied_ros.models.pi0.config import ARCHITECTURE, Pi0Config
from embodied_ros.models.pi0.model import Pi0Model
from embodied_ros.pipeline.stages import ModelSpec
from embodied_ros.sequence.tokenizer import PromptTokenizer


class Pi0Runtime(FlowVLARuntime):
    architecture = ARCHITECTURE
    config_type = Pi0Config
    state_use = "pi0 reads the robot state as a token"
    make_model = Pi0Model
    make_tokenizer = PromptTokenizer


def spec_of(bundle) -> ModelSpec:
    return Pi0Runtime.spec_of(bundle)


def load_runtime(bundle, backend: str = "numba") -> Pi0Runtime:
    return Pi0Runtime.from_bundle(bundle, backend)
