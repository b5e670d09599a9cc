/* Layer normalization of each row of the row-major [M, N] matrix X:
 *   Y[r, j] = (X[r, j] - mean_r) / sqrt(var_r + eps) * gamma[j] + beta[j]
 * with the biased variance. One work-item per row, two statistics passes and a write pass. */
__kernel void layernorm(__global const float *X, __global const float *gamma, __global const float *beta,
                        __global float *Y, const int M, const int N, const float eps)
{
    const int row = get_global_id(0);
    if (row >= M)
        return;
    __global const float *x = X + (size_t)row * N;
    __global float *y = Y + (size_t)row * N;
    float sum = 0.0f;
    for (int j = 0; j < N; ++j)
        sum += x[j];
    const float mean = sum / N;
    float sq = 0.0f;
    for (int j = 0; j < N; ++j) {
        const float d = x[j] - mean;
        sq += d * d;
    }
    const float rstd = 1.0f / sqrt(sq / N + eps);
    for (int j = 0; j < N; ++j)
        y[j] = (x[j] - mean) * rstd * gamma[j] + beta[j];
}
