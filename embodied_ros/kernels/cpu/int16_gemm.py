"""y = x @ W^T with int16 products on AVX2 (`vpmaddwd`, or AVX-VNNI's `vpdpwssd`), for BF16 weights on CPUs
without AVX-512.

Such CPUs multiply float32 at 8 lanes per FMA, and `vpmaddwd` adds two int16 products into each of
8 int32 lanes per instruction: on a Zen 3 core the pair (with the `vpaddd` that sums it) adds 1.55x
as many products a cycle as FMA does (BENCHMARKS.md, unit_peaks_amd_zen3). Integers with 13 bits
of magnitude lose less than bfloat16 does: W is quantized per output feature (d_w = max|w| / LEVELS,
q_w = round(w / d_w)), x per 128-wide block (d_x likewise per block), so an outlier costs only its
block, and a block's 128 products of at most LEVELS^2 sum exactly in int32. Each block's sum is
scaled by d_x into y in float32; the first pass over a panel starts y at zero and the last scales it
by d_w and adds the bias, each on the tile it has in cache (as sweeps over all of y before and after
the passes, products on two Zen 3 cores took 1-8% longer, side by side). Blocks of 128 at 4095
levels rather than 32 at 8191 update y a quarter as often: on Zen 3 released-size SmolVLA's BF16
chunk ran 1.1-1.2x as fast (`int16_blocks_amd_zen3`), and the error of a product of random
matrices, relative to its largest output, went from 1.6e-4 to 3.5e-4, still a fraction of bf16's
rounding (test_int16_products.py).

The weight is packed once (`I16Weight`, 2 bytes a weight as bf16) into panels of 32 output
features: per block, 64 steps of [32 features, 2 consecutive k] int16, so one 256-bit vector holds
8 features' pairs and `vpmaddwd` with the broadcast pair of x adds both products into each
feature's sum. The register tile takes up to 6 rows of x by half a panel: 12 int32 sums, 2 weight
vectors and x's pair, within AVX2's 16 registers; y, in float32, is updated once a block. The last
block of k stops after its last pair of real features (720 = 5 x 128 + 80: the expert's products
would spend 6% of their steps on zeros).

Every product of such a weight runs here, whatever its rows. Decoding the panels for OpenBLAS
above 256 rows (the vision towers) was slower in whole chunks, run by run in one process
(benchmarks/path_pairs.py, path_pairs_*_amd_zen3): on Zen 3 GR00T small's chunk took 1.15x as long,
released-size SmolVLA's vision tower 1.08x.
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

from embodied_ros.kernels.cpu.blas import before_kernel_region
from embodied_ros.kernels.cpu.jit import PARALLEL_MIN_ELEMENTS, PARALLEL_MIN_MACS, jit
from embodied_ros.kernels.cpu.shares import claim, counter, share_bounds, share_count
from embodied_ros.kernels.cpu.vector_ir import PANEL

BLOCK = 128
LEVELS = 4095  # |q| <= LEVELS on both sides: a block sums to at most 128 * 4095^2 < 2^31
MAX_ROWS = 6
DEPTH_BLOCKS = 2  # blocks per pass over a panel: 2 x 8 KiB = 16 KiB, in L1
_LANES = 8  # int32 / float32 lanes of an AVX2 vector
# (v + _ROUNDER) - _ROUNDER rounds |v| < 2^22 to an integer, ties to even as np.round, in float32
# arithmetic LLVM vectorizes: numba turns np.round to an integer into a scalar conversion per element
# (on one Zen 3 core, alternating: the expert's 50 x 720 took 0.048-0.081 ms that way, 0.033-0.052
# this way; 3072 x 768 3.4-4.8 against 2.4-3.1 ms; the same integers).
_ROUNDER = np.float32(1.5 * 2 ** 23)
_STEP_BYTES = PANEL * 2 * 2  # one step of a panel: 32 features x 2 int16
_BLOCK_BYTES = (BLOCK // 2) * _STEP_BYTES


def int16_unit() -> str | None:
    """The instructions int16 products run on here: "avx_vnni" (`vpdpwssd` on 256-bit vectors, which
    sums the pairs into the lanes itself), "avx2" (`vpmaddwd` then `vpaddd`), or None on CPUs with
    AVX-512, whose 16-lane float32 and bf16 products are faster, or without AVX2 and FMA."""
    features = llvm_binding.get_host_cpu_features()
    if features.get("avx512f", False) or not (features.get("avx2", False) and features.get("fma", False)):
        return None
    return "avx_vnni" if features.get("avxvnni", False) else "avx2"


def emit_tile(builder: ir.IRBuilder, unit: str, n_rows: int, xq_addr, xd_addr, ldd, wq_addr, ws_addr, bias_addr,
              c_addr, ldc, blocks, tail_steps, first, last) -> None:
    """tile_i16's LLVM IR for `unit` ("avx2" or "avx_vnni"); the arguments are i64 values."""
    f32, i8, i16, i32, i64 = ir.FloatType(), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
    floats, ints, shorts = ir.VectorType(f32, _LANES), ir.VectorType(i32, _LANES), ir.VectorType(i16, 2 * _LANES)
    xq, wq = (builder.inttoptr(v, i8.as_pointer()) for v in (xq_addr, wq_addr))
    xd, ws, bias, c = (builder.inttoptr(v, f32.as_pointer()) for v in (xd_addr, ws_addr, bias_addr, c_addr))

    def declare(name, result, operands):
        return cgutils.get_or_insert_function(builder.module, ir.FunctionType(result, operands), name)

    if unit == "avx_vnni":
        # As inline assembly: through its intrinsic, LLVM's tuning for Alder Lake splits most of
        # them back into `vpmaddwd` and `vpaddd`.
        fused = ir.InlineAsm(ir.FunctionType(ints, [ints, ints, ints]), "{vex} vpdpwssd $2, $1, $0", "=x,x,x,0")

        def add_pairs(total, w, x):
            return builder.call(fused, [x, w, total])
    else:
        pairs = declare("llvm.x86.avx2.pmadd.wd", ints, [shorts, shorts])

        def add_pairs(total, w, x):
            return builder.add(total, builder.call(pairs, [builder.bitcast(w, shorts), builder.bitcast(x, shorts)]))

    fma = declare("llvm.fma.v8f32", floats, [floats] * 3)
    zero = ir.Constant(ints, [0] * _LANES)
    undef_i, undef_f = ir.Constant(ints, ir.Undefined), ir.Constant(floats, ir.Undefined)
    splat = ir.Constant(ints, [0] * _LANES)
    x_rows = [ir.Constant(i64, 2 * BLOCK * r) for r in range(n_rows)]

    def load(base, byte_offset, kind):
        pointer = builder.gep(base, [byte_offset])
        return builder.load(builder.bitcast(pointer, kind.as_pointer()), align=1)

    def broadcast(value, undef):
        return builder.shuffle_vector(builder.insert_element(undef, value, ir.Constant(i32, 0)), undef, splat)

    def y_at(r, v):
        offset = builder.add(builder.mul(ldc, ir.Constant(i64, r)), ir.Constant(i64, _LANES * v))
        return builder.bitcast(builder.gep(c, [offset]), floats.as_pointer())

    def features(base, v):
        return builder.load(builder.bitcast(builder.gep(base, [ir.Constant(i64, _LANES * v)]), floats.as_pointer()),
                            align=4)

    with builder.if_then(builder.icmp_unsigned("!=", first, ir.Constant(i64, 0))):
        for r in range(n_rows):
            for v in range(4):
                builder.store(ir.Constant(floats, [0.0] * _LANES), y_at(r, v), align=4)

    # Half a panel at a time. The steps stay a loop, with the sums in memory LLVM keeps in registers:
    # unrolled in the IR, LLVM re-associates each row's sum into a tree and spills.
    for half in (range(0, 2), range(2, 4)):
        sums = {(r, v): cgutils.alloca_once_value(builder, zero) for r in range(n_rows) for v in half}
        with cgutils.for_range(builder, blocks) as loop:
            b = loop.index
            w_block = builder.mul(b, ir.Constant(i64, _BLOCK_BYTES))
            x_block = builder.mul(b, ir.Constant(i64, 2 * BLOCK * n_rows))
            for total in sums.values():
                builder.store(zero, total)
            is_tail = builder.icmp_unsigned("==", b, builder.sub(blocks, ir.Constant(i64, 1)))
            with cgutils.for_range(builder, builder.select(is_tail, tail_steps, ir.Constant(i64, BLOCK // 2))) as steps:
                w_step = builder.add(w_block, builder.mul(steps.index, ir.Constant(i64, _STEP_BYTES)))
                x_step = builder.add(x_block, builder.mul(steps.index, ir.Constant(i64, 4)))
                w = {v: load(wq, builder.add(w_step, ir.Constant(i64, 32 * v)), ints) for v in half}
                for r in range(n_rows):
                    x = broadcast(load(xq, builder.add(x_rows[r], x_step), i32), undef_i)
                    for v in half:
                        builder.store(add_pairs(builder.load(sums[r, v]), w[v], x), sums[r, v])
            for r in range(n_rows):
                dx = broadcast(builder.load(builder.gep(xd, [builder.add(builder.mul(ldd, ir.Constant(i64, r)), b)])),
                               undef_f)
                for v in half:
                    target = y_at(r, v)
                    total = builder.call(fma, [builder.sitofp(builder.load(sums[r, v]), floats), dx,
                                               builder.load(target, align=4)])
                    builder.store(total, target, align=4)
    with builder.if_then(builder.icmp_unsigned("!=", last, ir.Constant(i64, 0))):
        for v in range(4):
            scale, offset = features(ws, v), features(bias, v)
            for r in range(n_rows):
                builder.store(builder.call(fma, [builder.load(y_at(r, v), align=4), scale, offset]), y_at(r, v),
                              align=4)


INT16_UNIT = int16_unit()
if INT16_UNIT == "avx_vnni":
    llvm_binding.initialize_native_asmparser()  # numba's LLVM reads the tile's inline assembly with it


@intrinsic
def tile_i16(typingctx, rows, xq_addr, xd_addr, ldd, wq_addr, ws_addr, bias_addr, c_addr, ldc, blocks, tail_steps,
             first, last):
    """y[rows, 32] += sum over `blocks` blocks of d_x * sum(q_x * q_w), the last block's over its first
    `tail_steps` pairs of k only; y set to zero before if `first`, to y * d_w + bias after if `last`.

    xq: the tile's int16 rows block by block, [blocks, rows, BLOCK]; xd: float32 block scales at
    xd_addr + r * ldd (elements); wq: the panel's blocks [blocks, BLOCK / 2, 32, 2] int16; y: float32
    rows at c_addr + r * ldc elements; ws, bias: the panel's 32 float32 d_w and biases.
    """
    if not isinstance(rows, types.IntegerLiteral):
        return None
    signature = types.void(rows, types.uintp, types.uintp, types.intp, types.uintp, types.uintp, types.uintp,
                           types.uintp, types.intp, types.intp, types.intp, types.intp, types.intp)

    def codegen(context, builder, sig, args):
        emit_tile(builder, INT16_UNIT or "avx2", rows.literal_value, *args[1:])
        return context.get_dummy_value()

    return signature, codegen


@jit(inline="always")
def _tile_rows(rows, xq, xd, ldd, wq, ws, bias, c, ldc, blocks, tail_steps, first, last):  # pragma: no cover - compiled
    if rows == 6:
        tile_i16(6, xq, xd, ldd, wq, ws, bias, c, ldc, blocks, tail_steps, first, last)
    elif rows == 5:
        tile_i16(5, xq, xd, ldd, wq, ws, bias, c, ldc, blocks, tail_steps, first, last)
    elif rows == 4:
        tile_i16(4, xq, xd, ldd, wq, ws, bias, c, ldc, blocks, tail_steps, first, last)
    elif rows == 3:
        tile_i16(3, xq, xd, ldd, wq, ws, bias, c, ldc, blocks, tail_steps, first, last)
    elif rows == 2:
        tile_i16(2, xq, xd, ldd, wq, ws, bias, c, ldc, blocks, tail_steps, first, last)
    else:
        tile_i16(1, xq, xd, ldd, wq, ws, bias, c, ldc, blocks, tail_steps, first, last)


@jit(inline="always")
def _tiles(n_rows):  # pragma: no cover - compiled
    """(tiles, base, extra): n_rows split into tiles of at most MAX_ROWS rows, the first `extra` of
    base + 1 rows, the others of base."""
    tiles = (n_rows + MAX_ROWS - 1) // MAX_ROWS
    return tiles, n_rows // tiles, n_rows % tiles


@jit(inline="always")
def _x_tile_start(b0, n_rows, n_blocks, row):  # pragma: no cover - compiled
    """Where in xq (int16 elements) the row tile starting at `row` holds its blocks b0..b0 + DEPTH_BLOCKS
    (`_quantize_row`'s layout)."""
    return (b0 * n_rows + row * min(DEPTH_BLOCKS, n_blocks - b0)) * BLOCK


@jit(inline="always")
def _panels(xq, xd, wq, ws, bias, y, tail_steps, first, last):  # pragma: no cover - compiled
    """Panels first..last of y = bias + d_w * (x @ W^T). xq: x's tiles (`_quantize_row`), xd [N, B]
    float32, wq [P, B, BLOCK / 2, 32, 2] int16, ws / bias [32 P], y [N, 32 P]."""
    n_rows, n_blocks = xd.shape
    tiles, base, extra = _tiles(n_rows)
    ldd, ldc = xd.strides[0] // 4, y.strides[0] // 4
    for b0 in range(0, n_blocks, DEPTH_BLOCKS):
        b1 = min(b0 + DEPTH_BLOCKS, n_blocks)
        for p in range(first, last):
            row = 0
            for t in range(tiles):
                rows = base + 1 if t < extra else base
                _tile_rows(rows, xq.ctypes.data + _x_tile_start(b0, n_rows, n_blocks, row) * 2,
                           xd.ctypes.data + (row * ldd + b0) * 4, ldd, wq[p, b0:].ctypes.data,
                           ws.ctypes.data + PANEL * p * 4, bias.ctypes.data + PANEL * p * 4,
                           y.ctypes.data + (row * ldc + PANEL * p) * 4, ldc, b1 - b0,
                           tail_steps if b1 == n_blocks else BLOCK // 2,
                           1 if b0 == 0 else 0, 1 if b1 == n_blocks else 0)
                row += rows


@jit(parallel=True)
def _product_parallel(xq, xd, wq, ws, bias, y, tail_steps, workers, shares, claimed):  # pragma: no cover - compiled
    for worker in numba.prange(workers):
        share = claim(claimed)
        while share < shares:
            first, last = share_bounds(share, shares, wq.shape[0])
            _panels(xq, xd, wq, ws, bias, y, tail_steps, first, last)
            share = claim(claimed)


@jit()
def _product_serial(xq, xd, wq, ws, bias, y, tail_steps):  # pragma: no cover - compiled
    _panels(xq, xd, wq, ws, bias, y, tail_steps, 0, wq.shape[0])


@jit(inline="always")
def _quantize_row(x, xq, xd, r, scratch):  # pragma: no cover - compiled
    """Row r of x into xq, a flat int16 array in the order the tiles read it: by DEPTH_BLOCKS groups of
    blocks, within a group the row tiles one after the other, each block by block ([blocks, rows,
    BLOCK]), so one pass over a panel reads x in one stream, which the cache's prefetcher follows (with
    each tile's blocks of all depths together, consecutive tiles were a tile's whole row apart: on
    Zen 3, one core or two, products of 256-3072 rows ran up to 6% slower that way, 3072 x 3072 ->
    768 7-17%); its block scales into xd [N, B]. scratch: BLOCK int32 of the calling thread's."""
    n_rows, n_in = x.shape
    n_blocks = xd.shape[1]
    tiles, base, extra = _tiles(n_rows)
    if r < extra * (base + 1):
        rows, local = base + 1, r % (base + 1)
    else:
        rows, local = base, (r - extra * (base + 1)) % base
    row0 = r - local
    for b in range(n_blocks):
        first = BLOCK * b
        count = min(BLOCK, n_in - first)
        amax = np.float32(0.0)
        for i in range(first, first + count):
            amax = max(amax, abs(x[r, i]))
        d = amax / np.float32(LEVELS)
        inverse = np.float32(1.0) / d if d > 0 else np.float32(0.0)
        xd[r, b] = d
        for i in range(count):
            scratch[i] = np.int32(x[r, first + i] * inverse + _ROUNDER) - np.int32(_ROUNDER)
        for i in range(count, BLOCK):
            scratch[i] = 0
        group = b - b % DEPTH_BLOCKS
        out = _x_tile_start(group, n_rows, n_blocks, row0) + ((b - group) * rows + local) * BLOCK
        for i in range(BLOCK):
            xq[out + i] = scratch[i]


@jit()
def _quantize_serial(x, xq, xd):  # pragma: no cover - compiled
    scratch = np.empty(BLOCK, np.int32)
    for r in range(x.shape[0]):
        _quantize_row(x, xq, xd, r, scratch)


@jit(parallel=True)
def _quantize_parallel(x, xq, xd, workers, shares, claimed):  # pragma: no cover - compiled
    for worker in numba.prange(workers):
        scratch = np.empty(BLOCK, np.int32)
        share = claim(claimed)
        while share < shares:
            first, last = share_bounds(share, shares, x.shape[0])
            for r in range(first, last):
                _quantize_row(x, xq, xd, r, scratch)
            share = claim(claimed)


def quantize_activations(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy form of the kernels' quantization of x [N, k]: (q_x int16 [N, BLOCK B], d_x float32 [N, B]),
    B = ceil(k / BLOCK), k padded with zeros."""
    n_rows, n_in = x.shape
    n_blocks = -(-n_in // BLOCK)
    padded = np.zeros((n_rows, n_blocks * BLOCK), np.float32)
    padded[:, :n_in] = x
    blocks = padded.reshape(n_rows, n_blocks, BLOCK)
    d = (np.abs(blocks).max(axis=2) / np.float32(LEVELS)).astype(np.float32)
    inverse = np.divide(np.float32(1.0), d, out=np.zeros_like(d), where=d > 0)
    q = np.round(blocks * inverse[:, :, None]).astype(np.int16)
    return q.reshape(n_rows, -1), d


@dataclass(frozen=True, eq=False)
class I16Weight:
    """A weight [out, in] quantized to int16 per output feature and packed for `vpmaddwd` (module doc)."""

    quants: np.ndarray  # int16 [P, B, BLOCK / 2, 32, 2]: B blocks of k (zero past in), 32 features (zero past out)
    scales: np.ndarray  # float32 [32 P]: d_w per output feature
    shape: tuple[int, int]

    @property
    def ndim(self) -> int:
        return 2

    @property
    def nbytes(self) -> int:
        return int(self.quants.nbytes + self.scales.nbytes)

    def integers(self) -> np.ndarray:
        """q_w int16 [out, in] as packed."""
        n_out, n_in = self.shape
        return self.quants.transpose(0, 3, 1, 2, 4).reshape(-1, self.quants.shape[1] * BLOCK)[:n_out, :n_in]

    def dense(self) -> np.ndarray:
        """The [out, in] float32 values the products multiply: q_w * d_w."""
        return self.integers().astype(np.float32) * self.scales[:self.shape[0], None]


def pack_i16(values: np.ndarray) -> I16Weight:
    """[out, in] matrix of float32 or float16 values, or of bf16 bit patterns (uint16) -> I16Weight, a
    panel at a time: no float32 copy of the whole matrix (a Gemma MLP matrix's would be 134 MB)."""
    n_out, n_in = values.shape
    n_blocks, n_panels = -(-n_in // BLOCK), -(-n_out // PANEL)
    quants = np.zeros((n_panels, n_blocks, BLOCK // 2, PANEL, 2), np.int16)
    scales = np.zeros(n_panels * PANEL, np.float32)
    for p in range(n_panels):
        rows = values[PANEL * p:PANEL * p + PANEL]
        rows = (rows.astype(np.uint32) << 16).view(np.float32) if rows.dtype == np.uint16 else rows.astype(np.float32)
        count = rows.shape[0]
        d = (np.abs(rows).max(axis=1) / np.float32(LEVELS)).astype(np.float32)
        inverse = np.divide(np.float32(1.0), d, out=np.zeros_like(d), where=d > 0)
        q = np.zeros((count, n_blocks * BLOCK), np.int16)
        q[:, :n_in] = np.round(rows * inverse[:, None])
        scales[PANEL * p:PANEL * p + count] = d
        quants[p, :, :, :count] = q.reshape(count, n_blocks, BLOCK // 2, 2).transpose(1, 2, 0, 3)
    return I16Weight(quants, scales, (n_out, n_in))


def matmul_i16(x: np.ndarray, weight: I16Weight, bias: np.ndarray | None = None) -> np.ndarray:
    """x [N, in] float32 @ weight^T + bias -> [N, out], x quantized per BLOCK-wide block, int16 products."""
    n_out, n_in = weight.shape
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, n_in)
    n_panels, n_blocks = weight.quants.shape[:2]
    padded_bias = np.zeros(n_panels * PANEL, np.float32)
    if bias is not None:
        padded_bias[:n_out] = bias
    y = np.empty((x.shape[0], n_panels * PANEL), np.float32)
    if x.shape[0] == 0:
        y[:] = padded_bias
        return np.ascontiguousarray(y[:, :n_out])
    xq = np.empty(x.shape[0] * n_blocks * BLOCK, np.int16)
    xd = np.empty((x.shape[0], n_blocks), np.float32)
    tail_steps = (n_in - (n_blocks - 1) * BLOCK + 1) // 2  # pairs of k in the last block; past them, zeros
    workers = min(numba.get_num_threads(), n_panels)
    macs = x.shape[0] * n_in * n_out
    if workers > 1 and x.size >= PARALLEL_MIN_ELEMENTS:  # in as many shares as the product after it
        _quantize_parallel(x, xq, xd, workers, share_count(workers, x.shape[0], macs), counter())
    else:
        _quantize_serial(x, xq, xd)
    if workers > 1 and macs >= PARALLEL_MIN_MACS:
        before_kernel_region()
        _product_parallel(xq, xd, weight.quants, weight.scales, padded_bias, y, tail_steps, workers,
                          share_count(workers, n_panels, macs), counter())
    else:
        _product_serial(xq, xd, weight.quants, weight.scales, padded_bias, y, tail_steps)
    return y if n_out == y.shape[1] else np.ascontiguousarray(y[:, :n_out])
