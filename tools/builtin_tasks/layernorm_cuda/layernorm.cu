// Naive layer normalization of each row of X [M, N] (row-major float32):
// Y = (X - mean) / sqrt(var + eps) * gamma + beta, biased variance, one thread per row,
// three passes (mean, variance, write). Loads are strided by N across a warp.
extern "C" __global__ void layernorm(const float* __restrict__ X, const float* __restrict__ gamma,
                                     const float* __restrict__ beta, float* __restrict__ Y,
                                     const int M, const int N, const float eps)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M)
        return;
    const float* xr = X + (size_t)row * N;
    float* yr = Y + (size_t)row * N;
    float s = 0.0f;
    for (int j = 0; j < N; ++j)
        s += xr[j];
    const float mean = s / N;
    float v = 0.0f;
    for (int j = 0; j < N; ++j) {
        const float d = xr[j] - mean;
        v += d * d;
    }
    const float rstd = 1.0f / sqrtf(v / N + eps);
    for (int j = 0; j < N; ++j)
        yr[j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
}
