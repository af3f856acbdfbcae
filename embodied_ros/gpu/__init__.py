"""The device-resident runtime: whole model chunks on an NVIDIA GPU (docs/cuda.md).

`engine.CudaEngine` is the GPU (CuPy arrays, cuBLAS products, the kernels of kernels/transformer.cu,
CUDA graphs); `host.HostEngine` runs the same operations in numpy, as their reference and for tests
on machines without a GPU. `layers` holds the transformer math on an engine, `flow_solve` the action
expert's captured Euler solve, and `pi05` / `smolvla` the device models of those families.
"""

from __future__ import annotations

import threading

_engine = None
_lock = threading.Lock()


def cuda_engine():
    """The process's GPU engine, opened on first use: every stage of a process shares it (and so its
    device memory: a prefix cache built by one stage is read in place by another)."""
    global _engine
    with _lock:
        if _engine is None:
            from embodied_ros.gpu.engine import CudaEngine
            _engine = CudaEngine()
        return _engine
