/* B[e] = the multiply-add chain of A[e] (see task.toml): twelve chains per work-item, each a VT of VEC floats.
 *   VEC  1: scalar code in WG-item work-groups (WG = 16: the runtime's own vectors across work-items);
 *        4, 8: explicit vectors of VEC floats in one-item work-groups
 * Compiled as it stands (no defines), it is the reference: scalar code in one-item work-groups. */
#ifndef VEC
#define VEC 1
#endif
#ifndef WG
#define WG 1
#endif
#pragma OPENCL FP_CONTRACT OFF  /* a multiply and an add, never fused: every variant rounds alike */
#define ITERS 1024
#if VEC == 1
#define VT float
#define LOAD(i) A[i]
#define STORE(x, i) B[i] = (x)
#else
#define VT_(n) float##n
#define VT1(n) VT_(n)
#define VT VT1(VEC)
#define LOAD_(n, i) vload##n(i, A)
#define LOAD1(n, i) LOAD_(n, i)
#define LOAD(i) LOAD1(VEC, i)
#define STORE_(n, x, i) vstore##n(x, i, B)
#define STORE1(n, x, i) STORE_(n, x, i)
#define STORE(x, i) STORE1(VEC, x, i)
#endif
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void simd_width(__global const float *A, __global float *B)
{
    const size_t base = get_global_id(0) * 12;  /* in units of VT */
    const VT a = (VT)(0.999f), b = (VT)(0.5f);
    VT x0 = LOAD(base + 0), x1 = LOAD(base + 1), x2 = LOAD(base + 2), x3 = LOAD(base + 3);
    VT x4 = LOAD(base + 4), x5 = LOAD(base + 5), x6 = LOAD(base + 6), x7 = LOAD(base + 7);
    VT x8 = LOAD(base + 8), x9 = LOAD(base + 9), x10 = LOAD(base + 10), x11 = LOAD(base + 11);
    for (int t = 0; t < ITERS; ++t) {
        x0 = x0 * a + b; x1 = x1 * a + b; x2 = x2 * a + b; x3 = x3 * a + b; x4 = x4 * a + b; x5 = x5 * a + b;
        x6 = x6 * a + b; x7 = x7 * a + b; x8 = x8 * a + b; x9 = x9 * a + b; x10 = x10 * a + b; x11 = x11 * a + b;
    }
    STORE(x0, base + 0); STORE(x1, base + 1); STORE(x2, base + 2); STORE(x3, base + 3);
    STORE(x4, base + 4); STORE(x5, base + 5); STORE(x6, base + 6); STORE(x7, base + 7);
    STORE(x8, base + 8); STORE(x9, base + 9); STORE(x10, base + 10); STORE(x11, base + 11);
}
