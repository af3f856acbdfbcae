"""The CPU matrix product y = x @ W^T as numba kernels on explicit 16-lane vectors.

Why not numpy's BLAS: OpenBLAS picks its kernels when it loads, and an environment may pin them
(OPENBLAS_CORETYPE=Haswell runs 8-lane AVX2 kernels on an AVX-512 CPU: 135 GFLOP/s per core on
the development machine, where 16 lanes give 270). numba compiles for the CPU it runs on, so these
kernels use the widest vectors it has, whatever the environment says about BLAS. They run on
numba's OpenMP pool, the one pool of the runtime's other parallel kernels: no second thread pool
waits for cores between two products.

Layout (as in BLIS and OpenBLAS): W^T is read in panels of 32 output features, [k, 32] contiguous;
a register tile multiplies up to 10 rows of x by one panel, 20 accumulator vectors, each x value
broadcast from its row and each panel row loaded once per tile. Float32 weights can be packed into
panels once (`PackedWeight`); other weights (float32 and F16 arrays, Q8_0, Q4_K, BF16 blocks) are packed
on the fly, a block of panels at a time, into a per-thread buffer that stays in cache while every
row of x passes over it: a quantized weight is read from memory in its stored size and decoded
once per product, never written out as float32.

    kernel          role                                            stays in
    tile           rows x panel over a block of k, += into y       registers (20 x 16 floats)
    _panel_rows     every row tile of a row block against one panel L1/L2: panel, L2: rows of x
    _worker         blocks of panels x blocks of k x blocks of rows L2: packed block

Packing transposes 16 x 16 blocks with vector shuffles (`cpu/vector_ir.py`); q4_k blocks are decoded
straight into panel order, other quantized rows 256 weights at a time into an L1 buffer first, and
the next block's bytes are prefetched while the current one is multiplied. Measured on the 2-core
development machine (OPENBLAS_CORETYPE=Haswell, 2 threads), against numpy: 50 x 192 -> 1536
packed 62 us (numpy 154), 223 x 384 -> 1536 0.51 ms (1.12); a Wan2.2 block's 960 x 3072 -> 3072:
float32 36 ms, Q4_K 36 ms (numpy 68).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numba
import numpy as np

from embodied_ros.kernels.cpu.jit import PARALLEL_MIN_MACS, jit
from embodied_ros.kernels.cpu.vector_ir import (LANES, PANEL, prefetch, q4_k_block_to_panel, tile, transpose16,
                                             bytes_at, floats_at)
from embodied_ros.kernels.cpu.vector_math import _float32_from_bits
from embodied_ros.kernels.quant import (F16_TO_F32, QuantTensor, f16_at, q4_k_decode_row, q4_k_scale_min,
                                        q8_0_decode_row)

MAX_ROWS = 10  # rows of x per register tile: 20 accumulators. 12 ran 3x slower (LLVM's allocation)
DEPTH_BLOCK = 512  # k per packed block (a multiple of every quantized block size)
DECODE_STEP = 256  # k decoded at a time: 32 rows x 256 floats = 32 KiB
PANEL_BLOCK = 8  # panels packed at a time: 8 x 512 x 32 floats = 512 KiB per thread
ROW_BLOCK = 128  # rows of x per pass over a packed block: 128 x 512 floats = 256 KiB
KINDS = {"f32": 0, "q8_0": 1, "q4_k": 2, "bf16": 3, "f16": 4}
_NO_FLOATS = np.zeros((0, 0), np.float32)
_NO_PANELS = np.zeros((0, 0, PANEL), np.float32)
_NO_BIAS = np.zeros(0, np.float32)
_NO_BIAS.flags.writeable = False  # as a bundle's biases are: the products compile for read-only ones
ZERO_BIAS = np.zeros(PANEL, np.float32)
_local = threading.local()


# ---- the register tiles of a panel ----------------------------------------------------------

@jit(inline="always")
def tile_rows(rows, a, lda, b, c, ldc, depth, accumulate, bias):  # pragma: no cover - compiled
    """tile with a run-time row count: one compiled tile per count."""
    if rows == 10:
        tile(10, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 9:
        tile(9, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 8:
        tile(8, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 7:
        tile(7, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 6:
        tile(6, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 5:
        tile(5, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 4:
        tile(4, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 3:
        tile(3, a, lda, b, c, ldc, depth, accumulate, bias)
    elif rows == 2:
        tile(2, a, lda, b, c, ldc, depth, accumulate, bias)
    else:
        tile(1, a, lda, b, c, ldc, depth, accumulate, bias)


@jit(inline="always")
def _panel_rows(x, r0, r1, k0, k1, panel, y, col, bias, scratch):  # pragma: no cover - compiled
    """y[r0:r1, col:col + 32] (+)= x[r0:r1, k0:k1] @ panel[:k1 - k0]; the first k block (k0 == 0)
    starts from the bias. Rows go in near-equal tiles of at most MAX_ROWS. Columns past y's width
    (the last, partial panel) go through `scratch` [MAX_ROWS, 32]."""
    n_rows, n_cols = r1 - r0, min(PANEL, y.shape[1] - col)
    tiles = (n_rows + MAX_ROWS - 1) // MAX_ROWS
    base, extra = n_rows // tiles, n_rows % tiles
    lda, ldc, depth, first = x.strides[0] // 4, y.strides[0] // 4, k1 - k0, k0 == 0
    bias_addr = bias[col:].ctypes.data if bias.shape[0] and n_cols == PANEL else ZERO_BIAS.ctypes.data
    row = r0
    for t in range(tiles):
        rows = base + 1 if t < extra else base
        a = x.ctypes.data + (row * lda + k0) * 4
        if n_cols == PANEL:
            tile_rows(rows, a, lda, panel.ctypes.data, y.ctypes.data + (row * ldc + col) * 4, ldc, depth,
                       not first, bias_addr)
        else:
            tile_rows(rows, a, lda, panel.ctypes.data, scratch.ctypes.data, PANEL, depth, False,
                       ZERO_BIAS.ctypes.data)
            for i in range(rows):
                for j in range(n_cols):
                    start = y[row + i, col + j] if not first else (bias[col + j] if bias.shape[0] else 0.0)
                    y[row + i, col + j] = start + scratch[i, j]
        row += rows


# ---- packing W^T into panels ------------------------------------------------------------

@jit(inline="always")
def _transpose_into(rows, n_rows, panel):  # pragma: no cover - compiled
    # rows: [>= n_rows, depth] (features contiguous) -> panel [depth, 32], columns past n_rows zero
    depth = panel.shape[0]
    if n_rows == PANEL and depth % LANES == 0:
        stride = rows.strides[0] // 4
        for k in range(0, depth, LANES):
            for half in range(2):
                transpose16(rows.ctypes.data + (half * LANES * stride + k) * 4, stride,
                             panel.ctypes.data + (k * PANEL + half * LANES) * 4, PANEL)
        return
    for k in range(depth):
        for j in range(n_rows):
            panel[k, j] = rows[j, k]
        for j in range(n_rows, PANEL):
            panel[k, j] = 0.0


@jit()
def _decode_rows(kind, rows, f16_to_f32, k0, k1, decoded):  # pragma: no cover - compiled
    """rows [n, stored bytes] of a q8_0 (kind 1), q4_k (2), bf16 (3) or f16 (4) weight over k0..k1 ->
    decoded [n, k1 - k0]."""
    if kind == 1:  # one loop per kind: a kind test inside the row loop kept q4_k at 3x the cost
        for j in range(rows.shape[0]):
            q8_0_decode_row(rows[j, k0 // 32 * 34:k1 // 32 * 34], f16_to_f32, decoded[j])
    elif kind == 2:
        for j in range(rows.shape[0]):
            q4_k_decode_row(rows[j, k0 // 256 * 144:k1 // 256 * 144], f16_to_f32, decoded[j])
    elif kind == 4:
        for j in range(rows.shape[0]):
            for k in range(k1 - k0):
                decoded[j, k] = f16_at(rows[j], 2 * (k0 + k), f16_to_f32)
    else:
        for j in range(rows.shape[0]):
            for k in range(k1 - k0):
                bits = (np.int32(rows[j, 2 * (k0 + k)]) << 16) | (np.int32(rows[j, 2 * (k0 + k) + 1]) << 24)
                decoded[j, k] = _float32_from_bits(np.int32(bits))


@jit(inline="always")
def _q4_k_panel(rows, f16_to_f32, k0, k1, decoded, panel):  # pragma: no cover - compiled
    """32 rows of q4_k blocks over k0..k1 (multiples of 256) -> panel [k1 - k0, 32], a block of 16
    rows at a time; each block's scales and offsets go through `decoded` (as [32, 8])."""
    scales = decoded.reshape(-1)[:32 * 8].reshape(32, 8)
    for block in range(k0 // 256, k1 // 256):
        base = 144 * block
        for half in range(2):
            for j in range(LANES):
                row = rows[LANES * half + j]
                d, dmin = f16_at(row, base, f16_to_f32), f16_at(row, base + 2, f16_to_f32)
                for sub in range(8):
                    sc, m = q4_k_scale_min(row, base + 4, sub)
                    scales[j, sub] = d * np.float32(sc)
                    scales[LANES + j, sub] = dmin * np.float32(m)
            q4_k_block_to_panel(rows[LANES * half].ctypes.data + base + 16, rows.strides[0], scales.ctypes.data,
                                 panel[256 * block - k0:, LANES * half:].ctypes.data)


@jit(inline="always")
def _pack_panel(kind, w_f32, w_bytes, f16_to_f32, first_row, k0, k1, decoded, panel):  # pragma: no cover
    """Output features first_row.. (up to 32) over k0..k1 of a weight -> panel [k1 - k0, 32].
    kind: KINDS; w_f32 [out, in] float32 (kind 0) or w_bytes [out, stored bytes] (others);
    decoded: [32, DECODE_STEP] float32 scratch for the decoded rows, a step at a time (stays in L1)."""
    n_out = w_f32.shape[0] if kind == 0 else w_bytes.shape[0]
    n_rows, depth = min(PANEL, n_out - first_row), k1 - k0
    if kind == 0:
        _transpose_into(w_f32[first_row:, k0:k1], n_rows, panel[:depth])
        return
    rows = w_bytes[first_row:first_row + n_rows]
    if kind == 2 and n_rows == PANEL:
        _q4_k_panel(rows, f16_to_f32, k0, k1, decoded, panel)
        return
    for start in range(k0, k1, DECODE_STEP):
        stop = min(start + DECODE_STEP, k1)
        _decode_rows(kind, rows, f16_to_f32, start, stop, decoded)
        _transpose_into(decoded[:, :stop - start], n_rows, panel[start - k0:stop - k0])


@jit(inline="always")
def _prefetch_panel(kind, w_bytes, panel, last_panel, k0, k1):  # pragma: no cover - compiled
    """Prefetch the stored bytes of a quantized weight's panel (its 32 rows) over k0..k1, to be packed
    next. Each row is a short segment (288 bytes of a q4_k row per 512 weights), which the hardware's
    stream prefetch does not follow: without this, packing waited on memory (a q4_k product of
    50 x 3072 -> 14336 took 14.6 ms instead of 12.8); float32 rows are long segments that it follows."""
    if panel >= last_panel:
        return
    block, size = (32, 34) if kind == 1 else ((256, 144) if kind == 2 else (1, 2))
    start, stop = k0 // block * size, k1 // block * size
    base, stride = w_bytes.ctypes.data, w_bytes.strides[0]
    for row in range(PANEL * panel, min(PANEL * panel + PANEL, w_bytes.shape[0])):
        for offset in range(start, stop, 64):
            prefetch(base + row * stride + offset)


# ---- drivers ------------------------------------------------------------------------------

@jit(inline="always")
def _worker(x, kind, w_f32, w_bytes, f16_to_f32, packed, bias, y, first_panel, last_panel, block,
            decoded, scratch):  # pragma: no cover - compiled
    """Panels first_panel..last_panel of y = x @ W^T + bias. packed: [panels, in, 32] (weights packed
    once; kind ignored) or empty, then W is packed into `block` [PANEL_BLOCK, DEPTH_BLOCK, 32]."""
    n_rows, depth = x.shape
    for p0 in range(first_panel, last_panel, PANEL_BLOCK):
        p1 = min(p0 + PANEL_BLOCK, last_panel)
        for k0 in range(0, depth, DEPTH_BLOCK):
            k1 = min(k0 + DEPTH_BLOCK, depth)
            if not packed.shape[0]:
                for p in range(p0, p1):
                    _pack_panel(kind, w_f32, w_bytes, f16_to_f32, p * PANEL, k0, k1, decoded, block[p - p0])
            next_p0, next_k0 = (p0, k1) if k1 < depth else (p1, 0)  # the block packed next
            prefetch = kind != 0 and not packed.shape[0]
            for r0 in range(0, n_rows, ROW_BLOCK):
                r1 = min(r0 + ROW_BLOCK, n_rows)
                for p in range(p0, p1):
                    if prefetch and r1 == n_rows:  # spread over the panels of the last row block
                        _prefetch_panel(kind, w_bytes, next_p0 + p - p0, last_panel, next_k0,
                                        min(next_k0 + DEPTH_BLOCK, depth))
                    panel = packed[p, k0:k1] if packed.shape[0] else block[p - p0]
                    _panel_rows(x, r0, r1, k0, k1, panel, y, p * PANEL, bias, scratch)


# Not inlined: its three callers share one compiled body (each inlined copy took ~20 s to compile), as
# long as they pass the same types: int64 addresses, kinds and panel numbers, never literals.
@jit()
def _product(x_addr, n_rows, depth, lda, kind, w_addr, w_stride, n_out, packed, bias_addr, y_addr, ldy,
             f16_to_f32, first_panel, last_panel, block, decoded, scratch):  # pragma: no cover - compiled
    x, y = floats_at(x_addr, n_rows, lda, depth), floats_at(y_addr, n_rows, ldy, n_out)
    w_f32 = floats_at(w_addr, n_out if kind == 0 else 0, w_stride, depth)
    w_bytes = bytes_at(w_addr, n_out if kind != 0 else 0, w_stride)
    n_bias = n_out if bias_addr else 0
    bias = floats_at(bias_addr, 1, n_bias, n_bias)[0]
    _worker(x, kind, w_f32, w_bytes, f16_to_f32, packed, bias, y, first_panel, last_panel, block, decoded,
            scratch)


@jit(parallel=True)
def _product_parallel(x_addr, n_rows, depth, lda, kind, w_addr, w_stride, n_out, packed, bias_addr, y_addr, ldy,
                      f16_to_f32, blocks, decoded, scratch):  # pragma: no cover - compiled
    """y = x @ W^T + bias on every worker (one per buffer), each on its share of the panels.
    Addresses and strides in float32 elements (bytes for a quantized W's rows); bias_addr 0: none."""
    workers = blocks.shape[0]
    panels = (n_out + PANEL - 1) // PANEL
    for worker in numba.prange(workers):
        _product(x_addr, n_rows, depth, lda, kind, w_addr, w_stride, n_out, packed, bias_addr, y_addr, ldy,
                 f16_to_f32, worker * panels // workers, (worker + 1) * panels // workers, blocks[worker],
                 decoded[worker], scratch[worker])


@jit()
def _product_serial(x_addr, n_rows, depth, lda, kind, w_addr, w_stride, n_out, packed, bias_addr, y_addr, ldy,
                    f16_to_f32, blocks, decoded, scratch):  # pragma: no cover - compiled
    _product(x_addr, n_rows, depth, lda, kind, w_addr, w_stride, n_out, packed, bias_addr, y_addr, ldy, f16_to_f32,
             np.int64(0), (n_out + PANEL - 1) // PANEL, blocks[0], decoded[0], scratch[0])


@jit()
def _packed_product_serial(x, panels, bias, y, f16_to_f32, blocks, decoded, scratch):  # pragma: no cover - compiled
    """_product_serial for a weight packed once and a C-contiguous x, taking the arrays: their
    addresses are read here, where Python's `.ctypes.data` reads of three arrays cost more than a
    small product itself. bias: [out] read-only, or empty for none."""
    n_out, none = y.shape[1], np.int64(0)
    bias_addr = np.int64(bias.ctypes.data) if bias.shape[0] else none
    _product(np.int64(x.ctypes.data), x.shape[0], x.shape[1], x.shape[1], none, none, none, n_out, panels, bias_addr,
             np.int64(y.ctypes.data), n_out, f16_to_f32, none, (n_out + PANEL - 1) // PANEL, blocks[0], decoded[0],
             scratch[0])


@dataclass(frozen=True, eq=False)
class PackedWeight:
    """A float32 weight [out, in] stored once as the panels the product reads, [>= out / 32, in, 32]
    (rows past `out` in the last panel are never read). `ks.linear` takes it wherever it takes the
    array."""

    panels: np.ndarray
    shape: tuple[int, int]

    @property
    def ndim(self) -> int:
        return 2

    def dense(self) -> np.ndarray:
        """The [out, in] float32 array it was packed from."""
        n_out, n_in = self.shape
        return np.ascontiguousarray(self.panels.transpose(0, 2, 1).reshape(-1, n_in)[:n_out])


def pack_weight(weight: np.ndarray) -> PackedWeight:
    """[out, in] float32 -> PackedWeight (a copy in panel layout)."""
    weight = np.ascontiguousarray(weight, dtype=np.float32)
    if weight.ndim != 2:
        raise ValueError(f"pack_weight: expected a matrix [out_features, in_features], got shape {weight.shape}")
    n_out, n_in = weight.shape
    padded = np.zeros((-(-n_out // PANEL) * PANEL, n_in), np.float32)
    padded[:n_out] = weight
    return PackedWeight(np.ascontiguousarray(padded.reshape(-1, PANEL, n_in).transpose(0, 2, 1)), (n_out, n_in))


def _buffers(workers: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-thread packing block, decode rows and partial-panel tile, kept between calls (first
    touches of fresh pages would cost more than small products)."""
    views = getattr(_local, "views", None)
    if views is None:
        views = _local.views = {}
    if workers not in views:
        cached = getattr(_local, "buffers", None)
        if cached is None or cached[0].shape[0] < workers:
            cached = _local.buffers = (np.zeros((workers, PANEL_BLOCK, DEPTH_BLOCK, PANEL), np.float32),
                                       np.zeros((workers, PANEL, DECODE_STEP), np.float32),
                                       np.zeros((workers, MAX_ROWS, PANEL), np.float32))
            views.clear()
        views[workers] = tuple(buffer[:workers] for buffer in cached)
    return views[workers]


def matmul(x: np.ndarray, weight, bias: np.ndarray | None = None) -> np.ndarray:
    """x [N, in] (rows may be strided, features contiguous) @ weight^T + bias -> [N, out] float32.
    weight: PackedWeight, float32 or float16 [out, in] array, or a 2-D QuantTensor (q8_0, q4_k, bf16)."""
    n_out, n_in = weight.shape
    if type(weight) is PackedWeight and _plain_rows(x) and 0 < x.shape[0] * n_in * n_out < PARALLEL_MIN_MACS:
        y = np.empty((x.shape[0], n_out), np.float32)
        _packed_product_serial(x, weight.panels, _read_only_bias(bias), y, F16_TO_F32, *_buffers(1))
        return y
    x = _rows_view(x)
    y = np.empty((x.shape[0], n_out), np.float32)
    if x.shape[0] == 0:
        if bias is not None:
            y[:] = bias
        return y
    packed, kind, w = _NO_PANELS, 0, _NO_FLOATS
    if isinstance(weight, PackedWeight):
        packed = weight.panels
    elif isinstance(weight, QuantTensor):
        kind, w = KINDS[weight.qtype], weight.data
        if w.strides[-1] != 1:
            w = np.ascontiguousarray(w)
    elif weight.dtype == np.float16:  # its bytes, decoded as they are packed
        kind, w = KINDS["f16"], np.ascontiguousarray(weight).view(np.uint8)
    else:
        w = _rows_view(weight)
    w_stride = w.strides[0] if kind else w.strides[0] // 4
    bias = _NO_BIAS if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
    macs = x.shape[0] * n_in * n_out
    workers = min(numba.get_num_threads(), -(-n_out // PANEL)) if macs >= PARALLEL_MIN_MACS else 1
    run = _product_parallel if workers > 1 else _product_serial
    run(x.ctypes.data, x.shape[0], n_in, x.strides[0] // 4, kind, w.ctypes.data, w_stride, n_out, packed,
        bias.ctypes.data if bias.size else 0, y.ctypes.data, n_out, F16_TO_F32, *_buffers(workers))
    return y


def _plain_rows(x: np.ndarray) -> bool:
    """x is the one array type `_packed_product_serial` is compiled for: 2-D float32, C-contiguous, writeable."""
    if x.dtype != np.float32 or x.ndim != 2:
        return False
    flags = x.flags
    return flags.c_contiguous and flags.writeable


def _read_only_bias(bias: np.ndarray | None) -> np.ndarray:
    if bias is None:
        return _NO_BIAS
    if bias.dtype != np.float32 or bias.ndim != 1 or not bias.flags.c_contiguous:
        bias = np.ascontiguousarray(bias, dtype=np.float32).reshape(-1)
    if bias.flags.writeable:
        bias = bias.view()
        bias.flags.writeable = False
    return bias


def _rows_view(a: np.ndarray) -> np.ndarray:
    """A 2-D float32 array whose rows are `strides[0] // 4` elements apart and whose features are
    contiguous: the array itself when it already is one, else a copy."""
    if a.dtype == np.float32 and a.ndim == 2 and a.strides[1] == 4 and a.strides[0] % 4 == 0 and a.strides[0] >= 0:
        return a
    return np.ascontiguousarray(a, dtype=np.float32).reshape(a.shape[0], -1)
