/* B[e] = the multiply-add chain of A[e] (see task.toml): twelve chains per work-item,
 *   VEC  1: scalar code in WG-item work-groups (WG = 16: the runtime's own vectors across work-items);
 *        4, 8: explicit vectors of VEC floats in one-item work-groups
 */
#pragma OPENCL FP_CONTRACT OFF  /* a multiply and an add, never fused: every variant rounds alike */
#define ITERS 1024
#define VT_(n) float##n
#define VT(n) VT_(n)
#define LOAD_(n) vload##n
#define LOAD(n) LOAD_(n)
#define STORE_(n) vstore##n
#define STORE(n) STORE_(n)
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void simd_width(__global const float *A, __global float *B)
{
#if VEC == 1
    const size_t base = get_global_id(0) * 12;
    float x0 = A[base + 0], x1 = A[base + 1], x2 = A[base + 2], x3 = A[base + 3], x4 = A[base + 4], x5 = A[base + 5];
    float x6 = A[base + 6], x7 = A[base + 7], x8 = A[base + 8], x9 = A[base + 9], x10 = A[base + 10], x11 = A[base + 11];
    for (int t = 0; t < ITERS; ++t) {
        x0 = x0 * 0.999f + 0.5f; x1 = x1 * 0.999f + 0.5f; x2 = x2 * 0.999f + 0.5f; x3 = x3 * 0.999f + 0.5f; x4 = x4 * 0.999f + 0.5f; x5 = x5 * 0.999f + 0.5f;
        x6 = x6 * 0.999f + 0.5f; x7 = x7 * 0.999f + 0.5f; x8 = x8 * 0.999f + 0.5f; x9 = x9 * 0.999f + 0.5f; x10 = x10 * 0.999f + 0.5f; x11 = x11 * 0.999f + 0.5f;
    }
    B[base + 0] = x0; B[base + 1] = x1; B[base + 2] = x2; B[base + 3] = x3; B[base + 4] = x4; B[base + 5] = x5;
    B[base + 6] = x6; B[base + 7] = x7; B[base + 8] = x8; B[base + 9] = x9; B[base + 10] = x10; B[base + 11] = x11;
#else
    const size_t base = get_global_id(0) * 12;  /* in vectors of VEC */
    const VT(VEC) a = (VT(VEC))(0.999f), b = (VT(VEC))(0.5f);
    VT(VEC) x0 = LOAD(VEC)(base + 0, A), x1 = LOAD(VEC)(base + 1, A), x2 = LOAD(VEC)(base + 2, A), x3 = LOAD(VEC)(base + 3, A), x4 = LOAD(VEC)(base + 4, A), x5 = LOAD(VEC)(base + 5, A);
    VT(VEC) x6 = LOAD(VEC)(base + 6, A), x7 = LOAD(VEC)(base + 7, A), x8 = LOAD(VEC)(base + 8, A), x9 = LOAD(VEC)(base + 9, A), x10 = LOAD(VEC)(base + 10, A), x11 = LOAD(VEC)(base + 11, A);
    for (int t = 0; t < ITERS; ++t) {
        x0 = x0 * a + b; x1 = x1 * a + b; x2 = x2 * a + b; x3 = x3 * a + b; x4 = x4 * a + b; x5 = x5 * a + b;
        x6 = x6 * a + b; x7 = x7 * a + b; x8 = x8 * a + b; x9 = x9 * a + b; x10 = x10 * a + b; x11 = x11 * a + b;
    }
    STORE(VEC)(x0, base + 0, B); STORE(VEC)(x1, base + 1, B); STORE(VEC)(x2, base + 2, B); STORE(VEC)(x3, base + 3, B); STORE(VEC)(x4, base + 4, B); STORE(VEC)(x5, base + 5, B);
    STORE(VEC)(x6, base + 6, B); STORE(VEC)(x7, base + 7, B); STORE(VEC)(x8, base + 8, B); STORE(VEC)(x9, base + 9, B); STORE(VEC)(x10, base + 10, B); STORE(VEC)(x11, base + 11, B);
#endif
}
