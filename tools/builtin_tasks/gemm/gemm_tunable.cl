/* Register-blocked GEMM, optionally tiled through local memory.
 *   TM     rows of C per work-item
 *   TN     columns of C per work-item, held as one floatTN vector (vloadTN / vstoreTN)
 *   WGX    work-group width  (work-items along columns)
 *   WGY    work-group height (work-items along rows)
 *   KU     unroll factor of the k loop
 *   LOCAL  1: stage a (WGY*TM x TK) tile of A and a (TK x WGX*TN) tile of B in local memory
 *   TK     depth of the k tile when LOCAL == 1
 * Geometry: global = (N / TN, M / TM), local = (WGX, WGY); the task's constraints
 * guarantee that every tile divides M, N and K, so there are no bounds checks.
 */
#define CAT(a, b) a##b
#define XCAT(a, b) CAT(a, b)
#if TN == 1
  #define VT float
  #define VLOAD(p) (*(p))
  #define VSTORE(v, p) (*(p) = (v))
#else
  #define VT XCAT(float, TN)
  #define VLOAD(p) XCAT(vload, TN)(0, (p))
  #define VSTORE(v, p) XCAT(vstore, TN)((v), 0, (p))
#endif

__kernel __attribute__((reqd_work_group_size(WGX, WGY, 1)))
void gemm(__global const float *A, __global const float *B, __global float *C,
          const int M, const int N, const int K)
{
    const int col0 = get_global_id(0) * TN;
    const int row0 = get_global_id(1) * TM;
    VT acc[TM];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        acc[i] = (VT)(0.0f);

#if LOCAL
    __local float As[WGY * TM][TK];
    __local float Bs[TK][WGX * TN];
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int tid = ly * WGX + lx;
    const int grow0 = get_group_id(1) * (WGY * TM);
    const int gcol0 = get_group_id(0) * (WGX * TN);
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int e = tid; e < WGY * TM * TK; e += WGX * WGY) {
            const int r = e / TK, c = e % TK;
            As[r][c] = A[(grow0 + r) * K + k0 + c];
        }
        for (int e = tid; e < TK * WGX * TN; e += WGX * WGY) {
            const int r = e / (WGX * TN), c = e % (WGX * TN);
            Bs[r][c] = B[(k0 + r) * N + gcol0 + c];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TK; k += KU) {
            #pragma unroll
            for (int u = 0; u < KU; ++u) {
                const VT b = VLOAD(&Bs[k + u][lx * TN]);
                #pragma unroll
                for (int i = 0; i < TM; ++i)
                    acc[i] += As[ly * TM + i][k + u] * b;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#else
    for (int k = 0; k < K; k += KU) {
        #pragma unroll
        for (int u = 0; u < KU; ++u) {
            const VT b = VLOAD(B + (k + u) * N + col0);
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                acc[i] += A[(row0 + i) * K + k + u] * b;
        }
    }
#endif

    #pragma unroll
    for (int i = 0; i < TM; ++i)
        VSTORE(acc[i], C + (row0 + i) * N + col0);
}
