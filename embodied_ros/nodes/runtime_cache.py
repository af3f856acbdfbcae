"""One runtime per (bundle, backend) per process: composed nodes share weights and compiled kernels.

Loading runs every stage once on a blank observation, so kernels are compiled (or loaded from the
numba cache) while the node configures, never during its first control step.
"""

from __future__ import annotations

import threading

import numpy as np

from embodied_ros.pipeline.stages import Runtime, infer, load_runtime
from embodied_ros.pipeline.types import Observation

_lock = threading.Lock()
_runtimes: dict[tuple[str, str], Runtime] = {}


def acquire_runtime(bundle: str, backend: str) -> Runtime:
    """Load (once per process) the bundle's runtime and warm it up."""
    if not bundle:
        raise ValueError("no bundle configured: set the `bundle` parameter to a model bundle file")
    with _lock:
        key = (bundle, backend)
        if key not in _runtimes:
            runtime = load_runtime(bundle, backend)
            warm_up(runtime)
            _runtimes[key] = runtime
        return _runtimes[key]


def warm_up(runtime: Runtime) -> None:
    """One full inference on a blank observation (black images, zero state)."""
    spec = runtime.spec
    height, width = spec.image_size
    observation = Observation(
        stamp_ns=0, images={name: np.zeros((height, width, 3), np.uint8) for name in spec.camera_names},
        state=np.zeros(len(spec.state_names), np.float32), instruction="warm up")
    infer(runtime, observation, np.zeros(spec.noise_shape, np.float32))
