/* Row softmax, one block of BLOCK threads per row, VEC floats per load (N % VEC == 0).
 * ONLINE = 0: three passes over the row (max, sum, write);
 * ONLINE = 1: one pass keeps a running (max, sum) per thread, rescaled as the max grows,
 *             then the write pass: two reads of the row instead of three.
 * Block reductions: warp shuffles, then one value per warp through shared memory. */
#define NWARPS (BLOCK / 32)

struct __align__(4 * VEC) vecf { float v[VEC]; };

__device__ __forceinline__ float warp_max(float v)
{
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Every thread of the block gets the result. */
__device__ __forceinline__ float block_max(float v, float* red)
{
    v = warp_max(v);
#if NWARPS > 1
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = warp_max(lane < NWARPS ? red[lane] : -INFINITY);
    __syncthreads();
#endif
    return v;
}

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
void softmax(const float* __restrict__ X, float* __restrict__ Y, const int M, const int N)
{
    __shared__ float red[32];
    const int row = blockIdx.x;
    const vecf* xr = reinterpret_cast<const vecf*>(X + (size_t)row * N);
    vecf* yr = reinterpret_cast<vecf*>(Y + (size_t)row * N);
    const int nv = N / VEC;

#if ONLINE
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x; j < nv; j += BLOCK) {
        const vecf v = xr[j];
        float vm = v.v[0];
        #pragma unroll
        for (int c = 1; c < VEC; ++c)
            vm = fmaxf(vm, v.v[c]);
        if (vm > m) {
            s *= __expf(m - vm);   /* exp(-inf) = 0 on the first element */
            m = vm;
        }
        #pragma unroll
        for (int c = 0; c < VEC; ++c)
            s += __expf(v.v[c] - m);
    }
    const float rmax = block_max(m, red);
    const float rsum = block_sum(m == -INFINITY ? 0.0f : s * __expf(m - rmax), red);
#else
    float m = -INFINITY;
    for (int j = threadIdx.x; j < nv; j += BLOCK) {
        const vecf v = xr[j];
        #pragma unroll
        for (int c = 0; c < VEC; ++c)
            m = fmaxf(m, v.v[c]);
    }
    const float rmax = block_max(m, red);
    float s = 0.0f;
    for (int j = threadIdx.x; j < nv; j += BLOCK) {
        const vecf v = xr[j];
        #pragma unroll
        for (int c = 0; c < VEC; ++c)
            s += __expf(v.v[c] - rmax);
    }
    const float rsum = block_sum(s, red);
#endif
    const float inv = 1.0f / rsum;
    for (int j = threadIdx.x; j < nv; j += BLOCK) {
        vecf v = xr[j];
        #pragma unroll
        for (int c = 0; c < VEC; ++c)
            v.v[c] = __expf(v.v[c] - rmax) * inv;
        yr[j] = v;
    }
}
