// Naive GEMM: C[M,N] = A[M,K] * B[K,N], row-major float32. One thread per element of C,
// no tiling and no data reuse beyond what the caches find. x indexes columns, y rows.
extern "C" __global__ void gemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                const int M, const int N, const int K)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k)
            acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
        C[(size_t)row * N + col] = acc;
    }
}
