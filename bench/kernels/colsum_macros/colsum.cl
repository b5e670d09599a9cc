/* Column sums of an R x C row-major matrix, written as users write kernels: the element type and the zero
 * come from #define lines, and the ids share one declaration. One work-item per column; each walks its
 * column with stride C. */
#define REAL float
#define ZERO 0.0f

__kernel void colsum(__global const REAL *m, __global REAL *out, const int R, const int C)
{
    int c = get_global_id(0), stride = C;
    if (c >= C)
        return;
    REAL acc = ZERO;
    for (int r = 0; r < R; ++r)
        acc += m[r * stride + c];
    out[c] = acc;
}
