"""Every registered kernel, on every backend that runs here, against its numpy reference."""

import numpy as np
import pytest

from embodied_ros.kernels import registry

_RUNNABLE_BACKENDS = ("numba",)  # cuda kernels are checked by test_cuda_*.py in the CUDA simulator


def _cases():
    for op in registry.ops():
        for backend in registry.implementations(op):
            if backend in _RUNNABLE_BACKENDS:
                yield pytest.param(op, backend, id=f"{op}-{backend}")


def _as_list(out):
    return list(out) if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("op,backend", list(_cases()))
def test_kernel_matches_reference(op, backend):
    ref = registry.reference_of(op)
    impl = registry.implementations(op)[backend]
    for example in ref.examples(np.random.default_rng(1234)):
        copies = [a.copy() if isinstance(a, np.ndarray) else a for a in example]
        expected = _as_list(ref.fn(*copies))
        got = _as_list(impl(*example))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=ref.rtol, atol=ref.atol, err_msg=f"{op} on {backend}")


def test_every_op_has_a_reference_and_examples():
    for op in registry.ops():
        ref = registry.reference_of(op)
        assert ref.examples(np.random.default_rng(0)), f"{op} has no examples"


def test_kernel_set_falls_back_to_reference():
    ks = registry.KernelSet("cuda")
    for op in registry.ops():
        chosen = ks.chosen[op]
        assert chosen in registry.implementations(op)
