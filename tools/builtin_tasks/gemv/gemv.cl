/* y = A * x for row-major A [M, N]: one work-item per row, a sequential dot product. */
__kernel void gemv(__global const float *A, __global const float *x, __global float *y, const int M, const int N)
{
    const int row = get_global_id(0);
    if (row < M) {
        float acc = 0.0f;
        for (int j = 0; j < N; ++j)
            acc += A[(size_t)row * N + j] * x[j];
        y[row] = acc;
    }
}
