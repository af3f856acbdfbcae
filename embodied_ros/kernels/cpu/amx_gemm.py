"""y = x @ W^T on the AMX tiles of Intel CPUs: bf16 products (`tdpbf16ps`), float32 sums.

The weight is a `Bf16Weight` as packed for AVX512-BF16 (bf16_gemm.py): a panel row holds one k pair
of 32 output features, 128 bytes, so 16 panel rows read at a stride of 128 bytes are the B tile of
16 features (64 bytes of pairs each), and the next 64 bytes the other 16. Nothing is packed twice.
x is rounded to bf16 once per product into A tiles, [row blocks of 16, k steps of 16 pairs, 16, 16]
uint32: each tile 1 KiB, contiguous. Tiles not on 64-byte lines load at under a third of the
speed (0.8 vs 2.8 TFLOP/s on one core), so every operand here is aligned and tiles never straddle
lines.

The block product (32 rows x 32 features: 2 A, 2 B and 4 accumulator tiles, all eight registers)
is LLVM IR over the `x86_amx` intrinsics, compiled by llvmlite when the tiles are first asked for
(numba has no tile type) and called from numba's loops by its symbol name, so those loops cache
like every other kernel. Linux traps the first tile instruction of a process that has not asked
for the tile state (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, kernel 5.16+):
`tile_units_available` asks.
"""

from __future__ import annotations

import ctypes
import functools

import numba
import numpy as np
from llvmlite import binding as llvm_binding
from numba import types

from embodied_ros.kernels.cpu.allocator import ALIGN, aligned_empty, recycled_empty
from embodied_ros.kernels.cpu.bf16_gemm import bf16_bits_of
from embodied_ros.kernels.cpu.jit import PARALLEL_MIN_ELEMENTS, PARALLEL_MIN_MACS, jit
from embodied_ros.kernels.cpu.vector_ir import PANEL

TILE = 16            # rows of a tile, and k pairs of one tile step
BLOCK_ROWS = 32      # rows of x per block product (two A tiles)
# passes of (tile steps, blocks of 32 rows): 64 x 8 was the fastest of 32..all x 4..31 on the
# products of pi0.5 and SmolVLA (Xeon with AMX, 2 threads; benchmarks/amx_blocking.py)
BLOCKING = (64, 8)

_SYS_ARCH_PRCTL = 158
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18
SYMBOL = "embodied_ros_amx_bf16_block"
PANELS_SYMBOL = "embodied_ros_amx_bf16_panels"


def _steps(start: str, init: str, a0: str, b: str) -> str:
    """The k loop of a 32 x 32 block (label `step`, entered from `start` with the accumulators
    `init`00..11; A tiles at `a0` and %a1, the panel at `b`) and its store to %c00..%c11."""
    return (_STEPS.replace("%START", start).replace("%INIT", init).replace("%A0", a0)
            .replace("%B,", f"{b},"))


# The tile intrinsics of this module's kernels and amx_q8's, each tile's shape (rows, bytes a row) given
# at every call, from which LLVM configures the tiles (`ldtilecfg`) on entering a function.
TILE_DECLARATIONS = """target triple = "x86_64-unknown-linux-gnu"
declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)
declare x86_amx @llvm.x86.tdpbf16ps.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare x86_amx @llvm.x86.tdpbssd.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)
declare x86_amx @llvm.x86.tilezero.internal(i16, i16)
"""

_STEPS = """step:
  %k = phi i64 [0, %START], [%k.next, %step]
  %y00 = phi x86_amx [%INIT00, %START], [%n00, %step]
  %y01 = phi x86_amx [%INIT01, %START], [%n01, %step]
  %y10 = phi x86_amx [%INIT10, %START], [%n10, %step]
  %y11 = phi x86_amx [%INIT11, %START], [%n11, %step]
  %ka = mul i64 %k, 1024
  %pa0 = getelementptr i8, ptr %A0, i64 %ka
  %pa1 = getelementptr i8, ptr %a1, i64 %ka
  %kb = mul i64 %k, 2048
  %pb0 = getelementptr i8, ptr %B, i64 %kb
  %pb1 = getelementptr i8, ptr %pb0, i64 64
  %ta0 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pa0, i64 64)
  %ta1 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pa1, i64 64)
  %tb0 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pb0, i64 128)
  %tb1 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pb1, i64 128)
  %n00 = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, x86_amx %y00, x86_amx %ta0, x86_amx %tb0)
  %n01 = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, x86_amx %y01, x86_amx %ta0, x86_amx %tb1)
  %n10 = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, x86_amx %y10, x86_amx %ta1, x86_amx %tb0)
  %n11 = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, x86_amx %y11, x86_amx %ta1, x86_amx %tb1)
  %k.next = add i64 %k, 1
  %more = icmp ult i64 %k.next, %steps
  br i1 %more, label %step, label %store
store:
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %c00, i64 %ldc, x86_amx %n00)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %c01, i64 %ldc, x86_amx %n01)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %c10, i64 %ldc, x86_amx %n10)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %c11, i64 %ldc, x86_amx %n11)
"""

# y[32 x 32] = init + A @ B over `steps` tile steps, for `blocks` blocks of 32 rows. init is read
# like a C tile at `init_stride` (0 repeats one row: the bias). a: A tiles, 16-row blocks
# `a_stride` bytes apart, steps 1 KiB apart; b: a panel, rows 128 bytes apart; c: rows `ldc` bytes
# apart; init of block r at init + r * init_block bytes.
_IR = TILE_DECLARATIONS + r"""

define void @SYMBOL(ptr %a, i64 %a_stride, ptr %b, ptr %c, i64 %ldc, ptr %init, i64 %init_stride,
                    i64 %init_block, i64 %blocks, i64 %steps) #0 {
entry:
  %c_half = mul i64 %ldc, 16
  %c_block = mul i64 %ldc, 32
  %a_block = mul i64 %a_stride, 2
  %i_half = mul i64 %init_stride, 16
  br label %block
block:
  %r = phi i64 [0, %entry], [%r.next, %stored]
  %a_off = mul i64 %r, %a_block
  %a0 = getelementptr i8, ptr %a, i64 %a_off
  %a1 = getelementptr i8, ptr %a0, i64 %a_stride
  %c_off = mul i64 %r, %c_block
  %c00 = getelementptr i8, ptr %c, i64 %c_off
  %c01 = getelementptr i8, ptr %c00, i64 64
  %c10 = getelementptr i8, ptr %c00, i64 %c_half
  %c11 = getelementptr i8, ptr %c10, i64 64
  %i_off = mul i64 %r, %init_block
  %i00 = getelementptr i8, ptr %init, i64 %i_off
  %i01 = getelementptr i8, ptr %i00, i64 64
  %i10 = getelementptr i8, ptr %i00, i64 %i_half
  %i11 = getelementptr i8, ptr %i10, i64 64
  %s00 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %i00, i64 %init_stride)
  %s01 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %i01, i64 %init_stride)
  %s10 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %i10, i64 %init_stride)
  %s11 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %i11, i64 %init_stride)
  br label %step
STEPS_BLOCK  br label %stored
stored:
  %r.next = add i64 %r, 1
  %more_blocks = icmp ult i64 %r.next, %blocks
  br i1 %more_blocks, label %block, label %done
done:
  ret void
}

; y[32 x 32 p .. 32 p + 31] = A @ panel p from zero, for the `panels` panels `panel_bytes` apart:
; one row block of x against a whole weight (attention's scores and weighted sums), the A tiles
; staying in L1 across the panels
define void @PANELS_SYMBOL(ptr %a, i64 %a_stride, ptr %b, i64 %panel_bytes, i64 %panels, ptr %c,
                           i64 %ldc, i64 %steps) #0 {
entry:
  %a1 = getelementptr i8, ptr %a, i64 %a_stride
  %c_half = mul i64 %ldc, 16
  br label %panel
panel:
  %p = phi i64 [0, %entry], [%p.next, %store]
  %b_off = mul i64 %p, %panel_bytes
  %bp = getelementptr i8, ptr %b, i64 %b_off
  %c_off = mul i64 %p, 128
  %c00 = getelementptr i8, ptr %c, i64 %c_off
  %c01 = getelementptr i8, ptr %c00, i64 64
  %c10 = getelementptr i8, ptr %c00, i64 %c_half
  %c11 = getelementptr i8, ptr %c10, i64 64
  %z00 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z01 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z10 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z11 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  br label %step
STEPS_PANEL  %p.next = add i64 %p, 1
  %more_panels = icmp ult i64 %p.next, %panels
  br i1 %more_panels, label %panel, label %done
done:
  ret void
}
attributes #0 = { nounwind "target-features"="+amx-tile,+amx-bf16,+avx512f" }
""".replace("PANELS_SYMBOL", PANELS_SYMBOL).replace("SYMBOL", SYMBOL).replace(
    "STEPS_BLOCK", _steps("%block", "%s", "%a0", "%b")).replace("STEPS_PANEL", _steps("%panel", "%z", "%a", "%bp"))

_block = types.ExternalFunction(SYMBOL, types.void(types.uintp, types.intp, types.uintp, types.uintp, types.intp,
                                                   types.uintp, types.intp, types.intp, types.intp, types.intp))
block_against_panels = types.ExternalFunction(PANELS_SYMBOL, types.void(types.uintp, types.intp, types.uintp,
                                                                        types.intp, types.intp, types.uintp,
                                                                        types.intp, types.intp))


@functools.cache
def tile_state_granted(kind: str) -> bool:
    """True where the CPU has AMX tiles with `kind` products ("amx-bf16", "amx-int8") and the kernel
    granted this process the tile state (once a process)."""
    features = llvm_binding.get_host_cpu_features()
    if not (features.get("amx-tile", False) and features.get(kind, False)):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0


_ENGINES = []  # the llvmlite engines holding compiled tile code; kept for the process's life


def compile_tile_code(ir_text: str, symbols: tuple[str, ...]) -> None:
    """Compiles IR over the tile intrinsics for this CPU and registers `symbols` for numba's loops."""
    llvm_binding.initialize_native_target()
    llvm_binding.initialize_native_asmprinter()
    module = llvm_binding.parse_assembly(ir_text)
    module.verify()
    machine = llvm_binding.Target.from_default_triple().create_target_machine(
        cpu=llvm_binding.get_host_cpu_name(), features=llvm_binding.get_host_cpu_features().flatten(), opt=3)
    engine = llvm_binding.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    _ENGINES.append(engine)
    for symbol in symbols:
        llvm_binding.add_symbol(symbol, engine.get_function_address(symbol))


@functools.cache
def tile_units_available() -> bool:
    """True where the CPU has AMX bf16 tiles and the kernel granted this process their state; then
    the block product is compiled and its symbol registered for the numba loops below."""
    if not tile_state_granted("amx-bf16"):
        return False
    compile_tile_code(_IR, (SYMBOL, PANELS_SYMBOL))
    return True


@jit(inline="always")
def round_into_tile_row(values, tiles, r):  # pragma: no cover - compiled
    """A row of float32 values rounded to bf16 (nearest even) as row r (< 16) of the A tiles of one
    16-row block, tiles [steps, 16, 32] uint16; zero past the row's end."""
    depth = values.shape[0]
    full_steps = depth // 32
    for s in range(full_steps):
        out = tiles[s, r]
        for i in range(32):
            out[i] = np.uint16(bf16_bits_of(values[32 * s + i]))
    for s in range(full_steps, tiles.shape[0]):
        out = tiles[s, r]
        for i in range(32):
            k = 32 * s + i
            out[i] = np.uint16(bf16_bits_of(values[k])) if k < depth else np.uint16(0)


@jit(inline="always")
def _tile_row_block(x, tiles, block):  # pragma: no cover - compiled
    """Rows 16 block..16 block + 15 of x [N, k] float32 into tiles[block] ([steps, 16, 32] uint16: bf16,
    nearest even), zero past N and past k."""
    for r in range(TILE):
        row = block * TILE + r
        if row >= x.shape[0]:
            tiles[block, :, r, :] = 0
        else:
            round_into_tile_row(x[row], tiles[block], r)


@jit()
def _to_tiles_serial(x, tiles):  # pragma: no cover - compiled
    for block in range(tiles.shape[0]):
        _tile_row_block(x, tiles, block)


@jit(parallel=True)
def _to_tiles_parallel(x, tiles):  # pragma: no cover - compiled
    for block in numba.prange(tiles.shape[0]):
        _tile_row_block(x, tiles, block)


@jit(inline="always")
def _panels(a, a_stride, row_blocks, steps, panels, panel_bytes, bias, y, ldy, first, last, blocking):  # pragma: no cover
    """y[:, 32 p:32 p + 32] = bias + A @ panel p for p in first..last (addresses in bytes), in passes of
    blocking = (tile steps, row blocks): one pass's A tiles stay in L2 while every panel reads them."""
    k_pass, m_pass = blocking
    for m0 in range(0, row_blocks, m_pass):
        blocks = min(m_pass, row_blocks - m0)
        y_pass = y + m0 * BLOCK_ROWS * ldy
        for k0 in range(0, steps, k_pass):
            k_steps = min(k_pass, steps - k0)
            a_pass = a + m0 * 2 * a_stride + k0 * 1024
            for p in range(first, last):
                c = y_pass + p * PANEL * 4
                if k0 == 0:  # start from the bias row, repeated
                    init, init_stride, init_block = bias + p * PANEL * 4, 0, 0
                else:
                    init, init_stride, init_block = c, ldy, BLOCK_ROWS * ldy
                _block(a_pass, a_stride, panels + p * panel_bytes + k0 * TILE * PANEL * 4, c, ldy,
                       init, init_stride, init_block, blocks, k_steps)


@jit(parallel=True)
def _product_parallel(a, a_stride, row_blocks, steps, panels, n_panels, panel_bytes, bias, y, ldy, blocking,
                      workers):  # pragma: no cover - compiled
    for worker in numba.prange(workers):
        _panels(a, a_stride, row_blocks, steps, panels, panel_bytes, bias, y, ldy,
                worker * n_panels // workers, (worker + 1) * n_panels // workers, blocking)


@jit()
def _product_serial(a, a_stride, row_blocks, steps, panels, n_panels, panel_bytes, bias, y, ldy,
                    blocking):  # pragma: no cover - compiled
    _panels(a, a_stride, row_blocks, steps, panels, panel_bytes, bias, y, ldy, 0, n_panels, blocking)


def _check_tile_weight(weight) -> None:
    panels = weight.panels
    if panels.shape[1] % TILE or panels.ctypes.data % ALIGN or not panels.flags.c_contiguous:
        raise ValueError("matmul_amx_bf16: the weight's panels are not in tile layout (pack it with pack_bf16)")


def padded_bias(weight, bias: np.ndarray | None) -> np.ndarray:
    """The bias over every feature of the weight's panels (0 past its features and without one)."""
    padded = aligned_empty((weight.panels.shape[0] * PANEL,), np.float32)
    padded[:] = 0
    if bias is not None:
        padded[:weight.shape[0]] = bias
    return padded


def a_tiles(x: np.ndarray, steps: int) -> np.ndarray:
    """x [N, k] float32 rounded to bf16 into A tiles [2 * ceil(N / 32), steps, 16, 32] uint16 (zero
    past N and past k)."""
    tiles = recycled_empty((2 * -(-x.shape[0] // BLOCK_ROWS), steps, TILE, 2 * TILE), np.uint16)
    parallel = numba.get_num_threads() > 1 and x.size >= PARALLEL_MIN_ELEMENTS
    (_to_tiles_parallel if parallel else _to_tiles_serial)(x, tiles)
    return tiles


def tile_product(tiles: np.ndarray, n_rows: int, weight, bias: np.ndarray | None = None) -> np.ndarray:
    """The A tiles of N rows @ weight^T + bias: the padded product [N rounded up to 32, panels x 32]
    float32 (as amx_product). The tiles' steps are the weight's pairs / 16."""
    panels = weight.panels
    n_panels, steps = panels.shape[0], panels.shape[1] // TILE
    row_blocks = -(-n_rows // BLOCK_ROWS)
    y = recycled_empty((row_blocks * BLOCK_ROWS, n_panels * PANEL), np.float32)
    if n_rows == 0:
        return y
    workers = min(numba.get_num_threads(), n_panels)
    bias_row = padded_bias(weight, bias)  # held here: the kernels see only its address
    args = (tiles.ctypes.data, tiles.strides[0], row_blocks, steps, panels.ctypes.data, n_panels, panels.strides[0],
            bias_row.ctypes.data, y.ctypes.data, y.strides[0], BLOCKING)
    if workers > 1 and n_rows * 2 * panels.shape[1] * weight.shape[0] >= PARALLEL_MIN_MACS:
        _product_parallel(*args, workers)
    else:
        _product_serial(*args)
    return y


def amx_product(x: np.ndarray, weight, bias: np.ndarray | None = None) -> np.ndarray:
    """x [N, k] float32 @ weight^T + bias on the tiles, k at most the weight's padded depth (the columns
    past it read as zeros): the whole padded product [N rounded up to 32, panels x 32] float32, whose
    features past `out` hold the bias' padding (0) and rows past N junk. weight: a Bf16Weight whose
    pairs are a multiple of 16 and whose panels are 64-byte aligned (`pack_bf16` makes them so)."""
    _check_tile_weight(weight)
    n_pairs = weight.panels.shape[1]
    if x.ndim != 2 or x.shape[1] > 2 * n_pairs or x.dtype != np.float32 or not x.flags.c_contiguous:
        raise ValueError(f"matmul_amx_bf16: x {x.shape} {x.dtype} is not contiguous float32 rows of at most {2 * n_pairs}")
    return tile_product(a_tiles(x, n_pairs // TILE), x.shape[0], weight, bias)


def matmul_amx_bf16(x: np.ndarray, weight, bias: np.ndarray | None = None) -> np.ndarray:
    """x [N, in] float32 @ weight^T + bias -> [N, out] float32, products of bf16 values (x rounded
    to nearest even) on the tiles (`amx_product`)."""
    n_out, n_in = weight.shape
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, n_in)
    y = amx_product(x, weight, bias)[:x.shape[0]]
    return y if n_out == y.shape[1] else np.ascontiguousarray(y[:, :n_out])
