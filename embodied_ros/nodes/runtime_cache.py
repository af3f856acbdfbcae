"""One runtime per (bundle, backend) per process: composed nodes share weights and compiled kernels."""

from __future__ import annotations

import threading

from embodied_ros.pipeline.stages import Runtime, load_runtime

_lock = threading.Lock()
_runtimes: dict[tuple[str, str], Runtime] = {}


def acquire_runtime(bundle: str, backend: str) -> Runtime:
    """Load (once per process) the bundle's runtime; loading compiles its kernels."""
    if not bundle:
        raise ValueError("no bundle configured: set the `bundle` parameter to a model bundle file")
    with _lock:
        key = (bundle, backend)
        if key not in _runtimes:
            _runtimes[key] = load_runtime(bundle, backend)
        return _runtimes[key]
