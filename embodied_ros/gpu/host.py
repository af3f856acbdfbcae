"""The device runtime's operations in numpy: the reference each GPU operation is checked against, and
an engine that runs a device model on the CPU exactly as the GPU would, bf16 roundings included.

Both engines (this one and `engine.CudaEngine`) offer the same calls over their own arrays: numpy
arrays here, CuPy arrays there. bf16 tensors are uint16 arrays of the upper 16 bits of a float32
(rounded to nearest, ties to even). Operands may be strided views: every matrix is read through its
row stride, and a batched product's batch stride may be 0 (one matrix shared by every batch entry).

    matmul(a, b, out, alpha, beta, transpose_b)  out = alpha * a @ b^T (or a @ b) + beta * out;
                                                 a, b bf16 (or both float32: a float32 product);
                                                 out float32 or bf16 (rounded); 2-D or 3-D
    residual_norm(x, h, mul, eps, y, bias, gate, add, center)
                                                 x += gate * (y + bias); h = norm(x) * mul + add
    rope_split(src, q, k, v, heads, head_dim, cos, sin, rotate_k)
                                                 q/k/v product output -> bf16 heads, RoPE on q (and k)
    softmax(scores, p, scale, bias)              p = bf16(softmax(scale * scores + bias[row % len(bias)]))
    glu(gate_up, out, act)                       out = bf16(act(gate) * up)
    bias_act(y, out, bias, act)                  out = act(y + bias)
    axpy_cast(x, out, bias, alpha)               x += alpha * bias; out = bf16(x) (out may be None)
A kernel's output is bf16 or, where its array is float32, float32 (the input of a float32 product).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator

import numpy as np

from embodied_ros.kernels.activations import gelu_tanh
from embodied_ros.kernels.cpu.bf16_gemm import bf16_bits
from embodied_ros.kernels.silu import silu

ACTIVATIONS = ("none", "gelu_tanh", "silu")


def from_bf16(bits: np.ndarray) -> np.ndarray:
    """uint16 bf16 bits -> float32 values."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def activation(values: np.ndarray, act: str) -> np.ndarray:
    if act == "gelu_tanh":
        return gelu_tanh(values)
    if act == "silu":
        return silu(values)
    if act == "none":
        return values
    raise ValueError(f"unknown activation {act!r}; expected one of {ACTIVATIONS}")


def check_matmul(a, b, out, transpose_b: bool, operand=np.uint16) -> None:
    """Shapes and types of a product, the same rules on both engines."""
    if a.ndim != b.ndim or a.ndim != out.ndim or a.ndim not in (2, 3):
        raise ValueError(f"matmul takes 2-D or 3-D operands of one rank, got {a.shape}, {b.shape}, {out.shape}")
    m, k = a.shape[-2:]
    n, k_b = (b.shape[-2], b.shape[-1]) if transpose_b else (b.shape[-1], b.shape[-2])
    if k != k_b or out.shape[-2:] != (m, n) or (a.ndim == 3 and not a.shape[0] == b.shape[0] == out.shape[0]):
        raise ValueError(f"matmul shapes do not fit: a {a.shape}, b {b.shape} ({'transposed' if transpose_b else 'as is'}),"
                         f" out {out.shape}")
    if a.dtype != b.dtype or a.dtype not in (operand, np.float32):
        raise TypeError(f"matmul reads {np.dtype(operand)} or float32 operands of one type, got {a.dtype} and {b.dtype}")
    if out.dtype not in (np.float32, operand):
        raise TypeError(f"matmul writes float32 or {np.dtype(operand)}, got {out.dtype}")
    for name, array in (("a", a), ("b", b), ("out", out)):
        if array.strides[-1] != array.itemsize:
            raise ValueError(f"matmul: {name}'s rows must be contiguous, got strides {array.strides}")


class HostGraph:
    """What the CUDA engine captures, run again on every replay."""

    def __init__(self, work: Callable[[], None]) -> None:
        self._work = work

    def replay(self) -> None:
        self._work()


class HostEngine:
    """The GPU operations in numpy, on host arrays.

    exact: keep what the GPU rounds to bf16 in float32 instead (products' operands, the values the
    kernels write for them): the same sequence of operations in float32, which must then agree with
    the CPU runtime to float32 precision, so that every difference of the rounding engine is rounding.
    """

    xp = np

    def __init__(self, exact: bool = False) -> None:
        self.exact = exact
        self.product_dtype = np.dtype(np.float32 if exact else np.uint16)
        self.name = "host (numpy, float32)" if exact else "host (numpy, bf16)"

    def _round(self, values: np.ndarray, out_dtype=None) -> np.ndarray:
        """What a kernel writes for a product to read: bf16 bits, or float32 (when exact, or into a
        float32 array)."""
        values = np.asarray(values, np.float32)
        if self.exact or out_dtype == np.float32:
            return values
        return bf16_bits(values).reshape(values.shape)

    def _values(self, operand: np.ndarray) -> np.ndarray:
        return operand if operand.dtype == np.float32 else from_bf16(operand)

    # ---- memory -------------------------------------------------------------------------------

    @contextmanager
    def active(self) -> Iterator[None]:
        yield

    def empty(self, shape, dtype) -> np.ndarray:
        return np.empty(shape, dtype)

    def zeros(self, shape, dtype) -> np.ndarray:
        return np.zeros(shape, dtype)

    def upload(self, array, dtype=None) -> np.ndarray:
        return np.array(array, dtype=dtype, copy=True)

    def bf16(self, array) -> np.ndarray:
        """A float array (any float type) as the products read it: bf16 bits (float32 when exact)."""
        return self._round(array)

    def download(self, array) -> np.ndarray:
        return np.array(array, copy=True)

    def write(self, target, values) -> None:
        """Host values into an existing array (a static buffer a graph reads)."""
        target[...] = values

    def graph(self, work: Callable[[], None]) -> HostGraph:
        return HostGraph(work)

    def reserve(self, nbytes: int, what: str) -> None:
        """The host's memory is checked when a bundle is loaded (bundle/memory.py)."""

    def private_pool(self) -> None:
        return None

    def allocations_from(self, pool) -> contextmanager:
        return nullcontext()

    def synchronize(self) -> None:
        pass

    # ---- operations ---------------------------------------------------------------------------

    def matmul(self, a, b, out, alpha: float = 1.0, beta: float = 0.0, transpose_b: bool = True) -> None:
        check_matmul(a, b, out, transpose_b, self.product_dtype)
        right = self._values(b)
        product = np.matmul(self._values(a), np.swapaxes(right, -1, -2) if transpose_b else right)
        result = np.float32(alpha) * product
        if beta:
            result = result + np.float32(beta) * self._values(out)
        out[...] = self._round(result, out.dtype)

    def residual_norm(self, x, h, mul, eps: float, y=None, bias=None, gate=None, add=None,
                      center: bool = False) -> None:
        if y is not None or bias is not None:
            delta = (0 if y is None else y) + (0 if bias is None else bias)
            x[...] = x + (1 if gate is None else gate) * delta
        values = x.astype(np.float32)
        if center:
            values = values - values.mean(axis=-1, keepdims=True)
        inverse = 1.0 / np.sqrt((values * values).mean(axis=-1, keepdims=True) + np.float32(eps))
        h[...] = self._round(values * inverse.astype(np.float32) * mul + (0 if add is None else add), h.dtype)

    def rope_split(self, src, q, k, v, heads: tuple[int, int, int], head_dim: int, cos=None, sin=None,
                   rotate_k: bool = True) -> None:
        rows = src.shape[0]
        heads_q, heads_k, heads_v = heads
        parts = np.split(src[:, : (heads_q + heads_k + heads_v) * head_dim].astype(np.float32),
                         np.cumsum([heads_q * head_dim, heads_k * head_dim]), axis=1)
        for part, out, count, rotate in ((parts[0], q, heads_q, True), (parts[1], k, heads_k, rotate_k),
                                         (parts[2], v, heads_v, False)):
            if not count:
                continue
            values = part.reshape(rows, count, head_dim)
            if rotate:
                half = head_dim // 2
                c, s = cos[:, None, :], sin[:, None, :]
                first, second = values[..., :half], values[..., half:]
                values = np.concatenate([first * c - second * s, second * c + first * s], axis=-1)
            out[:, : count * head_dim] = self._round(values).reshape(rows, count * head_dim)

    def softmax(self, scores, p, scale: float, bias=None) -> None:
        logits = np.float32(scale) * scores
        if bias is not None:
            logits = logits + np.tile(bias, (scores.shape[0] // bias.shape[0], 1))
        logits = logits - logits.max(axis=-1, keepdims=True)
        weights = np.exp(logits)
        p[...] = self._round(weights / weights.sum(axis=-1, keepdims=True))

    def glu(self, gate_up, out, act: str) -> None:
        width = out.shape[1]
        values = self._values(gate_up)
        out[...] = self._round(activation(values[:, :width], act) * values[:, width: 2 * width])

    def bias_act(self, y, out, bias=None, act: str = "none") -> None:
        out[...] = self._round(activation(y + (0 if bias is None else bias), act), out.dtype)

    def axpy_cast(self, x, out, bias, alpha: float) -> None:
        if bias is not None:
            x[...] = x + np.float32(alpha) * bias
        if out is not None:
            out[...] = self._round(x)
