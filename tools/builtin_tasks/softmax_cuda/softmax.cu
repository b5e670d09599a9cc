// Naive row softmax over X[M,N] (row-major float32): one thread per row, three passes
// (max, sum of exponentials, normalize). Loads are strided by N across a warp.
extern "C" __global__ void softmax(const float* __restrict__ X, float* __restrict__ Y, const int M, const int N)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M)
        return;
    const float* xr = X + (size_t)row * N;
    float* yr = Y + (size_t)row * N;
    float m = -INFINITY;
    for (int j = 0; j < N; ++j)
        m = fmaxf(m, xr[j]);
    float s = 0.0f;
    for (int j = 0; j < N; ++j)
        s += expf(xr[j] - m);
    const float inv = 1.0f / s;
    for (int j = 0; j < N; ++j)
        yr[j] = expf(xr[j] - m) * inv;
}
