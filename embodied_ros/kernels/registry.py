"""Which implementation of each op runs on which backend.

Implementations register themselves with `@kernel(op, backend)`. The numpy implementation of an op
is its reference: tests compare every other implementation against it. A `KernelSet` resolves every
op for one backend once, at start-up, falling back to the numpy reference where the backend has no
implementation of its own, and compiles what needs compiling before any control step runs.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

BACKENDS = ("numpy", "numba", "cuda")

_IMPLEMENTATIONS: dict[str, dict[str, Callable]] = {}
_WARMUPS: dict[tuple[str, str], Callable[[], None]] = {}


def kernel(op: str, backend: str, warmup: Callable[[], None] | None = None):
    """Register the decorated function as `op` on `backend`; `warmup` compiles it on tiny inputs."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")

    def register(fn: Callable) -> Callable:
        by_backend = _IMPLEMENTATIONS.setdefault(op, {})
        if backend in by_backend:
            raise ValueError(f"kernel {op!r} already has a {backend} implementation")
        by_backend[backend] = fn
        if warmup is not None:
            _WARMUPS[(op, backend)] = warmup
        return fn

    return register


_loaded = False


def _load() -> None:
    """Import every kernel module of this package once; registering is a side effect of the import.

    Every module in embodied_ros/kernels/ except this one and private (`_`) ones defines kernels, so
    a new kernel file needs no edit here. A module must import cheaply and without a GPU: backends
    that need hardware check for it when their kernel first runs, not at import.
    """
    global _loaded
    if _loaded:
        return
    package = importlib.import_module("embodied_ros.kernels")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name != "registry" and not info.name.startswith("_"):
            importlib.import_module(f"embodied_ros.kernels.{info.name}")
    _loaded = True


def ops() -> list[str]:
    _load()
    return sorted(_IMPLEMENTATIONS)


def implementations(op: str) -> dict[str, Callable]:
    """backend -> implementation, for every backend that has one."""
    _load()
    if op not in _IMPLEMENTATIONS:
        raise KeyError(f"no kernel named {op!r}; known: {', '.join(sorted(_IMPLEMENTATIONS))}")
    return dict(_IMPLEMENTATIONS[op])


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
            if chosen not in by_backend:
                raise LookupError(f"kernel {op!r} has no numpy reference implementation")
            setattr(self, op, by_backend[chosen])
            self.chosen[op] = chosen

    def compile(self) -> None:
        """Run every chosen implementation's warm-up so no compilation happens in a control step."""
        for op, chosen in self.chosen.items():
            warmup = _WARMUPS.get((op, chosen))
            if warmup is not None:
                warmup()
