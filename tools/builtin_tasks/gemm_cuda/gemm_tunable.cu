/* Shared-memory tiled GEMM with register blocking (C[M,N] = A[M,K] * B[K,N], row-major).
 * BM x BN: tile of C per block; BK: depth of the A and B slabs staged in shared memory;
 * TM x TN: outputs per thread, spread with stride (BM/TM, BN/TN) so that shared-memory
 * reads are conflict-free and stores to C are coalesced. Block = (BN/TN, BM/TM) threads.
 * The task's constraints guarantee M % BM == N % BN == K % BK == 0 and that both slabs
 * divide evenly among the threads, so there are no bounds checks. */
#define TX (BN / TN)
#define TY (BM / TM)
#define NTHREADS (TX * TY)

extern "C" __global__ __launch_bounds__(NTHREADS)
void gemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
          const int M, const int N, const int K)
{
    __shared__ float As[BK][BM + 1];  /* A slab, transposed; +1 avoids bank conflicts on the store */
    __shared__ float Bs[BK][BN];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * TX + tx;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

    float acc[TM][TN];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j)
            acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        #pragma unroll
        for (int r = 0; r < (BM * BK) / NTHREADS; ++r) {
            const int e = tid + r * NTHREADS, m = e / BK, k = e % BK;   /* coalesced along k */
            As[k][m] = A[(size_t)(row0 + m) * K + k0 + k];
        }
        #pragma unroll
        for (int r = 0; r < (BK * BN) / NTHREADS; ++r) {
            const int e = tid + r * NTHREADS, k = e / BN, n = e % BN;   /* coalesced along n */
            Bs[k][n] = B[(size_t)(k0 + k) * N + col0 + n];
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
            #pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[k][ty + i * TY];
            #pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tx + j * TX];
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j)
            C[(size_t)(row0 + ty + i * TY) * N + col0 + tx + j * TX] = acc[i][j];
}
