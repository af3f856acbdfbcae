"""One runtime per (bundle, backend) per process: composed nodes share weights and compiled kernels.

Loading runs every stage once on a blank observation, so kernels are compiled (or loaded from the
numba cache) while the node configures, never during its first control step. It also sets the
process's compute settings (`compute.*` of the graph config).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from embodied_ros.graph.config import GraphConfig
from embodied_ros.pipeline.stages import Runtime, infer, load_runtime
from embodied_ros.pipeline.types import Observation

_lock = threading.Lock()
_runtimes: dict[tuple[str, str], Runtime] = {}


def acquire_runtime(config: GraphConfig) -> Runtime:
    """Load (once per process) the configured bundle's runtime and warm it up."""
    bundle, backend = config.bundle, config.backend
    if not bundle:
        raise ValueError("no bundle configured: set the `bundle` parameter to a model bundle file")
    apply_compute_settings(config)
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


def compile_kernel_cache(bundles: Sequence[str | Path] = ()) -> None:
    """Fill numba's on-disk cache before any node starts (setup.sh, the colcon install): every CPU
    kernel on its examples, then a warm-up of each bundle's runtime, which adds the variants a model
    calls with its memory-mapped (read-only) weights."""
    from embodied_ros.kernels import KernelSet

    KernelSet("numba").compile()
    for bundle in bundles:
        warm_up(load_runtime(bundle, "numba"))


def apply_compute_settings(config: GraphConfig) -> None:
    """Process-wide settings of the numerical libraries."""
    if config.compute.blas_threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(config.compute.blas_threads, user_api="blas")
