"""Which implementation of each op runs on which backend.

An op's numpy implementation is its reference, registered with `@reference(op, examples=...)`;
`examples(rng)` returns argument tuples of random, odd shapes, and the reference's tolerances say how
close another implementation must come. Other backends register with `@kernel(op, backend)`.
`test/test_kernels.py` runs every implementation on every example against the reference, so a new
kernel is tested by being registered.

A `KernelSet` resolves every op for one backend once, at start-up, falling back to the reference
where the backend has none, and `compile()` runs each compiled kernel once on an example so that no
compilation happens inside a control step.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

BACKENDS = ("numpy", "numba", "cuda")
# The modules that register ops, loaded once by `_load`: each public op module holds an op's numpy
# reference and its numba kernel (their machinery is in cpu/); cuda/ holds the CUDA implementations.
OP_MODULES = ("activations", "attention", "attention_bf16", "feed_forward", "gelu_erf", "linear", "linear_bf16", "linear_int8", "linear_int16",
              "modulation", "norms",
              "qk_norm", "quant", "rope", "rope3d", "silu", "cpu.ternary_gemm",
              "cuda.attention", "cuda.elementwise", "cuda.linear", "cuda.norms", "cuda.rope", "cuda.ternary")


@dataclass(frozen=True)
class Reference:
    fn: Callable
    examples: Callable[[np.random.Generator], list[tuple[Any, ...]]]
    rtol: float
    atol: float


_REFERENCES: dict[str, Reference] = {}
_IMPLEMENTATIONS: dict[str, dict[str, Callable]] = {}
_loaded = False


def reference(op: str, examples: Callable[[np.random.Generator], list[tuple[Any, ...]]],
              rtol: float = 1e-5, atol: float = 1e-5):
    """Register the decorated numpy function as the reference implementation of `op`."""

    def register(fn: Callable) -> Callable:
        if op in _REFERENCES:
            raise ValueError(f"kernel {op!r} already has a reference implementation")
        _REFERENCES[op] = Reference(fn, examples, rtol, atol)
        _IMPLEMENTATIONS.setdefault(op, {})["numpy"] = fn
        return fn

    return register


def kernel(op: str, backend: str):
    """Register the decorated function as the `backend` implementation of `op`."""
    if backend not in BACKENDS or backend == "numpy":
        raise ValueError(f"backend must be one of {BACKENDS[1:]}, got {backend!r} "
                         "(numpy implementations register with @reference)")

    def register(fn: Callable) -> Callable:
        by_backend = _IMPLEMENTATIONS.setdefault(op, {})
        if backend in by_backend:
            raise ValueError(f"kernel {op!r} already has a {backend} implementation")
        by_backend[backend] = fn
        return fn

    return register


def _load() -> None:
    """Import every module of OP_MODULES once; registering is a side effect of the import. A module
    must import cheaply and without a GPU: backends that need hardware check for it when their
    kernel first runs, not at import."""
    global _loaded
    if _loaded:
        return
    for name in OP_MODULES:
        importlib.import_module(f"embodied_ros.kernels.{name}")
    _loaded = True
    missing = sorted(set(_IMPLEMENTATIONS) - set(_REFERENCES))
    if missing:
        raise LookupError(f"kernels without a numpy reference: {', '.join(missing)}")


def ops() -> list[str]:
    _load()
    return sorted(_IMPLEMENTATIONS)


def implementations(op: str) -> dict[str, Callable]:
    """backend -> implementation, for every backend that has one."""
    _load()
    if op not in _IMPLEMENTATIONS:
        raise KeyError(f"no kernel named {op!r}; known: {', '.join(sorted(_IMPLEMENTATIONS))}")
    return dict(_IMPLEMENTATIONS[op])


def reference_of(op: str) -> Reference:
    _load()
    return _REFERENCES[op]


class KernelSet:
    """The implementation of every op for one backend, resolved once.

    Attribute access gives the op: `ks = KernelSet("numba"); ks.rms_norm(x, w, eps)`.
    """

    def __init__(self, backend: str) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
        _load()
        self.backend = backend
        self.chosen: dict[str, str] = {}
        for op, by_backend in _IMPLEMENTATIONS.items():
            chosen = backend if backend in by_backend else "numpy"
            setattr(self, op, by_backend[chosen])
            self.chosen[op] = chosen

    def compile(self) -> None:
        """Run every compiled (non-numpy) implementation on all of its op's examples.

        All of them, not one: an op may dispatch to several compiled kernels by argument type
        (a quantized `linear` has its own), and each must be compiled before a control step.
        """
        rng = np.random.default_rng(0)
        for op, chosen in self.chosen.items():
            if chosen != "numpy":
                for args in _REFERENCES[op].examples(rng):
                    _IMPLEMENTATIONS[op][chosen](*args)
