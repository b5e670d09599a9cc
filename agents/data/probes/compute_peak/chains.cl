/* B[e] = A[e] through ITERS multiply-adds (mad: fused where the device fuses them), sixteen independent chains per
 * work-item, so the adds' latency never hides the arithmetic's throughput: the device's compute roof (see
 * task.toml). Each chain's floats are one global size apart, so neighbouring work-items read neighbouring floats
 * (a CPU runtime's vectors across work-items, a GPU's coalesced loads). */
#define ITERS 512
#define CHAINS 16
__kernel void compute_peak(__global const float *A, __global float *B)
{
    const size_t i = get_global_id(0), n = get_global_size(0);
    const float a = 0.999f, b = 0.5f;
    float x0 = A[i], x1 = A[i + n], x2 = A[i + 2 * n], x3 = A[i + 3 * n];
    float x4 = A[i + 4 * n], x5 = A[i + 5 * n], x6 = A[i + 6 * n], x7 = A[i + 7 * n];
    float x8 = A[i + 8 * n], x9 = A[i + 9 * n], x10 = A[i + 10 * n], x11 = A[i + 11 * n];
    float x12 = A[i + 12 * n], x13 = A[i + 13 * n], x14 = A[i + 14 * n], x15 = A[i + 15 * n];
    for (int t = 0; t < ITERS; ++t) {
        x0 = mad(x0, a, b); x1 = mad(x1, a, b); x2 = mad(x2, a, b); x3 = mad(x3, a, b);
        x4 = mad(x4, a, b); x5 = mad(x5, a, b); x6 = mad(x6, a, b); x7 = mad(x7, a, b);
        x8 = mad(x8, a, b); x9 = mad(x9, a, b); x10 = mad(x10, a, b); x11 = mad(x11, a, b);
        x12 = mad(x12, a, b); x13 = mad(x13, a, b); x14 = mad(x14, a, b); x15 = mad(x15, a, b);
    }
    B[i] = x0; B[i + n] = x1; B[i + 2 * n] = x2; B[i + 3 * n] = x3;
    B[i + 4 * n] = x4; B[i + 5 * n] = x5; B[i + 6 * n] = x6; B[i + 7 * n] = x7;
    B[i + 8 * n] = x8; B[i + 9 * n] = x9; B[i + 10 * n] = x10; B[i + 11 * n] = x11;
    B[i + 12 * n] = x12; B[i + 13 * n] = x13; B[i + 14 * n] = x14; B[i + 15 * n] = x15;
}
