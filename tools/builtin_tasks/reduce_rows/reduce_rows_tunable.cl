/* Row sums with WG work-items per row and ROWS rows per work-group.
 *   WG      work-items cooperating on one row (1: a work-item owns its row); partial sums meet in local memory
 *   ROWS    rows per work-group (the work-group is WG x ROWS)
 *   VEC     vector width of the loads (vloadVEC)
 *   UNROLL  independent vector accumulators per work-item (loads in flight)
 * Geometry: global = (WG, M), local = (WG, ROWS). In each step the work-items of a row read UNROLL
 * consecutive blocks of WG*VEC floats, so neighbouring work-items read neighbouring vectors.
 * The constraints guarantee N % (WG * VEC * UNROLL) == 0 and M % ROWS == 0.
 */
#define CAT(a, b) a##b
#define XCAT(a, b) CAT(a, b)
#if VEC == 1
  #define VT float
  #define VLOAD(i, p) ((p)[i])
  #define HSUM(v) (v)
#else
  #define VT XCAT(float, VEC)
  #define VLOAD(i, p) XCAT(vload, VEC)((i), (p))
  #if VEC == 2
    #define HSUM(v) ((v).s0 + (v).s1)
  #elif VEC == 4
    #define HSUM(v) (((v).s0 + (v).s1) + ((v).s2 + (v).s3))
  #else
    #define HSUM(v) ((((v).s0 + (v).s1) + ((v).s2 + (v).s3)) + (((v).s4 + (v).s5) + ((v).s6 + (v).s7)))
  #endif
#endif

__kernel __attribute__((reqd_work_group_size(WG, ROWS, 1)))
void reduce_rows(__global const float *A, __global float *out, const int M, const int N)
{
    const int lid = get_local_id(0);
    const int row = get_global_id(1);
    __global const float *a = A + (size_t)row * N;
    VT acc[UNROLL];
    #pragma unroll
    for (int u = 0; u < UNROLL; ++u)
        acc[u] = (VT)(0.0f);
    const int vecs = N / VEC;  /* row length in vectors */
    for (int base = 0; base < vecs; base += WG * UNROLL) {
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            acc[u] += VLOAD(base + u * WG + lid, a);
    }
    #pragma unroll
    for (int u = 1; u < UNROLL; ++u)
        acc[0] += acc[u];
    float s = HSUM(acc[0]);
#if WG == 1
    out[row] = s;
#else
    __local float part[ROWS][WG];
    const int ly = get_local_id(1);
    part[ly][lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = WG / 2; step > 0; step >>= 1) {
        if (lid < step)
            part[ly][lid] += part[ly][lid + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        out[row] = part[ly][0];
#endif
}
