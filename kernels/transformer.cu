// Row-wise and element-wise kernels of the device-resident transformer runtime (embodied_ros/gpu/):
// everything between the matrix products, which cuBLAS runs on the tensor cores. Compiled at run time
// (NVRTC, through CuPy) for the GPU at hand; no header is included, so it builds anywhere.
//
// Types: activations on the residual stream are float32; what a matrix product reads is bf16, stored
// as its 16 bits (`bf16_t`, rounded to nearest, ties to even; NaN stays NaN). Every kernel reads
// float32 or bf16 and writes the bf16 the next product reads, so no product input is ever a float32
// tensor that needs a separate cast. Row strides (`ld*`) are in elements. A null pointer means "absent".
// Element counts stay below 2^31 (the engine checks): index arithmetic is 32-bit.
//
// Entries (C linkage):
//   residual_norm  x += gate * (y + bias) (each part optional), then h = norm(x) * mul + add, written
//                  as bf16 (or float32 with h_float: the input of a float32 product)
//                  norm: (x - mean) / sqrt(var + eps) with `center`, x / sqrt(mean(x^2) + eps) without.
//                  One block per row, dynamic shared memory (width + 32) floats.
//   rope_split     a q/k/v product's float32 output -> bf16 q, k, v (rotate-half RoPE on q and,
//                  with rotate_k, on k), each written where the caller says (a cache's rows).
//   softmax_rows   p = softmax(scale * s + bias[row % bias_rows]) -> bf16; one warp per row.
//   glu            out = act(gate) * up from a bf16 [gate | up] product output.
//   bias_act       out = act(y + bias) as bf16 (or float32 with out_float); act: 0 none, 1 gelu (tanh form), 2 silu.
//   axpy_cast      x += alpha * bias (one Euler step's bias term), then out = bf16(x) unless out is null.

typedef unsigned short bf16_t;

#define ACT_NONE 0
#define ACT_GELU_TANH 1
#define ACT_SILU 2

__device__ __forceinline__ float bf16_to_float(bf16_t h) { return __uint_as_float(((unsigned int)h) << 16); }

__device__ __forceinline__ bf16_t float_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

__device__ __forceinline__ float activate(float v, int act) {
    if (act == ACT_GELU_TANH) {
        const float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        return 0.5f * v * (1.0f + tanhf(inner));
    }
    if (act == ACT_SILU) return v / (1.0f + expf(-v));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32); scratch: 32 floats of shared memory.
__device__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = threadIdx.x < (blockDim.x >> 5) ? scratch[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) scratch[0] = v;
    }
    __syncthreads();
    const float total = scratch[0];
    __syncthreads();
    return total;
}

extern "C" __global__ void residual_norm(float* __restrict__ x, int ldx, const float* __restrict__ y, int ldy,
                                         const float* __restrict__ bias, const float* __restrict__ gate,
                                         const float* __restrict__ mul, const float* __restrict__ add,
                                         void* __restrict__ h, int ldh, int width, float eps, int center,
                                         int h_float) {
    extern __shared__ float shared[];
    float* row = shared;
    float* scratch = shared + width;
    const long r = blockIdx.x;
    float* xr = x + r * ldx;
    const bool update = y != nullptr || bias != nullptr;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        float v = xr[i];
        if (update) {
            const float delta = (y != nullptr ? y[r * ldy + i] : 0.0f) + (bias != nullptr ? bias[i] : 0.0f);
            v += (gate != nullptr ? gate[i] : 1.0f) * delta;
            xr[i] = v;
        }
        row[i] = v;
        sum += v;
    }
    const float mean = center ? block_sum(sum, scratch) / width : 0.0f;
    float squares = 0.0f;
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        const float d = row[i] - mean;
        squares += d * d;
    }
    const float inverse = rsqrtf(block_sum(squares, scratch) / width + eps);
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        const float value = (row[i] - mean) * inverse * mul[i] + (add != nullptr ? add[i] : 0.0f);
        if (h_float)
            static_cast<float*>(h)[r * ldh + i] = value;
        else
            static_cast<bf16_t*>(h)[r * ldh + i] = float_to_bf16(value);
    }
}

// src columns: heads_q query heads, then heads_k key heads, then heads_v value heads, head_dim each.
// cos_t, sin_t: [rows, head_dim / 2] (the first half of the usual tables, whose halves are equal).
extern "C" __global__ void rope_split(const float* __restrict__ src, int ld_src, int rows, int heads_q,
                                      int heads_k, int heads_v, int head_dim, const float* __restrict__ cos_t,
                                      const float* __restrict__ sin_t, bf16_t* __restrict__ q, int ldq,
                                      bf16_t* __restrict__ k, int ldk, bf16_t* __restrict__ v, int ldv,
                                      int rotate_k) {
    const int half = head_dim / 2;
    const unsigned per_row = (unsigned)(heads_q + heads_k + heads_v) * half;
    const unsigned total = (unsigned)rows * per_row;
    for (unsigned index = blockIdx.x * blockDim.x + threadIdx.x; index < total; index += gridDim.x * blockDim.x) {
        const long r = index / per_row;
        const int rest = (int)(index - (unsigned)r * per_row);
        const int head = rest / half, i = rest - head * half;
        const float* s = src + r * ld_src + (long)head * head_dim;
        float a = s[i], b = s[i + half];
        bf16_t* out;
        bool rotate;
        if (head < heads_q) {
            out = q + r * ldq + (long)head * head_dim;
            rotate = true;
        } else if (head < heads_q + heads_k) {
            out = k + r * ldk + (long)(head - heads_q) * head_dim;
            rotate = rotate_k != 0;
        } else {
            out = v + r * ldv + (long)(head - heads_q - heads_k) * head_dim;
            rotate = false;
        }
        if (rotate) {
            const float c = cos_t[r * half + i], sn = sin_t[r * half + i];
            const float rotated_a = a * c - b * sn;
            b = b * c + a * sn;
            a = rotated_a;
        }
        out[i] = float_to_bf16(a);
        out[i + half] = float_to_bf16(b);
    }
}

extern "C" __global__ void softmax_rows(const float* __restrict__ s, int lds, int rows, int cols, float scale,
                                        const float* __restrict__ bias, int bias_rows, int ldb,
                                        bf16_t* __restrict__ p, int ldp) {
    const long row = (blockIdx.x * (long)blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float* sr = s + row * lds;
    const float* br = bias != nullptr ? bias + (row % bias_rows) * ldb : nullptr;
    float top = -3.402823466e38f;
    for (int j = lane; j < cols; j += 32) top = fmaxf(top, scale * sr[j] + (br != nullptr ? br[j] : 0.0f));
    top = warp_max(top);
    float total = 0.0f;
    for (int j = lane; j < cols; j += 32) total += __expf(scale * sr[j] + (br != nullptr ? br[j] : 0.0f) - top);
    const float inverse = 1.0f / warp_sum(total);
    bf16_t* pr = p + row * ldp;
    for (int j = lane; j < cols; j += 32)
        pr[j] = float_to_bf16(__expf(scale * sr[j] + (br != nullptr ? br[j] : 0.0f) - top) * inverse);
}

extern "C" __global__ void glu(const bf16_t* __restrict__ gate_up, int ld_in, bf16_t* __restrict__ out, int ld_out,
                               int rows, int width, int act) {
    const unsigned total = (unsigned)rows * width;
    for (unsigned index = blockIdx.x * blockDim.x + threadIdx.x; index < total; index += gridDim.x * blockDim.x) {
        const long r = index / (unsigned)width;
        const int i = (int)(index - (unsigned)r * width);
        const bf16_t* in = gate_up + r * ld_in;
        out[r * ld_out + i] = float_to_bf16(activate(bf16_to_float(in[i]), act) * bf16_to_float(in[width + i]));
    }
}

extern "C" __global__ void bias_act(const float* __restrict__ y, int ldy, const float* __restrict__ bias,
                                    void* __restrict__ out, int ld_out, int rows, int width, int act, int out_float) {
    const unsigned total = (unsigned)rows * width;
    for (unsigned index = blockIdx.x * blockDim.x + threadIdx.x; index < total; index += gridDim.x * blockDim.x) {
        const long r = index / (unsigned)width;
        const int i = (int)(index - (unsigned)r * width);
        const float v = activate(y[r * ldy + i] + (bias != nullptr ? bias[i] : 0.0f), act);
        if (out_float)
            static_cast<float*>(out)[r * ld_out + i] = v;
        else
            static_cast<bf16_t*>(out)[r * ld_out + i] = float_to_bf16(v);
    }
}

extern "C" __global__ void axpy_cast(float* __restrict__ x, int ldx, const float* __restrict__ bias, float alpha,
                                     bf16_t* __restrict__ out, int ld_out, int rows, int width) {
    const unsigned total = (unsigned)rows * width;
    for (unsigned index = blockIdx.x * blockDim.x + threadIdx.x; index < total; index += gridDim.x * blockDim.x) {
        const long r = index / (unsigned)width;
        const int i = (int)(index - (unsigned)r * width);
        const float v = x[r * ldx + i] + (bias != nullptr ? alpha * bias[i] : 0.0f);
        x[r * ldx + i] = v;
        if (out != nullptr) out[r * ld_out + i] = float_to_bf16(v);
    }
}
