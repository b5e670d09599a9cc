/* Row layernorm with WG work-items per row and ROWS rows per work-group.
 *   WG       work-items cooperating on one row (1: a work-item owns its row); statistics meet in local memory
 *   ROWS     rows per work-group (the work-group is WG x ROWS); they share the reads of gamma and beta
 *   VEC      vector width of loads and stores (vloadVEC / vstoreVEC)
 *   ONEPASS  1: sum and sum of squares in one pass (var = E[x^2] - mean^2); 0: mean pass, then centred variance pass
 * Geometry: global = (WG, M), local = (WG, ROWS); the constraints guarantee N % (WG * VEC) == 0.
 */
#define CAT(a, b) a##b
#define XCAT(a, b) CAT(a, b)
#if VEC == 1
  #define VT float
  #define VLOAD(i, p) ((p)[i])
  #define VSTORE(v, i, p) ((p)[i] = (v))
  #define HSUM(v) (v)
#else
  #define VT XCAT(float, VEC)
  #define VLOAD(i, p) XCAT(vload, VEC)((i), (p))
  #define VSTORE(v, i, p) XCAT(vstore, VEC)((v), (i), (p))
  #if VEC == 2
    #define HSUM(v) ((v).s0 + (v).s1)
  #elif VEC == 4
    #define HSUM(v) (((v).s0 + (v).s1) + ((v).s2 + (v).s3))
  #else
    #define HSUM(v) ((((v).s0 + (v).s1) + ((v).s2 + (v).s3)) + (((v).s4 + (v).s5) + ((v).s6 + (v).s7)))
  #endif
#endif

#if WG > 1
  /* sum red[ly][0..WG) into red[ly][0]; every work-item of the row reads the result */
  #define ROW_SUM(val, out) do {                                            \
      red[ly][lid] = (val);                                                 \
      barrier(CLK_LOCAL_MEM_FENCE);                                         \
      for (int step = WG / 2; step > 0; step >>= 1) {                       \
          if (lid < step)                                                   \
              red[ly][lid] += red[ly][lid + step];                          \
          barrier(CLK_LOCAL_MEM_FENCE);                                     \
      }                                                                     \
      (out) = red[ly][0];                                                   \
      barrier(CLK_LOCAL_MEM_FENCE);                                         \
  } while (0)
#else
  #define ROW_SUM(val, out) ((out) = (val))
#endif

__kernel __attribute__((reqd_work_group_size(WG, ROWS, 1)))
void layernorm(__global const float *X, __global const float *gamma, __global const float *beta,
               __global float *Y, const int M, const int N, const float eps)
{
    const int lid = get_local_id(0);
    const int row = get_global_id(1);
    __global const float *x = X + (size_t)row * N;
    __global float *y = Y + (size_t)row * N;
    const int vecs = N / VEC;
#if WG > 1
    __local float red[ROWS][WG];
    const int ly = get_local_id(1);
#endif

#if ONEPASS
    VT s = (VT)(0.0f), q = (VT)(0.0f);
    for (int v = lid; v < vecs; v += WG) {
        const VT xv = VLOAD(v, x);
        s += xv;
        q += xv * xv;
    }
    float sum, sumsq;
    ROW_SUM(HSUM(s), sum);
    ROW_SUM(HSUM(q), sumsq);
    const float mean = sum / N;
    const float var = fmax(sumsq / N - mean * mean, 0.0f);
#else
    VT s = (VT)(0.0f);
    for (int v = lid; v < vecs; v += WG)
        s += VLOAD(v, x);
    float sum;
    ROW_SUM(HSUM(s), sum);
    const float mean = sum / N;
    VT q = (VT)(0.0f);
    for (int v = lid; v < vecs; v += WG) {
        const VT d = VLOAD(v, x) - (VT)(mean);
        q += d * d;
    }
    float sumsq;
    ROW_SUM(HSUM(q), sumsq);
    const float var = sumsq / N;
#endif

    const float rstd = 1.0f / sqrt(var + eps);
    for (int v = lid; v < vecs; v += WG)
        VSTORE((VLOAD(v, x) - (VT)(mean)) * (VT)(rstd) * VLOAD(v, gamma) + VLOAD(v, beta), v, y);
}
