// Naive row sums: y[i] = sum_j x[i, j] for x [M, N] row-major float32. One thread per row,
// a serial loop; a warp's loads are N floats apart, so none of them coalesce.
extern "C" __global__ void reduce_rows(const float* __restrict__ x, float* __restrict__ y, const int M, const int N)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M)
        return;
    const float* xr = x + (size_t)row * N;
    float s = 0.0f;
    for (int j = 0; j < N; ++j)
        s += xr[j];
    y[row] = s;
}
