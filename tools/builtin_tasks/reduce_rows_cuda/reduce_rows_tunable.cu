/* Row sums with TPR threads per row and RPB rows per block: block = (TPR, RPB).
 * Each thread strides through its row with VEC-wide loads (N % VEC == 0) into VEC
 * independent partial sums (ILP), then the row's threads combine them with warp
 * shuffles and, when TPR > 32, one value per warp through shared memory. */
#define WPR ((TPR + 31) / 32)   /* warps per row */

struct __align__(4 * VEC) vecf { float v[VEC]; };

__device__ __forceinline__ float warp_sum(float v)
{
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ __launch_bounds__(TPR * RPB)
void reduce_rows(const float* __restrict__ A, float* __restrict__ out, const int M, const int N)
{
    const int row = blockIdx.x * RPB + threadIdx.y;
    const vecf* xr = reinterpret_cast<const vecf*>(A + (size_t)row * N);
    const int nv = N / VEC;
    float part[VEC];
    #pragma unroll
    for (int c = 0; c < VEC; ++c)
        part[c] = 0.0f;
    for (int j = threadIdx.x; j < nv; j += TPR) {
        const vecf v = xr[j];
        #pragma unroll
        for (int c = 0; c < VEC; ++c)
            part[c] += v.v[c];
    }
    float s = 0.0f;
    #pragma unroll
    for (int c = 0; c < VEC; ++c)
        s += part[c];
    s = warp_sum(s);
#if WPR > 1
    __shared__ float red[RPB][WPR];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0)
        red[threadIdx.y][warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = warp_sum(lane < WPR ? red[threadIdx.y][lane] : 0.0f);
        if (lane == 0)
            out[row] = s;
    }
#else
    if (threadIdx.x == 0)
        out[row] = s;
#endif
}
