/* Inclusive scan in one launch without inter-group communication ("reduce, then scan" with a redundant
 * reduction): work-group g owns the block [g*B, (g+1)*B) with B = WG * CHUNK.
 *   1. the work-group sums every element before its block (x[0 .. g*B)), reading VEC ints at a time,
 *      and combines the partial sums in local memory: O(N * groups) reads in total
 *   2. each work-item sums its contiguous CHUNK, the WG chunk totals are scanned in local memory
 *      (LSCAN 0: serially by work-item 0; 1: Hillis-Steele in log2(WG) steps)
 *   3. each work-item rescans its CHUNK with its offset and writes it
 * Geometry: global = N / CHUNK, local = WG; the constraints guarantee N % (WG * CHUNK) == 0.
 */
#define CAT(a, b) a##b
#define XCAT(a, b) CAT(a, b)
#if VEC == 1
  #define VT int
  #define VLOAD(i, p) ((p)[i])
  #define HSUM(v) (v)
#else
  #define VT XCAT(int, VEC)
  #define VLOAD(i, p) XCAT(vload, VEC)((i), (p))
  #if VEC == 2
    #define HSUM(v) ((v).s0 + (v).s1)
  #elif VEC == 4
    #define HSUM(v) ((v).s0 + (v).s1 + (v).s2 + (v).s3)
  #else
    #define HSUM(v) ((v).s0 + (v).s1 + (v).s2 + (v).s3 + (v).s4 + (v).s5 + (v).s6 + (v).s7)
  #endif
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void scan(__global const int *x, __global int *out, const int N)
{
    __local int red[WG];
    const int lid = get_local_id(0);
    const int block = get_group_id(0) * (WG * CHUNK);

    /* 1. sum of everything before this block */
    VT acc = (VT)(0);
    for (int v = lid; v < block / VEC; v += WG)
        acc += VLOAD(v, x);
    red[lid] = HSUM(acc);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = WG / 2; step > 0; step >>= 1) {
        if (lid < step)
            red[lid] += red[lid + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const int before = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);

    /* 2. chunk totals, scanned across the work-group (inclusive) */
    __global const int *chunk = x + block + lid * CHUNK;
    int total = 0;
    for (int k = 0; k < CHUNK; ++k)
        total += chunk[k];
    red[lid] = total;
    barrier(CLK_LOCAL_MEM_FENCE);
#if LSCAN
    for (int step = 1; step < WG; step <<= 1) {
        const int add = lid >= step ? red[lid - step] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        red[lid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#else
    if (lid == 0)
        for (int w = 1; w < WG; ++w)
            red[w] += red[w - 1];
    barrier(CLK_LOCAL_MEM_FENCE);
#endif

    /* 3. rescan the chunk with its offset */
    int run = before + red[lid] - total;
    __global int *o = out + block + lid * CHUNK;
    for (int k = 0; k < CHUNK; ++k) {
        run += chunk[k];
        o[k] = run;
    }
}
