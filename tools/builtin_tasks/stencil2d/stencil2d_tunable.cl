/* 5-point Jacobi step, coarsened: a work-item computes VX consecutive points of RY consecutive rows.
 *   VX   points per work-item along x, held as one floatVX vector (vloadVX / vstoreVX)
 *   RY   rows per work-item; the rows above and below are kept in registers while walking down
 *   WGX  work-group width, WGY work-group height (in work-items)
 * Geometry: global = (W / VX, H / RY), local = (WGX, WGY); the constraints guarantee that the tiles divide
 * W and H. Left/right neighbours come from unaligned vector loads one element to either side; for the first
 * and last vector of an interior row these touch the neighbouring rows (still inside the buffer) and the
 * boundary lanes are then replaced by the copied centre value.
 */
#define CAT(a, b) a##b
#define XCAT(a, b) CAT(a, b)
#if VX == 1
  #define VT float
  #define VLOAD(p) (*(p))
  #define VSTORE(v, p) (*(p) = (v))
  #define FIRST(v) (v)
  #define LAST(v) (v)
#else
  #define VT XCAT(float, VX)
  #define VLOAD(p) XCAT(vload, VX)(0, (p))
  #define VSTORE(v, p) XCAT(vstore, VX)((v), 0, (p))
  #define FIRST(v) (v).s0
  #if VX == 2
    #define LAST(v) (v).s1
  #elif VX == 4
    #define LAST(v) (v).s3
  #else
    #define LAST(v) (v).s7
  #endif
#endif

__kernel __attribute__((reqd_work_group_size(WGX, WGY, 1)))
void stencil2d(__global const float *in, __global float *out, const int H, const int W)
{
    const int j0 = get_global_id(0) * VX;
    const int i0 = get_global_id(1) * RY;
    VT up = i0 > 0 ? VLOAD(in + (size_t)(i0 - 1) * W + j0) : (VT)(0.0f);
    VT cur = VLOAD(in + (size_t)i0 * W + j0);
    #pragma unroll
    for (int r = 0; r < RY; ++r) {
        const int i = i0 + r;
        __global const float *p = in + (size_t)i * W + j0;
        VT dn = i + 1 < H ? VLOAD(p + W) : (VT)(0.0f);
        VT res;
        if (i == 0 || i == H - 1) {
            res = cur;
        } else {
            res = 0.25f * (up + dn + VLOAD(p - 1) + VLOAD(p + 1));
            if (j0 == 0)
                FIRST(res) = FIRST(cur);
            if (j0 + VX == W)
                LAST(res) = LAST(cur);
        }
        VSTORE(res, out + (size_t)i * W + j0);
        up = cur;
        cur = dn;
    }
}
