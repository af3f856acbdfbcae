"""SmolVLA behind the stage contract (models/kit/flow_vla.py): images of another size than the model's
are resized keeping their aspect ratio and padded with black on the left and top (LeRobot's SmolVLA
convention); the task gets a trailing newline before it is tokenized; the normalized state is the
prefix's last token. Padding image slots for absent cameras are masked and never read. On backend
"cuda" the model runs whole on the GPU (gpu/smolvla.py)."""

from __future__ import annotations

from functools import partial
from typing import Any, Mapping

from embodied_ros.models.kit.flow_vla import FlowVLARuntime
from embodied_ros.models.smolvla.config import SmolVLAConfig
from embodied_ros.models.smolvla.model import SmolVLAModel
from embodied_ros.pipeline.stages import ModelSpec
from embodied_ros.sequence.images import model_image


class SmolVLARuntime(FlowVLARuntime):
    architecture = "smolvla"
    config_type = SmolVLAConfig
    state_use = "smolvla reads the robot state"
    model_image = staticmethod(partial(model_image, padding="left_top"))

    @staticmethod
    def make_tokenizer(data: bytes, max_length: int):
        from embodied_ros.models.smolvla.tokenizer import SmolVLATokenizer
        return SmolVLATokenizer(data, max_length)

    @staticmethod
    def make_model(config: SmolVLAConfig, weights: Mapping[str, Any], backend: str):
        """The model on `backend`: on "cuda" the device-resident one (gpu/smolvla.py), else on a kernel set."""
        if backend == "cuda":
            from embodied_ros.gpu import cuda_engine
            from embodied_ros.gpu.smolvla import DeviceSmolVLAModel
            return DeviceSmolVLAModel(config, weights, cuda_engine())
        return SmolVLAModel(config, weights, backend)


def spec_of(bundle) -> ModelSpec:
    return SmolVLARuntime.spec_of(bundle)


def load_runtime(bundle, backend: str = "numba") -> SmolVLARuntime:
    return SmolVLARuntime.from_bundle(bundle, backend)
