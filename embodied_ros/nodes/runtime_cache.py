"""One runtime per (bundle, backend) per process: composed nodes share weights and compiled kernels.

Loading warms the runtime up once (`Runtime.warm_up`), so kernels are compiled (or loaded from the
numba cache) while the node configures, never during its first control step. It also sets the
process's compute settings (`compute.*` of the graph config).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Sequence

from embodied_ros.node_infra.config import GraphConfig
from embodied_ros.pipeline.stages import Runtime, load_runtime

_lock = threading.Lock()
_runtimes: dict[tuple[str, str], Runtime] = {}


def acquire_runtime(config: GraphConfig, injected: Runtime | None = None) -> Runtime:
    """Load (once per process) the configured bundle's runtime and warm it up; `injected`: a runtime
    made by the caller (tests), used instead. Either way the process's compute settings follow the config."""
    apply_compute_settings(config)
    if injected is not None:
        return injected
    bundle, backend = config.bundle, config.backend
    if not bundle:
        raise ValueError("no bundle configured: set the `bundle` parameter to a model bundle file")
    with _lock:
        key = (bundle, backend)
        if key not in _runtimes:
            check_drives_the_graph(bundle)
            runtime = load_runtime(bundle, backend)
            runtime.warm_up()
            _runtimes[key] = runtime
        return _runtimes[key]


def check_drives_the_graph(bundle_path: str) -> None:
    """BundleError (one line, before anything loads) for a bundle the graph cannot run: one without a
    tokenizer, since every observation's instruction becomes tokens of the prefix."""
    from embodied_ros.bundle import BundleError, open_bundle
    from embodied_ros.bundle.errors import NO_TOKENIZER

    if open_bundle(bundle_path, verify_digest=False).tokenizer_model is None:
        raise BundleError(f"{bundle_path}: {NO_TOKENIZER}")


def compile_kernel_cache(bundles: Sequence[str | Path] = ()) -> None:
    """Fill numba's on-disk cache before any node starts (setup.sh, the colcon install): every CPU
    kernel on its examples, then a warm-up of each bundle's runtime, which adds the variants a model
    calls with its memory-mapped (read-only) weights."""
    from embodied_ros.kernels import KernelSet

    KernelSet("numba").compile()
    for bundle in bundles:
        load_runtime(bundle, "numba").warm_up()


def apply_compute_settings(config: GraphConfig) -> None:
    """Process-wide settings of the numerical libraries."""
    from embodied_ros.kernels.cpu.blas import limit_threads

    limit_threads(blas_threads(config))


def blas_threads(config: GraphConfig) -> int:
    """The BLAS threads of a graph process of this config."""
    if config.compute.blas_threads:
        return config.compute.blas_threads
    one_call_at_a_time = config.layout == "composed" and config.compute.stage_turns
    # lock-step promises the same chunks in either layout, and OpenBLAS rounds differently on 2 threads
    return len(os.sched_getaffinity(0)) if one_call_at_a_time and config.schedule.mode == "realtime" else 1
