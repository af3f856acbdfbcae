"""y = x @ W^T for Q8_0 weights on the AMX tiles of Intel CPUs: int8 products (`tdpbssd`), int32 sums
a block, scaled into float32.

The weight is a `Q8Weight` as packed for the vector units (int8_gemm.py): per panel of 32 features and
32-block of k, 8 rows of [32 features, 4 consecutive k] int8, 128 bytes each, so the 8 rows read at a
stride of 128 bytes are the B tile of 16 features (one Q8_0 block deep) and the next 64 bytes the other
16. Nothing is packed twice. x is quantized per 32-block as for the vector units, stored as q_x itself
(signed: `tdpbssd` multiplies signed by signed, so no offset and no correction), rows padded to 32.

Q8_0's scale is per 32-block, so the tiles run one block deep (K = 32 bytes): each block's four
[16 x 16] int32 sums of a 32 x 32 block go to a 4 KiB scratch, and y += d_x * d_w * sum on the vector
units before the next block. The block product, its k loop and the scaling are LLVM IR (numba has no
tile type), compiled when the tiles are first asked for and called from numba's loops by symbol.
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from numba import types

from embodied_ros.kernels.cpu.allocator import recycled_empty
from embodied_ros.kernels.cpu.amx_gemm import BLOCKING, TILE_DECLARATIONS, compile_tile_code, tile_state_granted
from embodied_ros.kernels.cpu.int8_gemm import BLOCK, Q8Weight, quantize_parallel, quantize_rows
from embodied_ros.kernels.cpu.jit import PARALLEL_MIN_ELEMENTS, PARALLEL_MIN_MACS, jit
from embodied_ros.kernels.cpu.vector_ir import PANEL

BLOCK_ROWS = 32  # rows of x per block product (two A tiles)
TILES_MIN_ROWS = 8  # fewer rows go to vpdpbusd: a block product sums and scales 32 rows whatever the count
ROWS_PER_PASS = BLOCKING[1]  # blocks of 32 rows whose x stays in L2 while every panel reads it, as for bf16
SYMBOL = "embodied_ros_amx_q8_block"

# y[32 x 32] += sum over `blocks` 32-blocks b of d_x[r, b] * d_w[b, n] * (q_x[r, b] . q_w[b, n]). xq: 32 rows of
# q_x int8 `ldq` bytes apart; xd: their d_x float32, rows `ldd` bytes apart; wq: the panel's blocks, 1 KiB
# each; ws: its d_w, 32 float32 a block; y: rows `ldy` bytes apart, 32 float32 each.
IR = TILE_DECLARATIONS + r"""
declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)

define void @SYMBOL(ptr %xq, i64 %ldq, ptr %xd, i64 %ldd, ptr %wq, ptr %ws, ptr %y, i64 %ldy, i64 %blocks) #0 {
entry:
  %sums = alloca [1024 x i32], align 64
  %half = mul i64 %ldq, 16
  %xq1 = getelementptr i8, ptr %xq, i64 %half
  %s01 = getelementptr i8, ptr %sums, i64 64
  %s10 = getelementptr i8, ptr %sums, i64 2048
  %s11 = getelementptr i8, ptr %sums, i64 2112
  br label %block
block:
  %b = phi i64 [0, %entry], [%b.next, %scaled]
  %x_off = mul i64 %b, 32
  %pa0 = getelementptr i8, ptr %xq, i64 %x_off
  %pa1 = getelementptr i8, ptr %xq1, i64 %x_off
  %w_off = mul i64 %b, 1024
  %pb0 = getelementptr i8, ptr %wq, i64 %w_off
  %pb1 = getelementptr i8, ptr %pb0, i64 64
  %ta0 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 32, ptr %pa0, i64 %ldq)
  %ta1 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 32, ptr %pa1, i64 %ldq)
  %tb0 = call x86_amx @llvm.x86.tileloadd64.internal(i16 8, i16 64, ptr %pb0, i64 128)
  %tb1 = call x86_amx @llvm.x86.tileloadd64.internal(i16 8, i16 64, ptr %pb1, i64 128)
  %z00 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z01 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z10 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z11 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %c00 = call x86_amx @llvm.x86.tdpbssd.internal(i16 16, i16 64, i16 32, x86_amx %z00, x86_amx %ta0, x86_amx %tb0)
  %c01 = call x86_amx @llvm.x86.tdpbssd.internal(i16 16, i16 64, i16 32, x86_amx %z01, x86_amx %ta0, x86_amx %tb1)
  %c10 = call x86_amx @llvm.x86.tdpbssd.internal(i16 16, i16 64, i16 32, x86_amx %z10, x86_amx %ta1, x86_amx %tb0)
  %c11 = call x86_amx @llvm.x86.tdpbssd.internal(i16 16, i16 64, i16 32, x86_amx %z11, x86_amx %ta1, x86_amx %tb1)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %sums, i64 128, x86_amx %c00)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %s01, i64 128, x86_amx %c01)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %s10, i64 128, x86_amx %c10)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %s11, i64 128, x86_amx %c11)
  %d_off = mul i64 %b, 128
  %pw0 = getelementptr i8, ptr %ws, i64 %d_off
  %pw1 = getelementptr i8, ptr %pw0, i64 64
  %w0 = load <16 x float>, ptr %pw0, align 4
  %w1 = load <16 x float>, ptr %pw1, align 4
  %xd_col = mul i64 %b, 4
  %pxd = getelementptr i8, ptr %xd, i64 %xd_col
  br label %row
row:
  %r = phi i64 [0, %block], [%r.next, %row]
  %xd_row = mul i64 %r, %ldd
  %pdx = getelementptr i8, ptr %pxd, i64 %xd_row
  %dx = load float, ptr %pdx, align 4
  %dx.0 = insertelement <16 x float> poison, float %dx, i64 0
  %dxs = shufflevector <16 x float> %dx.0, <16 x float> poison, <16 x i32> zeroinitializer
  %scale0 = fmul <16 x float> %w0, %dxs
  %scale1 = fmul <16 x float> %w1, %dxs
  %s_row = mul i64 %r, 128
  %ps0 = getelementptr i8, ptr %sums, i64 %s_row
  %ps1 = getelementptr i8, ptr %ps0, i64 64
  %i0 = load <16 x i32>, ptr %ps0, align 64
  %i1 = load <16 x i32>, ptr %ps1, align 64
  %f0 = sitofp <16 x i32> %i0 to <16 x float>
  %f1 = sitofp <16 x i32> %i1 to <16 x float>
  %y_row = mul i64 %r, %ldy
  %py0 = getelementptr i8, ptr %y, i64 %y_row
  %py1 = getelementptr i8, ptr %py0, i64 64
  %y0 = load <16 x float>, ptr %py0, align 4
  %y1 = load <16 x float>, ptr %py1, align 4
  %n0 = call <16 x float> @llvm.fma.v16f32(<16 x float> %f0, <16 x float> %scale0, <16 x float> %y0)
  %n1 = call <16 x float> @llvm.fma.v16f32(<16 x float> %f1, <16 x float> %scale1, <16 x float> %y1)
  store <16 x float> %n0, ptr %py0, align 4
  store <16 x float> %n1, ptr %py1, align 4
  %r.next = add i64 %r, 1
  %more_rows = icmp ult i64 %r.next, 32
  br i1 %more_rows, label %row, label %scaled
scaled:
  %b.next = add i64 %b, 1
  %more = icmp ult i64 %b.next, %blocks
  br i1 %more, label %block, label %done
done:
  ret void
}
attributes #0 = { nounwind "target-features"="+amx-tile,+amx-int8,+avx512f" }
""".replace("SYMBOL", SYMBOL)

_block = types.ExternalFunction(SYMBOL, types.void(types.uintp, types.intp, types.uintp, types.intp, types.uintp,
                                                   types.uintp, types.uintp, types.intp, types.intp))


@functools.cache
def int8_tiles_available() -> bool:
    """True where the CPU has AMX int8 tiles and the kernel granted this process their state; then the
    block product is compiled and its symbol registered for the numba loops below."""
    if not tile_state_granted("amx-int8"):
        return False
    compile_tile_code(IR, (SYMBOL,))
    return True


@jit(inline="always")
def _panels(xq, xd, wq, ws, y, first, last):  # pragma: no cover - compiled
    """Panels first..last of y (rows of 32, already holding the bias) += x @ W^T, ROWS_PER_PASS blocks
    of 32 rows at a time against every panel."""
    row_blocks = xq.shape[0] // BLOCK_ROWS
    ldq, ldd, ldy = xq.strides[0], xd.strides[0], y.strides[0]
    blocks = xd.shape[1]
    for m0 in range(0, row_blocks, ROWS_PER_PASS):
        for p in range(first, last):
            for m in range(m0, min(m0 + ROWS_PER_PASS, row_blocks)):
                row = m * BLOCK_ROWS
                _block(xq.ctypes.data + row * ldq, ldq, xd.ctypes.data + row * ldd, ldd, wq[p].ctypes.data,
                       ws[p].ctypes.data, y.ctypes.data + row * ldy + p * PANEL * 4, ldy, blocks)


@jit(parallel=True)
def _product_parallel(xq, xd, wq, ws, y, workers):  # pragma: no cover - compiled
    n_panels = wq.shape[0]
    for worker in numba.prange(workers):
        _panels(xq, xd, wq, ws, y, worker * n_panels // workers, (worker + 1) * n_panels // workers)


@jit()
def _product_serial(xq, xd, wq, ws, y):  # pragma: no cover - compiled
    _panels(xq, xd, wq, ws, y, 0, wq.shape[0])


def matmul_amx_q8(x: np.ndarray, weight: Q8Weight, bias: np.ndarray | None = None) -> np.ndarray:
    """x [N, in] float32 @ weight^T + bias -> [N, out], x quantized per 32-block, int8 products on the
    tiles (`int8_tiles_available` must have said yes, or the symbol been registered otherwise)."""
    n_out, n_in = weight.shape
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, n_in)
    n_rows, n_panels = x.shape[0], weight.quants.shape[0]
    padded_rows = -(-n_rows // BLOCK_ROWS) * BLOCK_ROWS
    bias_row = np.zeros(n_panels * PANEL, np.float32)
    if bias is not None:
        bias_row[:n_out] = bias
    y = recycled_empty((padded_rows, n_panels * PANEL), np.float32)
    y[:] = bias_row
    if n_rows:
        xq = recycled_empty((padded_rows, n_in), np.uint8)
        xd = recycled_empty((padded_rows, n_in // BLOCK), np.float32)
        xq[n_rows:] = 0
        xd[n_rows:] = 0
        workers = min(numba.get_num_threads(), n_panels)
        parallel_quantize = workers > 1 and x.size >= PARALLEL_MIN_ELEMENTS
        (quantize_parallel if parallel_quantize else quantize_rows)(x, xq[:n_rows], xd[:n_rows], 0)
        if workers > 1 and n_rows * n_in * n_out >= PARALLEL_MIN_MACS:
            _product_parallel(xq, xd, weight.quants, weight.scales, y, workers)
        else:
            _product_serial(xq, xd, weight.quants, weight.scales, y)
    y = y[:n_rows]
    return y if n_out == y.shape[1] else np.ascontiguousarray(y[:, :n_out])
