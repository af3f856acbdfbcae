// Host model of kernels/gemm.cu, for machines without a GPU. It runs the kernel's tile loop for every
// block, thread and warp in the kernel's order (fetch next slice, multiply current, commit, barrier)
// with the kernel's own tiling code (gemm_tiling.cuh); ldmatrix and mma.sync are emulated from their
// definitions in the PTX ISA (which lane holds which matrix element). So a wrong chunk layout, edge
// guard, fragment address or accumulator position gives wrong numbers here, as it would on the GPU.
//
//   cuda_gemm_model WEIGHT M N K X_OFFSET W_OFFSET BIAS DIR
//     WEIGHT  f32 or bf16 (the kernel gemm_bf16_f32w or gemm_bf16_bf16w)
//     X_OFFSET, W_OFFSET  elements stored before the matrix in its file (to make rows unaligned)
//     BIAS    1 to read DIR/bias.bin, 0 for none
//   Reads DIR/x.bin (float32), DIR/w.bin (float32 or bf16 bits), writes DIR/y.bin (float32 [M, N]),
//   prints one JSON line: counts of broken invariants (all 0 when the tiling is right).

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gemm_tiling.cuh"

using namespace gemm;

namespace {

struct Violations {
  long chunk_layout = 0;       // tile elements not staged by exactly one (thread, chunk)
  long accumulator_layout = 0;  // tile elements of y not held by exactly one (warp, lane, fragment, element)
  long unfilled = 0;           // staged tile elements left unwritten after a fill
  long padding_written = 0;    // padding columns of a shared row written
  long ldmatrix_address = 0;   // ldmatrix row addresses unaligned or outside the staged columns
  long uncoalesced = 0;        // warp loads that do not cover whole tile rows (32 floats, 32 bf16)
};

using ConstTile = const __nv_bfloat16 (*)[SMEM_K];
const uint16_t SENTINEL = 0xFFFF;  // a bf16 NaN that no input, rounding or zero-fill produces

uint16_t bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

float value(__nv_bfloat16 v) { return __bfloat162float(v); }

// Every element of a [BLOCK, BLOCK_K] tile is moved by exactly one (thread, chunk), and each warp's
// loads read whole rows.
void check_chunk_layout(Violations& out) {
  std::vector<int> f32(BLOCK_M * BLOCK_K, 0), bf16(BLOCK_N * BLOCK_K, 0);
  for (int thread = 0; thread < THREADS; ++thread) {
    for (int i = 0; i < F32_CHUNKS; ++i) {
      const Coord c = f32_chunk(thread, i);
      for (int j = 0; j < F32_PER_CHUNK; ++j) f32[c.row * BLOCK_K + c.col + j] += 1;
    }
    for (int i = 0; i < BF16_CHUNKS; ++i) {
      const Coord c = bf16_chunk(thread, i);
      for (int j = 0; j < BF16_PER_CHUNK; ++j) bf16[c.row * BLOCK_K + c.col + j] += 1;
    }
  }
  for (int n : f32) out.chunk_layout += n != 1;
  for (int n : bf16) out.chunk_layout += n != 1;
  // one warp's load instruction: its 32 chunks must be whole rows of the slice (contiguous in memory)
  for (int warp = 0; warp < THREADS / 32; ++warp) {
    for (int i = 0; i < F32_CHUNKS; ++i) {
      const Coord first = f32_chunk(32 * warp, i);
      for (int lane = 0; lane < 32; ++lane) {
        const Coord c = f32_chunk(32 * warp + lane, i);
        const int expected = first.row * BLOCK_K + first.col + lane * F32_PER_CHUNK;
        out.uncoalesced += first.col != 0 || c.row * BLOCK_K + c.col != expected;
      }
    }
    for (int i = 0; i < BF16_CHUNKS; ++i) {
      const Coord first = bf16_chunk(32 * warp, i);
      for (int lane = 0; lane < 32; ++lane) {
        const Coord c = bf16_chunk(32 * warp + lane, i);
        const int expected = first.row * BLOCK_K + first.col + lane * BF16_PER_CHUNK;
        out.uncoalesced += first.col != 0 || c.row * BLOCK_K + c.col != expected;
      }
    }
  }
}

// Every element of the BLOCK_M x BLOCK_N tile of y is held by exactly one accumulator register.
void check_accumulator_layout(Violations& out) {
  std::vector<int> seen(BLOCK_M * BLOCK_N, 0);
  for (int warp = 0; warp < THREADS / 32; ++warp)
    for (int lane = 0; lane < 32; ++lane)
      for (int mi = 0; mi < FRAGS_M; ++mi)
        for (int ni = 0; ni < FRAGS_N; ++ni)
          for (int e = 0; e < 4; ++e) {
            const Coord c = accumulator_coord(warp, lane, mi, ni, e);
            if (c.row < 0 || c.row >= BLOCK_M || c.col < 0 || c.col >= BLOCK_N) {
              out.accumulator_layout += 1;
              continue;
            }
            seen[c.row * BLOCK_N + c.col] += 1;
          }
  for (int n : seen) out.accumulator_layout += n != 1;
}

void check_fill(ConstTile tile, int rows, Violations& out) {
  for (int r = 0; r < rows; ++r) {
    for (int k = 0; k < BLOCK_K; ++k) out.unfilled += bits(tile[r][k]) == SENTINEL;
    for (int k = BLOCK_K; k < SMEM_K; ++k) out.padding_written += bits(tile[r][k]) != SENTINEL;
  }
}

// ldmatrix.m8n8.x4.b16: lanes 8j..8j+7 give the row addresses of matrix j; register j of lane l holds
// elements 2(l%4) and 2(l%4)+1 of row l/4 of matrix j (the lower-addressed one in the low half).
void ldmatrix_x4(ConstTile tile, const Coord (&rows)[32], int limit_rows, uint32_t (&out)[32][4], Violations& v) {
  for (int lane = 0; lane < 32; ++lane) {
    const Coord c = rows[lane];
    if (c.col % 8 != 0 || c.col + 8 > BLOCK_K || c.row < 0 || c.row >= limit_rows) v.ldmatrix_address += 1;
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < 4; ++j) {
      const Coord c = rows[8 * j + lane / 4];
      const uint16_t low = bits(tile[c.row][c.col + 2 * (lane % 4)]);
      const uint16_t high = bits(tile[c.row][c.col + 2 * (lane % 4) + 1]);
      out[lane][j] = static_cast<uint32_t>(low) | static_cast<uint32_t>(high) << 16;
    }
}

float half_of(uint32_t reg, int which) {
  return value(__ushort_as_bfloat16(static_cast<uint16_t>(which ? reg >> 16 : reg & 0xFFFF)));
}

// mma.sync.m16n8k16.row.col f32.bf16: with g = lane/4, t = lane%4,
//   a[0]: A[g][2t..2t+1]  a[1]: A[g+8][2t..]  a[2]: A[g][2t+8..]  a[3]: A[g+8][2t+8..]
//   b[0]: B[2t..2t+1][g]  b[1]: B[2t+8..2t+9][g]
//   c[0], c[1]: C[g][2t], C[g][2t+1]   c[2], c[3]: C[g+8][2t], C[g+8][2t+1]
void mma(float (&c)[32][4], const uint32_t (&a)[32][4], const uint32_t (&b)[32][2]) {
  float A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int h = 0; h < 2; ++h) {
      A[g][2 * t + h] = half_of(a[lane][0], h);
      A[g + 8][2 * t + h] = half_of(a[lane][1], h);
      A[g][2 * t + 8 + h] = half_of(a[lane][2], h);
      A[g + 8][2 * t + 8 + h] = half_of(a[lane][3], h);
      B[2 * t + h][g] = half_of(b[lane][0], h);
      B[2 * t + 8 + h][g] = half_of(b[lane][1], h);
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) {
      const int row = g + e / 2 * 8, col = 2 * t + e % 2;
      float sum = c[lane][e];
      for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
      c[lane][e] = sum;
    }
  }
}

// One warp's multiply() of a stage, as gemm.cu does it: acc[lane][mi][ni][e].
void multiply(float (&acc)[32][FRAGS_M][FRAGS_N][4], const Stage& stage, int warp, Violations& v) {
  for (int k0 = 0; k0 < BLOCK_K; k0 += MMA_K) {
    uint32_t a[FRAGS_M][32][4], b[FRAGS_N][32][2];
    for (int mi = 0; mi < FRAGS_M; ++mi) {
      Coord rows[32];
      for (int lane = 0; lane < 32; ++lane) rows[lane] = x_fragment_row(warp, lane, mi, k0);
      ldmatrix_x4(stage.x, rows, BLOCK_M, a[mi], v);
    }
    for (int pair = 0; pair < FRAGS_N / 2; ++pair) {
      Coord rows[32];
      uint32_t r[32][4];
      for (int lane = 0; lane < 32; ++lane) rows[lane] = w_fragment_row(warp, lane, pair, k0);
      ldmatrix_x4(stage.w, rows, BLOCK_N, r, v);
      for (int lane = 0; lane < 32; ++lane) {
        b[2 * pair][lane][0] = r[lane][0], b[2 * pair][lane][1] = r[lane][1];
        b[2 * pair + 1][lane][0] = r[lane][2], b[2 * pair + 1][lane][1] = r[lane][3];
      }
    }
    for (int mi = 0; mi < FRAGS_M; ++mi)
      for (int ni = 0; ni < FRAGS_N; ++ni) {
        float c[32][4];
        for (int lane = 0; lane < 32; ++lane)
          for (int e = 0; e < 4; ++e) c[lane][e] = acc[lane][mi][ni][e];
        mma(c, a[mi], b[ni]);
        for (int lane = 0; lane < 32; ++lane)
          for (int e = 0; e < 4; ++e) acc[lane][mi][ni][e] = c[lane][e];
      }
  }
}

template <typename Weight>
struct Problem {
  const float* x;
  const Weight* w;
  const float* bias;
  float* y;
  int M, N, K;
};

// One block of the kernel: product() of gemm.cu with its threads and warps run one after another
// between barriers.
template <typename Weight>
void run_block(const Problem<Weight>& p, int block_m, int block_n, Violations& v) {
  using Slice = typename SliceOf<Weight>::type;
  static Stage stages[STAGES];
  static Slice w_next[THREADS];
  static F32Slice x_next[THREADS];
  static float acc[THREADS / 32][32][FRAGS_M][FRAGS_N][4];
  memset(acc, 0, sizeof(acc));
  const int row0 = block_m * BLOCK_M, col0 = block_n * BLOCK_N;
  const bool x_aligned = chunks_aligned(p.x, p.K, F32_PER_CHUNK);
  const bool w_aligned = chunks_aligned(p.w, p.K, 16 / static_cast<int>(sizeof(Weight)));
  const int slices = (p.K + BLOCK_K - 1) / BLOCK_K;

  auto fetch_all = [&](Stage& stage, int k0) {
    memset(&stage, 0xFF, sizeof(stage));  // SENTINEL everywhere: what is not written stays visible
    for (int t = 0; t < THREADS; ++t) {
      fetch(x_next[t], stage.x, p.x, p.M, p.K, row0, k0, x_aligned, t);
      fetch(w_next[t], stage.w, p.w, p.N, p.K, col0, k0, w_aligned, t);
    }
  };
  auto commit_all = [&](Stage& stage) {
    for (int t = 0; t < THREADS; ++t) {
      commit(x_next[t], stage.x, x_aligned, t);
      commit(w_next[t], stage.w, w_aligned, t);
    }
    wait_for_copies();
    check_fill(stage.x, BLOCK_M, v);
    check_fill(stage.w, BLOCK_N, v);
  };

  fetch_all(stages[0], 0);
  commit_all(stages[0]);
  for (int t = 0; t < slices; ++t) {
    Stage& next = stages[(t + 1) % STAGES];
    const bool more = t + 1 < slices;
    if (more) fetch_all(next, (t + 1) * BLOCK_K);
    for (int warp = 0; warp < THREADS / 32; ++warp) multiply(acc[warp], stages[t % STAGES], warp, v);
    if (more) commit_all(next);
  }

  const bool pairs = p.N % 2 == 0 && reinterpret_cast<uintptr_t>(p.y) % 8 == 0;
  for (int warp = 0; warp < THREADS / 32; ++warp)
    for (int lane = 0; lane < 32; ++lane)
      for (int mi = 0; mi < FRAGS_M; ++mi)
        for (int ni = 0; ni < FRAGS_N; ++ni)
          for (int e = 0; e < 4; e += 2) {
            const Coord c = accumulator_coord(warp, lane, mi, ni, e);
            const float* a = acc[warp][lane][mi][ni];
            store_pair(p.y, p.bias, p.M, p.N, row0 + c.row, col0 + c.col, a[e], a[e + 1], pairs);
          }
}

template <typename T>
std::vector<T> read_file(const char* dir, const char* name, size_t count) {
  std::vector<T> data(count);
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE* f = fopen(path, "rb");
  if (f == nullptr || fread(data.data(), sizeof(T), count, f) != count) {
    fprintf(stderr, "cannot read %zu items from %s\n", count, path);
    exit(2);
  }
  fclose(f);
  return data;
}

template <typename Weight>
void run(const char* dir, int M, int N, int K, int x_offset, int w_offset, bool with_bias, Violations& v) {
  // exactly sized buffers: a read past a matrix is a read past its allocation (AddressSanitizer)
  const std::vector<float> x = read_file<float>(dir, "x.bin", static_cast<size_t>(x_offset) + size_t(M) * K);
  const std::vector<Weight> w = read_file<Weight>(dir, "w.bin", static_cast<size_t>(w_offset) + size_t(N) * K);
  std::vector<float> bias = with_bias ? read_file<float>(dir, "bias.bin", N) : std::vector<float>();
  std::vector<float> y(static_cast<size_t>(M) * N, NAN);
  const Problem<Weight> p{x.data() + x_offset, w.data() + w_offset, with_bias ? bias.data() : nullptr, y.data(),
                          M, N, K};
  for (int bm = 0; bm < (M + BLOCK_M - 1) / BLOCK_M; ++bm)
    for (int bn = 0; bn < (N + BLOCK_N - 1) / BLOCK_N; ++bn) run_block(p, bm, bn, v);
  char path[4096];
  snprintf(path, sizeof(path), "%s/y.bin", dir);
  FILE* f = fopen(path, "wb");
  if (f == nullptr || fwrite(y.data(), sizeof(float), y.size(), f) != y.size()) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(2);
  }
  fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 9) {
    fprintf(stderr, "usage: %s f32|bf16 M N K X_OFFSET W_OFFSET BIAS DIR\n", argv[0]);
    return 2;
  }
  const int M = atoi(argv[2]), N = atoi(argv[3]), K = atoi(argv[4]);
  const int x_offset = atoi(argv[5]), w_offset = atoi(argv[6]);
  const bool with_bias = atoi(argv[7]) != 0;
  Violations v;
  check_chunk_layout(v);
  check_accumulator_layout(v);
  if (strcmp(argv[1], "bf16") == 0) {
    run<__nv_bfloat16>(argv[8], M, N, K, x_offset, w_offset, with_bias, v);
  } else {
    run<float>(argv[8], M, N, K, x_offset, w_offset, with_bias, v);
  }
  printf(
      "{\"chunk_layout\": %ld, \"accumulator_layout\": %ld, \"unfilled\": %ld, \"padding_written\": %ld, "
      "\"ldmatrix_address\": %ld, \"uncoalesced\": %ld}\n",
      v.chunk_layout, v.accumulator_layout, v.unfilled, v.padding_written, v.ldmatrix_address, v.uncoalesced);
  return 0;
}
