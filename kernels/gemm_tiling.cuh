// Tile geometry of the tensor-core matrix product (gemm.cu) and the code that moves tiles from global
// to shared memory. Everything here also compiles for the host: test/cuda_gemm_model.cpp runs the
// kernel's tile loop on the CPU with these same functions (and the PTX ISA's definitions of ldmatrix
// and mma.sync), so the tiling, edge guards and rounding are checked on machines without a GPU.
//
// A block of THREADS threads computes a BLOCK_M x BLOCK_N tile of y = x @ W^T, stepping through K in
// slices of BLOCK_K. Each slice of x ([BLOCK_M, BLOCK_K]) and of W ([BLOCK_N, BLOCK_K], rows are
// output features) is staged in shared memory as bf16, rows of SMEM_K elements. The 8 warps form a
// WARPS_M x WARPS_N grid; each warp owns a WARP_M x WARP_N piece of the tile, computed as
// FRAGS_M x FRAGS_N mma.sync.m16n8k16 fragments.

#pragma once

#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define GEMM_HD __host__ __device__ __forceinline__
#define GEMM_UNROLL _Pragma("unroll")
#else
#define GEMM_HD inline
#define GEMM_UNROLL
#endif

namespace gemm {

constexpr int BLOCK_M = 128;
constexpr int BLOCK_N = 128;
constexpr int BLOCK_K = 32;
constexpr int WARPS_M = 2;
constexpr int WARPS_N = 4;
constexpr int THREADS = 32 * WARPS_M * WARPS_N;
constexpr int STAGES = 2;  // shared-memory buffers: one being multiplied, one being filled
constexpr int WARP_M = BLOCK_M / WARPS_M;  // 64 rows of y per warp
constexpr int WARP_N = BLOCK_N / WARPS_N;  // 32 columns of y per warp
constexpr int MMA_M = 16;
constexpr int MMA_N = 8;
constexpr int MMA_K = 16;
constexpr int FRAGS_M = WARP_M / MMA_M;  // 4
constexpr int FRAGS_N = WARP_N / MMA_N;  // 4
// A shared row holds BLOCK_K bf16 plus 8 of padding: 80 bytes, so the 8 rows one ldmatrix phase reads
// start in 8 different groups of 4 banks (no bank conflicts), and every row stays 16-byte aligned.
constexpr int SMEM_K = BLOCK_K + 8;
// Global loads move 16 bytes: 4 floats, or 8 bf16 weights.
constexpr int F32_PER_CHUNK = 4;
constexpr int BF16_PER_CHUNK = 8;
constexpr int F32_CHUNKS = BLOCK_M * BLOCK_K / F32_PER_CHUNK / THREADS;    // per thread per tile: 4
constexpr int BF16_CHUNKS = BLOCK_N * BLOCK_K / BF16_PER_CHUNK / THREADS;  // per thread per tile: 2

static_assert(BLOCK_M == BLOCK_N, "x and W tiles share one chunk layout");
static_assert(BLOCK_M * BLOCK_K % (F32_PER_CHUNK * THREADS) == 0, "f32 tile splits evenly over the threads");
static_assert(BLOCK_N * BLOCK_K % (BF16_PER_CHUNK * THREADS) == 0, "bf16 tile splits evenly over the threads");
static_assert(FRAGS_N % 2 == 0, "W fragments are loaded in pairs (one ldmatrix.x4 per two)");
static_assert(BLOCK_K % MMA_K == 0 && (SMEM_K * 2) % 16 == 0, "shared rows stay 16-byte aligned");

struct Coord {
  int row;
  int col;
};

// ---- global -> shared: which 16-byte chunk of a tile each thread moves --------------------------

// Chunk i (0..F32_CHUNKS-1) of a thread: the tile row and the first of its 4 columns (k). Consecutive
// threads take consecutive chunks of a row, so a warp reads whole 128-byte lines.
GEMM_HD Coord f32_chunk(int thread, int i) {
  const int chunk = thread + i * THREADS;
  constexpr int per_row = BLOCK_K / F32_PER_CHUNK;
  return {chunk / per_row, chunk % per_row * F32_PER_CHUNK};
}

// Chunk i (0..BF16_CHUNKS-1) of a thread in a bf16 W tile: tile row and first of its 8 columns.
GEMM_HD Coord bf16_chunk(int thread, int i) {
  const int chunk = thread + i * THREADS;
  constexpr int per_row = BLOCK_K / BF16_PER_CHUNK;
  return {chunk / per_row, chunk % per_row * BF16_PER_CHUNK};
}

// Whole 16-byte chunks can be read when every row starts 16-byte aligned (K a multiple of the chunk
// and an aligned base); then a chunk is entirely inside the matrix or entirely past its end.
GEMM_HD bool chunks_aligned(const void* base, int K, int per_chunk) {
  return K % per_chunk == 0 && reinterpret_cast<uintptr_t>(base) % 16 == 0;
}

// 4 floats of row `row`, columns k..k+3, of a [rows, K] matrix; zeros past its edges.
GEMM_HD void load_f32_chunk(const float* src, int rows, int K, int row, int k, bool aligned, float (&v)[4]) {
  const float* at = src + static_cast<size_t>(row) * K + k;
  if (aligned && row < rows && k < K) {
#ifdef __CUDA_ARCH__
    const float4 q = *reinterpret_cast<const float4*>(at);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
#else
    memcpy(v, at, sizeof(v));
#endif
    return;
  }
  for (int j = 0; j < 4; ++j) v[j] = (row < rows && k + j < K) ? at[j] : 0.0f;
}

// 8 bf16 of row `row`, columns k..k+7; zeros past the edges (the path for unaligned W).
GEMM_HD void load_bf16_chunk(const __nv_bfloat16* src, int rows, int K, int row, int k, __nv_bfloat16 (&v)[8]) {
  const __nv_bfloat16* at = src + static_cast<size_t>(row) * K + k;
  for (int j = 0; j < 8; ++j) v[j] = (row < rows && k + j < K) ? at[j] : __float2bfloat16_rn(0.0f);
}

// Bytes an aligned 16-byte W chunk copies from memory (cp.async zero-fills the rest): all or none.
GEMM_HD int bf16_chunk_bytes(int rows, int K, int row, int k) { return row < rows && k < K ? 16 : 0; }

// Four floats rounded to bf16 (to nearest, ties to even) into shared memory.
GEMM_HD void store_bf16x4(__nv_bfloat16* dst, const float (&v)[4]) {
  const __nv_bfloat162 low = __floats2bfloat162_rn(v[0], v[1]);
  const __nv_bfloat162 high = __floats2bfloat162_rn(v[2], v[3]);
#ifdef __CUDA_ARCH__
  uint2 bits;
  bits.x = *reinterpret_cast<const uint32_t*>(&low);
  bits.y = *reinterpret_cast<const uint32_t*>(&high);
  *reinterpret_cast<uint2*>(dst) = bits;
#else
  dst[0] = low.x, dst[1] = low.y, dst[2] = high.x, dst[3] = high.y;
#endif
}

// 16 bytes global -> shared; `bytes` (0 or 16) come from src, the rest are zeros. On the GPU an
// asynchronous copy (cp.async, sm_80+), complete after wait_for_copies().
GEMM_HD void copy_16(void* dst, const void* src, int bytes) {
#ifdef __CUDA_ARCH__
  const uint32_t shared = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(src), "r"(bytes) : "memory");
#else
  memcpy(dst, src, bytes);
  memset(static_cast<char*>(dst) + bytes, 0, 16 - bytes);
#endif
}

GEMM_HD void wait_for_copies() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// One pipeline stage in shared memory.
struct Stage {
  __nv_bfloat16 x[BLOCK_M][SMEM_K];  // [row of x][k]
  __nv_bfloat16 w[BLOCK_N][SMEM_K];  // [output feature][k]
};
using Tile = __nv_bfloat16 (*)[SMEM_K];

// A thread's share of the next slice of a float32 operand, held in registers while the current
// stage is multiplied.
struct F32Slice {
  float v[F32_CHUNKS][4];
};

// The same for bf16 weights whose rows are not 16-byte aligned (aligned ones go by copy_16).
struct Bf16Slice {
  __nv_bfloat16 v[BF16_CHUNKS][8];
};

template <typename T>
struct SliceOf;
template <>
struct SliceOf<float> {
  using type = F32Slice;
};
template <>
struct SliceOf<__nv_bfloat16> {
  using type = Bf16Slice;
};

// fetch: start moving this thread's chunks of rows first_row.., columns k0.. of a [rows, K] operand;
// commit: after the current stage is multiplied, finish them into `tile` (rounded to bf16).
GEMM_HD void fetch(F32Slice& slice, Tile, const float* src, int rows, int K, int first_row, int k0, bool aligned,
                   int thread) {
GEMM_UNROLL
  for (int i = 0; i < F32_CHUNKS; ++i) {
    const Coord c = f32_chunk(thread, i);
    load_f32_chunk(src, rows, K, first_row + c.row, k0 + c.col, aligned, slice.v[i]);
  }
}

GEMM_HD void commit(const F32Slice& slice, Tile tile, bool, int thread) {
GEMM_UNROLL
  for (int i = 0; i < F32_CHUNKS; ++i) {
    const Coord c = f32_chunk(thread, i);
    store_bf16x4(&tile[c.row][c.col], slice.v[i]);
  }
}

GEMM_HD void fetch(Bf16Slice& slice, Tile tile, const __nv_bfloat16* src, int rows, int K, int first_row, int k0,
                   bool aligned, int thread) {
GEMM_UNROLL
  for (int i = 0; i < BF16_CHUNKS; ++i) {
    const Coord c = bf16_chunk(thread, i);
    const int row = first_row + c.row, k = k0 + c.col;
    if (aligned) {
      const int bytes = bf16_chunk_bytes(rows, K, row, k);
      copy_16(&tile[c.row][c.col], bytes ? src + static_cast<size_t>(row) * K + k : src, bytes);
    } else {
      load_bf16_chunk(src, rows, K, row, k, slice.v[i]);
    }
  }
}

GEMM_HD void commit(const Bf16Slice& slice, Tile tile, bool aligned, int thread) {
  if (aligned) return;  // copy_16 wrote the tile
GEMM_UNROLL
  for (int i = 0; i < BF16_CHUNKS; ++i) {
    const Coord c = bf16_chunk(thread, i);
GEMM_UNROLL
    for (int j = 0; j < BF16_PER_CHUNK; ++j) tile[c.row][c.col + j] = slice.v[i][j];
  }
}

// ---- shared -> tensor cores ---------------------------------------------------------------------

// Top-left corner, in the block tile, of the WARP_M x WARP_N piece of y that warp `warp` computes.
GEMM_HD Coord warp_origin(int warp) { return {warp / WARPS_N * WARP_M, warp % WARPS_N * WARP_N}; }

// ldmatrix.x4 for the x fragment mi (16 rows x 16 k from column k0 of the x tile): lane l gives the
// address of one 8-element row of the four 8x8 matrices, in the order mma.sync takes them as a0..a3:
// rows 0-7 / 8-15 at k 0-7, then rows 0-7 / 8-15 at k 8-15.
GEMM_HD Coord x_fragment_row(int warp, int lane, int mi, int k0) {
  return {warp_origin(warp).row + mi * MMA_M + lane % 16, k0 + lane / 16 * 8};
}

// ldmatrix.x4 for the W fragments 2p and 2p+1 (features 16p..16p+15 of the warp, k0..k0+15): the
// matrices are (features 0-7, k 0-7), (0-7, k 8-15), (8-15, k 0-7), (8-15, k 8-15), which are b0, b1 of
// fragment 2p and b0, b1 of fragment 2p+1 (W rows are B's columns, so no transpose is needed).
GEMM_HD Coord w_fragment_row(int warp, int lane, int pair, int k0) {
  const int matrix = lane / 8;
  return {warp_origin(warp).col + pair * 2 * MMA_N + matrix / 2 * 8 + lane % 8, k0 + matrix % 2 * 8};
}

// Position in the block tile of accumulator element e (0..3) of fragment (mi, ni) held by `lane`
// (mma.sync's f32 accumulator layout: c0, c1 on row lane/4, c2, c3 eight rows below).
GEMM_HD Coord accumulator_coord(int warp, int lane, int mi, int ni, int e) {
  const Coord origin = warp_origin(warp);
  return {origin.row + mi * MMA_M + lane / 4 + e / 2 * 8, origin.col + ni * MMA_N + lane % 4 * 2 + e % 2};
}

// ---- registers -> y -----------------------------------------------------------------------------

// y[row, col] and y[row, col + 1] (col is even) plus the bias, where they exist. `pairs` says that
// two neighbours can be stored as one 8-byte value (N even and y 8-byte aligned).
GEMM_HD void store_pair(float* y, const float* bias, int M, int N, int row, int col, float v0, float v1,
                        bool pairs) {
  if (row >= M || col >= N) return;
  float* at = y + static_cast<size_t>(row) * N + col;
  const bool second = col + 1 < N;
  if (bias != nullptr) {
    v0 += bias[col];
    if (second) v1 += bias[col + 1];
  }
  if (pairs && second) {
#ifdef __CUDA_ARCH__
    *reinterpret_cast<float2*>(at) = make_float2(v0, v1);
#else
    at[0] = v0, at[1] = v1;
#endif
    return;
  }
  at[0] = v0;
  if (second) at[1] = v1;
}

}  // namespace gemm
