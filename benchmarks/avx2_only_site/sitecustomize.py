"""Loaded at interpreter start by the processes benchmarks/avx2_only.py runs (this folder leads their
PYTHONPATH): llvmlite, whose host features numba compiles for and the runtime's kernels dispatch on,
reports the CPU without its AVX-512, AVX10 and AMX features."""

import os

MASKED_PREFIXES = tuple(os.environ.get("EMBODIED_ROS_MASKED_CPU_FEATURES", "").split(","))

if MASKED_PREFIXES != ("",):
    try:
        from llvmlite import binding as _binding
    except ImportError:  # an environment without llvmlite (the PyTorch reference's): nothing to mask
        pass
    else:
        _host_features = _binding.get_host_cpu_features

        def _masked_host_features():
            features = _host_features()
            for name in list(features):
                if name.startswith(MASKED_PREFIXES):
                    features[name] = False
            return features

        _binding.get_host_cpu_features = _masked_host_features
