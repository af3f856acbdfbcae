"""Block-quantized weights (ggml layouts) and their dequantization.

A `QuantTensor` is a weight kept in its stored form: the raw block bytes, normally a view into the
memory-mapped bundle, plus the logical shape. Rows are quantized independently along the last
(input) axis, in blocks of `block_size` weights that take `block_bytes` bytes each:

  q8_0  32 weights in 34 bytes:  f16 d, then 32 int8 q;            w = d * q
  q4_k  256 weights in 144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales sc[8] and mins m[8],
        128 bytes of 4-bit q. Sub-block s (32 weights) has w = (d * sc[s]) * q - (dmin * m[s]).
        qs byte 32*c + l holds sub-block 2c weight l (low nibble) and sub-block 2c+1 weight l
        (high nibble). Scale bytes: for s < 4, sc = b[s] & 63, m = b[s+4] & 63; for s >= 4,
        sc = (b[s+4] & 15) | (b[s-4] >> 6) << 4, m = (b[s+4] >> 4) | (b[s] >> 6) << 4.
  bf16  1 weight in 2 bytes: the upper half of a float32.
  tq2_0 256 ternary weights in 66 bytes: 64 bytes of 2-bit codes q + 1, then f16 d; w = d * q.
        Byte 32*c + l holds weight 128*c + 32*n + l in bits 2n. (BitVLA's BitLinear weights; their
        exact per-tensor scale travels beside them, models/bitvla/weights.py.)

These are ggml's layouts, so a bundle's tensors read back through `gguf.quants.dequantize`
unchanged. Here: the numpy reference dequantization (op "dequantize", the oracle) and its numba
kernel. Matrix products with quantized weights are in `kernels/linear.py`; the encoders are in
`embodied_ros/bundle/quantize.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from embodied_ros.kernels.cpu.jit import jit
from embodied_ros.kernels.registry import kernel, reference


@dataclass(frozen=True)
class QuantType:
    name: str
    block_size: int  # weights per block
    block_bytes: int  # bytes per block


QUANT_TYPES = {
    "q8_0": QuantType("q8_0", 32, 34),
    "q4_k": QuantType("q4_k", 256, 144),
    "bf16": QuantType("bf16", 1, 2),
    "tq2_0": QuantType("tq2_0", 256, 66),
}


@dataclass(frozen=True, eq=False)
class QuantTensor:
    """A weight in a block-quantized (or bf16) layout; `data` is a view, never a copy.

    qtype: "q8_0", "q4_k" or "bf16"; shape: the logical shape (e.g. (out_features, in_features));
    data: uint8 [*shape[:-1], shape[-1] // block_size * block_bytes].
    `ks.linear(x, w, b)` multiplies by it directly; `dequantize()` gives the float32 array.
    """

    qtype: str
    shape: tuple[int, ...]
    data: np.ndarray

    def __post_init__(self) -> None:
        if self.qtype not in QUANT_TYPES:
            raise ValueError(f"unknown quantization type {self.qtype!r}; expected one of {sorted(QUANT_TYPES)}")
        shape = tuple(int(n) for n in self.shape)
        object.__setattr__(self, "shape", shape)
        kind = QUANT_TYPES[self.qtype]
        if not shape or shape[-1] % kind.block_size:
            raise ValueError(f"{self.qtype} tensor of shape {shape}: the last dimension must be a multiple "
                             f"of the block size {kind.block_size}")
        byte_shape = (*shape[:-1], shape[-1] // kind.block_size * kind.block_bytes)
        if self.data.dtype != np.uint8 or self.data.shape != byte_shape:
            raise ValueError(f"{self.qtype} tensor of shape {shape} needs uint8 data of shape {byte_shape}, "
                             f"got {self.data.dtype} {self.data.shape}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    @property
    def kind(self) -> QuantType:
        return QUANT_TYPES[self.qtype]

    def dequantize(self) -> np.ndarray:
        """The float32 values, shape `self.shape` (numpy reference implementation)."""
        return dequantize(self)

    def take_rows(self, rows: np.ndarray) -> np.ndarray:
        """float32 values of the given rows of a 2-D tensor (e.g. an embedding lookup): [len(rows), in]."""
        if self.ndim != 2:
            raise ValueError(f"take_rows needs a 2-D tensor, got shape {self.shape}")
        rows = np.asarray(rows)
        selected = QuantTensor(self.qtype, (rows.size, self.shape[1]), self.data[rows.reshape(-1)])
        return dequantize(selected).reshape(*rows.shape, self.shape[1])


# ---- numpy reference --------------------------------------------------------------------------

def _f16_field(blocks: np.ndarray, start: int) -> np.ndarray:
    # blocks: [n, block_bytes] uint8 -> [n, 1] float32 of the f16 stored at byte `start`
    return np.ascontiguousarray(blocks[:, start:start + 2]).view(np.float16).astype(np.float32)


def _dequantize_q8_0(blocks: np.ndarray) -> np.ndarray:
    # blocks: [n, 34] -> [n, 32]
    d = _f16_field(blocks, 0)
    q = blocks[:, 2:].view(np.int8).astype(np.float32)
    return q * d


def q4_k_scales_and_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """packed: [n, 12] uint8 -> (sc, m), each [n, 8] uint8 in 0..63."""
    low, high, extra = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    sc = np.concatenate([low & 63, (extra & 15) | ((low >> 6) << 4)], axis=1)
    m = np.concatenate([high & 63, (extra >> 4) | ((high >> 6) << 4)], axis=1)
    return sc, m


def _dequantize_q4_k(blocks: np.ndarray) -> np.ndarray:
    # blocks: [n, 144] -> [n, 256]
    n = blocks.shape[0]
    d, dmin = _f16_field(blocks, 0), _f16_field(blocks, 2)
    sc, m = q4_k_scales_and_mins(blocks[:, 4:16])
    scale = (d * sc.astype(np.float32))[:, :, None]  # [n, 8, 1]
    offset = (dmin * m.astype(np.float32))[:, :, None]
    qs = blocks[:, 16:].reshape(n, 4, 1, 32)
    q = np.concatenate([qs & 15, qs >> 4], axis=2).reshape(n, 8, 32).astype(np.float32)
    return (scale * q - offset).reshape(n, 256)


def _dequantize_bf16(blocks: np.ndarray) -> np.ndarray:
    # blocks: [n, 2] -> [n, 1]
    return (np.ascontiguousarray(blocks).view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _dequantize_tq2_0(blocks: np.ndarray) -> np.ndarray:
    # blocks: [n, 66] -> [n, 256]
    codes = (blocks[:, :64].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)) & 3
    return (codes.reshape(-1, 256).astype(np.float32) - 1.0) * _f16_field(blocks, 64)


_DEQUANTIZE_BLOCKS = {"q8_0": _dequantize_q8_0, "q4_k": _dequantize_q4_k, "bf16": _dequantize_bf16,
                      "tq2_0": _dequantize_tq2_0}


def random_quant_tensor(rng: np.random.Generator, qtype: str, shape: tuple[int, ...]) -> QuantTensor:
    """Valid blocks with random bits and moderate scales (tests and kernel examples)."""
    kind = QUANT_TYPES[qtype]
    n_blocks = int(np.prod(shape)) // kind.block_size
    blocks = rng.integers(0, 256, size=(n_blocks, kind.block_bytes), dtype=np.uint8)
    if qtype == "bf16":
        values = rng.standard_normal(n_blocks).astype(np.float32)
        blocks = (values.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(n_blocks, 2)
    else:
        n_scales = 1 if qtype == "q8_0" else 2
        scales = (rng.uniform(0.5, 1.5, (n_blocks, n_scales)) / (127 if qtype == "q8_0" else 900))
        blocks[:, :2 * n_scales] = scales.astype(np.float16).view(np.uint8)
    byte_shape = (*shape[:-1], shape[-1] // kind.block_size * kind.block_bytes)
    return QuantTensor(qtype, shape, blocks.reshape(byte_shape))


def _dequantize_examples(rng: np.random.Generator) -> list[tuple]:
    return [
        (random_quant_tensor(rng, "q8_0", (3, 96)),),
        (random_quant_tensor(rng, "q8_0", (1, 32)),),
        (random_quant_tensor(rng, "q4_k", (5, 512)),),
        (random_quant_tensor(rng, "q4_k", (2, 3, 256)),),
        (random_quant_tensor(rng, "bf16", (7, 13)),),
    ]


@reference("dequantize", examples=_dequantize_examples, rtol=0.0, atol=0.0)
def dequantize(tensor: QuantTensor) -> np.ndarray:
    """float32 values of a QuantTensor, shape tensor.shape."""
    kind = tensor.kind
    blocks = tensor.data.reshape(-1, kind.block_bytes)
    return _DEQUANTIZE_BLOCKS[tensor.qtype](blocks).reshape(tensor.shape)


# ---- numba ------------------------------------------------------------------------------------
# numba has no float16 on the CPU: f16 fields are decoded through this table, indexed by their bits.
F16_TO_F32 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


@jit(inline="always")
def f16_at(row: np.ndarray, index: int, f16_to_f32: np.ndarray) -> np.float32:
    """float32 value of the little-endian f16 at row[index:index + 2]."""
    return f16_to_f32[np.int64(row[index]) | (np.int64(row[index + 1]) << 8)]


@jit(inline="always")
def q4_k_scale_min(row: np.ndarray, base: int, s: int) -> tuple[int, int]:
    """6-bit (sc, m) of sub-block s from the 12 scale bytes at row[base:base + 12]."""
    if s < 4:
        return row[base + s] & 63, row[base + s + 4] & 63
    sc = (row[base + s + 4] & 15) | ((row[base + s - 4] >> 6) << 4)
    m = (row[base + s + 4] >> 4) | ((row[base + s] >> 6) << 4)
    return sc, m


# The decoders keep every byte operation in uint8 (`np.uint8(...)` on each step): numba otherwise
# widens to int64, and LLVM then either converts 8 lanes at a time or not at all (measured 1.9x).

@jit(inline="always")
def q8_0_decode_row(row: np.ndarray, f16_to_f32: np.ndarray, out: np.ndarray) -> None:
    """One row of q8_0 blocks -> out[in] float32."""
    for b in range(row.shape[0] // 34):
        d = f16_at(row, 34 * b, f16_to_f32)
        for k in range(32):
            byte = np.uint8(row[34 * b + 2 + k])  # int8 in two's complement
            q = np.float32(byte) - np.float32(np.uint8(byte >> np.uint8(7))) * np.float32(256.0)
            out[32 * b + k] = d * q


@jit(inline="always")
def q4_k_decode_row(row: np.ndarray, f16_to_f32: np.ndarray, out: np.ndarray) -> None:
    """One row of q4_k blocks -> out[in] float32."""
    for b in range(row.shape[0] // 144):
        base = 144 * b
        d, dmin = f16_at(row, base, f16_to_f32), f16_at(row, base + 2, f16_to_f32)
        for c in range(4):  # sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles)
            sc_low, m_low = q4_k_scale_min(row, base + 4, 2 * c)
            sc_high, m_high = q4_k_scale_min(row, base + 4, 2 * c + 1)
            scale_low, offset_low = d * np.float32(sc_low), dmin * np.float32(m_low)
            scale_high, offset_high = d * np.float32(sc_high), dmin * np.float32(m_high)
            col = 256 * b + 64 * c
            for lane in range(32):
                byte = np.uint8(row[base + 16 + 32 * c + lane])
                low = np.float32(np.uint8(byte & np.uint8(15)))
                high = np.float32(np.uint8(byte >> np.uint8(4)))
                out[col + lane] = scale_low * low - offset_low
                out[col + 32 + lane] = scale_high * high - offset_high


@jit(parallel=True)
def dequantize_q8_0_rows(data, f16_to_f32, out):
    # data: [R, nb * 34] uint8 -> out: [R, nb * 32] float32
    for r in numba.prange(data.shape[0]):
        q8_0_decode_row(data[r], f16_to_f32, out[r])


@jit(parallel=True)
def dequantize_q4_k_rows(data, f16_to_f32, out):
    # data: [R, nb * 144] uint8 -> out: [R, nb * 256] float32
    for r in numba.prange(data.shape[0]):
        q4_k_decode_row(data[r], f16_to_f32, out[r])


@jit(parallel=True)
def dequantize_bf16_rows(data, out_bits):
    # data: [R, n * 2] uint8 -> out_bits: [R, n] uint32, the float32 bit patterns
    for r in numba.prange(data.shape[0]):
        for k in range(out_bits.shape[1]):
            out_bits[r, k] = (np.uint32(data[r, 2 * k]) << 16) | (np.uint32(data[r, 2 * k + 1]) << 24)


def dequantize_rows_into(tensor: QuantTensor, start: int, stop: int, out: np.ndarray) -> None:
    """Rows start..stop of a 2-D QuantTensor, dequantized by numba into out: [stop - start, in] float32."""
    data = tensor.data[start:stop]
    if tensor.qtype == "tq2_0":  # no numba decoder: BitVLA repacks these for its own product
        out[:] = dequantize(QuantTensor("tq2_0", (stop - start, tensor.shape[-1]), data))
    elif tensor.qtype == "q8_0":
        dequantize_q8_0_rows(data, F16_TO_F32, out)
    elif tensor.qtype == "q4_k":
        dequantize_q4_k_rows(data, F16_TO_F32, out)
    else:
        dequantize_bf16_rows(data, out.view(np.uint32))


@kernel("dequantize", "numba")
def dequantize_numba(tensor: QuantTensor) -> np.ndarray:
    rows = tensor.data.reshape(-1, tensor.data.shape[-1])
    flat = QuantTensor(tensor.qtype, (rows.shape[0], tensor.shape[-1]), rows)
    out = np.empty(flat.shape, np.float32)
    dequantize_rows_into(flat, 0, flat.shape[0], out)
    return out.reshape(tensor.shape)
