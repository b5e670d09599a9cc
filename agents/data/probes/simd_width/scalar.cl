/* B[e] = the multiply-add chain of A[e] (see task.toml): twelve chains per work-item, scalar, one-item
 * work-groups (nothing to vectorize across). */
#pragma OPENCL FP_CONTRACT OFF  /* a multiply and an add, never fused: every variant rounds alike */
#define ITERS 1024
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void simd_width(__global const float *A, __global float *B)
{
    const size_t base = get_global_id(0) * 12;
    float x0 = A[base + 0], x1 = A[base + 1], x2 = A[base + 2], x3 = A[base + 3], x4 = A[base + 4], x5 = A[base + 5];
    float x6 = A[base + 6], x7 = A[base + 7], x8 = A[base + 8], x9 = A[base + 9], x10 = A[base + 10], x11 = A[base + 11];
    for (int t = 0; t < ITERS; ++t) {
        x0 = x0 * 0.999f + 0.5f; x1 = x1 * 0.999f + 0.5f; x2 = x2 * 0.999f + 0.5f; x3 = x3 * 0.999f + 0.5f; x4 = x4 * 0.999f + 0.5f; x5 = x5 * 0.999f + 0.5f;
        x6 = x6 * 0.999f + 0.5f; x7 = x7 * 0.999f + 0.5f; x8 = x8 * 0.999f + 0.5f; x9 = x9 * 0.999f + 0.5f; x10 = x10 * 0.999f + 0.5f; x11 = x11 * 0.999f + 0.5f;
    }
    B[base + 0] = x0; B[base + 1] = x1; B[base + 2] = x2; B[base + 3] = x3; B[base + 4] = x4; B[base + 5] = x5;
    B[base + 6] = x6; B[base + 7] = x7; B[base + 8] = x8; B[base + 9] = x9; B[base + 10] = x10; B[base + 11] = x11;
}
