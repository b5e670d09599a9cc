/* out[r] = sum of row r of the row-major [M, N] matrix A: one work-item per row, a plain sequential loop. */
__kernel void reduce_rows(__global const float *A, __global float *out, const int M, const int N)
{
    const int row = get_global_id(0);
    if (row < M) {
        float acc = 0.0f;
        for (int j = 0; j < N; ++j)
            acc += A[(size_t)row * N + j];
        out[row] = acc;
    }
}
