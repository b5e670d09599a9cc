/* y = A x for a column-major A [N columns of M]: one work-item per row i walks the columns j,
 * and keeps its running sum in the output itself (a global read and write per iteration). */
__kernel void matvec_cols(__global const float *A, __global const float *x, __global float *y,
                          const int M, const int N)
{
    const int i = get_global_id(0);
    if (i < M) {
        y[i] = 0.0f;
        for (int j = 0; j < N; ++j)
            y[i] += A[j * M + i] * x[j];
    }
}
