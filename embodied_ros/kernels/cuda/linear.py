"""Linear layers and dequantization on the GPU: `linear` and `dequantize` (see linear.py and quant.py
for the weight layouts). Weights stay in their stored form on the GPU (`to_device(QuantTensor)`).

  float32 weights     a tiled matrix product: each 16x16-thread block computes a 64x64 tile of y,
                      staging 16-wide slices of x and W in shared memory (float16 host weights are
                      converted to float32 when uploaded)
  q8_0 / q4_k, few    fused: one block per output feature; each thread decodes whole 32-weight
  rows (<= 64)        groups (a q8_0 block, a q4_k sub-block) straight from the blocks and applies
                      them to up to 8 rows at once; the rows' partial sums meet in shared memory
  more rows, or bf16  the weight is dequantized on the GPU into a temporary float32 matrix, then the
                      tiled product
  bf16 precision      opt-in (`gemm.use_matmul_precision("bf16")` or EMBODIED_ROS_CUDA_MATMUL=bf16):
                      products of at least TENSOR_CORE_MIN_ROWS rows run on the tensor cores
                      (kernels/gemm.cu); a bf16 weight is read as it is stored, others as float32
"""

from __future__ import annotations

import numpy as np

from embodied_ros.kernels.cuda import gemm
from embodied_ros.kernels.cuda.compiler import cuda, cuda_kernel, device_function
from embodied_ros.kernels.cuda.device import block_sum_rows, half_to_float, rounded_product, signed_byte
from embodied_ros.kernels.cuda.runtime import DeviceTensor, blocks_for, gpu, nothing, on_device, returned
from embodied_ros.kernels.cpu.bf16_gemm import Bf16Weight
from embodied_ros.kernels.quant import QuantTensor
from embodied_ros.kernels.registry import kernel

FUSED_MAX_ROWS = 64  # above this the decode is repeated too often; dequantize once and multiply
ROWS_AT_ONCE = 8  # rows a fused block applies each decoded group to
FUSED_THREADS = 64
TILE = 64  # output tile of the float32 product (rows x features)
STEP = 16  # reduction slice staged in shared memory
_DEQUANTIZE_THREADS = 128
_PADDED = TILE + 1  # shared tile rows: one extra column spreads the accesses over the memory banks
_MATRIX = "float32[:, ::1]"
_BYTES = "uint8[:, ::1]"


@cuda_kernel(f"void({_MATRIX}, {_MATRIX}, float32[::1], {_MATRIX})", threads=16 * 16)
def matmul_nt(x, w, bias, y):  # pragma: no cover - device code
    # y[N, O] = x[N, I] @ w[O, I]^T (+ bias[O] unless bias is empty); grid (O/64, N/64), block (16, 16)
    x_tile = cuda.shared.array((STEP, _PADDED), np.float32)  # [k, row]; +1 spreads the banks
    w_tile = cuda.shared.array((STEP, _PADDED), np.float32)  # [k, feature]
    acc = cuda.local.array((4, 4), np.float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    flat = ty * 16 + tx
    row0 = cuda.blockIdx.y * TILE
    col0 = cuda.blockIdx.x * TILE
    n_rows, n_in = x.shape
    n_out = w.shape[0]
    for a in range(4):
        for b in range(4):
            acc[a, b] = np.float32(0.0)
    for k0 in range(0, n_in, STEP):
        for part in range(4):
            e = flat + 256 * part
            r = e // STEP
            k = e % STEP
            inside = k0 + k < n_in
            x_tile[k, r] = x[row0 + r, k0 + k] if inside and row0 + r < n_rows else np.float32(0.0)
            w_tile[k, r] = w[col0 + r, k0 + k] if inside and col0 + r < n_out else np.float32(0.0)
        cuda.syncthreads()
        for k in range(STEP):
            for a in range(4):
                xa = x_tile[k, ty + 16 * a]
                for b in range(4):
                    acc[a, b] += xa * w_tile[k, tx + 16 * b]
        cuda.syncthreads()
    for a in range(4):
        row = row0 + ty + 16 * a
        for b in range(4):
            col = col0 + tx + 16 * b
            if row < n_rows and col < n_out:
                if bias.shape[0] == 0:
                    y[row, col] = acc[a, b]
                else:
                    y[row, col] = acc[a, b] + bias[col]


@cuda_kernel(f"void({_MATRIX}, {_BYTES}, float32[::1], {_MATRIX})", threads=FUSED_THREADS)
def q8_0_linear(x, data, bias, y):  # pragma: no cover - device code
    # x: [N, I]; data: [O, I/32 * 34] q8_0 blocks -> y: [N, O]; grid (O,), block FUSED_THREADS
    partial = cuda.shared.array((ROWS_AT_ONCE, FUSED_THREADS), np.float32)
    acc = cuda.local.array(ROWS_AT_ONCE, np.float32)
    o = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n_rows = x.shape[0]
    for r0 in range(0, n_rows, ROWS_AT_ONCE):
        rows = n_rows - r0 if n_rows - r0 < ROWS_AT_ONCE else ROWS_AT_ONCE
        for n in range(ROWS_AT_ONCE):
            acc[n] = np.float32(0.0)
        for b in range(t, x.shape[1] // 32, FUSED_THREADS):
            base = 34 * b
            d = half_to_float(data[o, base], data[o, base + 1])
            for k in range(32):
                weight = d * signed_byte(data[o, base + 2 + k])
                for n in range(ROWS_AT_ONCE):  # a constant trip count keeps acc in registers
                    if n < rows:
                        acc[n] += weight * x[r0 + n, 32 * b + k]
        for n in range(ROWS_AT_ONCE):
            partial[n, t] = acc[n]
        block_sum_rows(partial, rows)
        if t < rows:  # one thread per row's sum
            y[r0 + t, o] = partial[t, 0] + (bias[o] if bias.shape[0] != 0 else np.float32(0.0))
        cuda.syncthreads()


@cuda_kernel(f"void({_MATRIX}, {_BYTES}, float32[::1], {_MATRIX})", threads=FUSED_THREADS)
def q4_k_linear(x, data, bias, y):  # pragma: no cover - device code
    # x: [N, I]; data: [O, I/256 * 144] q4_k blocks -> y: [N, O]; grid (O,), block FUSED_THREADS
    partial = cuda.shared.array((ROWS_AT_ONCE, FUSED_THREADS), np.float32)
    acc = cuda.local.array(ROWS_AT_ONCE, np.float32)
    o = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n_rows = x.shape[0]
    for r0 in range(0, n_rows, ROWS_AT_ONCE):
        rows = n_rows - r0 if n_rows - r0 < ROWS_AT_ONCE else ROWS_AT_ONCE
        for n in range(ROWS_AT_ONCE):
            acc[n] = np.float32(0.0)
        for group in range(t, x.shape[1] // 32, FUSED_THREADS):
            step, low, first, shift = q4_k_group(data, o, group)
            for lane in range(32):
                level = (np.int32(data[o, first + lane]) >> shift) & np.int32(15)
                weight = step * np.float32(level) - low
                for n in range(ROWS_AT_ONCE):  # a constant trip count keeps acc in registers
                    if n < rows:
                        acc[n] += weight * x[r0 + n, 32 * group + lane]
        for n in range(ROWS_AT_ONCE):
            partial[n, t] = acc[n]
        block_sum_rows(partial, rows)
        if t < rows:  # one thread per row's sum
            y[r0 + t, o] = partial[t, 0] + (bias[o] if bias.shape[0] != 0 else np.float32(0.0))
        cuda.syncthreads()


@device_function
def q4_k_group(data, row, group):  # pragma: no cover - device code
    """Sub-block `group` (32 weights) of a q4_k row: weight = step * level - low, levels in the bytes
    data[row, first:first + 32] at bit `shift` (0: low nibble, 4: high nibble)."""
    base = 144 * (group // 8)
    s = group % 8
    d = half_to_float(data[row, base], data[row, base + 1])
    dmin = half_to_float(data[row, base + 2], data[row, base + 3])
    packed = base + 4
    if s < 4:
        sc = np.int32(data[row, packed + s]) & np.int32(63)
        m = np.int32(data[row, packed + s + 4]) & np.int32(63)
    else:
        sc = (np.int32(data[row, packed + s + 4]) & np.int32(15)) | \
            ((np.int32(data[row, packed + s - 4]) >> np.int32(6)) << np.int32(4))
        m = (np.int32(data[row, packed + s + 4]) >> np.int32(4)) | \
            ((np.int32(data[row, packed + s]) >> np.int32(6)) << np.int32(4))
    # rounded like numpy's, so that dequantization is bit-exact (see rounded_product)
    return (rounded_product(d, np.float32(sc)), rounded_product(dmin, np.float32(m)), base + 16 + 32 * (s // 2),
            np.int32(4 * (s % 2)))


@cuda_kernel(f"void({_BYTES}, {_MATRIX})", threads=_DEQUANTIZE_THREADS)
def q8_0_rows(data, out):  # pragma: no cover - device code
    # data: [R, B * 34] -> out: [R, B * 32]; one thread per q8_0 block
    n_blocks = data.shape[1] // 34
    for item in range(cuda.grid(1), data.shape[0] * n_blocks, cuda.gridsize(1)):
        r = item // n_blocks
        b = item - r * n_blocks
        d = half_to_float(data[r, 34 * b], data[r, 34 * b + 1])
        for k in range(32):
            out[r, 32 * b + k] = d * signed_byte(data[r, 34 * b + 2 + k])


@cuda_kernel(f"void({_BYTES}, {_MATRIX})", threads=_DEQUANTIZE_THREADS)
def q4_k_rows(data, out):  # pragma: no cover - device code
    # data: [R, B * 144] -> out: [R, B * 256]; one thread per 32-weight sub-block
    n_groups = out.shape[1] // 32
    for item in range(cuda.grid(1), data.shape[0] * n_groups, cuda.gridsize(1)):
        r = item // n_groups
        group = item - r * n_groups
        step, low, first, shift = q4_k_group(data, r, group)
        for lane in range(32):
            level = (np.int32(data[r, first + lane]) >> shift) & np.int32(15)
            out[r, 32 * group + lane] = rounded_product(step, np.float32(level)) - low  # as numpy: bit-exact


@cuda_kernel(f"void({_BYTES}, uint32[:, ::1])", threads=_DEQUANTIZE_THREADS)
def bf16_rows(data, bits):  # pragma: no cover - device code
    # data: [R, 2n] bf16 values, little-endian -> bits: [R, n] float32 bit patterns (bf16 is their upper half)
    width = bits.shape[1]
    for item in range(cuda.grid(1), bits.shape[0] * width, cuda.gridsize(1)):
        r = item // width
        k = item - r * width
        bits[r, k] = (np.uint32(data[r, 2 * k]) << np.uint32(16)) | (np.uint32(data[r, 2 * k + 1]) << np.uint32(24))


def _dequantize_on_gpu(weight: QuantTensor) -> DeviceTensor:
    """float32 [rows, in] on the GPU from a QuantTensor's blocks (any leading dims flattened to rows)."""
    data = on_device(weight.data, "weight blocks", np.uint8)
    data = data.reshape(-1, data.shape[-1])
    out = gpu().empty((data.shape[0], weight.shape[-1]), np.float32)
    if weight.qtype == "bf16":
        items, fn, args = out.size, bf16_rows, (data, out.view(np.uint32))
    elif weight.qtype == "q8_0":
        items, fn, args = out.size // 32, q8_0_rows, (data, out)
    else:
        items, fn, args = out.size // 32, q4_k_rows, (data, out)
    if items:
        gpu().launch(fn, (blocks_for(items, _DEQUANTIZE_THREADS),), (_DEQUANTIZE_THREADS,), args)
    return out


@kernel("dequantize", "cuda")
def dequantize_cuda(tensor: QuantTensor):
    out = _dequantize_on_gpu(tensor).reshape(tensor.shape)
    return returned(out, tensor.data)


def _check(x, weight, bias) -> None:
    if len(weight.shape) != 2 or tuple(x.shape[-1:]) != tuple(weight.shape[1:]):
        raise ValueError(f"linear: input with {x.shape[-1] if len(x.shape) else 0} features (shape "
                         f"{tuple(x.shape)}) does not fit a weight of shape {tuple(weight.shape)} "
                         "(out_features, in_features)")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"linear: bias has shape {tuple(bias.shape)}; expected ({weight.shape[0]},)")


@kernel("linear", "cuda")
def linear_cuda(x, weight, bias=None):
    # x: [..., in], weight: [out, in] (float32/float16 array, DeviceTensor or QuantTensor) -> [..., out]
    _check(x, weight, bias)
    n_out, n_in = weight.shape
    rows = on_device(x, "x").reshape(-1, n_in)  # a non-contiguous numpy view is made contiguous on the host
    n_rows = rows.shape[0]
    y = gpu().empty((n_rows, n_out), np.float32)
    if y.size:
        bias_d = nothing() if bias is None else on_device(bias, "bias")
        fused = {"q8_0": q8_0_linear, "q4_k": q4_k_linear}
        if _on_tensor_cores(n_rows):
            gemm.multiply(gpu(), rows, _tensor_core_weight(weight), bias_d, y)
        elif isinstance(weight, QuantTensor) and weight.qtype in fused and n_rows <= FUSED_MAX_ROWS:
            gpu().launch(fused[weight.qtype], (n_out,), (FUSED_THREADS,),
                         (rows, on_device(weight.data, "weight blocks", np.uint8), bias_d, y))
        else:
            w = _dequantize_on_gpu(weight) if isinstance(weight, QuantTensor) else on_device(weight, "weight")
            grid = (-(-n_out // TILE), -(-n_rows // TILE))
            gpu().launch(matmul_nt, grid, (16, 16), (rows, w, bias_d, y))
    return returned(y.reshape(*x.shape[:-1], n_out), x)


def _on_tensor_cores(n_rows: int) -> bool:
    return (n_rows >= gemm.TENSOR_CORE_MIN_ROWS and gemm.matmul_precision() == "bf16"
            and gemm.tensor_cores(gpu()))


def _tensor_core_weight(weight) -> DeviceTensor:
    """W for the tensor-core product: a bf16 weight's own blocks (uint8 [out, 2 * in]), else float32."""
    if isinstance(weight, QuantTensor) and weight.qtype == "bf16":
        return on_device(weight.data, "weight blocks", np.uint8)
    return _dequantize_on_gpu(weight) if isinstance(weight, QuantTensor) else on_device(weight, "weight")


@kernel("feed_forward", "cuda")
def feed_forward_cuda(x, up, up_bias, down, down_bias, activation):
    """The up product, the activation and the down product one after another on the GPU. A weight
    packed for the CPU's bf16 products (which the models make only for the numba backend) multiplies
    as its float32 values, x unrounded."""
    from embodied_ros.kernels.cuda.elementwise import gelu_tanh_cuda, gelu_tanh_glu_cuda, silu_glu_cuda
    from embodied_ros.kernels.feed_forward import check_feed_forward
    check_feed_forward(x, up, down, activation)
    activate = {"gelu_tanh": gelu_tanh_cuda, "gelu_tanh_glu": gelu_tanh_glu_cuda, "silu_glu": silu_glu_cuda}[activation]
    up, down = (w.dense() if isinstance(w, Bf16Weight) else w for w in (up, down))
    return linear_cuda(activate(linear_cuda(x, up, up_bias)), down, down_bias)
