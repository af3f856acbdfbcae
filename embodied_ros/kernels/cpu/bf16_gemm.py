"""y = x @ W^T with bfloat16 products and float32 sums, on AVX512-BF16 (`vdpbf16ps`).

A weight is packed once into panels of 32 output features whose elements are pairs of bf16 values
along k, [panels, k / 2, 32] uint32 (`Bf16Weight`): one 32-bit pair is what the instruction
multiplies per lane, w[j, 2i] * x[2i] + w[j, 2i + 1] * x[2i + 1], added to a float32 sum. x is
rounded to bf16 pairs once per product. The register tile is the float32 one's (kernels/cpu/gemm.py):
up to 10 rows of x by one panel, 20 accumulator vectors, each x pair broadcast, each panel row
loaded once per tile; a panel row covers two k values, so a tile does twice the work of a float32
one per instruction and reads half the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from embodied_ros.kernels.cpu.allocator import aligned_empty
from embodied_ros.kernels.cpu.jit import PARALLEL_MIN_ELEMENTS, PARALLEL_MIN_MACS, jit
from embodied_ros.kernels.cpu.vector_ir import LANES, PANEL

MAX_ROWS = 10
PAIRS_MULTIPLE = 16  # k pairs of the panels are padded to this: one AMX tile step
DEPTH_BLOCK = 256  # k pairs per pass over a panel: 256 x 32 pairs = 32 KiB, in L1


def bf16_products_available() -> bool:
    """True where the CPU multiplies bf16 pairs in one instruction (AVX512-BF16)."""
    features = llvm_binding.get_host_cpu_features()
    return bool(features.get("avx512f", False) and features.get("avx512bf16", False))


class _BFloat(ir.types.Type):
    """LLVM's bfloat type (llvmlite has none), for the intrinsic's operand type <32 x bfloat>."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other) -> bool:
        return isinstance(other, _BFloat)

    def __hash__(self) -> int:
        return hash("bfloat")


@intrinsic
def tile_bf16(typingctx, rows, a_addr, lda, b_addr, c_addr, ldc, depth, accumulate, bias_addr):
    """y[rows, 32] = (y if accumulate else bias[32]) + x[rows, 2 depth] @ panel[2 depth, 32].

    x: bf16 pairs (uint32) rows at a_addr + r * lda (pairs); the panel [depth, 32] pairs contiguous
    at b_addr; y float32 rows at c_addr + r * ldc (elements). `rows` is a compile-time constant.
    """
    if not isinstance(rows, types.IntegerLiteral):
        return None
    n_rows = rows.literal_value
    signature = types.void(rows, types.uintp, types.intp, types.uintp, types.uintp, types.intp, types.intp,
                           types.boolean, types.uintp)

    def codegen(context, builder, sig, args):
        _, a_addr, lda, b_addr, c_addr, ldc, depth, accumulate, bias_addr = args
        f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
        vector, pairs = ir.VectorType(f32, LANES), ir.VectorType(i32, LANES)
        bf16_pairs = ir.VectorType(_BFloat(), 2 * LANES)
        a, b = (builder.inttoptr(v, i32.as_pointer()) for v in (a_addr, b_addr))
        c, bias = (builder.inttoptr(v, f32.as_pointer()) for v in (c_addr, bias_addr))
        dot = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector, bf16_pairs, bf16_pairs]),
                                             "llvm.x86.avx512bf16.dpbf16ps.512")
        zero = ir.Constant(vector, [0.0] * LANES)
        undef = ir.Constant(pairs, ir.Undefined)
        splat = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
        acc = [[cgutils.alloca_once_value(builder, zero) for _ in range(2)] for _ in range(n_rows)]
        row_starts = [builder.mul(lda, ir.Constant(i64, r)) for r in range(n_rows)]

        def load(base, offset, kind):
            return builder.load(builder.bitcast(builder.gep(base, [offset]), kind.as_pointer()), align=4)

        with cgutils.for_range(builder, depth) as loop:
            k = loop.index
            panel_row = builder.mul(k, ir.Constant(i64, PANEL))
            w = [builder.bitcast(load(b, builder.add(panel_row, ir.Constant(i64, LANES * h)), pairs), bf16_pairs)
                 for h in range(2)]
            for r in range(n_rows):
                scalar = builder.load(builder.gep(a, [builder.add(row_starts[r], k)]))
                x = builder.shuffle_vector(builder.insert_element(undef, scalar, ir.Constant(i32, 0)), undef, splat)
                x = builder.bitcast(x, bf16_pairs)
                for h in range(2):
                    builder.store(builder.call(dot, [builder.load(acc[r][h]), x, w[h]]), acc[r][h])
        for r in range(n_rows):
            row = builder.mul(ldc, ir.Constant(i64, r))
            for h in range(2):
                target = builder.bitcast(builder.gep(c, [builder.add(row, ir.Constant(i64, LANES * h))]),
                                         vector.as_pointer())
                start_bias = builder.bitcast(builder.gep(bias, [ir.Constant(i64, LANES * h)]), vector.as_pointer())
                start = builder.select(accumulate, builder.load(target, align=4), builder.load(start_bias, align=4))
                builder.store(builder.fadd(start, builder.load(acc[r][h])), target, align=4)
        return context.get_dummy_value()

    return signature, codegen


@jit(inline="always")
def _tile_rows(rows, a, lda, b, c, ldc, depth, accumulate, bias):  # pragma: no cover - compiled
    if rows == 10:
        tile_bf16(10, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 9:
        tile_bf16(9, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 8:
        tile_bf16(8, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 7:
        tile_bf16(7, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 6:
        tile_bf16(6, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 5:
        tile_bf16(5, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 4:
        tile_bf16(4, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 3:
        tile_bf16(3, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 2:
        tile_bf16(2, a, lda, b, c, ldc, depth, accumulate, bias)
    else:
        tile_bf16(1, a, lda, b, c, ldc, depth, accumulate, bias)


@jit(inline="always")
def panel_product(x, panel, bias_addr, y_addr, ldc):  # pragma: no cover - compiled
    """The 32 float32 columns at y_addr (rows ldc elements apart) = bias (32 float32 at bias_addr) +
    x @ panel; x [N, pairs] uint32, panel [pairs, 32] uint32."""
    n_rows, depth = x.shape
    tiles = (n_rows + MAX_ROWS - 1) // MAX_ROWS
    base, extra = n_rows // tiles, n_rows % tiles
    lda = x.strides[0] // 4
    for k0 in range(0, depth, DEPTH_BLOCK):
        k1 = min(k0 + DEPTH_BLOCK, depth)
        row = 0
        for t in range(tiles):
            rows = base + 1 if t < extra else base
            _tile_rows(rows, x.ctypes.data + (row * lda + k0) * 4, lda, panel[k0:].ctypes.data,
                       y_addr + row * ldc * 4, ldc, k1 - k0, k0 > 0, bias_addr)
            row += rows


@jit(inline="always")
def _panels(x, panels, bias, y, first, last):  # pragma: no cover - compiled
    """y[:, 32 p:32 p + 32] = bias + x @ panel p for p in first..last; x [N, pairs] uint32,
    panels [P, pairs, 32] uint32, bias [32 P] float32, y [N, 32 P] float32."""
    for p in range(first, last):
        panel_product(x, panels[p], bias[PANEL * p:].ctypes.data, y.ctypes.data + PANEL * p * 4, y.strides[0] // 4)


@jit(parallel=True)
def _product_parallel(x, panels, bias, y, workers):  # pragma: no cover - compiled
    n_panels = panels.shape[0]
    for worker in numba.prange(workers):
        _panels(x, panels, bias, y, worker * n_panels // workers, (worker + 1) * n_panels // workers)


@jit()
def _product_serial(x, panels, bias, y):  # pragma: no cover - compiled
    _panels(x, panels, bias, y, 0, panels.shape[0])


@jit(inline="always")
def round_into_pairs(values, n, out):  # pragma: no cover - compiled
    """values[:n] float32 -> out [pairs] uint32 bf16 pairs (even index in the low half), rounded to
    nearest even, zero past n."""
    full = n // 2
    for j in range(full):
        out[j] = bf16_bits_of(values[2 * j]) | (bf16_bits_of(values[2 * j + 1]) << np.uint32(16))
    for j in range(full, out.shape[0]):
        out[j] = bf16_bits_of(values[2 * j]) if 2 * j < n else np.uint32(0)


@jit()
def round_to_bf16_pairs(x, out):  # pragma: no cover - compiled
    """x [N, k] float32 -> out [N, >= k / 2] uint32: bf16 pairs (even k in the low half), rounded to
    nearest even; pairs past k (an odd k's last high half, the panels' padding) are zero."""
    for r in range(x.shape[0]):
        round_into_pairs(x[r], x.shape[1], out[r])


@jit(parallel=True)
def _round_parallel(x, out):  # pragma: no cover - compiled
    for r in numba.prange(x.shape[0]):
        round_into_pairs(x[r], x.shape[1], out[r])


@jit(inline="always")
def bf16_bits_of(value):  # pragma: no cover - compiled
    """A float32 -> its bf16 bit pattern (uint32), rounded to nearest even."""
    bits = np.uint32(np.float32(value).view(np.uint32))
    return (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 array -> uint16 bf16 bit patterns, rounded to nearest even (numpy)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


@dataclass(frozen=True, eq=False)
class Bf16Weight:
    """A weight [out, in] stored once as bf16 pair panels, [ceil(out / 32), pairs, 32] uint32, pairs
    `in / 2` rounded up to a multiple of 16 (an AMX tile step), 64-byte aligned: the same panels feed
    `vdpbf16ps` and the AMX tiles (amx_gemm.py). Features past `out` and k past `in` are zero.
    `ks.linear` takes it like an array."""

    panels: np.ndarray
    shape: tuple[int, int]

    @property
    def ndim(self) -> int:
        return 2

    @property
    def nbytes(self) -> int:
        return int(self.panels.nbytes)

    def dense(self) -> np.ndarray:
        """The [out, in] float32 values (each a bf16 value)."""
        n_out, n_in = self.shape
        pairs = self.panels.transpose(0, 2, 1).reshape(-1, self.panels.shape[1])[:n_out]  # [out, pairs]
        halves = np.stack([pairs & 0xFFFF, pairs >> 16], axis=-1).reshape(n_out, -1)[:, :n_in]
        return (halves.astype(np.uint32) << 16).view(np.float32)


def padded_pairs(depth: int) -> int:
    """k pairs of a panel over `depth` values: depth / 2 rounded up to a multiple of PAIRS_MULTIPLE."""
    return -(-depth // (2 * PAIRS_MULTIPLE)) * PAIRS_MULTIPLE


def pack_bf16(bits: np.ndarray) -> Bf16Weight:
    """[out, in] uint16 bf16 bit patterns -> Bf16Weight (the panels are the one resident copy)."""
    n_out, n_in = bits.shape
    n_panels, n_pairs = -(-n_out // PANEL), padded_pairs(n_in)
    panels = aligned_empty((n_panels, n_pairs, PANEL), np.uint32)
    padded = np.zeros((PANEL, 2 * n_pairs), np.uint16)
    for p in range(n_panels):  # a panel at a time: no second whole-matrix copy while packing
        rows = bits[PANEL * p:PANEL * p + PANEL]
        padded[:rows.shape[0], :n_in] = rows
        padded[rows.shape[0]:] = 0
        panels[p] = padded.view(np.uint32).T
    return Bf16Weight(panels, (n_out, n_in))


def rounded_pairs(x: np.ndarray, n_pairs: int) -> np.ndarray:
    """x [N, k] float32 (C order) -> [N, n_pairs] uint32 bf16 pairs, zero past k."""
    pairs = np.empty((x.shape[0], n_pairs), np.uint32)
    # a prefix's activations (968 x 16384 before the MLP's down projection) take a core for 15 ms
    parallel = numba.get_num_threads() > 1 and x.size >= PARALLEL_MIN_ELEMENTS
    (_round_parallel if parallel else round_to_bf16_pairs)(x, pairs)
    return pairs


def pairs_product(pairs: np.ndarray, weight: Bf16Weight, bias: np.ndarray | None, n_in: int) -> np.ndarray:
    """pairs [N, panel pairs] uint32 (x rounded, n_in values a row) @ weight^T + bias -> [N, out] float32."""
    n_out = weight.shape[0]
    n_panels = weight.panels.shape[0]
    padded_bias = np.zeros(n_panels * PANEL, np.float32)
    if bias is not None:
        padded_bias[:n_out] = bias
    y = np.empty((pairs.shape[0], n_panels * PANEL), np.float32)
    workers = min(numba.get_num_threads(), n_panels)
    if workers > 1 and pairs.shape[0] * n_in * n_out >= PARALLEL_MIN_MACS:
        _product_parallel(pairs, weight.panels, padded_bias, y, workers)
    else:
        _product_serial(pairs, weight.panels, padded_bias, y)
    return y if n_out == y.shape[1] else np.ascontiguousarray(y[:, :n_out])


def matmul_bf16(x: np.ndarray, weight: Bf16Weight, bias: np.ndarray | None = None) -> np.ndarray:
    """x [N, in] float32 @ weight^T + bias -> [N, out] float32, products of bf16 values (x rounded)."""
    n_out, n_in = weight.shape
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, n_in)
    if x.shape[0] == 0:
        return np.broadcast_to(np.zeros(n_out, np.float32) if bias is None else np.asarray(bias, np.float32),
                               (0, n_out)).copy()
    return pairs_product(rounded_pairs(x, weight.panels.shape[1]), weight, bias, n_in)
