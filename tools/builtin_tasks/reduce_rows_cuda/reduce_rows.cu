// Naive row sums: out[i] = sum_j A[i, j] for A [M, N] row-major float32. One thread per row,
// a serial loop; a warp's loads are N floats apart, so none of them coalesce.
extern "C" __global__ void reduce_rows(const float* __restrict__ A, float* __restrict__ out, const int M, const int N)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M)
        return;
    const float* xr = A + (size_t)row * N;
    float s = 0.0f;
    for (int j = 0; j < N; ++j)
        s += xr[j];
    out[row] = s;
}
