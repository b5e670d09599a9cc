/* A hand-written faster GEMM candidate for the built-in `gemm` task (same signature as the reference).
 * Each work-item computes a 4x8 block of C: 4 rows of A are streamed against 8 columns of B loaded as
 * float8, so every B load is reused 4 times and every A load 8 times from registers.
 * Launch: global = (N / 8, M / 4), e.g.
 *   kernelcast measure gemm --candidate examples/gemm_blocked.cl --global "N / 8,M / 4" --local "8,4" --json
 * Requires M % 4 == 0 and N % 8 == 0 (true for the task's sizes).
 */
__kernel void gemm(__global const float *A, __global const float *B, __global float *C,
                   const int M, const int N, const int K)
{
    const int c0 = get_global_id(0) * 8;
    const int r0 = get_global_id(1) * 4;
    if (r0 >= M || c0 >= N)
        return;
    float8 acc0 = (float8)(0.0f), acc1 = (float8)(0.0f), acc2 = (float8)(0.0f), acc3 = (float8)(0.0f);
    for (int k = 0; k < K; ++k) {
        const float8 b = vload8(0, B + k * N + c0);
        acc0 += A[(r0 + 0) * K + k] * b;
        acc1 += A[(r0 + 1) * K + k] * b;
        acc2 += A[(r0 + 2) * K + k] * b;
        acc3 += A[(r0 + 3) * K + k] * b;
    }
    vstore8(acc0, 0, C + (r0 + 0) * N + c0);
    vstore8(acc1, 0, C + (r0 + 1) * N + c0);
    vstore8(acc2, 0, C + (r0 + 2) * N + c0);
    vstore8(acc3, 0, C + (r0 + 3) * N + c0);
}
