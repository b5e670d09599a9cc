/* Layer normalization, one block of BLOCK threads per row, VEC floats per load (N % VEC == 0).
 * ONEPASS = 0: mean first, then the variance from (X - mean)^2 (a second read of the row);
 * ONEPASS = 1: sum and sum of squares in a single read, var = E[X^2] - mean^2 (fewer bytes,
 *              less robust when |mean| >> std).
 * Block sums: warp shuffles, then one value per warp through shared memory. */
#define NWARPS (BLOCK / 32)

struct __align__(4 * VEC) vecf { float v[VEC]; };

__device__ __forceinline__ float warp_sum(float v)
{
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Every thread of the block gets the result. */
__device__ __forceinline__ float block_sum(float v, float* red)
{
    v = warp_sum(v);
#if NWARPS > 1
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = warp_sum(lane < NWARPS ? red[lane] : 0.0f);
    __syncthreads();
#endif
    return v;
}

extern "C" __global__ __launch_bounds__(BLOCK)
void layernorm(const float* __restrict__ X, const float* __restrict__ gamma, const float* __restrict__ beta,
               float* __restrict__ Y, const int M, const int N, const float eps)
{
    __shared__ float red[32];
    const int row = blockIdx.x;
    const vecf* xr = reinterpret_cast<const vecf*>(X + (size_t)row * N);
    vecf* yr = reinterpret_cast<vecf*>(Y + (size_t)row * N);
    const vecf* g = reinterpret_cast<const vecf*>(gamma);
    const vecf* b = reinterpret_cast<const vecf*>(beta);
    const int nv = N / VEC;
    const float inv_n = 1.0f / N;

    float s = 0.0f;
#if ONEPASS
    float sq = 0.0f;
#endif
    for (int j = threadIdx.x; j < nv; j += BLOCK) {
        const vecf v = xr[j];
        #pragma unroll
        for (int c = 0; c < VEC; ++c) {
            s += v.v[c];
#if ONEPASS
            sq = fmaf(v.v[c], v.v[c], sq);
#endif
        }
    }
    const float mean = block_sum(s, red) * inv_n;
#if ONEPASS
    const float var = fmaxf(block_sum(sq, red) * inv_n - mean * mean, 0.0f);
#else
    float d2 = 0.0f;
    for (int j = threadIdx.x; j < nv; j += BLOCK) {
        const vecf v = xr[j];
        #pragma unroll
        for (int c = 0; c < VEC; ++c) {
            const float d = v.v[c] - mean;
            d2 = fmaf(d, d, d2);
        }
    }
    const float var = block_sum(d2, red) * inv_n;
#endif
    const float rstd = rsqrtf(var + eps);
    for (int j = threadIdx.x; j < nv; j += BLOCK) {
        const vecf v = xr[j], gv = g[j], bv = b[j];
        vecf o;
        #pragma unroll
        for (int c = 0; c < VEC; ++c)
            o.v[c] = fmaf((v.v[c] - mean) * rstd, gv.v[c], bv.v[c]);
        yr[j] = o;
    }
}
