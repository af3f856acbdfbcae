"""Compute kernels: one op, several implementations (numpy reference, numba CPU, CUDA)."""

from embodied_ros.kernels.cpu.allocator import release_pages, reuse_freed_memory
from embodied_ros.kernels.registry import BACKENDS, KernelSet, implementations, kernel, ops, reference

__all__ = ["BACKENDS", "KernelSet", "implementations", "kernel", "ops", "reference", "release_pages", "reuse_freed_memory"]
