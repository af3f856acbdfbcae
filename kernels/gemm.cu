// Tensor-core matrix product for the `linear` op of the cuda backend:
//
//     y[M, N] = x[M, K] @ W[N, K]^T (+ bias[N])
//
// Entries (C linkage, same parameters; the weight type differs):
//   gemm_bf16_f32w (const float* x, const float* w,         const float* bias, float* y, int M, int N, int K)
//   gemm_bf16_bf16w(const float* x, const __nv_bfloat16* w, const float* bias, float* y, int M, int N, int K)
//     x     [M, K] float32, rows contiguous
//     w     [N, K] as checkpoints store it (out_features, in_features), rows contiguous: float32, or bf16
//           (a copy kept on the GPU: half the bytes to read)
//     bias  [N] float32, or null for none
//     y     [M, N] float32, rows contiguous
//     M, N >= 1, K >= 0, any values (tiles past the edges are zero-filled; no alignment is required, aligned
//           rows just take the 16-byte load path)
//
// Launch: THREADS (256) threads per block, grid (ceil(M / BLOCK_M), ceil(N / BLOCK_N)), no dynamic
// shared memory (40 KB static). blockIdx.x walks M, so the blocks that share one BLOCK_N-row slice of
// W run at about the same time and W is read from DRAM about once.
//
// Precision: x and W are rounded to bf16 (nearest, ties to even) as they are staged in shared memory;
// products of two bf16 are exact in float32, and the tensor cores accumulate them in float32. Against a
// float32 product the error is that of the input rounding: each product is off by at most 2^-8 of its
// magnitude, so |y - y_f32| <= 2^-8 * (|x| @ |W|^T) elementwise, typically a relative error of 1e-3..1e-2
// of a row's scale. This is an opt-in path for large products; the float32 kernel stays the exact one.
//
// Architectures: sm_80 and newer (mma.sync.m16n8k16 bf16, ldmatrix, cp.async): A100 (sm_80), Jetson
// Orin (sm_87), Ada (sm_89), Hopper (sm_90, where this runs on the mma.sync path, not wgmma).
//
// Pipeline: two shared-memory stages. While the warps multiply stage t, every thread already has the
// loads of slice t + 1 in flight (float32 into registers; aligned bf16 W straight into the other stage
// with cp.async); after the multiply the registers are rounded to bf16 and stored, and one barrier per
// slice separates the stages.

#include "gemm_tiling.cuh"

namespace gemm {

// ---- PTX wrappers -------------------------------------------------------------------------------

// Four 8x8 bf16 matrices from shared memory; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
  const uint32_t shared = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared)
               : "memory");
}

// acc[16x8] += a[16x16] @ b[16x8], bf16 inputs, float32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- shared -> tensor cores ---------------------------------------------------------------------

// acc += this warp's rows of the x tile @ its features of the W tile, over the stage's BLOCK_K.
__device__ __forceinline__ void multiply(float (&acc)[FRAGS_M][FRAGS_N][4], const Stage& stage, int warp,
                                         int lane) {
#pragma unroll
  for (int k0 = 0; k0 < BLOCK_K; k0 += MMA_K) {
    uint32_t a[FRAGS_M][4];
    uint32_t b[FRAGS_N][2];
#pragma unroll
    for (int mi = 0; mi < FRAGS_M; ++mi) {
      const Coord c = x_fragment_row(warp, lane, mi, k0);
      ldmatrix_x4(a[mi], &stage.x[c.row][c.col]);
    }
#pragma unroll
    for (int pair = 0; pair < FRAGS_N / 2; ++pair) {
      const Coord c = w_fragment_row(warp, lane, pair, k0);
      uint32_t r[4];
      ldmatrix_x4(r, &stage.w[c.row][c.col]);
      b[2 * pair][0] = r[0], b[2 * pair][1] = r[1];
      b[2 * pair + 1][0] = r[2], b[2 * pair + 1][1] = r[3];
    }
#pragma unroll
    for (int mi = 0; mi < FRAGS_M; ++mi)
#pragma unroll
      for (int ni = 0; ni < FRAGS_N; ++ni) mma_bf16(acc[mi][ni], a[mi], b[ni]);
  }
}

// ---- the kernel ---------------------------------------------------------------------------------

template <typename Weight>
__device__ __forceinline__ void product(const float* __restrict__ x, const Weight* __restrict__ w,
                                        const float* __restrict__ bias, float* __restrict__ y, int M, int N, int K) {
  __shared__ __align__(128) Stage stages[STAGES];
  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
  const int row0 = blockIdx.x * BLOCK_M, col0 = blockIdx.y * BLOCK_N;
  const bool x_aligned = chunks_aligned(x, K, F32_PER_CHUNK);
  const bool w_aligned = chunks_aligned(w, K, 16 / static_cast<int>(sizeof(Weight)));
  const int slices = (K + BLOCK_K - 1) / BLOCK_K;

  F32Slice x_next;
  typename SliceOf<Weight>::type w_next;
  float acc[FRAGS_M][FRAGS_N][4] = {};

  fetch(x_next, stages[0].x, x, M, K, row0, 0, x_aligned, thread);
  fetch(w_next, stages[0].w, w, N, K, col0, 0, w_aligned, thread);
  commit(x_next, stages[0].x, x_aligned, thread);
  commit(w_next, stages[0].w, w_aligned, thread);
  wait_for_copies();
  __syncthreads();

#pragma unroll 1
  for (int t = 0; t < slices; ++t) {
    Stage& next = stages[(t + 1) % STAGES];
    const bool more = t + 1 < slices;
    if (more) {  // stage t + 1 was last read before the previous barrier: free to fill
      fetch(x_next, next.x, x, M, K, row0, (t + 1) * BLOCK_K, x_aligned, thread);
      fetch(w_next, next.w, w, N, K, col0, (t + 1) * BLOCK_K, w_aligned, thread);
    }
    multiply(acc, stages[t % STAGES], warp, lane);
    if (more) {
      commit(x_next, next.x, x_aligned, thread);
      commit(w_next, next.w, w_aligned, thread);
    }
    wait_for_copies();
    __syncthreads();
  }

  const bool pairs = N % 2 == 0 && reinterpret_cast<uintptr_t>(y) % 8 == 0;
#pragma unroll
  for (int mi = 0; mi < FRAGS_M; ++mi)
#pragma unroll
    for (int ni = 0; ni < FRAGS_N; ++ni)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const Coord c = accumulator_coord(warp, lane, mi, ni, e);
        store_pair(y, bias, M, N, row0 + c.row, col0 + c.col, acc[mi][ni][e], acc[mi][ni][e + 1], pairs);
      }
}

}  // namespace gemm

extern "C" __global__ void __launch_bounds__(gemm::THREADS)
    gemm_bf16_f32w(const float* x, const float* w, const float* bias, float* y, int M, int N, int K) {
  gemm::product(x, w, bias, y, M, N, K);
}

extern "C" __global__ void __launch_bounds__(gemm::THREADS)
    gemm_bf16_bf16w(const float* x, const __nv_bfloat16* w, const float* bias, float* y, int M, int N, int K) {
  gemm::product(x, w, bias, y, M, N, K);
}
