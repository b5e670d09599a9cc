/* VEC: vector width, COARSEN: vectors per work-item (strided by the grid), WG: work-group size. */
#if VEC == 1
  #define VTYPE float
  #define VLOAD(i, p) (p)[i]
  #define VSTORE(v, i, p) ((p)[i] = (v))
#else
  #define CAT(a, b) a##b
  #define XCAT(a, b) CAT(a, b)
  #define VTYPE XCAT(float, VEC)
  #define VLOAD(i, p) XCAT(vload, VEC)(i, p)
  #define VSTORE(v, i, p) XCAT(vstore, VEC)(v, i, p)
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void saxpy(__global const float *x, __global float *y, const float a, const int n)
{
    const int gsz = get_global_size(0);
    int i = get_global_id(0);
    #pragma unroll
    for (int c = 0; c < COARSEN; ++c, i += gsz) {
        VTYPE xv = VLOAD(i, x);
        VTYPE yv = VLOAD(i, y);
        VSTORE(a * xv + yv, i, y);
    }
}
