/* Row softmax with WG work-items per row and ROWS rows per work-group.
 *   WG      work-items cooperating on one row (1: a work-item owns its row); max and sum meet in local memory
 *   ROWS    rows per work-group (the work-group is WG x ROWS)
 *   VEC     vector width of loads, exp and stores (vloadVEC / vstoreVEC)
 *   ONLINE  1: one fused pass computes the running max and the rescaled sum of exponentials together
 *           (online softmax); 0: separate max and sum passes
 * Geometry: global = (WG, M), local = (WG, ROWS); the constraints guarantee N % (WG * VEC) == 0.
 */
#define CAT(a, b) a##b
#define XCAT(a, b) CAT(a, b)
#if VEC == 1
  #define VT float
  #define VLOAD(i, p) ((p)[i])
  #define VSTORE(v, i, p) ((p)[i] = (v))
  #define HMAX(v) (v)
  #define HSUM(v) (v)
#else
  #define VT XCAT(float, VEC)
  #define VLOAD(i, p) XCAT(vload, VEC)((i), (p))
  #define VSTORE(v, i, p) XCAT(vstore, VEC)((v), (i), (p))
  #if VEC == 2
    #define HMAX(v) fmax((v).s0, (v).s1)
    #define HSUM(v) ((v).s0 + (v).s1)
  #elif VEC == 4
    #define HMAX(v) fmax(fmax((v).s0, (v).s1), fmax((v).s2, (v).s3))
    #define HSUM(v) (((v).s0 + (v).s1) + ((v).s2 + (v).s3))
  #else
    #define HMAX(v) fmax(fmax(fmax((v).s0, (v).s1), fmax((v).s2, (v).s3)), fmax(fmax((v).s4, (v).s5), fmax((v).s6, (v).s7)))
    #define HSUM(v) ((((v).s0 + (v).s1) + ((v).s2 + (v).s3)) + (((v).s4 + (v).s5) + ((v).s6 + (v).s7)))
  #endif
#endif

__kernel __attribute__((reqd_work_group_size(WG, ROWS, 1)))
void softmax(__global const float *X, __global float *Y, const int M, const int N)
{
    const int lid = get_local_id(0);
    const int row = get_global_id(1);
    __global const float *x = X + (size_t)row * N;
    __global float *y = Y + (size_t)row * N;
    const int vecs = N / VEC;

#if ONLINE
    /* per lane: running max m and sum of exp(x - m), rescaled whenever m grows */
    VT m = (VT)(-INFINITY), s = (VT)(0.0f);
    for (int v = lid; v < vecs; v += WG) {
        const VT xv = VLOAD(v, x);
        const VT mn = fmax(m, xv);
        s = s * exp(m - mn) + exp(xv - mn);
        m = mn;
    }
    float mx = HMAX(m);
    float sum = HSUM(s * exp(m - (VT)(mx)));
#else
    VT mv = (VT)(-INFINITY);
    for (int v = lid; v < vecs; v += WG)
        mv = fmax(mv, VLOAD(v, x));
    float mx = HMAX(mv);
#endif

#if WG > 1
    __local float red[ROWS][WG];
    const int ly = get_local_id(1);
    red[ly][lid] = mx;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = WG / 2; step > 0; step >>= 1) {
        if (lid < step)
            red[ly][lid] = fmax(red[ly][lid], red[ly][lid + step]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float rowmax = red[ly][0];
    barrier(CLK_LOCAL_MEM_FENCE);
#else
    const float rowmax = mx;
#endif

#if ONLINE
    float part = sum * exp(mx - rowmax);
#else
    VT sv = (VT)(0.0f);
    for (int v = lid; v < vecs; v += WG)
        sv += exp(VLOAD(v, x) - (VT)(rowmax));
    float part = HSUM(sv);
#endif

#if WG > 1
    red[ly][lid] = part;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = WG / 2; step > 0; step >>= 1) {
        if (lid < step)
            red[ly][lid] += red[ly][lid + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float total = red[ly][0];
#else
    const float total = part;
#endif

    for (int v = lid; v < vecs; v += WG)
        VSTORE(exp(VLOAD(v, x) - (VT)(rowmax)) / (VT)(total), v, y);
}
