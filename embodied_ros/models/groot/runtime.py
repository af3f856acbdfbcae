"""GR00T N1.7 from a bundle: the model-space model (model.py) with its config and weights."""

from __future__ import annotations

from embodied_ros.models.groot.config import GrootConfig
from embodied_ros.models.groot.model import GrootModel


def load_model(bundle, backend: str = "numba") -> GrootModel:
    return GrootModel(GrootConfig.from_dict(bundle.config), bundle.weights(), backend)
