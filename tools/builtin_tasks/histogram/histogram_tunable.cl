/* 256-bin histogram, coarsened and optionally privatized per work-group.
 *   WG       work-group size
 *   CHUNK    bytes per work-item, read as CHUNK / VEC vectors of ucharVEC
 *   VEC      vector width of the byte loads (vloadVEC)
 *   PRIVATE  0: every byte is a global atomic;
 *            1: each work-group counts into a local histogram (local atomics) and adds it to the global bins
 *               at the end (one global atomic per bin and work-group);
 *            2: each work-item counts its chunk into a private 256-bin array without atomics and adds the
 *               non-zero counts to the global bins (one global atomic per bin and work-item)
 *   STRIDED  1: the vectors of a work-item are WG vectors apart (neighbouring work-items read neighbouring
 *            vectors, the GPU-friendly order); 0: a work-item reads one contiguous chunk
 * Geometry: global = N / CHUNK, local = WG; the constraints guarantee N % (CHUNK * WG) == 0, CHUNK % VEC == 0.
 */
#define CAT(a, b) a##b
#define XCAT(a, b) CAT(a, b)
#define NBINS 256

#if PRIVATE == 2
  #define COUNT(b) (++hist[b])
#elif PRIVATE == 1
  #define COUNT(b) atomic_inc(&hist[b])
#else
  #define COUNT(b) atomic_inc(&bins[b])
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void histogram(__global const uchar *data, __global uint *bins, const int N)
{
    const int lid = get_local_id(0);
#if PRIVATE == 2
    uint hist[NBINS];
    for (int b = 0; b < NBINS; ++b)
        hist[b] = 0;
#elif PRIVATE == 1
    __local uint hist[NBINS];
    for (int b = lid; b < NBINS; b += WG)
        hist[b] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    const int nv = CHUNK / VEC;  /* vectors per work-item */
#if STRIDED
    /* vector index of this work-item's k-th vector */
    const int vbase = get_group_id(0) * (WG * nv) + lid;
    #define VIDX(k) (vbase + (k) * WG)
#else
    const int vbase = get_global_id(0) * nv;
    #define VIDX(k) (vbase + (k))
#endif
    for (int k = 0; k < nv; ++k) {
#if VEC == 1
        COUNT(data[VIDX(k)]);
#else
        const XCAT(uchar, VEC) v = XCAT(vload, VEC)(VIDX(k), data);
        COUNT(v.s0); COUNT(v.s1);
  #if VEC >= 4
        COUNT(v.s2); COUNT(v.s3);
  #endif
  #if VEC >= 8
        COUNT(v.s4); COUNT(v.s5); COUNT(v.s6); COUNT(v.s7);
  #endif
#endif
    }
#if PRIVATE == 2
    for (int b = 0; b < NBINS; ++b) {
        const uint c = hist[b];
        if (c)
            atomic_add(&bins[b], c);
    }
#elif PRIVATE == 1
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int b = lid; b < NBINS; b += WG) {
        const uint c = hist[b];
        if (c)
            atomic_add(&bins[b], c);
    }
#endif
}
