// Naive transpose: B[N, M] = A[M, N]^T, row-major float32. One thread per element;
// reads along a row coalesce, writes are M floats apart and do not.
extern "C" __global__ void transpose(const float* __restrict__ A, float* __restrict__ B, const int M, const int N)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N)
        B[(size_t)col * M + row] = A[(size_t)row * N + col];
}
